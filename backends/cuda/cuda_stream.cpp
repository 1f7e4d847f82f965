// Streams: non-blocking CUDA streams, of the primary context or of a partition's green
// context; transfers, fills and waits on events. Launches are in cuda_module.cpp.
#include "cuda_internal.hpp"

#include <memory>

namespace halcyon::cuda {
namespace {

// Host pointers and device addresses share one space (unified addressing), so cuMemcpyAsync
// takes either; pageable host memory is staged by the driver.
hal_error* copy_async(CudaStream* s, CUdeviceptr dst, CUdeviceptr src, uint64_t size, const char* what) {
  const Driver* d = s->device->d;
  ContextScope scope(d, s->device->ctx);
  CU_TRY(d, d->cuMemcpyAsync(dst, src, size, s->stream), fmt::format("{}: {} of {} bytes", s->device->uri, what, size));
  return nullptr;
}

}  // namespace

hal_error* cuda_stream_create(CudaDevice* dv, CudaPartition* part, const hal_stream_desc*,
                              CudaStream** out) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    auto s = std::make_unique<CudaStream>();
    s->device = dv;
    if (part) {
      CU_TRY(d, d->cuGreenCtxStreamCreate(&s->stream, part->green, CU_STREAM_NON_BLOCKING, 0),
             dv->uri + ": creating a stream in a green-context partition");
      s->ctx = part->ctx;
    } else {
      ContextScope scope(d, dv->ctx);
      CU_TRY(d, d->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING), dv->uri + ": cuStreamCreate");
      s->ctx = dv->ctx;
    }
    {
      // In the stream's own context: a primary-context event cannot record a green one's stream.
      ContextScope scope(d, s->ctx ? s->ctx : dv->ctx);
      if (d->cuEventCreate(&s->release_mark, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) s->release_mark = nullptr;
    }
    {
      std::lock_guard lock(dv->mu);
      dv->streams.insert(s.get());
    }
    *out = s.release();
    return nullptr;
  })
}

hal_error* cuda_stream_import(CudaDevice* dv, const hal_stream_import_desc* desc, CudaStream** out) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    if (!d->cuStreamGetCtx)
      return error(HAL_UNSUPPORTED, fmt::format("{}: this driver lacks cuStreamGetCtx, so an imported stream's "
                                                "context cannot be checked", dv->uri));
    auto s = std::make_unique<CudaStream>();
    s->device = dv;
    s->imported = true;
    s->stream = reinterpret_cast<CUstream>(static_cast<uintptr_t>(desc->native));
    s->ctx = dv->ctx;
    ContextScope scope(d, dv->ctx);  // the legacy (0) and per-thread (2) streams are the current context's
    CUcontext ctx = nullptr;
    CU_TRY(d, d->cuStreamGetCtx(s->stream, &ctx),
           fmt::format("{}: importing stream 0x{:x}: not a stream the CUDA driver knows", dv->uri, desc->native));
    if (ctx != dv->ctx)
      return error(HAL_INVALID_ARGUMENT, fmt::format("{}: importing stream 0x{:x}: it belongs to another CUDA context "
                                                     "(not this device's primary context)", dv->uri, desc->native));
    if (d->cuEventCreate(&s->release_mark, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) s->release_mark = nullptr;
    {
      std::lock_guard lock(dv->mu);
      dv->streams.insert(s.get());
    }
    *out = s.release();
    return nullptr;
  })
}

void cuda_stream_destroy(CudaStream* s) {
  CudaDevice* dv = s->device;
  const Driver* d = dv->d;
  if (!s->imported) d->cuStreamSynchronize(s->stream);
  {
    // A buffer release marks the streams under this lock: once erased, none uses it.
    std::lock_guard lock(dv->mu);
    dv->streams.erase(s);
    // The owner's stream is not waited for, and buffer releases no longer see it: later frees
    // (all queued on the free stream, in order) wait for the work queued on it so far.
    ImportedStreamScope scope(s);
    if (s->imported && d->cuStreamQuery(s->stream) != CUDA_SUCCESS) {
      if (!s->release_mark || !dv->free_stream || d->cuEventRecord(s->release_mark, s->stream) != CUDA_SUCCESS ||
          d->cuStreamWaitEvent(dv->free_stream, s->release_mark, 0) != CUDA_SUCCESS)
        d->cuStreamSynchronize(s->stream);  // no free stream (no pool) or no event: wait here instead
    }
  }
  if (!s->imported) d->cuStreamDestroy(s->stream);
  if (s->release_mark) d->cuEventDestroy(s->release_mark);  // frees queued behind it keep their wait
  delete s;
}

// The CUstream itself (0 for an imported legacy default stream), as hal_stream_import takes it.
hal_error* cuda_stream_native(CudaStream* s, uint64_t* out) {
  *out = reinterpret_cast<uintptr_t>(s->stream);
  return nullptr;
}

hal_error* cuda_stream_synchronize(CudaStream* s) {
  ImportedStreamScope scope(s);
  CU_TRY(s->device->d, s->device->d->cuStreamSynchronize(s->stream), s->device->uri + ": cuStreamSynchronize");
  return nullptr;
}

hal_error* cuda_stream_write(CudaStream* s, CudaBuffer* dst, uint64_t off, const void* src, uint64_t size) {
  return copy_async(s, dst->address + off, reinterpret_cast<CUdeviceptr>(src), size, "write");
}

hal_error* cuda_stream_read(CudaStream* s, CudaBuffer* src, uint64_t off, void* dst, uint64_t size) {
  return copy_async(s, reinterpret_cast<CUdeviceptr>(dst), src->address + off, size, "read");
}

hal_error* cuda_stream_copy(CudaStream* s, CudaBuffer* dst, uint64_t doff, CudaBuffer* src,
                            uint64_t soff, uint64_t size) {
  const Driver* d = s->device->d;
  ContextScope scope(d, s->device->ctx);
  CU_TRY(d, d->cuMemcpyDtoDAsync(dst->address + doff, src->address + soff, size, s->stream),
         fmt::format("{}: copy of {} bytes", s->device->uri, size));
  return nullptr;
}

hal_error* cuda_stream_fill(CudaStream* s, CudaBuffer* dst, uint64_t off, uint64_t size,
                            uint32_t pattern, uint32_t psize) {
  const Driver* d = s->device->d;
  ContextScope scope(d, s->device->ctx);
  CUdeviceptr p = dst->address + off;
  CUresult r = psize == 1   ? d->cuMemsetD8Async(p, static_cast<unsigned char>(pattern), size, s->stream)
               : psize == 2 ? d->cuMemsetD16Async(p, static_cast<unsigned short>(pattern), size / 2, s->stream)
                            : d->cuMemsetD32Async(p, pattern, size / 4, s->stream);
  if (r != CUDA_SUCCESS) return cu_error(d, r, fmt::format("{}: fill of {} bytes", s->device->uri, size));
  return nullptr;
}

hal_error* cuda_stream_wait_event(CudaStream* s, CudaEvent* ev) {
  std::lock_guard lock(ev->mu);
  ImportedStreamScope scope(s);
  CU_TRY(s->device->d, s->device->d->cuStreamWaitEvent(s->stream, ev->event, 0), s->device->uri + ": cuStreamWaitEvent");
  return nullptr;
}

}  // namespace halcyon::cuda
