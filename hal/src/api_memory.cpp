// Buffers.
#include "core.hpp"

#include <unistd.h>

namespace halcyon::core {
BufferObj::~BufferObj() {
  if (be) api().buffer_destroy(be);
  if (release) release(release_user);  // the owner of imported memory may free it now
}

namespace {

// The host's physical memory, or 0 when the system does not say.
uint64_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// A size no memory of its kind can hold is refused here, for every backend: a backend that
// rounds it up to its alignment would otherwise wrap to a tiny allocation that the core then
// reports (and range-checks) at the full size. Pinned memory is host memory: it is bounded by
// the host's, device memory by the device's.
hal_error* check_buffer_size(const char* fn, const DeviceObj& dev, const hal_buffer_desc& bd) {
  const uint64_t slack = bd.alignment > 4096 ? bd.alignment : 4096;  // room for any backend's rounding
  if (bd.size > UINT64_MAX - slack)
    return err(HAL_OUT_OF_RANGE, "{}: {} bytes (alignment {}) cannot be allocated: rounding it up overflows 64 bits",
               fn, bd.size, bd.alignment);
  bool pinned = bd.kind == HAL_MEMORY_HOST_PINNED;
  uint64_t limit = pinned ? host_memory_bytes() : dev.info.memory_bytes;
  if (limit != 0 && bd.size > limit)
    return err(HAL_OUT_OF_MEMORY, "{}: {} bytes of {} memory asked for, {} has {} bytes", fn, bd.size,
               pinned ? "pinned host" : "device", pinned ? "the host" : dev.uri, limit);
  return nullptr;
}

}  // namespace
}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_error* hal_buffer_create(hal_device d, const hal_buffer_desc* desc, hal_buffer* out) {
  constexpr const char* fn = "hal_buffer_create";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    hal_buffer_desc bd{};
    if ((e = read_struct(desc, HAL_BUFFER_DESC_MIN_SIZE, &bd, fn, "hal_buffer_desc"))) return e;
    if (bd.kind != HAL_MEMORY_DEVICE && bd.kind != HAL_MEMORY_HOST_PINNED)
      return err(HAL_INVALID_ARGUMENT, "{}: memory kind {} is neither HAL_MEMORY_DEVICE nor HAL_MEMORY_HOST_PINNED", fn, int(bd.kind));
    if (bd.flags != 0) return err(HAL_INVALID_ARGUMENT, "{}: flags 0x{:x} are reserved and must be 0", fn, bd.flags);
    if (bd.alignment != 0 && (bd.alignment & (bd.alignment - 1)) != 0)
      return err(HAL_INVALID_ARGUMENT, "{}: alignment {} is not a power of two", fn, bd.alignment);
    if ((e = check_buffer_size(fn, *dev, bd))) return e;
    auto b = std::make_shared<BufferObj>(dev);
    b->kind = bd.kind;
    b->size = bd.size;
    if ((e = dev->api().buffer_create(dev->be, &bd, &b->be, &b->address, &b->host))) return e;
    *out = reinterpret_cast<hal_buffer>(handle_insert(b));
    return nullptr;
  })
}

HAL_API hal_error* hal_buffer_import(hal_device d, const hal_buffer_import_desc* desc, hal_buffer* out) {
  constexpr const char* fn = "hal_buffer_import";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    hal_buffer_import_desc id{};
    if ((e = read_struct(desc, HAL_BUFFER_IMPORT_DESC_MIN_SIZE, &id, fn, "hal_buffer_import_desc"))) return e;
    if (id.kind != HAL_MEMORY_DEVICE)
      return err(HAL_INVALID_ARGUMENT, "{}: memory kind {} cannot be imported (HAL_MEMORY_DEVICE only)", fn, int(id.kind));
    if (id.flags & ~uint32_t(HAL_BUFFER_IMPORT_OWNER_ORDERED))
      return err(HAL_INVALID_ARGUMENT, "{}: flags 0x{:x}: bits 0x{:x} are reserved and must be 0", fn, id.flags,
                 id.flags & ~uint32_t(HAL_BUFFER_IMPORT_OWNER_ORDERED));
    if (id.size > 0 && id.device_address == 0)
      return err(HAL_INVALID_ARGUMENT, "{}: address 0 for {} bytes", fn, id.size);
    if (id.device_address + id.size < id.device_address)
      return err(HAL_OUT_OF_RANGE, "{}: [0x{:x}, +{}) wraps around the address space", fn, id.device_address, id.size);
    if (!dev->backend->has_buffer_import())
      return err(HAL_UNSUPPORTED, "{}: the {} backend cannot import external memory", fn, dev->backend->api->name);
    auto b = std::make_shared<BufferObj>(dev);
    b->kind = id.kind;
    b->size = id.size;
    b->address = id.device_address;
    if ((e = dev->api().buffer_import(dev->be, &id, &b->be, &b->host))) return e;
    b->release = id.release;  // only now: on the error above the caller still owns the memory
    b->release_user = id.release_user;
    *out = reinterpret_cast<hal_buffer>(handle_insert(b));
    return nullptr;
  })
}

HAL_API hal_error* hal_buffer_get_info(hal_buffer h, hal_buffer_info* out) {
  constexpr const char* fn = "hal_buffer_get_info";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto b = lookup<BufferObj>(h, fn, "buffer", &e);
    if (!b) return e;
    if ((e = check_out_struct(out, HAL_BUFFER_INFO_MIN_SIZE, fn, "hal_buffer_info"))) return e;
    hal_buffer_info i{};
    i.struct_size = sizeof i;
    i.kind = b->kind;
    i.size = b->size;
    i.device_address = b->address;
    i.host_pointer = b->host;
    std::snprintf(i.device_uri, sizeof i.device_uri, "%s", b->device->uri.c_str());
    write_struct(i, out);
    return nullptr;
  })
}

HAL_API hal_error* hal_buffer_retain(hal_buffer h) {
  HAL_CORE_GUARD("hal_buffer_retain", { return handle_retain(reinterpret_cast<uint64_t>(h), ObjType::Buffer, "hal_buffer_retain"); })
}
HAL_API hal_error* hal_buffer_release(hal_buffer h) {
  HAL_CORE_GUARD("hal_buffer_release", { return handle_release(reinterpret_cast<uint64_t>(h), ObjType::Buffer, "hal_buffer_release"); })
}

}  // extern "C"
