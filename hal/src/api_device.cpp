// Devices (partitions: api_partition.cpp).
#include "core.hpp"

#include <string_view>

namespace halcyon::core {
DeviceObj::~DeviceObj() {
  if (be) api().device_close(be);
}

bool has_capability(const DeviceObj& dev, std::string_view tag) {
  std::string_view caps(dev.info.capabilities);
  size_t pos = 0;
  while (pos < caps.size()) {
    size_t sp = caps.find(' ', pos);
    if (sp == std::string_view::npos) sp = caps.size();
    if (caps.substr(pos, sp - pos) == tag) return true;
    pos = sp + 1;
  }
  return false;
}
}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_error* hal_device_open(const char* uri, hal_device* out) {
  constexpr const char* fn = "hal_device_open";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    if (!uri || !*uri) return err(HAL_INVALID_ARGUMENT, "{}: device URI is NULL or empty", fn);
    Backend* b = nullptr;
    uint32_t index = 0;
    std::string canonical;
    if (hal_error* e = registry_resolve(uri, &b, &index, &canonical)) return e;
    auto dev = std::make_shared<DeviceObj>();
    dev->backend = b;
    dev->uri = canonical;
    if (hal_error* e = b->api->device_open(b->be, index, &dev->be)) return e;
    hal_device_info info{};
    info.struct_size = sizeof info;
    std::snprintf(info.uri, sizeof info.uri, "%s", canonical.c_str());
    if (hal_error* e = b->api->device_info(dev->be, &info)) return e;
    info.struct_size = sizeof info;
    info.next = nullptr;
    std::snprintf(info.uri, sizeof info.uri, "%s", canonical.c_str());
    dev->info = info;
    *out = reinterpret_cast<hal_device>(handle_insert(dev));
    return nullptr;
  })
}

HAL_DEFINE_HANDLE_ENTRIES(device, Device, DeviceObj, HAL_DEVICE_INFO_MIN_SIZE, "device")

HAL_API hal_error* hal_device_has_capability(hal_device d, const char* tag, bool* out) {
  constexpr const char* fn = "hal_device_has_capability";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    if (!tag || !*tag || !out) return err(HAL_INVALID_ARGUMENT, "{}: tag or out is NULL", fn);
    bool found = has_capability(*dev, tag);
    *out = found;
    return nullptr;
  })
}

}  // extern "C"
