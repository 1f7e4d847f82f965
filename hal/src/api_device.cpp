// Devices and compute partitions.
#include "core.hpp"

#include <string_view>

namespace halcyon::core {
DeviceObj::~DeviceObj() {
  if (be) api().device_close(be);
}
PartitionObj::~PartitionObj() {
  if (be) api().partition_destroy(be);
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

HAL_API hal_error* hal_device_retain(hal_device d) {
  HAL_CORE_GUARD("hal_device_retain", { return handle_retain(reinterpret_cast<uint64_t>(d), ObjType::Device, "hal_device_retain"); })
}
HAL_API hal_error* hal_device_release(hal_device d) {
  HAL_CORE_GUARD("hal_device_release", { return handle_release(reinterpret_cast<uint64_t>(d), ObjType::Device, "hal_device_release"); })
}

HAL_API hal_error* hal_device_get_info(hal_device d, hal_device_info* out) {
  constexpr const char* fn = "hal_device_get_info";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    if ((e = check_out_struct(out, HAL_DEVICE_INFO_MIN_SIZE, fn, "hal_device_info"))) return e;
    write_struct(dev->info, out);
    return nullptr;
  })
}

HAL_API hal_error* hal_device_has_capability(hal_device d, const char* tag, bool* out) {
  constexpr const char* fn = "hal_device_has_capability";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    if (!tag || !*tag || !out) return err(HAL_INVALID_ARGUMENT, "{}: tag or out is NULL", fn);
    std::string_view caps(dev->info.capabilities), t(tag);
    bool found = false;
    size_t pos = 0;
    while (pos < caps.size()) {
      size_t sp = caps.find(' ', pos);
      if (sp == std::string_view::npos) sp = caps.size();
      if (caps.substr(pos, sp - pos) == t) found = true;
      pos = sp + 1;
    }
    *out = found;
    return nullptr;
  })
}

HAL_API hal_error* hal_device_split(hal_device d, const hal_partition_desc* desc,
                                    hal_partition* part, hal_partition* remainder) {
  constexpr const char* fn = "hal_device_split";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    hal_partition_desc pd{};
    if ((e = read_struct(desc, HAL_PARTITION_DESC_MIN_SIZE, &pd, fn, "hal_partition_desc"))) return e;
    if (!part) return err(HAL_INVALID_ARGUMENT, "{}: part is NULL", fn);
    *part = nullptr;
    if (remainder) *remainder = nullptr;
    if (pd.units == 0)
      return err(HAL_INVALID_ARGUMENT, "{}: asked for 0 compute units of {}", fn, dev->uri);
    if (pd.units > dev->info.compute_units)
      return err(HAL_OUT_OF_RANGE, "{}: asked for {} compute units, {} has {}", fn, pd.units,
                 dev->uri, dev->info.compute_units);
    if (pd.flags & ~uint32_t(HAL_PARTITION_FINE_GRAINED))
      return err(HAL_INVALID_ARGUMENT, "{}: unknown flags 0x{:x}", fn, pd.flags);
    if (!dev->backend->has_partition_split())
      return err(HAL_UNSUPPORTED, "{}: backend {} cannot split devices", fn, dev->backend->name);
    auto p = std::make_shared<PartitionObj>(dev);
    std::shared_ptr<PartitionObj> r = remainder ? std::make_shared<PartitionObj>(dev) : nullptr;
    p->info.struct_size = sizeof p->info;
    if (r) r->info.struct_size = sizeof r->info;
    if ((e = dev->api().partition_split(dev->be, &pd, &p->be, &p->info, r ? &r->be : nullptr,
                                        r ? &r->info : nullptr)))
      return e;
    p->info.units_requested = pd.units;
    *part = reinterpret_cast<hal_partition>(handle_insert(p));
    if (r) *remainder = reinterpret_cast<hal_partition>(handle_insert(r));
    return nullptr;
  })
}

HAL_API hal_error* hal_partition_get_info(hal_partition h, hal_partition_info* out) {
  constexpr const char* fn = "hal_partition_get_info";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto p = lookup<PartitionObj>(h, fn, "partition", &e);
    if (!p) return e;
    if ((e = check_out_struct(out, HAL_PARTITION_INFO_MIN_SIZE, fn, "hal_partition_info"))) return e;
    write_struct(p->info, out);
    return nullptr;
  })
}

HAL_API hal_error* hal_partition_retain(hal_partition h) {
  HAL_CORE_GUARD("hal_partition_retain", { return handle_retain(reinterpret_cast<uint64_t>(h), ObjType::Partition, "hal_partition_retain"); })
}
HAL_API hal_error* hal_partition_release(hal_partition h) {
  HAL_CORE_GUARD("hal_partition_release", { return handle_release(reinterpret_cast<uint64_t>(h), ObjType::Partition, "hal_partition_release"); })
}

}  // extern "C"
