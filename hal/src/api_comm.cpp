// Communicators (ABI 1.4): every argument is checked here, before a backend sees it.
#include "core.hpp"

#include <algorithm>
#include <vector>

namespace halcyon::core {
CommObj::~CommObj() {
  if (be) api().comm_destroy(be);
}

namespace {

hal_error* check_rendezvous(const char* fn, const char* name) {
  if (name == nullptr || name[0] == '\0')
    return err(HAL_INVALID_ARGUMENT, "{}: hal_comm_desc.rendezvous is empty: every rank must pass the same name", fn);
  size_t n = 0;
  for (const char* p = name; *p; ++p, ++n) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    if (!ok)
      return err(HAL_INVALID_ARGUMENT, "{}: rendezvous '{}' has the character '{}' (byte {}): only [A-Za-z0-9._-]", fn,
                 name, c, n);
    if (n >= HAL_COMM_RENDEZVOUS_MAX)
      return err(HAL_INVALID_ARGUMENT, "{}: rendezvous name is longer than {} characters", fn,
                 int(HAL_COMM_RENDEZVOUS_MAX));
  }
  return nullptr;
}

hal_error* check_comm_buffer(const char* fn, const char* what, const BufferObj& b, const CommObj& c) {
  if (b.device->uri != c.device->uri)
    return err(HAL_INVALID_ARGUMENT, "{}: {} belongs to {}, the communicator to {}", fn, what, b.device->uri,
               c.device->uri);
  return nullptr;
}

// One direction of an all-to-all: offsets and sizes arrays, each range inside the buffer.
hal_error* check_ranges(const char* fn, const char* what, const BufferObj& b, const uint64_t* offsets,
                        const uint64_t* sizes, uint32_t n) {
  if (!offsets || !sizes) return err(HAL_INVALID_ARGUMENT, "{}: {}_offsets or {}_sizes is NULL", fn, what, what);
  for (uint32_t p = 0; p < n; ++p)
    if (offsets[p] > b.size || sizes[p] > b.size - offsets[p])
      return err(HAL_OUT_OF_RANGE, "{}: {} range for rank {} [{}, {}+{}) lies past the end of a {}-byte buffer", fn,
                 what, p, offsets[p], offsets[p], sizes[p], b.size);
  return nullptr;
}

}  // namespace
}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_error* hal_comm_create(hal_device d, const hal_comm_desc* desc, hal_comm* out) {
  constexpr const char* fn = "hal_comm_create";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    LOOKUP(dev, DeviceObj, d, "device");
    hal_comm_desc cd{};
    if (hal_error* e = read_struct(desc, HAL_COMM_DESC_MIN_SIZE, &cd, fn, "hal_comm_desc")) return e;
    if (cd.size < 1) return err(HAL_INVALID_ARGUMENT, "{}: size is 0: a communicator has at least one rank", fn);
    if (cd.rank >= cd.size) return err(HAL_INVALID_ARGUMENT, "{}: rank {} is not below size {}", fn, cd.rank, cd.size);
    if (cd.flags != 0) return err(HAL_INVALID_ARGUMENT, "{}: flags 0x{:x} are reserved and must be 0", fn, cd.flags);
    if (hal_error* e = check_rendezvous(fn, cd.rendezvous)) return e;
    if (cd.timeout_ms == 0) cd.timeout_ms = 30000;
    if (!dev->backend->has_comm())
      return err(HAL_UNSUPPORTED, "{}: the {} backend of {} offers no communicator", fn, dev->backend->name, dev->uri);
    auto c = std::make_shared<CommObj>(dev);
    hal_comm_info info{};
    info.struct_size = sizeof info;
    if (hal_error* e = dev->api().comm_create(dev->be, &cd, &c->be, &info)) return e;
    info.struct_size = sizeof info;
    info.next = nullptr;
    info.rank = cd.rank;
    info.size = cd.size;
    c->info = info;
    *out = reinterpret_cast<hal_comm>(handle_insert(c));
    return nullptr;
  })
}

HAL_DEFINE_HANDLE_ENTRIES(comm, Comm, CommObj, HAL_COMM_INFO_MIN_SIZE, "communicator")

HAL_API hal_error* hal_comm_barrier(hal_comm h) {
  constexpr const char* fn = "hal_comm_barrier";
  HAL_CORE_GUARD(fn, {
    LOOKUP(c, CommObj, h, "communicator");
    return c->api().comm_barrier(c->be);
  })
}

HAL_API hal_error* hal_comm_all_gather(hal_comm h, const void* send, uint64_t bytes, void* recv) {
  constexpr const char* fn = "hal_comm_all_gather";
  HAL_CORE_GUARD(fn, {
    LOOKUP(c, CommObj, h, "communicator");
    if (bytes > c->info.max_all_gather_bytes)
      return err(HAL_OUT_OF_RANGE, "{}: {} bytes per rank, more than this communicator's max_all_gather_bytes {}", fn,
                 bytes, c->info.max_all_gather_bytes);
    if (bytes > 0 && (!send || !recv)) return err(HAL_INVALID_ARGUMENT, "{}: send or recv is NULL", fn);
    return c->api().comm_all_gather(c->be, send, bytes, recv);
  })
}

HAL_API hal_error* hal_comm_buffer_create(hal_comm h, uint64_t size, hal_buffer* out) {
  constexpr const char* fn = "hal_comm_buffer_create";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    LOOKUP(c, CommObj, h, "communicator");
    if (size == 0) return err(HAL_INVALID_ARGUMENT, "{}: size is 0: a peer-visible buffer holds at least one byte", fn);
    auto b = std::make_shared<BufferObj>(c->device);
    b->size = size;
    b->exported_by = c;
    if (hal_error* e = c->api().comm_buffer_create(c->be, size, &b->be, &b->address, &b->host)) return e;
    *out = reinterpret_cast<hal_buffer>(handle_insert(b));
    return nullptr;
  })
}

HAL_API hal_error* hal_comm_buffer_export(hal_comm h, hal_buffer buffer, hal_comm_handle* out) {
  constexpr const char* fn = "hal_comm_buffer_export";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    LOOKUP(c, CommObj, h, "communicator");
    LOOKUP(b, BufferObj, buffer, "buffer");
    if (b->exported_by.get() != c.get())
      return err(HAL_INVALID_ARGUMENT,
                 "{}: the buffer was not made by hal_comm_buffer_create of this communicator: only those can be "
                 "mapped by peers", fn);
    *out = hal_comm_handle{};
    return c->api().comm_buffer_export(c->be, b->be, out);
  })
}

HAL_API hal_error* hal_comm_buffer_import(hal_comm h, uint32_t peer, const hal_comm_handle* handle, hal_buffer* out) {
  constexpr const char* fn = "hal_comm_buffer_import";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    if (!handle) return err(HAL_INVALID_ARGUMENT, "{}: handle is NULL", fn);
    LOOKUP(c, CommObj, h, "communicator");
    if (peer >= c->info.size)
      return err(HAL_INVALID_ARGUMENT, "{}: peer {} is not a rank of a {}-rank communicator", fn, peer, c->info.size);
    if (peer == c->info.rank)
      return err(HAL_INVALID_ARGUMENT, "{}: peer {} is this rank: use the buffer itself", fn, peer);
    auto b = std::make_shared<BufferObj>(c->device);
    if (hal_error* e = c->api().comm_buffer_import(c->be, peer, handle, &b->be, &b->size, &b->address, &b->host))
      return e;
    *out = reinterpret_cast<hal_buffer>(handle_insert(b));
    return nullptr;
  })
}

HAL_API hal_error* hal_comm_all_to_all(hal_comm h, hal_stream stream, hal_buffer send, const uint64_t* send_offsets,
                                       const uint64_t* send_sizes, hal_buffer recv, const uint64_t* recv_offsets,
                                       const uint64_t* recv_sizes) {
  constexpr const char* fn = "hal_comm_all_to_all";
  HAL_CORE_GUARD(fn, {
    LOOKUP(c, CommObj, h, "communicator");
    LOOKUP(s, StreamObj, stream, "stream");
    LOOKUP(sb, BufferObj, send, "send");
    LOOKUP(rb, BufferObj, recv, "recv");
    if (s->device->uri != c->device->uri)
      return err(HAL_INVALID_ARGUMENT, "{}: the stream belongs to {}, the communicator to {}", fn, s->device->uri,
                 c->device->uri);
    if (hal_error* e = check_comm_buffer(fn, "send", *sb, *c)) return e;
    if (hal_error* e = check_comm_buffer(fn, "recv", *rb, *c)) return e;
    if (sb.get() == rb.get()) return err(HAL_INVALID_ARGUMENT, "{}: send and recv are one buffer", fn);
    const uint32_t n = c->info.size;
    if (hal_error* e = check_ranges(fn, "send", *sb, send_offsets, send_sizes, n)) return e;
    if (hal_error* e = check_ranges(fn, "recv", *rb, recv_offsets, recv_sizes, n)) return e;
    // Every rank learns what every rank sends and expects, so that a disagreement is the same
    // error on every rank, not a short read on one and a timeout on the others.
    std::vector<uint64_t> mine(2 * size_t(n)), all(2 * size_t(n) * n);
    std::copy(send_sizes, send_sizes + n, mine.begin());
    std::copy(recv_sizes, recv_sizes + n, mine.begin() + n);
    if (hal_error* e = c->api().comm_all_gather(c->be, mine.data(), mine.size() * sizeof(uint64_t), all.data()))
      return e;
    for (uint32_t from = 0; from < n; ++from)
      for (uint32_t to = 0; to < n; ++to) {
        uint64_t sent = all[2 * size_t(n) * from + to], expected = all[2 * size_t(n) * to + n + from];
        if (sent != expected)
          return err(HAL_INVALID_ARGUMENT, "{}: rank {} expects {} bytes from rank {}, which sends it {}", fn, to,
                     expected, from, sent);
      }
    return c->api().comm_all_to_all(c->be, s->be, sb->be, send_offsets, send_sizes, rb->be, recv_offsets, recv_sizes);
  })
}

}  // extern "C"
