// A skeleton for a new vendor's backend. Copy this folder to backends/<vendor>/, rename
// `template` below, and replace each entry, one at a time, with real driver calls; the
// conformance suite (`halcyon cts --backend <vendor>`) tells you what still fails.
// docs/porting.md walks through the order that gets a first kernel running soonest.
//
// Until then every entry reports HAL_UNIMPLEMENTED with its name, so a half-finished
// backend fails clearly instead of crashing.
#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <string>

// Your objects. Each holds whatever your driver needs (context, queue, allocation...).
struct hal_be_backend {};
struct hal_be_device {};
struct hal_be_buffer {};
struct hal_be_stream {};
struct hal_be_event {};
struct hal_be_module {};
struct hal_be_kernel {};
struct hal_be_partition {};

namespace {

hal_error* unimplemented(const char* entry) {
  return halcyon::plugin::error(HAL_UNIMPLEMENTED,
                                std::string("template: ") + entry + " is not implemented yet");
}

// Probe the machine here: load the vendor's driver library with dlopen, count devices, and
// return HAL_UNAVAILABLE with the reason ("libvendor.so.1 not found") when it cannot run.
hal_error* t_create(const hal_host_api* host, hal_be_backend**) {
  halcyon::plugin::host() = host;
  return unimplemented("create");
}
void t_destroy(hal_be_backend* b) { delete b; }
hal_error* t_device_count(hal_be_backend*, uint32_t*) { return unimplemented("device_count"); }
hal_error* t_device_open(hal_be_backend*, uint32_t, hal_be_device**) { return unimplemented("device_open"); }
void t_device_close(hal_be_device* d) { delete d; }
// Fill name, vendor, arch, compute_units, simd_width, memory_bytes, limits, and the
// capability tags, including "module.<format>" for each binary format you load.
hal_error* t_device_info(hal_be_device*, hal_device_info*) { return unimplemented("device_info"); }
hal_error* t_buffer_create(hal_be_device*, const hal_buffer_desc*, hal_be_buffer**, uint64_t*, void**) {
  return unimplemented("buffer_create");
}
// Must not free memory that work already queued on any stream may still use.
void t_buffer_destroy(hal_be_buffer* b) { delete b; }
hal_error* t_stream_create(hal_be_device*, hal_be_partition*, const hal_stream_desc*, hal_be_stream**) {
  return unimplemented("stream_create");
}
void t_stream_destroy(hal_be_stream* s) { delete s; }
hal_error* t_stream_synchronize(hal_be_stream*) { return unimplemented("stream_synchronize"); }
hal_error* t_stream_write(hal_be_stream*, hal_be_buffer*, uint64_t, const void*, uint64_t) {
  return unimplemented("stream_write");
}
hal_error* t_stream_read(hal_be_stream*, hal_be_buffer*, uint64_t, void*, uint64_t) {
  return unimplemented("stream_read");
}
hal_error* t_stream_copy(hal_be_stream*, hal_be_buffer*, uint64_t, hal_be_buffer*, uint64_t, uint64_t) {
  return unimplemented("stream_copy");
}
hal_error* t_stream_fill(hal_be_stream*, hal_be_buffer*, uint64_t, uint64_t, uint32_t, uint32_t) {
  return unimplemented("stream_fill");
}
hal_error* t_stream_wait_event(hal_be_stream*, hal_be_event*) { return unimplemented("stream_wait_event"); }
// The blob is already checked against the kernel's argument layout; pass it to the driver.
hal_error* t_stream_launch(hal_be_stream*, hal_be_kernel*, const hal_launch_desc*) {
  return unimplemented("stream_launch");
}
hal_error* t_event_create(hal_be_device*, const hal_event_desc*, hal_be_event**) { return unimplemented("event_create"); }
void t_event_destroy(hal_be_event* e) { delete e; }
hal_error* t_event_record(hal_be_event*, hal_be_stream*) { return unimplemented("event_record"); }
hal_error* t_event_query(hal_be_event*, bool*) { return unimplemented("event_query"); }
hal_error* t_event_synchronize(hal_be_event*) { return unimplemented("event_synchronize"); }
hal_error* t_event_elapsed_ms(hal_be_event*, hal_be_event*, float*) { return unimplemented("event_elapsed_ms"); }
// Refuse a binary built for another architecture with HAL_ARCH_MISMATCH naming both,
// before calling the driver.
hal_error* t_module_load(hal_be_device*, const hal_module_desc*, hal_be_module**) { return unimplemented("module_load"); }
void t_module_destroy(hal_be_module* m) { delete m; }
hal_error* t_kernel_get(hal_be_module*, const char*, hal_be_kernel**, hal_kernel_info*, hal_kernel_arg*, uint32_t) {
  return unimplemented("kernel_get");
}
void t_kernel_destroy(hal_be_kernel* k) { delete k; }
// Optional: leave partition_split NULL if the hardware cannot split its compute units.
hal_error* t_partition_split(hal_be_device*, const hal_partition_desc*, hal_be_partition**, hal_partition_info*,
                             hal_be_partition**, hal_partition_info*) {
  return unimplemented("partition_split");
}
void t_partition_destroy(hal_be_partition* p) { delete p; }

const hal_backend_api kApi = {
    sizeof(hal_backend_api), nullptr, HAL_ABI_MAJOR, HAL_ABI_MINOR,
    "template", "skeleton for a new vendor backend (every entry is unimplemented)",
    t_create, t_destroy, t_device_count, nullptr, t_device_open, t_device_close, t_device_info,
    t_buffer_create, t_buffer_destroy, t_stream_create, t_stream_destroy, t_stream_synchronize,
    t_stream_write, t_stream_read, t_stream_copy, t_stream_fill, t_stream_wait_event, t_stream_launch,
    t_event_create, t_event_destroy, t_event_record, t_event_query, t_event_synchronize, t_event_elapsed_ms,
    t_module_load, t_module_destroy, t_kernel_get, t_kernel_destroy, t_partition_split, t_partition_destroy,
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_template(void) { return &kApi; }
