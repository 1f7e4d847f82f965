// Streams, transfers and events. Every range is checked here, before a backend sees it.
#include "core.hpp"

namespace halcyon::core {
StreamObj::~StreamObj() {
  if (be) api().stream_destroy(be);
}
EventObj::~EventObj() {
  if (be) api().event_destroy(be);
}

namespace {

hal_error* check_range(const char* fn, const char* what, const BufferObj& b, uint64_t offset,
                       uint64_t size) {
  if (offset > b.size || size > b.size - offset)
    return err(HAL_OUT_OF_RANGE,
               "{}: {} range [{}, {}+{}) lies past the end of a {}-byte buffer on {}", fn, what,
               offset, offset, size, b.size, b.device->uri);
  return nullptr;
}

hal_error* check_same_device(const char* fn, const char* what, const DeviceChild& obj,
                             const StreamObj& s) {
  if (obj.device->uri != s.device->uri)
    return err(HAL_INVALID_ARGUMENT, "{}: {} belongs to {}, the stream to {}", fn, what,
               obj.device->uri, s.device->uri);
  return nullptr;
}

}  // namespace
}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_error* hal_stream_create(hal_device d, const hal_stream_desc* desc, hal_stream* out) {
  constexpr const char* fn = "hal_stream_create";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    LOOKUP(dev, DeviceObj, d, "device");
    hal_stream_desc sd{};
    if (desc) {
      if (hal_error* e = read_struct(desc, HAL_STREAM_DESC_MIN_SIZE, &sd, fn, "hal_stream_desc")) return e;
    }
    if (sd.flags != 0) return err(HAL_INVALID_ARGUMENT, "{}: flags 0x{:x} are reserved and must be 0", fn, sd.flags);
    std::shared_ptr<PartitionObj> part;
    if (sd.partition) {
      hal_error* e = nullptr;
      part = lookup<PartitionObj>(sd.partition, fn, "desc->partition", &e);
      if (!part) return e;
      if (part->device->uri != dev->uri)
        return err(HAL_INVALID_ARGUMENT, "{}: partition belongs to {}, not {}", fn, part->device->uri, dev->uri);
    }
    auto s = std::make_shared<StreamObj>(dev);
    s->partition = part;
    if (hal_error* e = dev->api().stream_create(dev->be, part ? part->be : nullptr, &sd, &s->be)) return e;
    *out = reinterpret_cast<hal_stream>(handle_insert(s));
    return nullptr;
  })
}

HAL_API hal_error* hal_stream_import(hal_device d, const hal_stream_import_desc* desc, hal_stream* out) {
  constexpr const char* fn = "hal_stream_import";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    LOOKUP(dev, DeviceObj, d, "device");
    hal_stream_import_desc id{};
    if (hal_error* e = read_struct(desc, HAL_STREAM_IMPORT_DESC_MIN_SIZE, &id, fn, "hal_stream_import_desc")) return e;
    if (id.flags != 0 || id.reserved0 != 0)
      return err(HAL_INVALID_ARGUMENT, "{}: flags 0x{:x} and reserved0 0x{:x} are reserved and must be 0", fn, id.flags,
                 id.reserved0);
    if (!dev->backend->has_stream_import())
      return err(HAL_UNSUPPORTED, "{}: the {} backend cannot import a native stream", fn, dev->backend->api->name);
    auto s = std::make_shared<StreamObj>(dev);
    if (hal_error* e = dev->api().stream_import(dev->be, &id, &s->be)) return e;
    *out = reinterpret_cast<hal_stream>(handle_insert(s));
    return nullptr;
  })
}

HAL_API hal_error* hal_stream_get_info(hal_stream h, hal_stream_info* out) {
  constexpr const char* fn = "hal_stream_get_info";
  HAL_CORE_GUARD(fn, {
    LOOKUP(s, StreamObj, h, "stream");
    if (hal_error* e = check_out_struct(out, HAL_STREAM_INFO_MIN_SIZE, fn, "hal_stream_info")) return e;
    hal_stream_info i{};
    i.struct_size = sizeof i;
    if (s->partition) {
      i.partition = reinterpret_cast<hal_partition>(s->partition->handle);
      i.units = s->partition->info.units_granted;
      i.enforced = s->partition->info.enforced;
      i.mechanism = s->partition->info.mechanism;
    } else {
      i.units = s->device->info.compute_units;
      i.mechanism = HAL_PARTITION_WHOLE_DEVICE;
    }
    std::snprintf(i.device_uri, sizeof i.device_uri, "%s", s->device->uri.c_str());
    if (s->device->backend->has_stream_native()) {
      if (hal_error* e = s->api().stream_native(s->be, &i.native)) return e;
      i.has_native = 1;
    }
    write_struct(i, out);
    return nullptr;
  })
}

HAL_API hal_error* hal_stream_retain(hal_stream h) {
  HAL_CORE_GUARD("hal_stream_retain", { return handle_retain(reinterpret_cast<uint64_t>(h), ObjType::Stream, "hal_stream_retain"); })
}
HAL_API hal_error* hal_stream_release(hal_stream h) {
  HAL_CORE_GUARD("hal_stream_release", { return handle_release(reinterpret_cast<uint64_t>(h), ObjType::Stream, "hal_stream_release"); })
}

HAL_API hal_error* hal_stream_synchronize(hal_stream h) {
  constexpr const char* fn = "hal_stream_synchronize";
  HAL_CORE_GUARD(fn, {
    LOOKUP(s, StreamObj, h, "stream");
    return s->api().stream_synchronize(s->be);
  })
}

HAL_API hal_error* hal_stream_write(hal_stream h, hal_buffer dst, uint64_t dst_offset,
                                    const void* src, uint64_t size) {
  constexpr const char* fn = "hal_stream_write";
  HAL_CORE_GUARD(fn, {
    LOOKUP(s, StreamObj, h, "stream");
    LOOKUP(b, BufferObj, dst, "dst");
    if (hal_error* e = check_same_device(fn, "dst", *b, *s)) return e;
    if (hal_error* e = check_range(fn, "dst", *b, dst_offset, size)) return e;
    if (size == 0) return nullptr;
    if (!src) return err(HAL_INVALID_ARGUMENT, "{}: src is NULL for a {}-byte write", fn, size);
    return s->api().stream_write(s->be, b->be, dst_offset, src, size);
  })
}

HAL_API hal_error* hal_stream_read(hal_stream h, hal_buffer src, uint64_t src_offset, void* dst,
                                   uint64_t size) {
  constexpr const char* fn = "hal_stream_read";
  HAL_CORE_GUARD(fn, {
    LOOKUP(s, StreamObj, h, "stream");
    LOOKUP(b, BufferObj, src, "src");
    if (hal_error* e = check_same_device(fn, "src", *b, *s)) return e;
    if (hal_error* e = check_range(fn, "src", *b, src_offset, size)) return e;
    if (size == 0) return nullptr;
    if (!dst) return err(HAL_INVALID_ARGUMENT, "{}: dst is NULL for a {}-byte read", fn, size);
    return s->api().stream_read(s->be, b->be, src_offset, dst, size);
  })
}

HAL_API hal_error* hal_stream_copy(hal_stream h, hal_buffer dst, uint64_t dst_offset,
                                   hal_buffer src, uint64_t src_offset, uint64_t size) {
  constexpr const char* fn = "hal_stream_copy";
  HAL_CORE_GUARD(fn, {
    LOOKUP(s, StreamObj, h, "stream");
    LOOKUP(d, BufferObj, dst, "dst");
    LOOKUP(r, BufferObj, src, "src");
    if (hal_error* e = check_same_device(fn, "dst", *d, *s)) return e;
    if (hal_error* e = check_same_device(fn, "src", *r, *s)) return e;
    if (hal_error* e = check_range(fn, "dst", *d, dst_offset, size)) return e;
    if (hal_error* e = check_range(fn, "src", *r, src_offset, size)) return e;
    if (d.get() == r.get() && dst_offset < src_offset + size && src_offset < dst_offset + size)
      return err(HAL_INVALID_ARGUMENT, "{}: source [{}, +{}) and destination [{}, +{}) overlap in one buffer",
                 fn, src_offset, size, dst_offset, size);
    if (size == 0) return nullptr;
    return s->api().stream_copy(s->be, d->be, dst_offset, r->be, src_offset, size);
  })
}

HAL_API hal_error* hal_stream_fill(hal_stream h, hal_buffer dst, uint64_t offset, uint64_t size,
                                   const void* pattern, uint32_t pattern_size) {
  constexpr const char* fn = "hal_stream_fill";
  HAL_CORE_GUARD(fn, {
    LOOKUP(s, StreamObj, h, "stream");
    LOOKUP(b, BufferObj, dst, "dst");
    if (hal_error* e = check_same_device(fn, "dst", *b, *s)) return e;
    if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4)
      return err(HAL_INVALID_ARGUMENT, "{}: pattern_size {} is not 1, 2 or 4", fn, pattern_size);
    if (!pattern) return err(HAL_INVALID_ARGUMENT, "{}: pattern is NULL", fn);
    if (offset % pattern_size || size % pattern_size)
      return err(HAL_INVALID_ARGUMENT, "{}: offset {} and size {} must be multiples of pattern_size {}", fn,
                 offset, size, pattern_size);
    if (hal_error* e = check_range(fn, "dst", *b, offset, size)) return e;
    if (size == 0) return nullptr;
    uint32_t p = 0;
    std::memcpy(&p, pattern, pattern_size);
    return s->api().stream_fill(s->be, b->be, offset, size, p, pattern_size);
  })
}

HAL_API hal_error* hal_event_create(hal_device d, const hal_event_desc* desc, hal_event* out) {
  constexpr const char* fn = "hal_event_create";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    LOOKUP(dev, DeviceObj, d, "device");
    hal_event_desc ed{};
    ed.flags = HAL_EVENT_TIMING;
    if (desc) {
      ed.flags = 0;
      if (hal_error* e = read_struct(desc, HAL_EVENT_DESC_MIN_SIZE, &ed, fn, "hal_event_desc")) return e;
    }
    if (ed.flags & ~uint32_t(HAL_EVENT_TIMING)) return err(HAL_INVALID_ARGUMENT, "{}: unknown flags 0x{:x}", fn, ed.flags);
    auto ev = std::make_shared<EventObj>(dev);
    ev->timing = ed.flags & HAL_EVENT_TIMING;
    if (hal_error* e = dev->api().event_create(dev->be, &ed, &ev->be)) return e;
    *out = reinterpret_cast<hal_event>(handle_insert(ev));
    return nullptr;
  })
}

HAL_API hal_error* hal_event_retain(hal_event h) {
  HAL_CORE_GUARD("hal_event_retain", { return handle_retain(reinterpret_cast<uint64_t>(h), ObjType::Event, "hal_event_retain"); })
}
HAL_API hal_error* hal_event_release(hal_event h) {
  HAL_CORE_GUARD("hal_event_release", { return handle_release(reinterpret_cast<uint64_t>(h), ObjType::Event, "hal_event_release"); })
}

HAL_API hal_error* hal_event_record(hal_event h, hal_stream st) {
  constexpr const char* fn = "hal_event_record";
  HAL_CORE_GUARD(fn, {
    LOOKUP(ev, EventObj, h, "event");
    LOOKUP(s, StreamObj, st, "stream");
    if (hal_error* e = check_same_device(fn, "event", *ev, *s)) return e;
    if (hal_error* e = s->api().event_record(ev->be, s->be)) return e;
    ev->recorded = true;
    return nullptr;
  })
}

HAL_API hal_error* hal_stream_wait_event(hal_stream st, hal_event h) {
  constexpr const char* fn = "hal_stream_wait_event";
  HAL_CORE_GUARD(fn, {
    LOOKUP(s, StreamObj, st, "stream");
    LOOKUP(ev, EventObj, h, "event");
    if (hal_error* e = check_same_device(fn, "event", *ev, *s)) return e;
    if (!ev->recorded) return nullptr;
    return s->api().stream_wait_event(s->be, ev->be);
  })
}

HAL_API hal_error* hal_event_query(hal_event h, bool* complete) {
  constexpr const char* fn = "hal_event_query";
  HAL_CORE_GUARD(fn, {
    LOOKUP(ev, EventObj, h, "event");
    if (!complete) return err(HAL_INVALID_ARGUMENT, "{}: complete is NULL", fn);
    if (!ev->recorded) {
      *complete = true;  // as in CUDA: an unrecorded event has nothing to wait for
      return nullptr;
    }
    return ev->api().event_query(ev->be, complete);
  })
}

HAL_API hal_error* hal_event_synchronize(hal_event h) {
  constexpr const char* fn = "hal_event_synchronize";
  HAL_CORE_GUARD(fn, {
    LOOKUP(ev, EventObj, h, "event");
    if (!ev->recorded) return nullptr;
    return ev->api().event_synchronize(ev->be);
  })
}

HAL_API hal_error* hal_event_elapsed_ms(hal_event start, hal_event end, float* ms) {
  constexpr const char* fn = "hal_event_elapsed_ms";
  HAL_CORE_GUARD(fn, {
    LOOKUP(a, EventObj, start, "start");
    LOOKUP(b, EventObj, end, "end");
    if (!ms) return err(HAL_INVALID_ARGUMENT, "{}: ms is NULL", fn);
    if (a->device->uri != b->device->uri)
      return err(HAL_INVALID_ARGUMENT, "{}: start is on {}, end on {}", fn, a->device->uri, b->device->uri);
    if (!a->timing || !b->timing)
      return err(HAL_INVALID_ARGUMENT, "{}: {} event was created without HAL_EVENT_TIMING", fn,
                 a->timing ? "end" : "start");
    if (!a->recorded || !b->recorded)
      return err(HAL_FAILED_PRECONDITION, "{}: {} event was never recorded", fn, a->recorded ? "end" : "start");
    return a->api().event_elapsed_ms(a->be, b->be, ms);
  })
}

}  // extern "C"
