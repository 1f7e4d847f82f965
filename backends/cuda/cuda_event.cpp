// Events, with or without timing; remade in a partition's green context when recorded there.
#include "cuda_internal.hpp"

#include <memory>

namespace halcyon::cuda {

hal_error* cuda_event_create(CudaDevice* dv, const hal_event_desc* desc, CudaEvent** out) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    auto ev = std::make_unique<CudaEvent>();
    ev->device = dv;
    ev->flags = (desc->flags & HAL_EVENT_TIMING) ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
    ev->ctx = dv->ctx;
    ContextScope scope(d, dv->ctx);
    CU_TRY(d, d->cuEventCreate(&ev->event, ev->flags), dv->uri + ": cuEventCreate");
    *out = ev.release();
    return nullptr;
  })
}

namespace {

// Destroys the replaced CUevents no synchronize can still be waiting on. Under ev->mu.
void destroy_retired(CudaEvent* ev) {
  for (CUevent e : ev->retired) ev->device->d->cuEventDestroy(e);
  ev->retired.clear();
}

}  // namespace

void cuda_event_destroy(CudaEvent* ev) {
  {
    std::lock_guard lock(ev->mu);
    destroy_retired(ev);  // the last reference is gone: nothing synchronizes any more
  }
  ev->device->d->cuEventDestroy(ev->event);
  delete ev;
}

hal_error* cuda_event_record(CudaEvent* ev, CudaStream* s) {
  const Driver* d = s->device->d;
  std::lock_guard lock(ev->mu);
  ImportedStreamScope scope(s);
  CUresult r = d->cuEventRecord(ev->event, s->stream);
  if (r != CUDA_SUCCESS && s->ctx && s->ctx != ev->ctx) {
    // An event records only streams of its own context: remake it in the stream's (green)
    // context. Waits already queued on the old event keep their captured state.
    CUevent fresh = nullptr;
    {
      ContextScope scope(d, s->ctx);
      CU_TRY(d, d->cuEventCreate(&fresh, ev->flags), s->device->uri + ": cuEventCreate in a partition's context");
    }
    if (ev->synchronizing) ev->retired.push_back(ev->event);  // a synchronize may be waiting on it
    else d->cuEventDestroy(ev->event);
    ev->event = fresh;
    ev->ctx = s->ctx;
    r = d->cuEventRecord(ev->event, s->stream);
  }
  if (r != CUDA_SUCCESS) return cu_error(d, r, s->device->uri + ": cuEventRecord");
  return nullptr;
}

hal_error* cuda_event_query(CudaEvent* ev, bool* complete) {
  const Driver* d = ev->device->d;
  std::lock_guard lock(ev->mu);
  CUresult r = d->cuEventQuery(ev->event);
  if (r == CUDA_ERROR_NOT_READY) {
    *complete = false;
    return nullptr;
  }
  if (r != CUDA_SUCCESS) return cu_error(d, r, ev->device->uri + ": cuEventQuery");
  *complete = true;
  return nullptr;
}

hal_error* cuda_event_synchronize(CudaEvent* ev) {
  const Driver* d = ev->device->d;
  CUevent e;
  {
    std::lock_guard lock(ev->mu);
    e = ev->event;
    ++ev->synchronizing;  // keeps `e` alive through a concurrent record (cuda_event_record)
  }
  CUresult r = d->cuEventSynchronize(e);
  {
    std::lock_guard lock(ev->mu);
    if (--ev->synchronizing == 0) destroy_retired(ev);
  }
  if (r != CUDA_SUCCESS) return cu_error(d, r, ev->device->uri + ": cuEventSynchronize");
  return nullptr;
}

hal_error* cuda_event_elapsed_ms(CudaEvent* a, CudaEvent* b, float* ms) {
  const Driver* d = a->device->d;
  std::scoped_lock lock(a->mu, b->mu);
  CUresult r = d->cuEventElapsedTime(ms, a->event, b->event);
  if (r == CUDA_ERROR_NOT_READY)
    return error(HAL_FAILED_PRECONDITION, "cuda: hal_event_elapsed_ms: an event has not completed yet");
  if (r != CUDA_SUCCESS) return cu_error(d, r, a->device->uri + ": cuEventElapsedTime");
  return nullptr;
}

}  // namespace halcyon::cuda
