// Events: one Level Zero event each (its own pool, host-visible), recorded by a barrier that
// signals it; a timing event also has the device's global timestamp written to host memory at
// that point (zeCommandListAppendWriteGlobalTimestamp), and elapsed time is the difference
// times the device's timer resolution.
#include "ze_internal.hpp"

namespace halcyon::ze {

hal_error* event_create(Device* d, const hal_event_desc* desc, Event** out) {
  HAL_BACKEND_GUARD({
    const Symbols& z = d->s();
    auto ev = std::make_unique<Event>();
    ev->device = d;
    ev->timing = desc->flags & HAL_EVENT_TIMING;
    ze_event_pool_desc_t pd{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr, ZE_EVENT_POOL_FLAG_HOST_VISIBLE, 1};
    ZE_CHECK(z.zeEventPoolCreate(d->backend->context, &pd, 0, nullptr, &ev->pool));
    ze_event_desc_t ed{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, 0, ZE_EVENT_SCOPE_FLAG_HOST, ZE_EVENT_SCOPE_FLAG_HOST};
    if (hal_error* e = check(z.zeEventCreate(ev->pool, &ed, &ev->event), "zeEventCreate")) {
      event_destroy(ev.release());
      return e;
    }
    if (ev->timing) {
      ze_host_mem_alloc_desc_t hd{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
      void* p = nullptr;
      if (hal_error* e = check(z.zeMemAllocHost(d->backend->context, &hd, 8, 8, &p), "zeMemAllocHost")) {
        event_destroy(ev.release());
        return e;
      }
      ev->stamp = static_cast<uint64_t*>(p);
      *ev->stamp = 0;
    }
    *out = ev.release();
    return nullptr;
  })
}

// hal.h lets an event be released while a record of it is queued: wait for it first.
void event_destroy(Event* ev) {
  const Symbols& z = ev->device->s();
  if (ev->event && ev->was_recorded())
    logged(z.zeEventHostSynchronize(ev->event, UINT64_MAX), "zeEventHostSynchronize");
  if (ev->stamp) logged(z.zeMemFree(ev->device->backend->context, ev->stamp), "zeMemFree");
  if (ev->event) logged(z.zeEventDestroy(ev->event), "zeEventDestroy");
  if (ev->pool) logged(z.zeEventPoolDestroy(ev->pool), "zeEventPoolDestroy");
  delete ev;
}

hal_error* event_record(Event* ev, Stream* s) {
  const Symbols& z = ev->device->s();
  std::lock_guard lock(s->mu);  // appends to the list: see Stream::mu
  ZE_CHECK(z.zeCommandListAppendEventReset(s->list, ev->event));
  if (ev->timing) {
    // The barrier orders the timestamp after the stream's earlier work.
    ZE_CHECK(z.zeCommandListAppendBarrier(s->list, nullptr, 0, nullptr));
    ZE_CHECK(z.zeCommandListAppendWriteGlobalTimestamp(s->list, ev->stamp, ev->event, 0, nullptr));
    // On a list not made in order, a barrier after it too: else the stream's later work could
    // start before the stamp is written, and partly fall outside the interval it opens.
    ZE_CHECK(order_barrier(s));
  } else {
    ZE_CHECK(z.zeCommandListAppendBarrier(s->list, ev->event, 0, nullptr));
  }
  ev->recorded.store(true, std::memory_order_release);
  return nullptr;
}

// Waiting on an event that was never recorded is a no-op (hal.h, as in CUDA).
hal_error* stream_wait_event(Stream* s, Event* ev) {
  if (!ev->was_recorded()) return nullptr;
  std::lock_guard lock(s->mu);  // appends to the list: see Stream::mu
  ZE_CHECK(s->device->s().zeCommandListAppendWaitOnEvents(s->list, 1, &ev->event));
  return nullptr;
}

hal_error* event_query(Event* ev, bool* complete) {
  if (!ev->was_recorded()) {
    *complete = true;
    return nullptr;
  }
  ze_result_t r = ev->device->s().zeEventQueryStatus(ev->event);
  *complete = r == ZE_RESULT_SUCCESS;
  return r == ZE_RESULT_NOT_READY ? nullptr : check(r, "zeEventQueryStatus");
}

hal_error* event_synchronize(Event* ev) {
  if (!ev->was_recorded()) return nullptr;
  ZE_CHECK(ev->device->s().zeEventHostSynchronize(ev->event, UINT64_MAX));
  return nullptr;
}

hal_error* event_elapsed_ms(Event* a, Event* b, float* ms) {
  for (Event* ev : {a, b}) {
    if (!ev->timing || !ev->was_recorded())
      return error(HAL_FAILED_PRECONDITION, "ze: elapsed time needs two recorded timing events");
    bool done = false;
    if (hal_error* e = event_query(ev, &done)) return e;
    if (!done) return error(HAL_FAILED_PRECONDITION, "ze: elapsed time asked of an event that has not completed");
  }
  const auto& p = a->device->props;
  const uint64_t mask = p.timestampValidBits >= 64 ? ~0ull : (1ull << p.timestampValidBits) - 1;
  const uint64_t ticks = (*b->stamp - *a->stamp) & mask;  // the counter may wrap once
  *ms = float(double(ticks) * double(p.timerResolution) / 1e6);  // timerResolution: ns per tick
  return nullptr;
}

}  // namespace halcyon::ze
