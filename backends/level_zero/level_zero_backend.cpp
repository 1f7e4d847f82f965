// Level Zero (oneAPI) backend: so far, the probe only. It loads libze_loader.so.1 at run time,
// initialises the driver and counts GPU devices, and always reports itself UNAVAILABLE with
// what it found — memory, queues and SPIR-V modules are not written yet, and no Level Zero
// device or driver exists on the machines this project is built and tested on, so nothing
// beyond the probe could be verified. docs/status.md tracks it.
#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <level_zero/ze_api.h>

#include <fmt/format.h>

#include <dlfcn.h>

#include <string>
#include <vector>

namespace {

using halcyon::plugin::error;

struct ZeLoader {
  void* dl = nullptr;
  decltype(&zeInit) init = nullptr;
  decltype(&zeDriverGet) driver_get = nullptr;
  decltype(&zeDeviceGet) device_get = nullptr;
  ~ZeLoader() {
    if (dl) dlclose(dl);
  }
};

// Returns the number of Level Zero GPU devices, or an error saying why there are none.
hal_error* probe(uint32_t* devices) {
  ZeLoader ze;
  dlerror();
  ze.dl = dlopen("libze_loader.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!ze.dl) {
    const char* why = dlerror();
    return error(HAL_UNAVAILABLE, fmt::format("level_zero: libze_loader.so.1 not found: {}", why ? why : "?"));
  }
  ze.init = reinterpret_cast<decltype(ze.init)>(dlsym(ze.dl, "zeInit"));
  ze.driver_get = reinterpret_cast<decltype(ze.driver_get)>(dlsym(ze.dl, "zeDriverGet"));
  ze.device_get = reinterpret_cast<decltype(ze.device_get)>(dlsym(ze.dl, "zeDeviceGet"));
  if (!ze.init || !ze.driver_get || !ze.device_get)
    return error(HAL_UNAVAILABLE, "level_zero: libze_loader.so.1 lacks zeInit, zeDriverGet or zeDeviceGet");
  if (ze_result_t r = ze.init(ZE_INIT_FLAG_GPU_ONLY); r != ZE_RESULT_SUCCESS)
    return error(HAL_UNAVAILABLE, fmt::format("level_zero: zeInit failed with 0x{:x}: no Level Zero GPU driver is installed", uint32_t(r)));
  uint32_t drivers = 0;
  if (ze.driver_get(&drivers, nullptr) != ZE_RESULT_SUCCESS || drivers == 0)
    return error(HAL_UNAVAILABLE, "level_zero: the loader found no driver");
  std::vector<ze_driver_handle_t> handles(drivers);
  ze.driver_get(&drivers, handles.data());
  uint32_t total = 0;
  for (auto h : handles) {
    uint32_t n = 0;
    if (ze.device_get(h, &n, nullptr) == ZE_RESULT_SUCCESS) total += n;
  }
  *devices = total;
  return nullptr;
}

hal_error* ze_create(const hal_host_api* host, hal_be_backend**) {
  halcyon::plugin::host() = host;
  uint32_t devices = 0;
  if (hal_error* e = probe(&devices)) return e;
  return error(HAL_UNAVAILABLE,
               fmt::format("level_zero: {} GPU device(s) found, but this backend implements only the probe so far "
                           "(memory, queues and SPIR-V modules are not written yet)",
                           devices));
}

// create() never succeeds, so the registry never calls these; they exist because the table
// requires every entry.
hal_error* never() { return error(HAL_UNIMPLEMENTED, "level_zero: not implemented"); }
void ze_destroy(hal_be_backend*) {}
hal_error* ze_device_count(hal_be_backend*, uint32_t*) { return never(); }
hal_error* ze_device_open(hal_be_backend*, uint32_t, hal_be_device**) { return never(); }
void ze_device_close(hal_be_device*) {}
hal_error* ze_device_info(hal_be_device*, hal_device_info*) { return never(); }
hal_error* ze_buffer_create(hal_be_device*, const hal_buffer_desc*, hal_be_buffer**, uint64_t*, void**) { return never(); }
void ze_buffer_destroy(hal_be_buffer*) {}
hal_error* ze_stream_create(hal_be_device*, hal_be_partition*, const hal_stream_desc*, hal_be_stream**) { return never(); }
void ze_stream_destroy(hal_be_stream*) {}
hal_error* ze_stream_synchronize(hal_be_stream*) { return never(); }
hal_error* ze_stream_write(hal_be_stream*, hal_be_buffer*, uint64_t, const void*, uint64_t) { return never(); }
hal_error* ze_stream_read(hal_be_stream*, hal_be_buffer*, uint64_t, void*, uint64_t) { return never(); }
hal_error* ze_stream_copy(hal_be_stream*, hal_be_buffer*, uint64_t, hal_be_buffer*, uint64_t, uint64_t) { return never(); }
hal_error* ze_stream_fill(hal_be_stream*, hal_be_buffer*, uint64_t, uint64_t, uint32_t, uint32_t) { return never(); }
hal_error* ze_stream_wait_event(hal_be_stream*, hal_be_event*) { return never(); }
hal_error* ze_stream_launch(hal_be_stream*, hal_be_kernel*, const hal_launch_desc*) { return never(); }
hal_error* ze_event_create(hal_be_device*, const hal_event_desc*, hal_be_event**) { return never(); }
void ze_event_destroy(hal_be_event*) {}
hal_error* ze_event_record(hal_be_event*, hal_be_stream*) { return never(); }
hal_error* ze_event_query(hal_be_event*, bool*) { return never(); }
hal_error* ze_event_synchronize(hal_be_event*) { return never(); }
hal_error* ze_event_elapsed_ms(hal_be_event*, hal_be_event*, float*) { return never(); }
hal_error* ze_module_load(hal_be_device*, const hal_module_desc*, hal_be_module**) { return never(); }
void ze_module_destroy(hal_be_module*) {}
hal_error* ze_kernel_get(hal_be_module*, const char*, hal_be_kernel**, hal_kernel_info*, hal_kernel_arg*, uint32_t) { return never(); }
void ze_kernel_destroy(hal_be_kernel*) {}

const hal_backend_api kApi = {
    sizeof(hal_backend_api), nullptr, HAL_ABI_MAJOR, HAL_ABI_MINOR, "ze",
    "oneAPI Level Zero (probe only)",
    ze_create, ze_destroy, ze_device_count, nullptr, ze_device_open, ze_device_close, ze_device_info,
    ze_buffer_create, ze_buffer_destroy, ze_stream_create, ze_stream_destroy, ze_stream_synchronize,
    ze_stream_write, ze_stream_read, ze_stream_copy, ze_stream_fill, ze_stream_wait_event, ze_stream_launch,
    ze_event_create, ze_event_destroy, ze_event_record, ze_event_query, ze_event_synchronize, ze_event_elapsed_ms,
    ze_module_load, ze_module_destroy, ze_kernel_get, ze_kernel_destroy, nullptr, nullptr,
    nullptr,  // tensor_map_encode
    nullptr,  // device_can_run: the core's rule (a module runs where its target equals the arch)
    nullptr,  // partition_caps
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,  // communicator (ABI 1.4)
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_level_zero(void) { return &kApi; }
