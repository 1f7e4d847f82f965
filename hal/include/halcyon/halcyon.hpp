// The C++20 API over hal.h: RAII handles and Result<T>; no exceptions needed.
//
//   auto dev = halcyon::Device::open("cuda:0");
//   if (!dev) { fmt::print("{}\n", dev.error().to_string()); return 1; }
//   auto buf = dev->allocate(1 << 20);
#pragma once

#include <halcyon/hal.h>
#include <halcyon/result.hpp>
#include <halcyon/tensor_map.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <initializer_list>
#include <vector>

namespace halcyon {

// A reference-counted C handle owned by a C++ object. Copy retains, destruction releases.
template <typename H, hal_error* (*Retain)(H), hal_error* (*Release)(H)>
class Handle {
 public:
  Handle() = default;
  // Takes ownership of one reference.
  explicit Handle(H h) : h_(h) {}
  Handle(const Handle& o) : h_(o.h_) {
    if (h_) hal_error_free(Retain(h_));
  }
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (h_) hal_error_free(Release(std::exchange(h_, nullptr)));
  }
  H get() const { return h_; }
  H release_ownership() { return std::exchange(h_, nullptr); }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  H h_ = nullptr;
};

class Device;
class Stream;

class Buffer : public Handle<hal_buffer, hal_buffer_retain, hal_buffer_release> {
 public:
  using Handle::Handle;
  Result<hal_buffer_info> info() const {
    hal_buffer_info i{};
    i.struct_size = sizeof i;
    if (hal_error* e = hal_buffer_get_info(get(), &i)) return Error::adopt(e);
    return i;
  }
  uint64_t size() const { auto i = info(); return i ? i->size : 0; }
  uint64_t address() const { auto i = info(); return i ? i->device_address : 0; }
  void* host_pointer() const { auto i = info(); return i ? i->host_pointer : nullptr; }
};

class Event : public Handle<hal_event, hal_event_retain, hal_event_release> {
 public:
  using Handle::Handle;
  Status synchronize() const { return check(hal_event_synchronize(get())); }
  Result<bool> query() const {
    bool done = false;
    if (hal_error* e = hal_event_query(get(), &done)) return Error::adopt(e);
    return done;
  }
  // Milliseconds from `start` to this event.
  Result<float> elapsed_since(const Event& start) const {
    float ms = 0;
    if (hal_error* e = hal_event_elapsed_ms(start.get(), get(), &ms)) return Error::adopt(e);
    return ms;
  }
};

class Kernel : public Handle<hal_kernel, hal_kernel_retain, hal_kernel_release> {
 public:
  using Handle::Handle;
  Result<hal_kernel_info> info() const {
    hal_kernel_info i{};
    i.struct_size = sizeof i;
    if (hal_error* e = hal_kernel_get_info(get(), &i)) return Error::adopt(e);
    return i;
  }
  Result<std::vector<hal_kernel_arg>> args() const {
    auto i = info();
    if (!i) return i.error();
    std::vector<hal_kernel_arg> out(i->arg_count);
    for (uint32_t k = 0; k < i->arg_count; ++k)
      if (hal_error* e = hal_kernel_get_arg(get(), k, &out[k])) return Error::adopt(e);
    return out;
  }
};

class Module : public Handle<hal_module, hal_module_retain, hal_module_release> {
 public:
  using Handle::Handle;
  Result<Kernel> kernel(const char* name) const {
    hal_kernel k = nullptr;
    if (hal_error* e = hal_module_get_kernel(get(), name, &k)) return Error::adopt(e);
    return Kernel(k);
  }
};

class Partition : public Handle<hal_partition, hal_partition_retain, hal_partition_release> {
 public:
  using Handle::Handle;
  Result<hal_partition_info> info() const {
    hal_partition_info i{};
    i.struct_size = sizeof i;
    if (hal_error* e = hal_partition_get_info(get(), &i)) return Error::adopt(e);
    return i;
  }
};

// An encoded tensor map (Device::encode_tensor_map): 128 opaque bytes that a kernel takes by
// value as a 64-byte-aligned parameter; ArgPack::value places it at a multiple of 64.
struct TensorMap {
  alignas(64) unsigned char bytes[HAL_TENSOR_MAP_BYTES];
};

// Packs kernel arguments into the blob a launch takes. Default: each value at its natural
// alignment (alignof), as PTX parameter lists place them. Given the kernel's own layout
// (Kernel::args()), value i goes to the offset the backend reports for argument i, which is
// what a backend's layout for a module without a parameter list (a cubin) needs; a value whose
// size is not the argument's, or one past the last argument, leaves the pack invalid (ok()).
class ArgPack {
 public:
  ArgPack() = default;
  explicit ArgPack(std::vector<hal_kernel_arg> layout) : layout_(std::move(layout)) {
    size_t end = 0;
    for (const hal_kernel_arg& a : layout_) end = std::max<size_t>(end, size_t(a.offset) + a.size);
    bytes_.resize(end);
  }
  ArgPack& pointer(const Buffer& b, uint64_t offset = 0) { return value(b.address() + offset); }
  template <typename T>
  ArgPack& value(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    size_t at;
    if (!layout_.empty()) {
      if (count_ >= layout_.size() || layout_[count_].size != sizeof(T)) {
        bad_ = true;
        return *this;
      }
      at = layout_[count_].offset;
    } else {
      size_t align = alignof(T);
      at = (bytes_.size() + align - 1) / align * align;
      bytes_.resize(at + sizeof(T));
    }
    ++count_;
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  // With a layout: every argument given once, each of its size.
  bool ok() const { return !bad_ && (layout_.empty() || count_ == layout_.size()); }
  const void* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<hal_kernel_arg> layout_;
  std::vector<unsigned char> bytes_;
  size_t count_ = 0;
  bool bad_ = false;
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

class Stream : public Handle<hal_stream, hal_stream_retain, hal_stream_release> {
 public:
  using Handle::Handle;
  Status synchronize() const { return check(hal_stream_synchronize(get())); }
  // Where its work runs: the partition's units (or the device's), enforced or a soft cap.
  Result<hal_stream_info> info() const {
    hal_stream_info i{};
    i.struct_size = sizeof i;
    if (hal_error* e = hal_stream_get_info(get(), &i)) return Error::adopt(e);
    return i;
  }
  // Host transfers wait for the stream: `src`/`dst` is done with when they return, so a
  // temporary vector is safe (hal.h's rule, host memory valid until the stream reaches the
  // transfer, cannot be broken by an early return). The *_async forms queue the transfer and
  // return at once: for pinned memory, or host memory that the caller keeps alive until a
  // synchronize or an event after the transfer.
  Status write(const Buffer& dst, uint64_t off, const void* src, uint64_t size) const {
    Status queued = write_async(dst, off, src, size);
    return queued ? synchronize() : queued;
  }
  Status read(const Buffer& src, uint64_t off, void* dst, uint64_t size) const {
    Status queued = read_async(src, off, dst, size);
    return queued ? synchronize() : queued;
  }
  Status write_async(const Buffer& dst, uint64_t off, const void* src, uint64_t size) const {
    return check(hal_stream_write(get(), dst.get(), off, src, size));
  }
  Status read_async(const Buffer& src, uint64_t off, void* dst, uint64_t size) const {
    return check(hal_stream_read(get(), src.get(), off, dst, size));
  }
  Status copy(const Buffer& dst, uint64_t doff, const Buffer& src, uint64_t soff,
              uint64_t size) const {
    return check(hal_stream_copy(get(), dst.get(), doff, src.get(), soff, size));
  }
  template <typename T>
  Status fill(const Buffer& dst, uint64_t off, uint64_t size, T pattern) const {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4);
    return check(hal_stream_fill(get(), dst.get(), off, size, &pattern, sizeof(T)));
  }
  Status record(const Event& ev) const { return check(hal_event_record(ev.get(), get())); }
  Status wait(const Event& ev) const { return check(hal_stream_wait_event(get(), ev.get())); }
  Status launch(const Kernel& k, Dim3 grid, Dim3 block, const void* args, size_t args_size,
                uint32_t shared_bytes = 0) const {
    hal_launch_desc d{};
    d.struct_size = sizeof d;
    d.grid[0] = grid.x; d.grid[1] = grid.y; d.grid[2] = grid.z;
    d.block[0] = block.x; d.block[1] = block.y; d.block[2] = block.z;
    d.shared_bytes = shared_bytes;
    d.args = args;
    d.args_size = args_size;
    return check(hal_stream_launch(get(), k.get(), &d));
  }
  Status launch(const Kernel& k, Dim3 grid, Dim3 block, const ArgPack& args,
                uint32_t shared_bytes = 0) const {
    return launch(k, grid, block, args.data(), args.size(), shared_bytes);
  }
};

class Device : public Handle<hal_device, hal_device_retain, hal_device_release> {
 public:
  using Handle::Handle;
  static Result<Device> open(const char* uri) {
    hal_device d = nullptr;
    if (hal_error* e = hal_device_open(uri, &d)) return Error::adopt(e);
    return Device(d);
  }
  Result<hal_device_info> info() const {
    hal_device_info i{};
    i.struct_size = sizeof i;
    if (hal_error* e = hal_device_get_info(get(), &i)) return Error::adopt(e);
    return i;
  }
  bool has(const char* capability) const {
    bool v = false;
    hal_error* e = hal_device_has_capability(get(), capability, &v);
    hal_error_free(e);
    return v;
  }
  // Whether a module of `format` built for `target` runs on this device (hal_device_can_run);
  // when not and `why` is given, the reason.
  Result<bool> can_run(hal_module_format format, const char* target, std::string* why = nullptr) const {
    bool yes = false;
    char reason[256] = {};
    if (hal_error* e = hal_device_can_run(get(), uint32_t(format), target, &yes, reason, sizeof reason))
      return Error::adopt(e);
    if (!yes && why) *why = reason;
    return yes;
  }
  Result<Buffer> allocate(uint64_t size, hal_memory_kind kind = HAL_MEMORY_DEVICE) const {
    hal_buffer_desc d{};
    d.struct_size = sizeof d;
    d.kind = kind;
    d.size = size;
    hal_buffer b = nullptr;
    if (hal_error* e = hal_buffer_create(get(), &d, &b)) return Error::adopt(e);
    return Buffer(b);
  }
  // Someone else's device memory [address, address + size) as a buffer, in place
  // (hal_buffer_import): release(user) runs once after the buffer's last reference, never when
  // the import fails. flags: hal_buffer_import_flags.
  Result<Buffer> import_memory(uint64_t address, uint64_t size, hal_release_fn release = nullptr,
                               void* user = nullptr, uint32_t flags = 0,
                               hal_memory_kind kind = HAL_MEMORY_DEVICE) const {
    hal_buffer_import_desc d{};
    d.struct_size = sizeof d;
    d.kind = kind;
    d.flags = flags;
    d.device_address = address;
    d.size = size;
    d.release = release;
    d.release_user = user;
    hal_buffer b = nullptr;
    if (hal_error* e = hal_buffer_import(get(), &d, &b)) return Error::adopt(e);
    return Buffer(b);
  }
  Result<Stream> create_stream(const Partition* partition = nullptr) const {
    hal_stream_desc d{};
    d.struct_size = sizeof d;
    d.partition = partition ? partition->get() : nullptr;
    hal_stream s = nullptr;
    if (hal_error* e = hal_stream_create(get(), &d, &s)) return Error::adopt(e);
    return Stream(s);
  }
  // A stream the caller owns (CUDA: a CUstream as an integer; 0 the legacy default stream):
  // hal_stream_import. Releasing it neither destroys it nor waits for it.
  Result<Stream> import_stream(uint64_t native) const {
    hal_stream_import_desc d{};
    d.struct_size = sizeof d;
    d.native = native;
    hal_stream s = nullptr;
    if (hal_error* e = hal_stream_import(get(), &d, &s)) return Error::adopt(e);
    return Stream(s);
  }
  Result<Event> create_event(bool timing = true) const {
    hal_event_desc d{};
    d.struct_size = sizeof d;
    d.flags = timing ? HAL_EVENT_TIMING : 0;
    hal_event ev = nullptr;
    if (hal_error* e = hal_event_create(get(), &d, &ev)) return Error::adopt(e);
    return Event(ev);
  }
  Result<Module> load_module(hal_module_format format, const char* target, const void* data,
                             size_t size, const char* name = nullptr) const {
    hal_module_desc d{};
    d.struct_size = sizeof d;
    d.format = format;
    d.target = target;
    d.data = data;
    d.size = size;
    d.name = name;
    hal_module m = nullptr;
    if (hal_error* e = hal_module_load(get(), &d, &m)) return Error::adopt(e);
    return Module(m);
  }
  // Encodes a tiled tensor map of desc.buffer (hal_device_encode_tensor_map). A desc whose
  // struct_size is 0 is taken as this header's version (sizeof); any other value is passed on
  // as it is. Errors name the field: HAL_UNSUPPORTED where the device has no tensor maps
  // (capability "tensor_map").
  Result<TensorMap> encode_tensor_map(const hal_tensor_map_desc& desc) const {
    hal_tensor_map_desc d = desc;
    if (d.struct_size == 0) d.struct_size = sizeof d;
    TensorMap map{};
    if (hal_error* e = hal_device_encode_tensor_map(get(), &d, map.bytes, sizeof map.bytes)) return Error::adopt(e);
    return map;
  }
  // Splits off `units` compute units; the second partition holds the rest.
  Result<std::pair<Partition, Partition>> split(uint32_t units, uint32_t flags = 0) const {
    hal_partition_desc d{};
    d.struct_size = sizeof d;
    d.units = units;
    d.flags = flags;
    hal_partition a = nullptr, b = nullptr;
    if (hal_error* e = hal_device_split(get(), &d, &a, &b)) return Error::adopt(e);
    return std::pair<Partition, Partition>(Partition(a), Partition(b));
  }
  // What a split with `flags` would grant (granularity, mechanism, units still free).
  Result<hal_partition_caps> partition_caps(uint32_t flags = 0) const {
    hal_partition_caps c{};
    c.struct_size = sizeof c;
    if (hal_error* e = hal_device_partition_caps(get(), flags, &c)) return Error::adopt(e);
    return c;
  }
  // Several named partitions at once: {{"comm", 20}, {"compute", 0}} (0: the rest).
  struct PartitionRequest {
    const char* name;
    uint32_t units;
  };
  Result<std::vector<Partition>> split_n(std::initializer_list<PartitionRequest> requests, uint32_t flags = 0) const {
    std::vector<hal_partition_request> reqs;
    for (auto& r : requests) reqs.push_back({sizeof(hal_partition_request), nullptr, r.name, r.units, flags});
    std::vector<const hal_partition_request*> ptrs;
    for (auto& r : reqs) ptrs.push_back(&r);
    std::vector<hal_partition> raw(reqs.size());
    if (hal_error* e = hal_device_split_n(get(), ptrs.data(), uint32_t(ptrs.size()), raw.data()))
      return Error::adopt(e);
    std::vector<Partition> out;
    for (hal_partition p : raw) out.emplace_back(p);
    return out;
  }
};

// A communicator (hal.h "Communicators"): ranks of one job exchanging data.
//   auto comm = halcyon::Comm::create(dev, {.rank = r, .size = n, .rendezvous = "job-42"});
class Comm : public Handle<hal_comm, hal_comm_retain, hal_comm_release> {
 public:
  using Handle::Handle;
  struct Options {
    uint32_t rank = 0;
    uint32_t size = 1;
    std::string rendezvous;
    uint32_t timeout_ms = 0;  // 0: hal.h's default
  };
  // Collective: every rank calls it with the same size and rendezvous.
  static Result<Comm> create(const Device& device, const Options& o) {
    hal_comm_desc d{};
    d.struct_size = sizeof d;
    d.rank = o.rank;
    d.size = o.size;
    d.rendezvous = o.rendezvous.c_str();
    d.timeout_ms = o.timeout_ms;
    hal_comm c = nullptr;
    if (hal_error* e = hal_comm_create(device.get(), &d, &c)) return Error::adopt(e);
    return Comm(c);
  }
  Result<hal_comm_info> info() const {
    hal_comm_info i{};
    i.struct_size = sizeof i;
    if (hal_error* e = hal_comm_get_info(get(), &i)) return Error::adopt(e);
    return i;
  }
  uint32_t rank() const { auto i = info(); return i ? i->rank : 0; }
  uint32_t size() const { auto i = info(); return i ? i->size : 0; }
  Status barrier() const { return check(hal_comm_barrier(get())); }
  // Every rank's `bytes` of `send`, in rank order (size() * bytes).
  Result<std::vector<uint8_t>> all_gather(const void* send, uint64_t bytes) const {
    std::vector<uint8_t> out(size_t(bytes) * size());
    if (hal_error* e = hal_comm_all_gather(get(), send, bytes, out.data())) return Error::adopt(e);
    return out;
  }
  template <typename T>
  Result<std::vector<T>> all_gather_values(const std::vector<T>& mine) const {
    auto raw = all_gather(mine.data(), mine.size() * sizeof(T));
    if (!raw) return raw.error();
    std::vector<T> out(raw->size() / sizeof(T));
    if (!raw->empty()) std::memcpy(out.data(), raw->data(), raw->size());
    return out;
  }
  Result<Buffer> buffer(uint64_t size) const {
    hal_buffer b = nullptr;
    if (hal_error* e = hal_comm_buffer_create(get(), size, &b)) return Error::adopt(e);
    return Buffer(b);
  }
  Result<hal_comm_handle> export_buffer(const Buffer& b) const {
    hal_comm_handle h{};
    if (hal_error* e = hal_comm_buffer_export(get(), b.get(), &h)) return Error::adopt(e);
    return h;
  }
  Result<Buffer> import_buffer(uint32_t peer, const hal_comm_handle& h) const {
    hal_buffer b = nullptr;
    if (hal_error* e = hal_comm_buffer_import(get(), peer, &h, &b)) return Error::adopt(e);
    return Buffer(b);
  }
  // Collective: every rank passes how its own part of a step that the ranks take together
  // went, and learns whether every rank's went well. Call it wherever a rank can fail on its
  // own before the next collective: a rank that returned early would leave its peers waiting
  // in that collective until the communicator's timeout. Instead all fail together: a rank
  // that failed with "rank R failed: <its message>" (its own status), the others with "<who>:
  // rank R refused: see its error" (R the lowest failing rank, with its status). When the
  // exchange itself fails, a rank's own failure is still returned first.
  Status agree(const Status& mine, std::string_view who) const {
    const int32_t code = mine ? 0 : int32_t(mine.error().status());
    auto all = all_gather_values(std::vector<int32_t>{mine ? 0 : 1, code});
    if (!mine)
      return Error(mine.error().status(), "rank " + std::to_string(rank()) + " failed: " + mine.error().message());
    if (!all) return all.error();
    for (size_t p = 0; p + 1 < all->size(); p += 2)
      if ((*all)[p] != 0)
        return Error(hal_status((*all)[p + 1]),
                     std::string(who) + ": rank " + std::to_string(p / 2) + " refused: see its error");
    return {};
  }
  // Collective: every rank's `local` (made by buffer()) mapped here, indexed by rank; entry
  // rank() is `local` itself. Every rank fails when one rank's export or import fails (agree).
  Result<std::vector<Buffer>> share(const Buffer& local) const {
    auto mine = export_buffer(local);
    HALCYON_TRY(agree(mine ? Status{} : Status{mine.error()}, "Comm::share"));
    auto all = all_gather_values(std::vector<hal_comm_handle>{*mine});
    if (!all) return all.error();
    std::vector<Buffer> out(all->size());
    Status imported;
    const uint32_t me = rank();
    for (uint32_t p = 0; p < out.size() && imported; ++p) {
      if (p == me) {
        out[p] = local;
        continue;
      }
      auto b = import_buffer(p, (*all)[p]);
      if (b) out[p] = std::move(b).value();
      else imported = Error(b.error().status(), "importing rank " + std::to_string(p) + "'s buffer: " + b.error().message());
    }
    HALCYON_TRY(agree(imported, "Comm::share"));
    return out;
  }
  // Per peer rank: byte offsets and sizes in `send` and `recv` (hal_comm_all_to_all).
  Status all_to_all(const Stream& stream, const Buffer& send, std::span<const uint64_t> send_offsets,
                    std::span<const uint64_t> send_sizes, const Buffer& recv, std::span<const uint64_t> recv_offsets,
                    std::span<const uint64_t> recv_sizes) const {
    const size_t n = size();
    if (send_offsets.size() != n || send_sizes.size() != n || recv_offsets.size() != n || recv_sizes.size() != n)
      return Error(HAL_INVALID_ARGUMENT, "Comm::all_to_all: each offsets/sizes array needs one entry per rank (" +
                                             std::to_string(n) + ")");
    return check(hal_comm_all_to_all(get(), stream.get(), send.get(), send_offsets.data(), send_sizes.data(),
                                     recv.get(), recv_offsets.data(), recv_sizes.data()));
  }
};

// Discovers backends (hal_init) with HAL_INIT_* flags and extra plugin files or folders
// (':'-separated, or nullptr). Optional: the first call that needs the registry does it.
// backend_options: "<backend>.<key>=<value>" entries, ';'-separated; log_level: "debug",
// "info", "warning" or "error" (hal_init_desc).
inline Status init(uint32_t flags = 0, const char* backend_path = nullptr, const char* backend_options = nullptr,
                   const char* log_level = nullptr) {
  hal_init_desc d{};
  d.struct_size = sizeof d;
  d.flags = flags;
  d.backend_path = backend_path;
  d.backend_options = backend_options;
  d.log_level = log_level;
  return check(hal_init(&d));
}

// The registry's view: every backend and plugin file tried, and the devices they offer.
inline Result<std::vector<hal_backend_record>> backend_records() {
  uint32_t n = 0;
  if (hal_error* e = hal_registry_count(&n)) return Error::adopt(e);
  std::vector<hal_backend_record> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    out[i].struct_size = sizeof(hal_backend_record);
    if (hal_error* e = hal_registry_record(i, &out[i])) return Error::adopt(e);
  }
  return out;
}

inline Result<std::vector<std::string>> device_uris() {
  uint32_t n = 0;
  if (hal_error* e = hal_device_count(&n)) return Error::adopt(e);
  std::vector<std::string> out;
  for (uint32_t i = 0; i < n; ++i) {
    char uri[64];
    if (hal_error* e = hal_device_uri(i, uri, sizeof uri)) return Error::adopt(e);
    out.emplace_back(uri);
  }
  return out;
}

}  // namespace halcyon
