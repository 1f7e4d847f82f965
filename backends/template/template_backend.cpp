// A skeleton for a new vendor's backend. Copy this folder to backends/<vendor>/, rename
// `template` below, and replace each entry, one at a time, with real driver calls; the
// conformance suite (`halcyon cts --backend <vendor>`) tells you what still fails.
// docs/porting.md walks through the order that gets a first kernel running soonest.
//
// Until then every entry reports HAL_UNIMPLEMENTED with its name, so a half-finished
// backend fails clearly instead of crashing.
#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <cstdio>
#include <string>

// Your objects. Each holds whatever your driver needs (context, queue, allocation...).
// Never define hal.h's hal_be_* structs themselves: backends share libhalcyon, and two
// definitions of one struct would collide. HAL_BACKEND_TYPE maps yours to them.
namespace {
struct TBackend {};
struct TDevice {};
struct TBuffer {};
struct TStream {};
struct TEvent {};
struct TModule {};
struct TKernel {};
struct TPartition {};
}  // namespace
HAL_BACKEND_TYPE(TBackend, hal_be_backend)
HAL_BACKEND_TYPE(TDevice, hal_be_device)
HAL_BACKEND_TYPE(TBuffer, hal_be_buffer)
HAL_BACKEND_TYPE(TStream, hal_be_stream)
HAL_BACKEND_TYPE(TEvent, hal_be_event)
HAL_BACKEND_TYPE(TModule, hal_be_module)
HAL_BACKEND_TYPE(TKernel, hal_be_kernel)
HAL_BACKEND_TYPE(TPartition, hal_be_partition)

namespace {

hal_error* unimplemented(const char* entry) {
  return halcyon::plugin::error(HAL_UNIMPLEMENTED,
                                std::string("template: ") + entry + " is not implemented yet");
}

// Probe the machine here: load the vendor's driver library with dlopen, count devices, and
// return HAL_UNAVAILABLE with the reason ("libvendor.so.1 not found") when it cannot run.
// The skeleton's probe always succeeds with one placeholder device, so that `halcyon cts
// --backend template` runs from the first build (every case unsupported, each with its reason:
// tests/conformance's cts.template_plugin checks it); replace it with your driver's.
hal_error* t_create(const hal_host_api* host, TBackend** out) {
  halcyon::plugin::host() = host;
  *out = new TBackend;
  return nullptr;
}
void t_destroy(TBackend* b) { delete b; }
hal_error* t_device_count(TBackend*, uint32_t* count) {
  *count = 1;  // the placeholder
  return nullptr;
}
hal_error* t_device_open(TBackend*, uint32_t, TDevice** out) {
  *out = new TDevice;
  return nullptr;
}
void t_device_close(TDevice* d) { delete d; }
// Fill name, vendor, arch, compute_units, simd_width, memory_bytes, limits, and the
// capability tags, including "module.<format>" for each binary format you load. The
// placeholder advertises no capability: the suite's tests that need one are unsupported.
hal_error* t_device_info(TDevice*, hal_device_info* info) {
  std::snprintf(info->name, sizeof info->name, "template placeholder device (no driver behind it)");
  std::snprintf(info->vendor, sizeof info->vendor, "template");
  std::snprintf(info->arch, sizeof info->arch, "template");
  info->compute_units = 1;
  info->simd_width = 1;
  return nullptr;
}
hal_error* t_buffer_create(TDevice*, const hal_buffer_desc*, TBuffer**, uint64_t*, void**) {
  return unimplemented("buffer_create");
}
// Must not free memory that work already queued on any stream may still use.
void t_buffer_destroy(TBuffer* b) { delete b; }
hal_error* t_stream_create(TDevice*, TPartition*, const hal_stream_desc*, TStream**) {
  return unimplemented("stream_create");
}
void t_stream_destroy(TStream* s) { delete s; }
hal_error* t_stream_synchronize(TStream*) { return unimplemented("stream_synchronize"); }
hal_error* t_stream_write(TStream*, TBuffer*, uint64_t, const void*, uint64_t) {
  return unimplemented("stream_write");
}
hal_error* t_stream_read(TStream*, TBuffer*, uint64_t, void*, uint64_t) {
  return unimplemented("stream_read");
}
hal_error* t_stream_copy(TStream*, TBuffer*, uint64_t, TBuffer*, uint64_t, uint64_t) {
  return unimplemented("stream_copy");
}
hal_error* t_stream_fill(TStream*, TBuffer*, uint64_t, uint64_t, uint32_t, uint32_t) {
  return unimplemented("stream_fill");
}
hal_error* t_stream_wait_event(TStream*, TEvent*) { return unimplemented("stream_wait_event"); }
// The blob is already checked against the kernel's argument layout; pass it to the driver.
hal_error* t_stream_launch(TStream*, TKernel*, const hal_launch_desc*) {
  return unimplemented("stream_launch");
}
hal_error* t_event_create(TDevice*, const hal_event_desc*, TEvent**) { return unimplemented("event_create"); }
// May come while a record of the event or a wait on it is still queued: that command must
// still run (hal.h's lifetime rule). Defer the free to it, or count references as the CPU
// backend does; CUDA's cuEventDestroy defers by itself.
void t_event_destroy(TEvent* e) { delete e; }
hal_error* t_event_record(TEvent*, TStream*) { return unimplemented("event_record"); }
hal_error* t_event_query(TEvent*, bool*) { return unimplemented("event_query"); }
hal_error* t_event_synchronize(TEvent*) { return unimplemented("event_synchronize"); }
hal_error* t_event_elapsed_ms(TEvent*, TEvent*, float*) { return unimplemented("event_elapsed_ms"); }
// Refuse a binary built for another architecture with HAL_ARCH_MISMATCH naming both,
// before calling the driver.
hal_error* t_module_load(TDevice*, const hal_module_desc*, TModule**) { return unimplemented("module_load"); }
void t_module_destroy(TModule* m) { delete m; }
hal_error* t_kernel_get(TModule*, const char*, TKernel**, hal_kernel_info*, hal_kernel_arg*, uint32_t) {
  return unimplemented("kernel_get");
}
void t_kernel_destroy(TKernel* k) { delete k; }
// Optional: leave partition_split NULL if the hardware cannot split its compute units.
hal_error* t_partition_split(TDevice*, const hal_partition_desc*, TPartition**, hal_partition_info*,
                             TPartition**, hal_partition_info*) {
  return unimplemented("partition_split");
}
void t_partition_destroy(TPartition* p) { delete p; }

const hal_backend_api kApi = {
    sizeof(hal_backend_api), nullptr, HAL_ABI_MAJOR, HAL_ABI_MINOR,
    "template", "skeleton for a new vendor backend (every entry is unimplemented)",
    HAL_BACKEND_FN(t_create), HAL_BACKEND_FN(t_destroy), HAL_BACKEND_FN(t_device_count), nullptr, HAL_BACKEND_FN(t_device_open), HAL_BACKEND_FN(t_device_close), HAL_BACKEND_FN(t_device_info),
    HAL_BACKEND_FN(t_buffer_create), HAL_BACKEND_FN(t_buffer_destroy), HAL_BACKEND_FN(t_stream_create), HAL_BACKEND_FN(t_stream_destroy), HAL_BACKEND_FN(t_stream_synchronize),
    HAL_BACKEND_FN(t_stream_write), HAL_BACKEND_FN(t_stream_read), HAL_BACKEND_FN(t_stream_copy), HAL_BACKEND_FN(t_stream_fill), HAL_BACKEND_FN(t_stream_wait_event), HAL_BACKEND_FN(t_stream_launch),
    HAL_BACKEND_FN(t_event_create), HAL_BACKEND_FN(t_event_destroy), HAL_BACKEND_FN(t_event_record), HAL_BACKEND_FN(t_event_query), HAL_BACKEND_FN(t_event_synchronize), HAL_BACKEND_FN(t_event_elapsed_ms),
    HAL_BACKEND_FN(t_module_load), HAL_BACKEND_FN(t_module_destroy), HAL_BACKEND_FN(t_kernel_get), HAL_BACKEND_FN(t_kernel_destroy), HAL_BACKEND_FN(t_partition_split), HAL_BACKEND_FN(t_partition_destroy),
    nullptr,  // tensor_map_encode (optional): see docs/porting.md
    nullptr,  // device_can_run (optional): NULL = a module runs where its target equals the arch
    nullptr,  // partition_caps (optional, ABI 1.3): with partition_split, say its granularity
    nullptr,  // buffer_import (optional, ABI 1.4): wrap external memory (DLPack) without a copy
    // communicator (optional, ABI 1.4): all eight comm_* entries or none; the CPU backend's
    // (backends/cpu, over backends/comm_common/shm_group) is the model
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
    nullptr,  // stream_import (optional, ABI 1.5): wrap a stream the caller owns (PyTorch's current one)
    nullptr,  // stream_native (optional, ABI 1.11): the native handle of a stream, as stream_import takes it
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_template(void) { return &kApi; }
