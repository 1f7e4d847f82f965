// Buffers: device memory from the device's pool (or cuMemAlloc), pinned host memory.
#include "cuda_internal.hpp"

#include <memory>

namespace halcyon::cuda {

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
    const uint64_t bytes = desc->size + (align > natural ? align : 0);
    std::string what = fmt::format("{}: allocating {} bytes of {} memory", dv->uri, desc->size,
                                   desc->kind == HAL_MEMORY_DEVICE ? "device" : "pinned host");
    if (desc->kind == HAL_MEMORY_DEVICE) {
      CUresult r;
      if (dv->pool) {
        r = d->cuMemAllocFromPoolAsync(&b->base, bytes, dv->pool, dv->alloc_stream);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // give cached blocks back and try once more
          d->cuStreamSynchronize(dv->alloc_stream);
          d->cuMemPoolTrimTo(dv->pool, 0);
          r = d->cuMemAllocFromPoolAsync(&b->base, bytes, dv->pool, dv->alloc_stream);
        }
        // Every stream may use the buffer next: finish the allocation first.
        if (r == CUDA_SUCCESS) r = d->cuStreamSynchronize(dv->alloc_stream);
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

void cuda_buffer_destroy(CudaBuffer* b) {
  CudaDevice* dv = b->device;
  const Driver* d = dv->d;
  if (b->base || b->host_base) {
    dv->synchronize_all();  // queued work on any stream may still use it
    ContextScope scope(d, dv->ctx);
    if (b->host_base) d->cuMemFreeHost(b->host_base);
    else if (b->from_pool) d->cuMemFreeAsync(b->base, dv->alloc_stream);
    else d->cuMemFree(b->base);
  }
  delete b;
}

}  // namespace halcyon::cuda
