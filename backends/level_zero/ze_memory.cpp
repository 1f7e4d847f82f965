// Memory (device allocations, host allocations for pinned buffers) and streams: one immediate
// command list each, on the compute queue group of the device or of a partition's first tile.
// The core has checked every offset and size against the buffer before these run.
#include "ze_internal.hpp"

namespace halcyon::ze {

namespace {
constexpr size_t kDefaultAlignment = 256;
char* at(Buffer* b, uint64_t off) { return static_cast<char*>(b->ptr) + off; }

// Waits for the queued work of one stream: a barrier that signals its `done` event. Returns the
// first failing call's result and names it in *what.
ze_result_t drain(Stream* s, const char** what) {
  const Symbols& z = s->device->s();
  std::lock_guard lock(s->mu);
  *what = "zeEventHostReset";
  if (ze_result_t r = z.zeEventHostReset(s->done); r != ZE_RESULT_SUCCESS) return r;
  *what = "zeCommandListAppendBarrier";
  if (ze_result_t r = z.zeCommandListAppendBarrier(s->list, s->done, 0, nullptr); r != ZE_RESULT_SUCCESS) return r;
  *what = "zeEventHostSynchronize";
  return z.zeEventHostSynchronize(s->done, UINT64_MAX);
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

void buffer_destroy(Buffer* b) {
  if (b->ptr) {
    Device* d = b->device;
    {
      // Queued work of any stream may still use the memory: wait for it before the free. The
      // lock keeps a stream from being destroyed while it is drained.
      std::lock_guard lock(d->backend->streams_mu);
      const char* what = "";
      for (Stream* s : d->backend->streams) logged(drain(s, &what), what);
    }
    logged(d->s().zeMemFree(d->backend->context, b->ptr), "zeMemFree");
  }
  delete b;
}

hal_error* stream_create(Device* d, Partition* part, const hal_stream_desc*, Stream** out) {
  HAL_BACKEND_GUARD({
    const Symbols& z = d->s();
    auto s = std::make_unique<Stream>();
    s->device = d;
    // A tile partition's work goes to its first tile's compute engines.
    ze_device_handle_t target = part && !part->tiles.empty() ? d->tiles[part->tiles.front()] : d->handle;
    ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, d->compute_ordinal, 0, 0,
                               ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ZE_CHECK(z.zeCommandListCreateImmediate(d->backend->context, target, &qd, &s->list));
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
    ZE_CHECK(z.zeEventPoolCreate(d->backend->context, &pd, 1, &target, &s->pool));
    ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST};
    ZE_CHECK(z.zeEventCreate(s->pool, &ed, &s->done));
    {
      std::lock_guard lock(d->backend->streams_mu);
      d->backend->streams.insert(s.get());
    }
    *out = s.release();
    return nullptr;
  })
}

void stream_destroy(Stream* s) {
  const Symbols& z = s->device->s();
  {
    std::lock_guard lock(s->device->backend->streams_mu);
    s->device->backend->streams.erase(s);
  }
  const char* what = "";
  if (s->done && s->list) logged(drain(s, &what), what);
  if (s->done) logged(z.zeEventDestroy(s->done), "zeEventDestroy");
  if (s->pool) logged(z.zeEventPoolDestroy(s->pool), "zeEventPoolDestroy");
  if (s->list) logged(z.zeCommandListDestroy(s->list), "zeCommandListDestroy");
  delete s;
}

hal_error* stream_synchronize(Stream* s) {
  const char* what = "";
  return check(drain(s, &what), what);
}

hal_error* stream_write(Stream* s, Buffer* dst, uint64_t off, const void* src, uint64_t size) {
  if (size == 0) return nullptr;
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryCopy(s->list, at(dst, off), src, size, nullptr, 0, nullptr));
  return nullptr;
}

hal_error* stream_read(Stream* s, Buffer* src, uint64_t off, void* dst, uint64_t size) {
  if (size == 0) return nullptr;
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryCopy(s->list, dst, at(src, off), size, nullptr, 0, nullptr));
  return nullptr;
}

hal_error* stream_copy(Stream* s, Buffer* dst, uint64_t doff, Buffer* src, uint64_t soff, uint64_t size) {
  if (size == 0) return nullptr;
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryCopy(s->list, at(dst, doff), at(src, soff), size, nullptr, 0,
                                                        nullptr));
  return nullptr;
}

// The pattern is read when the fill is appended (Level Zero copies patterns of up to 4 bytes
// into the command), so a local is enough.
hal_error* stream_fill(Stream* s, Buffer* dst, uint64_t off, uint64_t size, uint32_t pattern, uint32_t psize) {
  if (size == 0) return nullptr;
  ZE_CHECK(s->device->s().zeCommandListAppendMemoryFill(s->list, at(dst, off), &pattern, psize, size, nullptr, 0,
                                                        nullptr));
  return nullptr;
}

}  // namespace halcyon::ze
