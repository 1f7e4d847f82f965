// Test-only plugin files that the registry must refuse (or mark unavailable), one per
// BAD_PLUGIN_KIND, and one it must accept although it is older (kind 6, ABI 1.0). None of
// them may crash the process that tries to load them.
#include <halcyon/hal.h>

#include <cstdlib>
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

#if BAD_PLUGIN_KIND == 6
// A working backend as a plugin built against ABI 1.0 would be: one device, buffers in host
// memory, and a table that ends at partition_destroy.
const hal_host_api* g_host = nullptr;
int g_backend = 0, g_device = 0;
hal_error* v10_create(const hal_host_api* host, hal_be_backend** out) {
  g_host = host;
  *out = reinterpret_cast<hal_be_backend*>(&g_backend);
  return nullptr;
}
hal_error* v10_device_count(hal_be_backend*, uint32_t* n) {
  *n = 1;
  return nullptr;
}
hal_error* v10_device_open(hal_be_backend*, uint32_t, hal_be_device** out) {
  *out = reinterpret_cast<hal_be_device*>(&g_device);
  return nullptr;
}
hal_error* v10_device_info(hal_be_device*, hal_device_info* info) {
  std::strcpy(info->name, "ABI 1.0 test device");
  std::strcpy(info->vendor, "test");
  std::strcpy(info->arch, "none");
  std::strcpy(info->capabilities, "module.host");  // so that hal_device_can_run reaches its fallback
  info->compute_units = 1;
  info->simd_width = 1;
  info->memory_bytes = 1 << 20;
  info->max_threads_per_block = 1;
  return nullptr;
}
hal_error* v10_buffer_create(hal_be_device*, const hal_buffer_desc* desc, hal_be_buffer** out, uint64_t* address,
                             void** host) {
  void* p = std::calloc(1, desc->size ? desc->size : 1);
  if (!p) return g_host->error_new(HAL_OUT_OF_MEMORY, "abi10: calloc failed");
  *out = static_cast<hal_be_buffer*>(p);
  *address = reinterpret_cast<uintptr_t>(p);
  *host = p;
  return nullptr;
}
void v10_buffer_destroy(hal_be_buffer* b) { std::free(b); }
int g_stream = 0;
hal_error* v10_stream_create(hal_be_device*, hal_be_partition*, const hal_stream_desc*, hal_be_stream** out) {
  *out = reinterpret_cast<hal_be_stream*>(&g_stream);
  return nullptr;
}
void v10_stream_destroy(hal_be_stream*) {}
// Lies past the table's struct_size: a libhalcyon that called it would be reading a newer
// plugin's entry out of an older one's table.
hal_error* v10_tensor_map_encode(hal_be_device*, uint64_t, const hal_tensor_map_desc*, void*) {
  return g_host->error_new(HAL_INTERNAL, "abi10: tensor_map_encode lies past the table's struct_size and was called");
}
hal_error* v10_device_can_run(hal_be_device*, uint32_t, const char*, bool*, char*, size_t) {
  return g_host->error_new(HAL_INTERNAL, "abi10: device_can_run lies past the table's struct_size and was called");
}
hal_error* v10_stream_native(hal_be_stream*, uint64_t*) {
  return g_host->error_new(HAL_INTERNAL, "abi10: stream_native lies past the table's struct_size and was called");
}
#endif

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
#elif BAD_PLUGIN_KIND == 6  // not bad: built for ABI 1.0, whose table ended at partition_destroy
  static hal_backend_api t = [] {
    auto x = make_table("abi10");
    x.struct_size = HAL_BACKEND_API_1_0_SIZE;
    x.abi_minor = 0;
    x.create = v10_create;
    x.device_count = v10_device_count;
    x.device_open = v10_device_open;
    x.device_info = v10_device_info;
    x.buffer_create = v10_buffer_create;
    x.buffer_destroy = v10_buffer_destroy;
    x.tensor_map_encode = v10_tensor_map_encode;
    x.device_can_run = v10_device_can_run;
    x.stream_create = v10_stream_create;
    x.stream_destroy = v10_stream_destroy;
    x.stream_native = v10_stream_native;
    return x;
  }();
  return &t;
#endif
}
#else
extern "C" HAL_API int not_a_halcyon_plugin(void) { return 42; }
#endif
