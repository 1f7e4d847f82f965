// The driver, its devices and their properties, and partitions: whole sub-devices (tiles) where
// the device has them, the only split Level Zero enforces; otherwise soft partitions, which
// cap the grids of the kernels launched in them but do not keep work off other EUs.
#include <algorithm>
#include <cstring>

#include "ze_internal.hpp"

namespace halcyon::ze {

hal_error* check(ze_result_t r, const char* what) {
  if (r == ZE_RESULT_SUCCESS) return nullptr;
  hal_status status = r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY || r == ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY
                          ? HAL_OUT_OF_MEMORY
                          : HAL_DEVICE_ERROR;
  const char* hint = r == ZE_RESULT_ERROR_DEVICE_LOST ? " (the device was lost: hung, reset or removed; "
                                                        "its objects are unusable, reopen it)"
                                                      : "";
  return error(status, fmt::format("ze: {} failed: {}{}", what, result_name(r), hint));
}

void logged(ze_result_t r, const char* what) {
  if (r != ZE_RESULT_SUCCESS)
    halcyon::plugin::log(HAL_LOG_WARNING, fmt::format("ze: {} failed during teardown ({})", what, result_name(r)));
}

Backend::~Backend() {
  for (const Retired& r : retired) {  // the owners' lists are theirs; only the events are ours
    logged(lib.sym.zeEventDestroy(r.done), "zeEventDestroy");
    logged(lib.sym.zeEventPoolDestroy(r.pool), "zeEventPoolDestroy");
  }
  if (context && own_context) logged(lib.sym.zeContextDestroy(context), "zeContextDestroy");
}

namespace {

// The first driver with a GPU device, its devices in *devices.
hal_error* find_devices(Backend* b) {
  const Symbols& s = b->lib.sym;
  uint32_t n = 0;
  ze_result_t r = s.zeDriverGet(&n, nullptr);
  if (r != ZE_RESULT_SUCCESS || n == 0)
    return error(HAL_UNAVAILABLE, fmt::format("ze: {} initialised, but it found no driver ({})", b->lib.path,
                                              r == ZE_RESULT_SUCCESS ? "0 drivers" : result_name(r)));
  std::vector<ze_driver_handle_t> drivers(n);
  ZE_CHECK(s.zeDriverGet(&n, drivers.data()));
  for (auto drv : drivers) {
    uint32_t count = 0;
    if (s.zeDeviceGet(drv, &count, nullptr) != ZE_RESULT_SUCCESS || count == 0) continue;
    b->devices.resize(count);
    ZE_CHECK(s.zeDeviceGet(drv, &count, b->devices.data()));
    b->driver = drv;
    return nullptr;
  }
  return error(HAL_UNAVAILABLE, fmt::format("ze: {} found {} driver(s), none with a GPU device", b->lib.path, n));
}

uint32_t eus(const ze_device_properties_t& p) { return p.numSlices * p.numSubslicesPerSlice * p.numEUsPerSubslice; }

}  // namespace

uint32_t Device::units() const { return std::max(eus(props), 1u); }

uint32_t Device::units_per_tile() const {
  return tiles.empty() ? units() : std::max(units() / uint32_t(tiles.size()), 1u);
}

hal_error* create(const hal_host_api* host, Backend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    auto b = std::make_unique<Backend>();
    std::string why;
    // ze.loader: the Level Zero loader (or a driver that exports the ze* entry points, such as
    // the tests' fake driver) to open instead of libze_loader.so.1.
    if (!b->lib.open(halcyon::plugin::option("ze", "loader"), &why)) return error(HAL_UNAVAILABLE, "ze: " + why);
    const Symbols& s = b->lib.sym;
    if (ze_result_t r = s.zeInit(ZE_INIT_FLAG_GPU_ONLY); r != ZE_RESULT_SUCCESS)
      return error(HAL_UNAVAILABLE,
                   fmt::format("ze: {} loaded, but zeInit failed with {}: no Level Zero GPU driver is installed "
                               "(Intel: intel-level-zero-gpu) or no GPU is visible (/dev/dri/renderD*)",
                               b->lib.path, result_name(r)));
    if (hal_error* e = find_devices(b.get())) return e;
    // The version says which flags the driver knows (create_list); optional, 0 where unknown.
    ze_api_version_t version{};
    if (s.zeDriverGetApiVersion && s.zeDriverGetApiVersion(b->driver, &version) == ZE_RESULT_SUCCESS)
      b->api_version = uint32_t(version);
    // The driver's default context where it has one: memory is usable only in the context it
    // was allocated in, and this is the one other users of the driver share (SYCL's contexts of
    // all root devices, so PyTorch's XPU tensors), which hal_buffer_import needs. Else our own.
    if (s.zeDriverGetDefaultContext) b->context = s.zeDriverGetDefaultContext(b->driver);
    if (!b->context) {
      ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
      ZE_CHECK(s.zeContextCreate(b->driver, &cd, &b->context));
      b->own_context = true;
    }
    *out = b.release();
    return nullptr;
  })
}

void destroy(Backend* b) { delete b; }

hal_error* device_count(Backend* b, uint32_t* out) {
  *out = uint32_t(b->devices.size());
  return nullptr;
}

namespace {

hal_error* read_queue_groups(Device* d) {
  const Symbols& s = d->s();
  uint32_t n = 0;
  ZE_CHECK(s.zeDeviceGetCommandQueueGroupProperties(d->handle, &n, nullptr));
  std::vector<ze_command_queue_group_properties_t> groups(n);
  for (auto& g : groups) g = {ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES, nullptr, 0, 0, 0};
  ZE_CHECK(s.zeDeviceGetCommandQueueGroupProperties(d->handle, &n, groups.data()));
  for (uint32_t i = 0; i < n; ++i) {
    if (groups[i].flags & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE) {
      d->compute_ordinal = i;
      d->compute_queues = std::max(groups[i].numQueues, 1u);
      return nullptr;
    }
  }
  return error(HAL_UNSUPPORTED, fmt::format("ze: device '{}' has no compute queue group", d->props.name));
}

hal_error* read_memory(Device* d) {
  const Symbols& s = d->s();
  uint32_t n = 0;
  ZE_CHECK(s.zeDeviceGetMemoryProperties(d->handle, &n, nullptr));
  std::vector<ze_device_memory_properties_t> mem(n);
  for (auto& m : mem) m = {ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES, nullptr, 0, 0, 0, 0, {}};
  ZE_CHECK(s.zeDeviceGetMemoryProperties(d->handle, &n, mem.data()));
  for (auto& m : mem) {
    d->memory_bytes += m.totalSize;
    // Clock (MHz) times bus width (bits), as the driver reports them: a peak, not a measurement.
    d->memory_bytes_per_s = std::max(d->memory_bytes_per_s, uint64_t(m.maxClockRate) * 1000000 * m.maxBusWidth / 8);
  }
  if (s.zeDeviceGetCacheProperties) {
    uint32_t c = 1;
    ze_device_cache_properties_t cache{ZE_STRUCTURE_TYPE_DEVICE_CACHE_PROPERTIES, nullptr, 0, 0};
    if (s.zeDeviceGetCacheProperties(d->handle, &c, &cache) == ZE_RESULT_SUCCESS && c >= 1) d->l2_bytes = cache.cacheSize;
  }
  return nullptr;
}

}  // namespace

hal_error* device_open(Backend* b, uint32_t index, Device** out) {
  HAL_BACKEND_GUARD({
    auto d = std::make_unique<Device>();
    d->backend = b;
    d->index = index;
    d->handle = b->devices[index];
    const Symbols& s = b->lib.sym;
    d->props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
    ZE_CHECK(s.zeDeviceGetProperties(d->handle, &d->props));
    d->compute.stype = ZE_STRUCTURE_TYPE_DEVICE_COMPUTE_PROPERTIES;
    ZE_CHECK(s.zeDeviceGetComputeProperties(d->handle, &d->compute));
    if (hal_error* e = read_queue_groups(d.get())) return e;
    if (hal_error* e = read_memory(d.get())) return e;
    uint32_t tiles = 0;
    ZE_CHECK(s.zeDeviceGetSubDevices(d->handle, &tiles, nullptr));
    if (tiles >= 2) {
      d->tiles.resize(tiles);
      ZE_CHECK(s.zeDeviceGetSubDevices(d->handle, &tiles, d->tiles.data()));
    }
    // PCI vendor and device id: the driver compiles SPIR-V for the device, so the id only names
    // it (and lets a caller load a module built for exactly this device).
    d->arch = d->props.vendorId == 0x8086 ? fmt::format("intel_{:04x}", d->props.deviceId)
                                          : fmt::format("ze_{:04x}_{:04x}", d->props.vendorId, d->props.deviceId);
    *out = d.release();
    return nullptr;
  })
}

void device_close(Device* d) { delete d; }

hal_error* device_info(Device* d, hal_device_info* info) {
  const auto& p = d->props;
  std::snprintf(info->name, sizeof info->name, "%.*s", int(strnlen(p.name, sizeof p.name)), p.name);
  std::snprintf(info->vendor, sizeof info->vendor, "%s",
                p.vendorId == 0x8086 ? "Intel" : fmt::format("PCI vendor 0x{:04x}", p.vendorId).c_str());
  std::snprintf(info->arch, sizeof info->arch, "%s", d->arch.c_str());
  info->compute_units = d->units();
  info->simd_width = p.physicalEUSimdWidth;
  info->memory_bytes = d->memory_bytes;
  info->max_shared_per_block = d->compute.maxSharedLocalMemory;
  info->max_threads_per_block = d->compute.maxTotalGroupSize;
  info->clock_khz = p.coreClockRate * 1000;
  info->l2_cache_bytes = d->l2_bytes;
  info->memory_bytes_per_s = d->memory_bytes_per_s;
  std::snprintf(info->capabilities, sizeof info->capabilities, "module.spirv events.timing%s",
                d->tiles.size() >= 2 ? " partition.sub_device partition.enforced" : "");
  return nullptr;
}

// SPIR-V is compiled by the driver for its device: a module tagged "spirv64" (64-bit
// addressing, the kernels/spirv build) runs on every device; one tagged with a device's arch
// only there.
hal_error* device_can_run(Device* d, uint32_t, const char* target, bool* yes, char* reason, size_t cap) {
  *yes = std::strcmp(target, "spirv64") == 0 || d->arch == target;
  if (!*yes)
    std::snprintf(reason, cap, "a SPIR-V module for %s runs only there; %s is %s (modules tagged spirv64 run on "
                  "every Level Zero device)", target, d->props.name, d->arch.c_str());
  return nullptr;
}

// ---- partitions ----------------------------------------------------------------------------

hal_error* partition_caps(Device* d, uint32_t, hal_partition_caps* out) {
  if (d->tiles.size() >= 2) {
    out->min_units = out->step_units = d->units_per_tile();
    out->mechanism = HAL_PARTITION_SUB_DEVICE;
    out->enforced = 1;
  } else {
    out->min_units = out->step_units = 1;
    out->mechanism = HAL_PARTITION_SOFT_CAP;
    out->enforced = 0;
  }
  return nullptr;
}

namespace {

void describe(Device* d, const Partition& p, uint32_t requested, hal_partition_info* info) {
  info->units_requested = requested;
  info->units_granted = p.units;
  if (p.tiles.empty()) {
    info->mechanism = HAL_PARTITION_SOFT_CAP;
    info->enforced = 0;
    info->granularity = 1;
    info->first_unit = UINT32_MAX;
  } else {
    info->mechanism = HAL_PARTITION_SUB_DEVICE;
    info->enforced = 1;
    info->granularity = d->units_per_tile();
    info->first_unit = p.tiles.front() * d->units_per_tile();
  }
}

// Whole tiles: `want` of the free ones, and the rest when asked for.
hal_error* split_tiles(Device* d, const hal_partition_desc* desc, Partition** part, hal_partition_info* pinfo,
                       Partition** rem, hal_partition_info* rinfo) {
  const uint32_t per = d->units_per_tile();
  std::vector<uint32_t> free_tiles;
  for (uint32_t t = 0; t < d->tiles.size(); ++t)
    if (!d->claimed_tiles.count(t)) free_tiles.push_back(t);
  const uint32_t want = (desc->units + per - 1) / per;
  if (desc->units == 0 || want > free_tiles.size() || (rem && want == free_tiles.size()))
    return error(HAL_OUT_OF_RANGE,
                 fmt::format("ze: asked for {} EUs: {} whole sub-device(s) of {} EUs{}; {} of the {} sub-devices of "
                             "'{}' are free (Level Zero partitions only by whole sub-devices)",
                             desc->units, want, per, rem ? " plus a non-empty remainder" : "", free_tiles.size(),
                             d->tiles.size(), d->props.name));
  auto make = [&](std::vector<uint32_t> tiles, uint32_t requested, hal_partition_info* info) {
    for (uint32_t t : tiles) d->claimed_tiles.insert(t);
    auto* p = new Partition{d, std::move(tiles), 0};
    p->units = uint32_t(p->tiles.size()) * per;
    describe(d, *p, requested, info);
    return p;
  };
  std::vector<uint32_t> mine(free_tiles.begin(), free_tiles.begin() + want);
  std::vector<uint32_t> rest(free_tiles.begin() + want, free_tiles.end());
  *part = make(std::move(mine), desc->units, pinfo);
  if (rem) *rem = make(std::move(rest), uint32_t(rest.size()) * per, rinfo);
  return nullptr;
}

}  // namespace

hal_error* partition_split(Device* d, const hal_partition_desc* desc, Partition** part, hal_partition_info* pinfo,
                           Partition** rem, hal_partition_info* rinfo) {
  HAL_BACKEND_GUARD({
    std::lock_guard lock(d->mu);
    if (d->tiles.size() >= 2) return split_tiles(d, desc, part, pinfo, rem, rinfo);
    // No sub-devices: a soft cap (the core has checked that the units are free).
    const uint32_t free = d->units() - std::min(d->soft_units, d->units());
    *part = new Partition{d, {}, desc->units};
    describe(d, **part, desc->units, pinfo);
    d->soft_units += desc->units;
    if (rem) {
      *rem = new Partition{d, {}, free - desc->units};
      describe(d, **rem, free - desc->units, rinfo);
      d->soft_units += free - desc->units;
    }
    return nullptr;
  })
}

void partition_destroy(Partition* p) {
  std::lock_guard lock(p->device->mu);
  for (uint32_t t : p->tiles) p->device->claimed_tiles.erase(t);
  if (p->tiles.empty()) p->device->soft_units -= std::min(p->units, p->device->soft_units);
  delete p;
}

namespace {
// ZE_COMMAND_QUEUE_FLAG_IN_ORDER, new in Level Zero 1.7 (Debian's 1.4 headers lack it).
constexpr ze_command_queue_flags_t kQueueFlagInOrder = 1u << 1;
constexpr uint32_t kApiInOrder = ZE_MAKE_VERSION(1, 7);
}  // namespace

// A stream's immediate command list on `target`, in the compute queue group, made in order
// (Stream::in_order) where the driver has the flag: Level Zero 1.7 or later. A driver that
// reports 1.7 yet refuses the flag as an unknown enumeration gets a list without it, as an older
// one does; order_barrier() then orders the stream's commands instead.
hal_error* create_list(Device* d, ze_device_handle_t target, Stream* s) {
  const Symbols& z = d->s();
  ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, d->compute_ordinal, 0, 0,
                             ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  if (d->backend->api_version >= kApiInOrder) {
    qd.flags = kQueueFlagInOrder;
    ze_result_t r = z.zeCommandListCreateImmediate(d->backend->context, target, &qd, &s->list);
    if (r == ZE_RESULT_SUCCESS) {
      s->in_order = true;
      return nullptr;
    }
    if (r != ZE_RESULT_ERROR_INVALID_ENUMERATION)
      return check(r, "zeCommandListCreateImmediate (ZE_COMMAND_QUEUE_FLAG_IN_ORDER)");
    qd.flags = 0;
  }
  ZE_CHECK(z.zeCommandListCreateImmediate(d->backend->context, target, &qd, &s->list));
  return nullptr;
}

}  // namespace halcyon::ze
