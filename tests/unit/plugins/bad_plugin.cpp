// Test-only plugin files that the registry must refuse (or mark unavailable), one per
// BAD_PLUGIN_KIND. None of them may crash the process that tries to load them.
#include <halcyon/hal.h>

#include <cstring>

namespace {

hal_error* make_unavailable(const hal_host_api* host, hal_be_backend**) {
  return host->error_new(HAL_UNAVAILABLE, "widget: libwidget.so.3 not found");
}
void destroy(hal_be_backend*) {}
template <typename... A>
hal_error* never(A...) { return nullptr; }
template <typename... A>
void never_void(A...) {}

[[maybe_unused]] hal_backend_api make_table(const char* name) {
  hal_backend_api t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.abi_major = HAL_ABI_MAJOR;
  t.abi_minor = HAL_ABI_MINOR;
  t.name = name;
  t.description = "test plugin";
  t.create = make_unavailable;
  t.destroy = destroy;
  t.device_count = never<hal_be_backend*, uint32_t*>;
  t.device_open = never<hal_be_backend*, uint32_t, hal_be_device**>;
  t.device_close = never_void<hal_be_device*>;
  t.device_info = never<hal_be_device*, hal_device_info*>;
  t.buffer_create = never<hal_be_device*, const hal_buffer_desc*, hal_be_buffer**, uint64_t*, void**>;
  t.buffer_destroy = never_void<hal_be_buffer*>;
  t.stream_create = never<hal_be_device*, hal_be_partition*, const hal_stream_desc*, hal_be_stream**>;
  t.stream_destroy = never_void<hal_be_stream*>;
  t.stream_synchronize = never<hal_be_stream*>;
  t.stream_write = never<hal_be_stream*, hal_be_buffer*, uint64_t, const void*, uint64_t>;
  t.stream_read = never<hal_be_stream*, hal_be_buffer*, uint64_t, void*, uint64_t>;
  t.stream_copy = never<hal_be_stream*, hal_be_buffer*, uint64_t, hal_be_buffer*, uint64_t, uint64_t>;
  t.stream_fill = never<hal_be_stream*, hal_be_buffer*, uint64_t, uint64_t, uint32_t, uint32_t>;
  t.stream_wait_event = never<hal_be_stream*, hal_be_event*>;
  t.stream_launch = never<hal_be_stream*, hal_be_kernel*, const hal_launch_desc*>;
  t.event_create = never<hal_be_device*, const hal_event_desc*, hal_be_event**>;
  t.event_destroy = never_void<hal_be_event*>;
  t.event_record = never<hal_be_event*, hal_be_stream*>;
  t.event_query = never<hal_be_event*, bool*>;
  t.event_synchronize = never<hal_be_event*>;
  t.event_elapsed_ms = never<hal_be_event*, hal_be_event*, float*>;
  t.module_load = never<hal_be_device*, const hal_module_desc*, hal_be_module**>;
  t.module_destroy = never_void<hal_be_module*>;
  t.kernel_get = never<hal_be_module*, const char*, hal_be_kernel**, hal_kernel_info*, hal_kernel_arg*, uint32_t>;
  t.kernel_destroy = never_void<hal_be_kernel*>;
  return t;
}

}  // namespace

#if BAD_PLUGIN_KIND != 0  // kind 0 exports no entry point at all
extern "C" HAL_API const hal_backend_api* halcyon_backend_plugin(void) {
#if BAD_PLUGIN_KIND == 1  // built for a future, incompatible ABI
  static hal_backend_api t = [] { auto x = make_table("future"); x.abi_major = HAL_ABI_MAJOR + 1; x.abi_minor = 3; return x; }();
  return &t;
#elif BAD_PLUGIN_KIND == 2  // entry point returns nothing
  return nullptr;
#elif BAD_PLUGIN_KIND == 3  // a required entry is missing
  static hal_backend_api t = [] { auto x = make_table("holey"); x.device_open = nullptr; return x; }();
  return &t;
#elif BAD_PLUGIN_KIND == 4  // well-formed, but its probe says the machine lacks its driver
  static hal_backend_api t = make_table("widget");
  return &t;
#elif BAD_PLUGIN_KIND == 5  // a table too small for ABI 1.0
  static hal_backend_api t = [] { auto x = make_table("tiny"); x.struct_size = HAL_BACKEND_API_MIN_SIZE - 8; return x; }();
  return &t;
#endif
}
#else
extern "C" HAL_API int not_a_halcyon_plugin(void) { return 42; }
#endif
