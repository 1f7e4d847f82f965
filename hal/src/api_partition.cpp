// Compute partitions: splits that reserve units (so partitions of a device are disjoint on
// every backend), the capability query, several named partitions in one call, and the soft
// partitions the core makes for a backend that cannot enforce one.
#include "core.hpp"

#include <algorithm>
#include <cstdio>
#include <string_view>

namespace halcyon::core {

PartitionObj::~PartitionObj() {
  if (be) api().partition_destroy(be);
  std::lock_guard lock(device->partition_mu);
  device->reserved_units -= reserved;
}

namespace {

void set_name(char (&dst)[32], std::string_view name) {
  std::snprintf(dst, sizeof dst, "%.*s", int(name.size()), name.data());
}

const char* mechanism_name(uint32_t m) {
  switch (m) {
    case HAL_PARTITION_GREEN_CONTEXT: return "green_context";
    case HAL_PARTITION_CU_MASK: return "cu_mask";
    case HAL_PARTITION_SUB_DEVICE: return "sub_device";
    case HAL_PARTITION_THREAD_SET: return "thread_set";
    case HAL_PARTITION_SOFT_CAP: return "soft_cap";
    default: return "whole_device";
  }
}

uint32_t free_units(DeviceObj& dev) {
  std::lock_guard lock(dev.partition_mu);
  return dev.info.compute_units - std::min(dev.reserved_units, dev.info.compute_units);
}

// The caps of a split with `flags`: the backend's answer, or what the core can say for it.
hal_error* caps_of(DeviceObj& dev, uint32_t flags, hal_partition_caps* c) {
  *c = hal_partition_caps{};
  c->struct_size = sizeof *c;
  if (dev.backend->has_partition_split() && dev.backend->has_partition_caps()) {
    if (hal_error* e = dev.api().partition_caps(dev.be, flags, c)) return e;
  } else if (dev.backend->has_partition_split()) {
    c->min_units = c->step_units = 1;
    c->mechanism = HAL_PARTITION_WHOLE_DEVICE;  // not said by an ABI 1.2 backend
    c->enforced = has_capability(dev, "partition.enforced");
  } else {
    c->min_units = c->step_units = 1;
    c->mechanism = HAL_PARTITION_SOFT_CAP;
    c->enforced = 0;
  }
  c->struct_size = sizeof *c;
  c->next = nullptr;
  c->units = dev.info.compute_units;
  c->units_free = free_units(dev);
  c->min_units = std::max(c->min_units, 1u);
  c->step_units = std::max(c->step_units, 1u);
  if (!c->mechanism_name[0]) set_name(c->mechanism_name, mechanism_name(c->mechanism));
  c->mechanism_name[sizeof c->mechanism_name - 1] = '\0';
  return nullptr;
}

std::shared_ptr<PartitionObj> soft_partition(const std::shared_ptr<DeviceObj>& dev, uint32_t units) {
  auto p = std::make_shared<PartitionObj>(dev);
  p->info.struct_size = sizeof p->info;
  p->info.units_requested = units;
  p->info.units_granted = units;
  p->info.mechanism = HAL_PARTITION_SOFT_CAP;
  p->info.enforced = 0;
  p->info.granularity = 1;
  p->info.first_unit = UINT32_MAX;
  return p;
}

// One split off the free units: `part` gets desc.units (rounded by the backend), `rest` (if
// asked for) every unit still free after it. Both reserve what they were granted.
hal_error* split_one(const std::shared_ptr<DeviceObj>& dev, const hal_partition_desc& pd, const char* fn,
                     std::shared_ptr<PartitionObj>* part, std::shared_ptr<PartitionObj>* rest) {
  const uint32_t free = free_units(*dev);
  if (pd.units > free)
    return err(HAL_OUT_OF_RANGE, "{}: asked for {} compute units; {} of the {} of {} are not in another partition", fn,
               pd.units, free, dev->info.compute_units, dev->uri);
  if (rest && pd.units == free)
    return err(HAL_OUT_OF_RANGE, "{}: asked for {} compute units plus a non-empty remainder; {} of {} are free", fn,
               pd.units, free, dev->uri);
  std::shared_ptr<PartitionObj> p, r;
  if (dev->backend->has_partition_split()) {
    p = std::make_shared<PartitionObj>(dev);
    if (rest) r = std::make_shared<PartitionObj>(dev);
    p->info.struct_size = sizeof p->info;
    if (r) r->info.struct_size = sizeof r->info;
    if (hal_error* e = dev->api().partition_split(dev->be, &pd, &p->be, &p->info, r ? &r->be : nullptr,
                                                  r ? &r->info : nullptr))
      return e;
    p->info.units_requested = pd.units;
  } else {
    p = soft_partition(dev, pd.units);
    if (rest) r = soft_partition(dev, free - pd.units);
  }
  std::lock_guard lock(dev->partition_mu);
  for (auto* q : {&p, &r})
    if (*q) (*q)->reserved = (*q)->info.units_granted, dev->reserved_units += (*q)->reserved;
  *part = std::move(p);
  if (rest) *rest = std::move(r);
  return nullptr;
}

hal_error* check_flags(uint32_t flags, const char* fn) {
  if (flags & ~uint32_t(HAL_PARTITION_FINE_GRAINED)) return err(HAL_INVALID_ARGUMENT, "{}: unknown flags 0x{:x}", fn, flags);
  return nullptr;
}

}  // namespace
}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_error* hal_device_split(hal_device d, const hal_partition_desc* desc, hal_partition* part,
                                    hal_partition* remainder) {
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
    if (pd.units == 0) return err(HAL_INVALID_ARGUMENT, "{}: asked for 0 compute units of {}", fn, dev->uri);
    if (pd.units > dev->info.compute_units)
      return err(HAL_OUT_OF_RANGE, "{}: asked for {} compute units, {} has {}", fn, pd.units, dev->uri,
                 dev->info.compute_units);
    if ((e = check_flags(pd.flags, fn))) return e;
    std::shared_ptr<PartitionObj> p, r;
    if ((e = split_one(dev, pd, fn, &p, remainder ? &r : nullptr))) return e;
    *part = reinterpret_cast<hal_partition>(handle_insert(p));
    if (r) *remainder = reinterpret_cast<hal_partition>(handle_insert(r));
    return nullptr;
  })
}

HAL_API hal_error* hal_device_partition_caps(hal_device d, uint32_t flags, hal_partition_caps* out) {
  constexpr const char* fn = "hal_device_partition_caps";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    if ((e = check_out_struct(out, HAL_PARTITION_CAPS_MIN_SIZE, fn, "hal_partition_caps"))) return e;
    if ((e = check_flags(flags, fn))) return e;
    hal_partition_caps c{};
    if ((e = caps_of(*dev, flags, &c))) return e;
    write_struct(c, out);
    return nullptr;
  })
}

HAL_API hal_error* hal_device_split_n(hal_device d, const hal_partition_request* const* requests, uint32_t count,
                                      hal_partition* out) {
  constexpr const char* fn = "hal_device_split_n";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    if (!requests || !out || count == 0)
      return err(HAL_INVALID_ARGUMENT, "{}: requests or out is NULL, or count is 0", fn);
    std::fill(out, out + count, nullptr);
    std::vector<hal_partition_request> req(count);
    int rest = -1;
    uint64_t fixed = 0;
    for (uint32_t i = 0; i < count; ++i) {
      std::string what = fmt::format("requests[{}]", i);
      if ((e = read_struct(requests[i], HAL_PARTITION_REQUEST_MIN_SIZE, &req[i], fn, what.c_str()))) return e;
      if ((e = check_flags(req[i].flags, fn))) return e;
      if (req[i].flags != req[0].flags)
        return err(HAL_INVALID_ARGUMENT, "{}: {} has flags 0x{:x}, requests[0] 0x{:x}: they must agree", fn, what,
                   req[i].flags, req[0].flags);
      if (req[i].name && std::string_view(req[i].name).size() > 31)
        return err(HAL_INVALID_ARGUMENT, "{}: {}'s name '{}' is longer than 31 bytes", fn, what, req[i].name);
      if (req[i].units == 0 && rest >= 0)
        return err(HAL_INVALID_ARGUMENT, "{}: requests[{}] and {} both ask for the rest (units 0)", fn, rest, what);
      if (req[i].units == 0) rest = int(i);
      fixed += req[i].units;
    }
    if (fixed == 0) return err(HAL_INVALID_ARGUMENT, "{}: no request names a number of units", fn);
    const uint32_t free = free_units(*dev);
    if (fixed > free || (rest >= 0 && fixed == free))
      return err(HAL_OUT_OF_RANGE, "{}: the requests ask for {} compute units{}; {} of the {} of {} are free", fn,
                 fixed, rest >= 0 ? " plus a non-empty rest" : "", free, dev->info.compute_units, dev->uri);
    // Fixed requests in order; the last one also takes the rest when a request asks for it.
    int last_fixed = -1;
    for (uint32_t i = 0; i < count; ++i)
      if (req[i].units) last_fixed = int(i);
    std::vector<std::shared_ptr<PartitionObj>> made(count);
    for (uint32_t i = 0; i < count; ++i) {
      if (!req[i].units) continue;
      hal_partition_desc pd{sizeof pd, nullptr, req[i].units, req[i].flags};
      std::shared_ptr<PartitionObj> r;
      const bool take_rest = rest >= 0 && int(i) == last_fixed;
      if ((e = split_one(dev, pd, fn, &made[i], take_rest ? &r : nullptr))) {
        // The partitions made so far are released with `made` (their units return).
        hal_error* named = err(hal_error_status(e), "requests[{}] ('{}', {} units): {}", i,
                               req[i].name ? req[i].name : "", req[i].units, hal_error_message(e));
        hal_error_free(e);
        return named;
      }
      if (take_rest) made[size_t(rest)] = std::move(r);
    }
    for (uint32_t i = 0; i < count; ++i) {
      set_name(made[i]->info.name, req[i].name ? req[i].name : "");
      out[i] = reinterpret_cast<hal_partition>(handle_insert(made[i]));
    }
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
