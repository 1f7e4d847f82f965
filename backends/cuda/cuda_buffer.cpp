// Buffers: device memory from the device's pool (or cuMemAlloc), pinned host memory.
//
// hal.h: a buffer released while queued work may still use it must not be freed under that
// work. The backend does not know which streams use a buffer (launches take raw addresses),
// so a release orders the free after everything queued on the device so far, without waiting
// on the host: the device's free stream waits for an event recorded on each stream that has
// work pending, then frees with cuMemFreeAsync. The pool reuses the block once that free has
// run (never earlier: see cuda_device.cpp). Without a pool, and for pinned host memory (whose
// frees are not stream-ordered), the release waits for the device's streams as before.
#include "cuda_internal.hpp"

#include <memory>

namespace halcyon::cuda {
namespace {

// Frees a pool allocation on dv->free_stream after the work queued so far on each of the
// device's streams. Streams that are idle need no wait; a stream whose mark cannot be recorded
// is waited for on the host (that stream alone).
CUresult free_after_queued_work(CudaDevice* dv, CUdeviceptr base) {
  const Driver* d = dv->d;
  std::lock_guard lock(dv->mu);
  for (CudaStream* s : dv->streams) {
    if (d->cuStreamQuery(s->stream) == CUDA_SUCCESS) continue;
    if (!s->release_mark || d->cuEventRecord(s->release_mark, s->stream) != CUDA_SUCCESS ||
        d->cuStreamWaitEvent(dv->free_stream, s->release_mark, 0) != CUDA_SUCCESS) {
      halcyon::plugin::log(HAL_LOG_DEBUG, fmt::format("cuda: {}: a buffer release waits for one stream on the host "
                                                      "(its event could not be recorded)", dv->uri));
      d->cuStreamSynchronize(s->stream);
    }
  }
  return d->cuMemFreeAsync(base, dv->free_stream);
}

}  // namespace

hal_error* cuda_buffer_create(CudaDevice* dv, const hal_buffer_desc* desc, CudaBuffer** out,
                              uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    auto b = std::make_unique<CudaBuffer>();
    b->device = dv;
    b->kind = static_cast<hal_memory_kind>(desc->kind);
    *address = 0;
    *host = nullptr;
    if (desc->size == 0) {
      *out = b.release();
      return nullptr;
    }
    ContextScope scope(d, dv->ctx);
    const uint64_t natural = desc->kind == HAL_MEMORY_DEVICE ? kDeviceAlign : kHostAlign;
    const uint64_t align = desc->alignment > natural ? desc->alignment : natural;
    // cuMemAlloc and the pool return 256-byte-aligned memory, so device memory needs slack only
    // for a larger alignment. cuMemHostAlloc promises none (small blocks come 1 KiB-aligned):
    // pinned memory always gets room to round its start up (compute-sanitizer found reads past
    // the end of a pinned block that had been rounded up without it).
    const uint64_t bytes = desc->size + (desc->kind == HAL_MEMORY_DEVICE ? (align > natural ? align : 0) : align - 1);
    std::string what = fmt::format("{}: allocating {} bytes of {} memory", dv->uri, desc->size,
                                   desc->kind == HAL_MEMORY_DEVICE ? "device" : "pinned host");
    if (desc->kind == HAL_MEMORY_DEVICE) {
      CUresult r;
      if (dv->pool) {
        r = d->cuMemAllocFromPoolAsync(&b->base, bytes, dv->pool, dv->alloc_stream);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // let pending frees run, give cached blocks back, retry once
          dv->synchronize_all("out of memory: waiting for pending frees before trimming the pool");
          d->cuMemPoolTrimTo(dv->pool, 0);
          r = d->cuMemAllocFromPoolAsync(&b->base, bytes, dv->pool, dv->alloc_stream);
        }
        // Every stream may use the buffer next: finish the allocation first. If that fails the
        // block is never handed out: back to the pool with it, not leaked.
        if (r == CUDA_SUCCESS) {
          r = d->cuStreamSynchronize(dv->alloc_stream);
          if (r != CUDA_SUCCESS) d->cuMemFreeAsync(b->base, dv->alloc_stream);
        }
        b->from_pool = r == CUDA_SUCCESS;
      } else {
        r = d->cuMemAlloc(&b->base, bytes);
      }
      if (r != CUDA_SUCCESS) return cu_error(d, r, what);
      b->address = (b->base + align - 1) / align * align;
    } else {
      CU_TRY(d, d->cuMemHostAlloc(&b->host_base, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP), what);
      CUdeviceptr p = 0;
      CUresult r = d->cuMemHostGetDevicePointer(&p, b->host_base, 0);
      if (r != CUDA_SUCCESS) {
        d->cuMemFreeHost(b->host_base);
        return cu_error(d, r, what + " (device pointer)");
      }
      uint64_t shift = (p + align - 1) / align * align - p;
      b->base = p;
      b->address = p + shift;
      *host = static_cast<char*>(b->host_base) + shift;
    }
    *address = b->address;
    *out = b.release();
    return nullptr;
  })
}

// Someone else's device memory (a PyTorch tensor's, through DLPack): checked to be device
// memory of this GPU, wrapped, never freed here.
hal_error* cuda_buffer_import(CudaDevice* dv, const hal_buffer_import_desc* desc, CudaBuffer** out, void** host) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    *host = nullptr;
    if (desc->size > 0) {
      if (!d->cuPointerGetAttributes)
        return error(HAL_UNSUPPORTED, fmt::format("{}: this driver lacks cuPointerGetAttributes, so "
                                                  "imported memory cannot be checked", dv->uri));
      ContextScope scope(d, dv->ctx);
      const CUdeviceptr p = desc->device_address;
      unsigned int type = 0;
      int ordinal = -1;
      const auto unknown = [&] { return fmt::format("{}: importing 0x{:x}: not memory the CUDA driver knows", dv->uri, p); };
      CUdeviceptr range_start = 0;
      size_t range_bytes = 0;
      // One driver query for all four (an import a tensor a call, from Python). An address the
      // driver does not know is no error here (its type reads 0): refused by name.
      CUpointer_attribute attrs[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
      void* data[4] = {&type, &ordinal, &range_start, &range_bytes};
      CU_TRY(d, d->cuPointerGetAttributes(4, attrs, data, p), unknown());
      if (type == 0) return cu_error(d, CUDA_ERROR_INVALID_VALUE, unknown());
      if (type != CU_MEMORYTYPE_DEVICE)
        return error(HAL_INVALID_ARGUMENT, fmt::format("{}: importing 0x{:x}: it is not device memory "
                                                                        "(CUmemorytype {})", dv->uri, p, type));
      if (ordinal != dv->ordinal)
        return error(HAL_INVALID_ARGUMENT, fmt::format("{}: importing 0x{:x}: it is memory of cuda:{}, "
                                                                        "not of this device", dv->uri, p, ordinal));
      // The core's range checks trust desc->size: a size past the allocation would let writes
      // land outside it. The range is the allocation's (for cuMemMap'd memory, its reservation).
      // (A driver reporting no range, 0 bytes, leaves nothing to check against.)
      if (range_bytes > 0)
        if (hal_error* e = plugin::check_import_range(dv->uri, p, desc->size, range_start, range_bytes)) return e;
    }
    auto b = std::make_unique<CudaBuffer>();
    b->device = dv;
    b->imported = true;
    b->owner_ordered = (desc->flags & HAL_BUFFER_IMPORT_OWNER_ORDERED) != 0;
    b->address = desc->device_address;
    *out = b.release();
    return nullptr;
  })
}

void cuda_buffer_destroy(CudaBuffer* b) {
  CudaDevice* dv = b->device;
  const Driver* d = dv->d;
  if (b->imported) {
    // Not ours to free, but the owner may free it once this returns: queued work first,
    // unless the owner orders its reuse after that work itself.
    if (b->address && !b->owner_ordered) dv->synchronize_all("releasing imported memory");
  } else if (b->from_pool) {
    ContextScope scope(d, dv->ctx);
    if (free_after_queued_work(dv, b->base) != CUDA_SUCCESS) {  // not expected; never leak
      dv->synchronize_all("a stream-ordered free failed");
      d->cuMemFreeAsync(b->base, dv->free_stream);
    }
  } else if (b->vmm) {
    dv->synchronize_all("releasing peer-mappable memory");
    cuda_vmm_release(b);
  } else if (b->base || b->host_base) {
    // Queued work on any stream may still use it.
    dv->synchronize_all(b->host_base ? "releasing pinned host memory" : "releasing device memory (no memory pool)");
    ContextScope scope(d, dv->ctx);
    if (b->host_base) d->cuMemFreeHost(b->host_base);
    else d->cuMemFree(b->base);
  }
  delete b;
}

}  // namespace halcyon::cuda
