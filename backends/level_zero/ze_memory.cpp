// Memory (device allocations, host allocations for pinned buffers; another user's device memory
// imported) and streams: one immediate command list each, on the compute queue group of the
// device or of a partition's first tile, or another user's immediate list imported. The core has
// checked every offset and size against the buffer before these run.
#include <algorithm>

#include "ze_internal.hpp"

namespace halcyon::ze {

namespace {
constexpr size_t kDefaultAlignment = 256;
char* at(Buffer* b, uint64_t off) { return static_cast<char*>(b->ptr) + off; }

// Appends a barrier that signals the stream's `done` event once its queued work is complete.
// The caller holds s->mu. Returns the first failing call's result and names it in *what.
ze_result_t mark_done(Stream* s, const char** what) {
  const Symbols& z = s->device->s();
  *what = "zeEventHostReset";
  if (ze_result_t r = z.zeEventHostReset(s->done); r != ZE_RESULT_SUCCESS) return r;
  *what = "zeCommandListAppendBarrier";
  return z.zeCommandListAppendBarrier(s->list, s->done, 0, nullptr);
}

// Waits for the queued work of one stream: mark_done, then the host waits for the event. Its
// barrier is an append, so it runs only where no other thread can append to the list meanwhile:
// for the stream's own synchronize and release, and for a created stream's list (which only the
// backend appends to, always under s->mu) from any thread.
ze_result_t drain(Stream* s, const char** what) {
  std::lock_guard lock(s->mu);
  if (ze_result_t r = mark_done(s, what); r != ZE_RESULT_SUCCESS) return r;
  *what = "zeEventHostSynchronize";
  return s->device->s().zeEventHostSynchronize(s->done, UINT64_MAX);
}

// What a buffer free waits with, from whatever thread frees it. A created stream is drained. An
// imported stream's list is appended to by its owner too, on the owner's thread and without our
// lock, so a barrier from the freeing thread could race with the owner's appends (Level Zero
// forbids concurrent appends to one list): zeCommandListHostSynchronize waits for the list
// without appending, and may be called from any thread (stream_import requires it).
ze_result_t wait_for_free(Stream* s, const char** what) {
  if (!s->imported) return drain(s, what);
  *what = "zeCommandListHostSynchronize";
  return s->device->s().zeCommandListHostSynchronize(s->list, UINT64_MAX);
}

// Destroys the retired imported streams' events (Backend::retired), those not yet signalled
// too once `wait` has waited for them. The caller holds streams_mu.
void reap_retired(Backend* b, bool wait) {
  const Symbols& z = b->lib.sym;
  std::erase_if(b->retired, [&](const Backend::Retired& r) {
    if (wait) logged(z.zeEventHostSynchronize(r.done, UINT64_MAX), "zeEventHostSynchronize");
    else if (z.zeEventQueryStatus(r.done) == ZE_RESULT_NOT_READY) return false;
    logged(z.zeEventDestroy(r.done), "zeEventDestroy");
    logged(z.zeEventPoolDestroy(r.pool), "zeEventPoolDestroy");
    return true;
  });
}

// A stream's own event for synchronize() (host visible), and its place among the live streams.
hal_error* attach(Stream* s, ze_device_handle_t target) {
  Device* d = s->device;
  const Symbols& z = d->s();
  ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
  ZE_CHECK(z.zeEventPoolCreate(d->backend->context, &pd, 1, &target, &s->pool));
  ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST};
  ZE_CHECK(z.zeEventCreate(s->pool, &ed, &s->done));
  std::lock_guard lock(d->backend->streams_mu);
  reap_retired(d->backend, false);
  d->backend->streams.insert(s);
  return nullptr;
}
}  // namespace

hal_error* buffer_create(Device* d, const hal_buffer_desc* desc, Buffer** out, uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    const Symbols& s = d->s();
    const bool pinned = desc->kind == HAL_MEMORY_HOST_PINNED;
    const size_t align = desc->alignment ? size_t(desc->alignment) : kDefaultAlignment;
    void* p = nullptr;
    if (desc->size > 0) {
      if (pinned) {
        ze_host_mem_alloc_desc_t hd{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
        ZE_CHECK(s.zeMemAllocHost(d->backend->context, &hd, desc->size, align, &p));
      } else {
        ze_device_mem_alloc_desc_t dd{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
        ze_result_t r = s.zeMemAllocDevice(d->backend->context, &dd, desc->size, align, d->handle, &p);
        if (r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
          return error(HAL_OUT_OF_MEMORY, fmt::format("ze: zeMemAllocDevice of {} bytes on '{}' ({} bytes in all) "
                                                      "failed: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
                                                      desc->size, d->props.name, d->memory_bytes));
        if (hal_error* e = check(r, "zeMemAllocDevice")) return e;
      }
    }
    *out = new Buffer{d, p};
    *address = reinterpret_cast<uint64_t>(p);
    *host = pinned ? p : nullptr;
    return nullptr;
  })
}

namespace {
// Which memory zeMemGetAllocProperties says p is, for an error.
const char* memory_type_name(ze_memory_type_t t) {
  switch (t) {
    case ZE_MEMORY_TYPE_HOST: return "host memory (zeMemAllocHost)";
    case ZE_MEMORY_TYPE_SHARED: return "shared memory (zeMemAllocShared)";
    case ZE_MEMORY_TYPE_DEVICE: return "device memory";
    default: return "unknown";
  }
}

bool is_device_or_tile(const Device* d, ze_device_handle_t h) {
  return h == d->handle || std::find(d->tiles.begin(), d->tiles.end(), h) != d->tiles.end();
}
}  // namespace

// Someone else's device memory (a PyTorch XPU tensor's, through DLPack): it must be a device
// allocation of this device (or of one of its tiles) in the backend's context, and the range
// must lie within it. Wrapped, never freed here.
hal_error* buffer_import(Device* d, const hal_buffer_import_desc* desc, Buffer** out, void** host) {
  HAL_BACKEND_GUARD({
    const Symbols& s = d->s();
    Backend* b = d->backend;
    *host = nullptr;
    void* p = reinterpret_cast<void*>(uintptr_t(desc->device_address));
    if (desc->size > 0) {
      if (!s.zeMemGetAllocProperties)
        return error(HAL_UNSUPPORTED, fmt::format("ze: {} lacks zeMemGetAllocProperties, so imported memory cannot "
                                                  "be checked", b->lib.path));
      ze_memory_allocation_properties_t props{ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, nullptr,
                                              ZE_MEMORY_TYPE_UNKNOWN, 0, 0};
      ze_device_handle_t owner = nullptr;
      ze_result_t r = s.zeMemGetAllocProperties(b->context, p, &props, &owner);
      if (r != ZE_RESULT_SUCCESS || props.type == ZE_MEMORY_TYPE_UNKNOWN)
        return error(HAL_INVALID_ARGUMENT,
                     fmt::format("ze:{}: importing {}: not memory of this backend's Level Zero context ({}); memory "
                                 "of another context cannot be used here{}",
                                 d->index, p, r == ZE_RESULT_SUCCESS ? "ZE_MEMORY_TYPE_UNKNOWN" : result_name(r),
                                 b->own_context ? " (the driver has no default context, zeDriverGetDefaultContext, "
                                                  "so the backend made its own)"
                                                : " (the backend uses the driver's default context, which SYCL "
                                                  "contexts of all root devices share)"));
      if (props.type != ZE_MEMORY_TYPE_DEVICE)
        return error(HAL_INVALID_ARGUMENT, fmt::format("ze:{}: importing {}: it is {}, not device memory", d->index, p,
                                                       memory_type_name(props.type)));
      if (!is_device_or_tile(d, owner))
        return error(HAL_INVALID_ARGUMENT,
                     fmt::format("ze:{}: importing {}: it is memory of another device, not of '{}'", d->index, p,
                                 d->props.name));
      void* base = nullptr;
      size_t bytes = 0;
      if (s.zeMemGetAddressRange && s.zeMemGetAddressRange(b->context, p, &base, &bytes) == ZE_RESULT_SUCCESS)
        if (hal_error* e = halcyon::plugin::check_import_range(fmt::format("ze:{}", d->index), uintptr_t(p),
                                                               desc->size, uintptr_t(base), bytes))
          return e;
    }
    auto buf = std::make_unique<Buffer>(Buffer{d, p});
    buf->imported = true;
    buf->owner_ordered = (desc->flags & HAL_BUFFER_IMPORT_OWNER_ORDERED) != 0;
    *out = buf.release();
    return nullptr;
  })
}

void buffer_destroy(Buffer* b) {
  // Imported memory is the owner's to free, but the owner may free it once this returns: queued
  // work first, unless the owner orders its reuse after that work itself.
  if (b->ptr && !(b->imported && b->owner_ordered)) {
    Device* d = b->device;
    {
      // Queued work of any stream may still use the memory: wait for it before the free. The
      // lock keeps a stream from being destroyed while it is drained.
      std::lock_guard lock(d->backend->streams_mu);
      const char* what = "";
      for (Stream* s : d->backend->streams) logged(wait_for_free(s, &what), what);
      reap_retired(d->backend, true);
    }
    if (!b->imported) logged(d->s().zeMemFree(d->backend->context, b->ptr), "zeMemFree");
  }
  delete b;
}

hal_error* stream_create(Device* d, Partition* part, const hal_stream_desc*, Stream** out) {
  HAL_BACKEND_GUARD({
    auto s = std::make_unique<Stream>();
    s->device = d;
    // A tile partition's work goes to its first tile's compute engines.
    ze_device_handle_t target = part && !part->tiles.empty() ? d->tiles[part->tiles.front()] : d->handle;
    if (hal_error* e = create_list(d, target, s.get())) return e;  // in order where the driver can
    if (hal_error* e = attach(s.get(), target)) {
      stream_destroy(s.release());
      return e;
    }
    *out = s.release();
    return nullptr;
  })
}

// The owner's immediate command list (a SYCL queue's, through sycl::get_native) as a stream: work
// is appended to it in order with the owner's own. It must be an immediate list of this device
// or one of its tiles, in the backend's context. The owner keeps it alive until the stream is
// released and does not append to it from another thread meanwhile (a list is not thread-safe).
hal_error* stream_import(Device* d, const hal_stream_import_desc* desc, Stream** out) {
  HAL_BACKEND_GUARD({
    const Symbols& z = d->s();
    auto list = reinterpret_cast<ze_command_list_handle_t>(uintptr_t(desc->native));
    const std::string what = fmt::format("ze:{}: importing command list 0x{:x}", d->index, desc->native);
    if (!z.zeCommandListIsImmediate || !z.zeCommandListGetDeviceHandle || !z.zeCommandListGetContextHandle)
      return error(HAL_UNSUPPORTED, fmt::format("{}: {} lacks zeCommandListIsImmediate / GetDeviceHandle / "
                                                "GetContextHandle (Level Zero 1.9), so what the list is cannot be "
                                                "checked", what, d->backend->lib.path));
    if (!z.zeCommandListHostSynchronize)
      return error(HAL_UNSUPPORTED, fmt::format("{}: {} lacks zeCommandListHostSynchronize (Level Zero 1.6), so a "
                                                "buffer free could wait for the list only by appending to it from "
                                                "another thread than the owner's", what, d->backend->lib.path));
    if (!list) return error(HAL_INVALID_ARGUMENT, what + ": the handle is 0");
    ze_bool_t immediate = false;
    ze_device_handle_t owner = nullptr;
    ze_context_handle_t context = nullptr;
    auto failed = [&](ze_result_t r, const char* call) -> hal_error* {  // each query only after the last succeeded
      if (r == ZE_RESULT_SUCCESS) return nullptr;
      return error(r == ZE_RESULT_ERROR_UNSUPPORTED_FEATURE ? HAL_UNSUPPORTED : HAL_INVALID_ARGUMENT,
                   fmt::format("{}: {} returned {}", what, call, result_name(r)));
    };
    if (hal_error* e = failed(z.zeCommandListIsImmediate(list, &immediate), "zeCommandListIsImmediate")) return e;
    if (hal_error* e = failed(z.zeCommandListGetDeviceHandle(list, &owner), "zeCommandListGetDeviceHandle")) return e;
    if (hal_error* e = failed(z.zeCommandListGetContextHandle(list, &context), "zeCommandListGetContextHandle"))
      return e;
    if (!immediate)
      return error(HAL_INVALID_ARGUMENT, what + ": it is a regular command list; only an immediate one "
                                                "(zeCommandListCreateImmediate) runs work as it is appended");
    if (context != d->backend->context)
      return error(HAL_INVALID_ARGUMENT,
                   fmt::format("{}: it is a list of another context; the backend runs in {}", what,
                               d->backend->own_context ? "its own (the driver has no default context)"
                                                       : "the driver's default context"));
    if (!is_device_or_tile(d, owner))
      return error(HAL_INVALID_ARGUMENT, fmt::format("{}: it is a list of another device, not of '{}'", what,
                                                     d->props.name));
    auto s = std::make_unique<Stream>();
    s->device = d;
    s->list = list;
    s->imported = true;
    if (hal_error* e = attach(s.get(), owner)) {
      stream_destroy(s.release());
      return e;
    }
    *out = s.release();
    return nullptr;
  })
}

// A created stream is drained and destroyed. An imported one is left to its owner, unwaited:
// a barrier appended to it signals its event, which the next buffer free waits for instead.
void stream_destroy(Stream* s) {
  const Symbols& z = s->device->s();
  Backend* b = s->device->backend;
  {
    std::lock_guard lock(b->streams_mu);
    b->streams.erase(s);
    if (s->imported && s->done) {
      std::lock_guard slock(s->mu);
      const char* what = "";
      if (ze_result_t r = mark_done(s, &what); r == ZE_RESULT_SUCCESS) {
        b->retired.push_back({s->pool, s->done});
        s->pool = nullptr, s->done = nullptr;
      } else {
        logged(r, what);
      }
      reap_retired(b, false);
    }
  }
  const char* what = "";
  if (!s->imported && s->done && s->list) logged(drain(s, &what), what);
  if (s->done) logged(z.zeEventDestroy(s->done), "zeEventDestroy");
  if (s->pool) logged(z.zeEventPoolDestroy(s->pool), "zeEventPoolDestroy");
  if (s->list && !s->imported) logged(z.zeCommandListDestroy(s->list), "zeCommandListDestroy");
  delete s;
}

// The immediate command list, as hal_stream_import takes it.
hal_error* stream_native(Stream* s, uint64_t* out) {
  *out = reinterpret_cast<uintptr_t>(s->list);
  return nullptr;
}

hal_error* stream_synchronize(Stream* s) {
  const char* what = "";
  return check(drain(s, &what), what);
}

hal_error* stream_write(Stream* s, Buffer* dst, uint64_t off, const void* src, uint64_t size) {
  if (size == 0) return nullptr;
  std::lock_guard lock(s->mu);  // appends to the list: see Stream::mu
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryCopy(s->list, at(dst, off), src, size, nullptr, 0, nullptr));
  ZE_CHECK(order_barrier(s));  // the next command waits for this one (Stream::in_order)
  return nullptr;
}

hal_error* stream_read(Stream* s, Buffer* src, uint64_t off, void* dst, uint64_t size) {
  if (size == 0) return nullptr;
  std::lock_guard lock(s->mu);  // appends to the list: see Stream::mu
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryCopy(s->list, dst, at(src, off), size, nullptr, 0, nullptr));
  ZE_CHECK(order_barrier(s));  // the next command waits for this one (Stream::in_order)
  return nullptr;
}

hal_error* stream_copy(Stream* s, Buffer* dst, uint64_t doff, Buffer* src, uint64_t soff, uint64_t size) {
  if (size == 0) return nullptr;
  std::lock_guard lock(s->mu);  // appends to the list: see Stream::mu
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryCopy(s->list, at(dst, doff), at(src, soff), size, nullptr, 0,
                                                        nullptr));
  ZE_CHECK(order_barrier(s));  // the next command waits for this one (Stream::in_order)
  return nullptr;
}

// The pattern is read when the fill is appended (Level Zero copies patterns of up to 4 bytes
// into the command), so a local is enough.
hal_error* stream_fill(Stream* s, Buffer* dst, uint64_t off, uint64_t size, uint32_t pattern, uint32_t psize) {
  if (size == 0) return nullptr;
  std::lock_guard lock(s->mu);  // appends to the list: see Stream::mu
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryFill(s->list, at(dst, off), &pattern, psize, size, nullptr, 0,
                                                        nullptr));
  ZE_CHECK(order_barrier(s));  // the next command waits for this one (Stream::in_order)
  return nullptr;
}

}  // namespace halcyon::ze
