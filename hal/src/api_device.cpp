// Devices (partitions: api_partition.cpp).
#include "core.hpp"

#include <map>
#include <mutex>
#include <string_view>
#include <utility>

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

namespace {

// Every open device, by backend and index: opening one again hands out the same object, so
// all streams, buffers and partitions of a device share one backend device. With one backend
// device per open, a buffer of one could be queued on a stream of the other (the core deems
// them the same device), and the backend, waiting only for its own streams, freed it under
// that work; partitions of the two overlapped although each was enforced.
struct OpenDevices {
  std::mutex mu;  // also serialises handle_insert of devices, the only writer of their handle
  std::map<std::pair<const Backend*, uint32_t>, std::weak_ptr<DeviceObj>> by_index;
};

OpenDevices& open_devices() {
  static auto* o = new OpenDevices;  // never destroyed: devices may be released during exit
  return *o;
}

// One more user reference to a device already open. When its every handle was released but
// its children keep it alive, it gets a new handle.
uint64_t reopen(const std::shared_ptr<DeviceObj>& dev, const char* fn) {
  if (hal_error* e = handle_retain(dev->handle, ObjType::Device, fn)) {
    hal_error_free(e);
    dev->user_refs.store(1);
    return handle_insert(dev);
  }
  return dev->handle;
}

hal_error* open_new(Backend* b, uint32_t index, const std::string& canonical, std::shared_ptr<DeviceObj>* out) {
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
  *out = std::move(dev);
  return nullptr;
}

}  // namespace
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
    OpenDevices& open = open_devices();
    std::lock_guard lock(open.mu);
    auto& slot = open.by_index[{b, index}];
    if (auto dev = slot.lock()) {
      *out = reinterpret_cast<hal_device>(reopen(dev, fn));
      return nullptr;
    }
    std::shared_ptr<DeviceObj> dev;
    if (hal_error* e = open_new(b, index, canonical, &dev)) return e;
    slot = dev;
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
