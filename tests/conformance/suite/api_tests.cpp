// The API suite: what every backend must do through hal.h, whatever it runs on. Each test
// checks both the success path (data really moves, kernels really write) and the error path
// (bad input is an error value with the right status and a message naming the bad value).
#include <halcyon/hal.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string_view>
#include <thread>

#include "testing.hpp"

namespace halcyon::cts {

void TestContext::check_error(const Error& e, hal_status status, std::string_view what,
                              std::initializer_list<std::string_view> names) {
  if (e.status() != status) {
    fail(fmt::format("{}: got {}, expected {}", what, e.to_string(), hal_status_name(status)));
    return;
  }
  for (std::string_view n : names)
    if (e.message().find(n) == std::string::npos)
      fail(fmt::format("{}: the message does not name '{}': {}", what, n, e.message()));
}

namespace {

// ---- helpers ------------------------------------------------------------------------------

std::vector<uint8_t> random_bytes(TestContext& t, size_t n) {
  std::vector<uint8_t> v(n);
  std::uniform_int_distribution<int> d(0, 255);
  for (auto& b : v) b = uint8_t(d(t.rng));
  return v;
}

Buffer allocate(TestContext& t, uint64_t size, hal_memory_kind kind = HAL_MEMORY_DEVICE) {
  return t.must(t.device.allocate(size, kind), fmt::format("allocate {} bytes", size));
}

Stream make_stream(TestContext& t) { return t.must(t.device.create_stream(), "create a stream"); }

std::vector<uint8_t> read_all(TestContext& t, const Stream& s, const Buffer& b, uint64_t off, uint64_t size) {
  std::vector<uint8_t> out(size);
  t.must(s.read(b, off, out.data(), size), fmt::format("read {} bytes at {}", size, off));
  t.must(s.synchronize(), "synchronize after a read");
  return out;
}

// First index where two byte ranges differ, or -1.
int64_t first_difference(const uint8_t* a, const uint8_t* b, size_t n) {
  auto m = std::mismatch(a, a + n, b);
  return m.first == a + n ? -1 : int64_t(m.first - a);
}

void expect_bytes(TestContext& t, const std::vector<uint8_t>& got, const uint8_t* want, std::string_view what) {
  int64_t at = first_difference(got.data(), want, got.size());
  if (at >= 0)
    t.fail(fmt::format("{}: byte {} of {} is 0x{:02x}, expected 0x{:02x}", what, at, got.size(), got[size_t(at)],
                       want[at]));
}

// ---- host test kernels (HAL_MODULE_HOST) --------------------------------------------------

struct IotaArgs {
  uint64_t out;
  uint32_t n;
  uint32_t scale;
};
constexpr hal_kernel_arg kIotaArgs[] = {{0, 8, HAL_ARG_POINTER}, {8, 4, HAL_ARG_VALUE}, {12, 4, HAL_ARG_VALUE}};

uint64_t linear_block(const hal_host_launch_ctx* c) {
  return c->block_id[0] + uint64_t(c->grid[0]) * (c->block_id[1] + uint64_t(c->grid[1]) * c->block_id[2]);
}

// out[i] = i * scale + 1 for every thread i < n of the whole grid.
void iota_kernel(const hal_host_launch_ctx* c, const void* raw) {
  IotaArgs a;
  std::memcpy(&a, raw, sizeof a);
  auto* out = reinterpret_cast<uint32_t*>(a.out);
  uint64_t threads = uint64_t(c->block[0]) * c->block[1] * c->block[2];
  uint64_t first = linear_block(c) * threads;
  for (uint64_t t = 0; t < threads; ++t)
    if (first + t < a.n) out[first + t] = uint32_t((first + t) * a.scale + 1);
}

// Fills the block's shared memory, then writes a checksum of it: out[block] = sum(bid + k).
void shared_kernel(const hal_host_launch_ctx* c, const void* raw) {
  IotaArgs a;
  std::memcpy(&a, raw, sizeof a);
  auto* out = reinterpret_cast<uint32_t*>(a.out);
  uint64_t bid = linear_block(c);
  uint32_t words = c->shared_bytes / 4;
  auto* sh = static_cast<uint32_t*>(c->shared);
  for (uint32_t k = 0; k < words; ++k) sh[k] = uint32_t(bid + k);
  uint32_t sum = 0;
  for (uint32_t k = 0; k < words; ++k) sum += sh[k];
  if (bid < a.n) out[bid] = sum;
}

// Sleeps, then writes `scale` into out[0..n): slow work for ordering tests.
void slow_kernel(const hal_host_launch_ctx* c, const void* raw) {
  IotaArgs a;
  std::memcpy(&a, raw, sizeof a);
  if (linear_block(c) != 0) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  auto* out = reinterpret_cast<uint32_t*>(a.out);
  for (uint32_t i = 0; i < a.n; ++i) out[i] = a.scale;
}

void empty_kernel(const hal_host_launch_ctx*, const void*) {}

constexpr hal_host_kernel_entry kHostKernels[] = {
    {"cts_iota", iota_kernel, 3, kIotaArgs, sizeof(IotaArgs)},
    {"cts_shared", shared_kernel, 3, kIotaArgs, sizeof(IotaArgs)},
    {"cts_slow", slow_kernel, 3, kIotaArgs, sizeof(IotaArgs)},
    {"cts_empty", empty_kernel, 0, nullptr, 0},
};

hal_host_module_image host_image() {
  hal_host_module_image img{};
  img.struct_size = sizeof img;
  img.kernel_count = uint32_t(std::size(kHostKernels));
  img.kernels = kHostKernels;
  return img;
}

Module load_host_module(TestContext& t) {
  static const hal_host_module_image img = host_image();
  return t.must(t.device.load_module(HAL_MODULE_HOST, "host", &img, sizeof img, "cts_host_kernels"),
                "load the host test module");
}

IotaArgs iota_args(const Buffer& out, uint32_t n, uint32_t scale) { return IotaArgs{out.address(), n, scale}; }

Status launch_raw(const Stream& s, const Kernel& k, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
                  const void* args, size_t args_size, uint32_t shared = 0) {
  return s.launch(k, Dim3{grid[0], grid[1], grid[2]}, Dim3{block[0], block[1], block[2]}, args, args_size, shared);
}

// ---- device -------------------------------------------------------------------------------

void device_info(TestContext& t) {
  const auto& i = t.info;
  CTS_CHECK(t, i.name[0] != 0, "the device has no name");
  CTS_CHECK(t, i.arch[0] != 0, "the device has no architecture");
  CTS_CHECK(t, i.compute_units > 0, "compute_units is 0");
  CTS_CHECK(t, i.max_threads_per_block > 0, "max_threads_per_block is 0");
  CTS_CHECK(t, std::string_view(i.capabilities).find("module.") != std::string_view::npos,
            "capabilities '{}' name no module format", i.capabilities);
  t.note(fmt::format("{} ({}), {} units", i.name, i.arch, i.compute_units));

  // An older caller's smaller struct is filled only up to its struct_size.
  struct {
    hal_device_info head;
    std::array<uint8_t, 64> guard;
  } small{};
  std::memset(&small, 0xA5, sizeof small);
  small.head.struct_size = HAL_DEVICE_INFO_MIN_SIZE;
  hal_error* e = hal_device_get_info(t.device.get(), &small.head);
  CTS_CHECK(t, e == nullptr, "get_info with the minimum struct_size: {}", hal_error_message(e));
  hal_error_free(e);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&small.head);
  bool clean = std::all_of(bytes + HAL_DEVICE_INFO_MIN_SIZE, bytes + sizeof small, [](uint8_t b) { return b == 0xA5; });
  CTS_CHECK(t, clean, "hal_device_get_info wrote past a {}-byte struct", HAL_DEVICE_INFO_MIN_SIZE);

  hal_device_info tiny{};
  tiny.struct_size = sizeof(size_t);
  t.check_error(Error::adopt(hal_device_get_info(t.device.get(), &tiny)), HAL_VERSION_MISMATCH,
                "get_info with a struct_size below the minimum");

  bool has = true;
  t.must(check(hal_device_has_capability(t.device.get(), "cts.no-such-capability", &has)), "has_capability");
  CTS_CHECK(t, !has, "the device claims the made-up capability 'cts.no-such-capability'");
}

void device_open_errors(TestContext& t) {
  std::string uri = t.info.uri;
  std::string scheme = uri.substr(0, uri.find(':'));
  std::string bad = scheme + ":4096";
  auto d = Device::open(bad.c_str());
  CTS_CHECK(t, !d.ok(), "opening {} succeeded", bad);
  if (!d.ok()) {
    CTS_CHECK(t, d.error().status() == HAL_NOT_FOUND || d.error().status() == HAL_OUT_OF_RANGE,
              "opening {}: {}, expected HAL_NOT_FOUND or HAL_OUT_OF_RANGE", bad, d.error().to_string());
    CTS_CHECK(t, d.error().message().find("4096") != std::string::npos, "the message does not name index 4096: {}",
              d.error().message());
  }
  // A second handle on the same device is independent of the first.
  auto again = t.must(Device::open(uri.c_str()), "open the device a second time");
  auto i2 = t.must(again.info(), "info of the second handle");
  CTS_CHECK(t, std::string_view(i2.uri) == uri, "second handle's URI is {}, expected {}", i2.uri, uri);
}

// ---- handles ------------------------------------------------------------------------------

void handles_invalid(TestContext& t) {
  hal_buffer_info bi{};
  bi.struct_size = sizeof bi;
  t.check_error(Error::adopt(hal_buffer_get_info(nullptr, &bi)), HAL_INVALID_HANDLE, "get_info of a NULL buffer");

  Buffer b = allocate(t, 64);
  hal_buffer raw = b.release_ownership();
  t.must(check(hal_buffer_release(raw)), "release a buffer");
  t.check_error(Error::adopt(hal_buffer_get_info(raw, &bi)), HAL_INVALID_HANDLE, "get_info of a released buffer",
                {"released"});
  t.check_error(Error::adopt(hal_buffer_release(raw)), HAL_INVALID_HANDLE, "releasing a buffer twice");

  Stream s = make_stream(t);
  t.check_error(Error::adopt(hal_buffer_get_info(reinterpret_cast<hal_buffer>(s.get()), &bi)), HAL_INVALID_HANDLE,
                "a stream handle passed as a buffer", {"stream"});
}

// ---- allocation ---------------------------------------------------------------------------

void alloc_sizes(TestContext& t) {
  for (uint64_t size : {0ull, 1ull, 3ull, 255ull, 4097ull, 1ull << 20, (1ull << 20) + 13}) {
    for (hal_memory_kind kind : {HAL_MEMORY_DEVICE, HAL_MEMORY_HOST_PINNED}) {
      auto b = t.device.allocate(size, kind);
      if (!b) {
        t.fail(fmt::format("allocate {} bytes of kind {}: {}", size, int(kind), b.error().to_string()));
        continue;
      }
      auto info = t.must(b->info(), "buffer info");
      CTS_CHECK(t, info.size == size, "buffer of {} bytes reports size {}", size, info.size);
      CTS_CHECK(t, info.kind == kind, "buffer kind {} reported as {}", int(kind), int(info.kind));
      if (size > 0) CTS_CHECK(t, info.device_address != 0, "{}-byte buffer has address 0", size);
      if (size > 0 && kind == HAL_MEMORY_HOST_PINNED)
        CTS_CHECK(t, info.host_pointer != nullptr, "{}-byte pinned buffer has no host pointer", size);
    }
  }
}

void alloc_alignment(TestContext& t) {
  for (uint64_t align : {256ull, 4096ull, 65536ull}) {
    hal_buffer_desc d{};
    d.struct_size = sizeof d;
    d.kind = HAL_MEMORY_DEVICE;
    d.size = 1000;
    d.alignment = align;
    hal_buffer h = nullptr;
    Status s = check(hal_buffer_create(t.device.get(), &d, &h));
    if (!s) {
      t.fail(fmt::format("allocate with alignment {}: {}", align, s.error().to_string()));
      continue;
    }
    Buffer b(h);
    CTS_CHECK(t, b.address() % align == 0, "address 0x{:x} is not {}-byte aligned", b.address(), align);
  }
}

void alloc_invalid(TestContext& t) {
  auto create = [&](hal_buffer_desc d) {
    hal_buffer h = nullptr;
    Status s = check(hal_buffer_create(t.device.get(), &d, &h));
    if (h) hal_error_free(hal_buffer_release(h));
    return s;
  };
  hal_buffer_desc d{};
  d.struct_size = sizeof d;
  d.size = 64;
  d.alignment = 48;
  t.expect_error(create(d), HAL_INVALID_ARGUMENT, "alignment 48", {"48"});
  d.alignment = 0;
  d.kind = hal_memory_kind(7);
  t.expect_error(create(d), HAL_INVALID_ARGUMENT, "memory kind 7", {"7"});
  d.kind = HAL_MEMORY_DEVICE;
  d.flags = 0x10;
  t.expect_error(create(d), HAL_INVALID_ARGUMENT, "reserved flags", {"0x10"});
  d.flags = 0;
  d.struct_size = 8;
  t.expect_error(create(d), HAL_VERSION_MISMATCH, "struct_size 8");
  if (t.info.memory_bytes > 0) {
    uint64_t too_big = t.info.memory_bytes + 1;
    t.expect_error(t.device.allocate(too_big), HAL_OUT_OF_MEMORY, "one byte more than the device memory",
                   {fmt::format("{}", too_big)});
  }
}

// ---- copies -------------------------------------------------------------------------------

// Host -> device -> host at every size and offset of interest, guarded by poisoned margins.
void copy_roundtrip(TestContext& t) {
  Stream s = make_stream(t);
  const uint64_t margin = 64;
  for (uint64_t size : {0ull, 1ull, 2ull, 3ull, 7ull, 64ull, 255ull, 4097ull, 65537ull}) {
    for (uint64_t off : {0ull, 1ull, 3ull, 13ull, 255ull}) {
      uint64_t cap = off + size + margin;
      Buffer b = allocate(t, cap);
      t.must(s.fill(b, 0, cap, uint8_t(0xCD)), "poison the buffer");
      auto data = random_bytes(t, size);
      t.must(s.write(b, off, data.data(), size), fmt::format("write {} bytes at {}", size, off));
      auto all = read_all(t, s, b, 0, cap);
      std::vector<uint8_t> want(cap, 0xCD);
      std::copy(data.begin(), data.end(), want.begin() + off);
      expect_bytes(t, all, want.data(), fmt::format("write of {} bytes at offset {}", size, off));
      if (size > 0) {
        auto part = read_all(t, s, b, off, size);
        expect_bytes(t, part, data.data(), fmt::format("read of {} bytes at offset {}", size, off));
      }
      if (!t.failures.empty()) return;
    }
  }
}

void copy_device_to_device(TestContext& t) {
  Stream s = make_stream(t);
  for (uint64_t size : {0ull, 1ull, 5ull, 4099ull, 65536ull + 7}) {
    for (auto [soff, doff] : {std::pair<uint64_t, uint64_t>{0, 0}, {1, 3}, {7, 0}, {0, 5}}) {
      Buffer src = allocate(t, soff + size + 16), dst = allocate(t, doff + size + 16);
      auto data = random_bytes(t, size);
      t.must(s.fill(dst, 0, dst.size(), uint8_t(0xEE)), "poison dst");
      t.must(s.write(src, soff, data.data(), size), "write src");
      t.must(s.copy(dst, doff, src, soff, size), fmt::format("copy {} bytes {}->{}", size, soff, doff));
      auto all = read_all(t, s, dst, 0, dst.size());
      std::vector<uint8_t> want(dst.size(), 0xEE);
      std::copy(data.begin(), data.end(), want.begin() + doff);
      expect_bytes(t, all, want.data(), fmt::format("copy of {} bytes from offset {} to {}", size, soff, doff));
    }
  }
  // Disjoint ranges of one buffer may be copied; overlapping ones are refused.
  Buffer one = allocate(t, 100);
  auto data = random_bytes(t, 100);
  t.must(s.write(one, 0, data.data(), 100), "write");
  t.must(s.copy(one, 60, one, 10, 40), "copy within one buffer, disjoint ranges");
  auto got = read_all(t, s, one, 60, 40);
  expect_bytes(t, got, data.data() + 10, "copy within one buffer");
  t.expect_error(s.copy(one, 20, one, 10, 40), HAL_INVALID_ARGUMENT, "overlapping copy", {"overlap"});
}

// hal_buffer_import (ABI 1.4): memory the device already has, here a buffer of its own, taken
// in place as a second buffer (an embedder's tensor through DLPack is the real use). Data moves
// both ways between the two views; `release` runs once, after the imported buffer's last
// reference, and the memory stays its owner's; the core's argument checks hold.
int g_import_releases = 0;
void count_import_release(void*) { ++g_import_releases; }

Result<Buffer> import_range(const Device& d, uint64_t address, uint64_t size, hal_memory_kind kind = HAL_MEMORY_DEVICE,
                            uint32_t flags = 0) {
  return d.import_memory(address, size, count_import_release, nullptr, flags, kind);
}

void buffer_import(TestContext& t) {
  Stream s = make_stream(t);
  Buffer owner = allocate(t, 4096);
  const uint64_t base = t.must(owner.info(), "owner info").device_address;
  g_import_releases = 0;
  auto first = import_range(t.device, base + 256, 1024);
  if (!first.ok() && first.error().status() == HAL_UNSUPPORTED)
    TestContext::unsupported("the device imports no memory: " + first.error().message());
  {
    Buffer view = t.must(std::move(first), "import 1024 bytes of a buffer of the device");
    CTS_CHECK(t, t.must(view.info(), "view info").device_address == base + 256, "the import is not in place");
    auto data = random_bytes(t, 1024);
    t.must(s.write(view, 0, data.data(), 1024), "write through the imported view");
    expect_bytes(t, read_all(t, s, owner, 256, 1024), data.data(), "the owner's bytes after a write to the view");
    auto back = random_bytes(t, 100);
    t.must(s.write(owner, 300, back.data(), 100), "write through the owner");
    expect_bytes(t, read_all(t, s, view, 44, 100), back.data(), "the view's bytes after a write to the owner");
    t.expect_error(s.write(view, 1000, data.data(), 25), HAL_OUT_OF_RANGE, "write past the imported range");
    Buffer owned_order = t.must(import_range(t.device, base, 4096, HAL_MEMORY_DEVICE, HAL_BUFFER_IMPORT_OWNER_ORDERED),
                                "import with HAL_BUFFER_IMPORT_OWNER_ORDERED");
    t.must(s.synchronize(), "synchronize");
    CTS_CHECK(t, g_import_releases == 0, "release ran {} time(s) while the imports were alive", g_import_releases);
  }
  CTS_CHECK(t, g_import_releases == 2, "release ran {} time(s) for 2 imports released", g_import_releases);
  auto still = random_bytes(t, 16);
  t.must(s.write(owner, 0, still.data(), 16), "the owner's buffer after its imports are gone");
  expect_bytes(t, read_all(t, s, owner, 0, 16), still.data(), "the owner's buffer after its imports are gone");
  t.expect_error(import_range(t.device, base, 64, HAL_MEMORY_HOST_PINNED), HAL_INVALID_ARGUMENT,
                 "import as host memory", {"HAL_MEMORY_DEVICE"});
  t.expect_error(import_range(t.device, base, 64, HAL_MEMORY_DEVICE, 1u << 7), HAL_INVALID_ARGUMENT,
                 "import with a reserved flag", {"reserved"});
  t.expect_error(import_range(t.device, 0, 64), HAL_INVALID_ARGUMENT, "import of address 0", {"address 0"});
  CTS_CHECK(t, g_import_releases == 2, "a refused import called release");
}

// A stream's own native handle (hal_stream_info.native, ABI 1.11) imported as a second hal stream
// (hal_stream_import): both queue to the same native stream, so their work runs in the order it
// was queued with no host wait between; the import's release neither destroys nor breaks it.
void stream_import(TestContext& t) {
  Stream s = make_stream(t);
  const hal_stream_info info = t.must(s.info(), "stream info");
  if (!info.has_native) TestContext::unsupported("the device's streams have no native handle (hal_stream_info.has_native 0)");
  auto first = t.device.import_stream(info.native);
  if (!first.ok() && first.error().status() == HAL_UNSUPPORTED)
    TestContext::unsupported("the device imports no stream: " + first.error().message());
  const uint64_t n = 1 << 20;
  Buffer a = allocate(t, n), b = allocate(t, n);
  auto data = random_bytes(t, n);
  {
    Stream imported = t.must(std::move(first), "import the stream's own native handle");
    const hal_stream_info again = t.must(imported.info(), "the import's info");
    CTS_CHECK(t, again.has_native && again.native == info.native, "the import's native handle 0x{:x}, not 0x{:x}",
              again.native, info.native);
    CTS_CHECK(t, std::string(again.device_uri) == info.device_uri, "the import is on {}, the stream on {}",
              again.device_uri, info.device_uri);
    t.must(s.write(a, 0, data.data(), n), "write a");
    // Queued alternately through the two handles, nothing waited for in between: b gets a's data
    // before a is zeroed, then half of b gets the zeros.
    t.must(imported.copy(b, 0, a, 0, n), "copy a to b through the import");
    t.must(s.fill(a, 0, n, uint8_t(0)), "zero a through the stream");
    t.must(imported.copy(b, 0, a, 0, n / 2), "copy half of a (zeros) to b through the import");
    std::vector<uint8_t> want(data);
    std::fill(want.begin(), want.begin() + n / 2, 0);
    expect_bytes(t, read_all(t, s, b, 0, n), want.data(), "b after the copies queued through both handles");
  }
  // The import is gone; the stream (its native stream) still runs work.
  auto more = random_bytes(t, 4096);
  t.must(s.write(b, 0, more.data(), more.size()), "write through the stream after the import's release");
  expect_bytes(t, read_all(t, s, b, 0, more.size()), more.data(), "the stream after the import's release");
  t.must(s.synchronize(), "synchronize");
}

void copy_out_of_range(TestContext& t) {
  Stream s = make_stream(t);
  Buffer b = allocate(t, 100), c = allocate(t, 100);
  std::vector<uint8_t> host(200);
  t.expect_error(s.write(b, 0, host.data(), 101), HAL_OUT_OF_RANGE, "write 101 bytes into 100", {"101", "100"});
  t.expect_error(s.write(b, 99, host.data(), 2), HAL_OUT_OF_RANGE, "write 2 bytes at 99", {"99"});
  t.expect_error(s.read(b, 101, host.data(), 0), HAL_OUT_OF_RANGE, "read 0 bytes at 101", {"101"});
  t.expect_error(s.read(b, UINT64_MAX, host.data(), 2), HAL_OUT_OF_RANGE, "read at offset 2^64-1 (overflow)");
  t.expect_error(s.read(b, 2, host.data(), UINT64_MAX), HAL_OUT_OF_RANGE, "read of 2^64-1 bytes (overflow)");
  t.expect_error(s.copy(b, 50, c, 0, 51), HAL_OUT_OF_RANGE, "copy past dst", {"51"});
  t.expect_error(s.copy(b, 0, c, 60, 41), HAL_OUT_OF_RANGE, "copy past src", {"41"});
  t.expect_error(s.write(b, 0, nullptr, 4), HAL_INVALID_ARGUMENT, "write from NULL");
  // Zero bytes at the very end is in range.
  t.must(s.write(b, 100, host.data(), 0), "write 0 bytes at the end");
  t.must(s.synchronize(), "synchronize");
}

// The largest single buffer the suite moves: a quarter of the device memory, capped (see
// docs/conformance.md) so that the suite stays quick; Options::max_copy_bytes is the cap.
uint64_t largest_copy_bytes(const hal_device_info& info, uint64_t cap) {
  uint64_t quarter = info.memory_bytes ? info.memory_bytes / 4 : cap;
  return std::max<uint64_t>(std::min(cap, quarter) / 8 * 8 + 3, 8);  // odd on purpose
}

void copy_largest(TestContext& t) {
  uint64_t n = largest_copy_bytes(t.info, t.max_copy_bytes);
  t.note(fmt::format("{} bytes", n));
  Stream s = make_stream(t);
  Buffer a = allocate(t, n), b = allocate(t, n);
  std::vector<uint8_t> host(n);
  for (uint64_t i = 0; i < n; ++i) host[i] = uint8_t((i * 2654435761u) >> 13);
  t.must(s.write(a, 0, host.data(), n), "write the largest buffer");
  t.must(s.copy(b, 0, a, 0, n), "copy the largest buffer");
  std::vector<uint8_t> back(n, 0);
  t.must(s.read(b, 0, back.data(), n), "read the largest buffer");
  t.must(s.synchronize(), "synchronize");
  int64_t at = first_difference(back.data(), host.data(), n);
  CTS_CHECK(t, at < 0, "{}-byte round trip differs first at byte {}", n, at);
}

// ---- fills --------------------------------------------------------------------------------

void fill_patterns(TestContext& t) {
  Stream s = make_stream(t);
  const uint32_t pattern = 0x89ABCDEF;
  for (uint32_t psize : {1u, 2u, 4u}) {
    for (uint64_t count : {0ull, 1ull, 3ull, 1001ull}) {
      for (uint64_t off_units : {0ull, 1ull, 5ull}) {
        uint64_t off = off_units * psize, size = count * psize, cap = off + size + 32;
        Buffer b = allocate(t, cap);
        t.must(s.fill(b, 0, cap, uint8_t(0x11)), "poison");
        t.must(check(hal_stream_fill(s.get(), b.get(), off, size, &pattern, psize)),
               fmt::format("fill {} bytes at {} with a {}-byte pattern", size, off, psize));
        auto got = read_all(t, s, b, 0, cap);
        std::vector<uint8_t> want(cap, 0x11);
        for (uint64_t i = 0; i < size; ++i) want[off + i] = reinterpret_cast<const uint8_t*>(&pattern)[i % psize];
        expect_bytes(t, got, want.data(), fmt::format("fill of {} bytes at {} ({}-byte pattern)", size, off, psize));
      }
    }
  }
  Buffer b = allocate(t, 64);
  t.expect_error(check(hal_stream_fill(s.get(), b.get(), 0, 12, &pattern, 3)), HAL_INVALID_ARGUMENT,
                 "3-byte pattern", {"3"});
  t.expect_error(check(hal_stream_fill(s.get(), b.get(), 2, 8, &pattern, 4)), HAL_INVALID_ARGUMENT,
                 "offset 2 with a 4-byte pattern", {"2"});
  t.expect_error(check(hal_stream_fill(s.get(), b.get(), 0, 6, &pattern, 4)), HAL_INVALID_ARGUMENT,
                 "size 6 with a 4-byte pattern", {"6"});
  t.expect_error(check(hal_stream_fill(s.get(), b.get(), 0, 68, &pattern, 4)), HAL_OUT_OF_RANGE,
                 "fill past the end", {"68"});
  t.expect_error(check(hal_stream_fill(s.get(), b.get(), 0, 4, nullptr, 4)), HAL_INVALID_ARGUMENT, "NULL pattern");
}

// ---- streams and events -------------------------------------------------------------------

// Work on one stream happens in order: each step reads what the previous one wrote.
void stream_order(TestContext& t) {
  Stream s = make_stream(t);
  const uint64_t n = 1 << 20;
  Buffer a = allocate(t, n), b = allocate(t, n);
  auto data = random_bytes(t, n);
  std::vector<uint8_t> mid(n), out(n);
  t.must(s.write(a, 0, data.data(), n), "write");
  t.must(s.copy(b, 0, a, 0, n), "copy");
  t.must(s.fill(a, 0, n, uint8_t(0)), "fill");
  t.must(s.read(b, 0, mid.data(), n), "read b");
  t.must(s.copy(b, 0, a, 0, n / 2), "copy the zeros over half");
  t.must(s.read(b, 0, out.data(), n), "read b again");
  t.must(s.synchronize(), "synchronize");
  expect_bytes(t, mid, data.data(), "b after write+copy");
  std::vector<uint8_t> want(data);
  std::fill(want.begin(), want.begin() + n / 2, 0);
  expect_bytes(t, out, want.data(), "b after the second copy");
}

// Several streams work at the same time without mixing up their data.
void stream_many(TestContext& t) {
  const int k = 4;
  const uint64_t n = 256 * 1024 + 1;
  std::vector<Stream> streams;
  std::vector<Buffer> bufs;
  std::vector<std::vector<uint8_t>> data, back(k, std::vector<uint8_t>(n));
  for (int i = 0; i < k; ++i) {
    streams.push_back(make_stream(t));
    bufs.push_back(allocate(t, n));
    data.push_back(random_bytes(t, n));
  }
  for (int i = 0; i < k; ++i) {
    t.must(streams[i].write(bufs[i], 0, data[i].data(), n), "write");
    t.must(streams[i].read(bufs[i], 0, back[i].data(), n), "read");
  }
  for (int i = 0; i < k; ++i) t.must(streams[i].synchronize(), "synchronize");
  for (int i = 0; i < k; ++i) expect_bytes(t, back[i], data[i].data(), fmt::format("stream {}", i));
}

// Stream B waits for an event recorded on stream A after a large transfer.
void event_cross_stream(TestContext& t) {
  Stream a = make_stream(t), b = make_stream(t);
  const uint64_t n = 32ull << 20;
  Buffer src = allocate(t, n), dst = allocate(t, n);
  Event ev = t.must(t.device.create_event(false), "create an event");
  std::vector<uint8_t> host(n);
  for (uint64_t i = 0; i < n; ++i) host[i] = uint8_t(i * 7 + 1);
  t.must(b.fill(dst, 0, n, uint8_t(0)), "clear dst");
  t.must(b.synchronize(), "synchronize b");
  t.must(a.write(src, 0, host.data(), n), "write on a");
  t.must(a.record(ev), "record on a");
  t.must(b.wait(ev), "b waits for the event");
  t.must(b.copy(dst, 0, src, 0, n), "copy on b");
  std::vector<uint8_t> back(n);
  t.must(b.read(dst, 0, back.data(), n), "read on b");
  t.must(b.synchronize(), "synchronize b");
  int64_t at = first_difference(back.data(), host.data(), n);
  CTS_CHECK(t, at < 0, "b's copy did not see a's write (first difference at byte {})", at);
  t.must(a.synchronize(), "synchronize a");
}

// The same with a slow kernel on A: without the wait, B's copy would see the old data.
void event_cross_stream_kernel(TestContext& t) {
  Module m = load_host_module(t);
  Kernel slow = t.must(m.kernel("cts_slow"), "kernel cts_slow");
  Stream a = make_stream(t), b = make_stream(t);
  const uint32_t n = 1024;
  Buffer src = allocate(t, n * 4), dst = allocate(t, n * 4);
  t.must(a.fill(src, 0, n * 4, uint32_t(0)), "clear src");
  t.must(a.synchronize(), "synchronize a");
  Event ev = t.must(t.device.create_event(false), "create an event");
  IotaArgs args = iota_args(src, n, 0xC0FFEEu);
  t.must(launch_raw(a, slow, {1, 1, 1}, {1, 1, 1}, &args, sizeof args), "launch the slow kernel on a");
  t.must(a.record(ev), "record on a");
  t.must(b.wait(ev), "b waits");
  t.must(b.copy(dst, 0, src, 0, n * 4), "copy on b");
  std::vector<uint32_t> back(n);
  t.must(b.read(dst, 0, back.data(), n * 4), "read on b");
  t.must(b.synchronize(), "synchronize b");
  auto bad = std::find_if(back.begin(), back.end(), [](uint32_t v) { return v != 0xC0FFEEu; });
  CTS_CHECK(t, bad == back.end(), "b ran before a's kernel finished: element {} is 0x{:x}", bad - back.begin(),
            bad == back.end() ? 0u : *bad);
}

void event_query(TestContext& t) {
  Event ev = t.must(t.device.create_event(false), "create an event");
  bool done = t.must(ev.query(), "query an unrecorded event");
  CTS_CHECK(t, done, "an event that was never recorded is reported incomplete");
  t.must(ev.synchronize(), "synchronize an unrecorded event");
  Stream s = make_stream(t);
  t.must(s.record(ev), "record");
  t.must(ev.synchronize(), "synchronize the event");
  done = t.must(ev.query(), "query after synchronize");
  CTS_CHECK(t, done, "the event is incomplete after hal_event_synchronize");
  // Re-recording moves the event to the new point.
  t.must(s.record(ev), "record again");
  t.must(s.synchronize(), "synchronize the stream");
  done = t.must(ev.query(), "query after the stream finished");
  CTS_CHECK(t, done, "the re-recorded event is incomplete after the stream synchronized");
}

void event_timing(TestContext& t) {
  Stream s = make_stream(t);
  Event a = t.must(t.device.create_event(true), "timing event a");
  Event b = t.must(t.device.create_event(true), "timing event b");
  Event plain = t.must(t.device.create_event(false), "non-timing event");
  t.expect_error(b.elapsed_since(a), HAL_FAILED_PRECONDITION, "elapsed time of unrecorded events");
  const uint64_t n = 16ull << 20;
  Buffer buf = allocate(t, n);
  t.must(s.record(a), "record a");
  t.must(s.fill(buf, 0, n, uint8_t(3)), "fill");
  t.must(s.record(b), "record b");
  t.must(s.record(plain), "record plain");
  t.must(b.synchronize(), "synchronize b");
  float ms = t.must(b.elapsed_since(a), "elapsed time a->b");
  CTS_CHECK(t, std::isfinite(ms) && ms >= 0, "elapsed time {} ms", ms);
  t.note(fmt::format("16 MiB fill: {:.3f} ms", ms));
  t.expect_error(plain.elapsed_since(a), HAL_INVALID_ARGUMENT, "elapsed time with a non-timing event", {"TIMING"});
}

// ---- modules ------------------------------------------------------------------------------

struct FormatName {
  hal_module_format format;
  const char* name;
};
constexpr FormatName kFormats[] = {{HAL_MODULE_PTX, "ptx"},
                                   {HAL_MODULE_CUBIN, "cubin"},
                                   {HAL_MODULE_HSACO, "hsaco"},
                                   {HAL_MODULE_SPIRV, "spirv"},
                                   {HAL_MODULE_HOST, "host"}};

bool loads(const TestContext& t, const char* format_name) {
  return t.device.has(fmt::format("module.{}", format_name).c_str());
}

// Plainly wrong bytes for a format: what a confused caller might pass.
std::vector<uint8_t> junk_module(hal_module_format f) {
  std::string s;
  switch (f) {
    case HAL_MODULE_PTX: s = "this is not PTX; .entry nothing("; break;
    case HAL_MODULE_CUBIN:
    case HAL_MODULE_HSACO: s = std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(9, '\0'); break;  // header, truncated
    case HAL_MODULE_SPIRV: s = std::string("\x03\x02\x23\x07", 4) + "no more words"; break;              // magic only
    default: s = "????"; break;
  }
  return std::vector<uint8_t>(s.begin(), s.end());
}

// A target string the device cannot run, for a format it loads.
std::string foreign_target(hal_module_format f, std::string_view arch) {
  switch (f) {
    case HAL_MODULE_HOST: return arch == "aarch64" ? "x86_64" : "aarch64";
    case HAL_MODULE_PTX:
    case HAL_MODULE_CUBIN: return "sm_1000";  // no device has it yet: PTX only runs forward
    case HAL_MODULE_HSACO: return arch == "gfx942" ? "gfx90a" : "gfx942";
    case HAL_MODULE_SPIRV: return "spirv32";  // 32-bit addressing: no 64-bit device runs it
    default: return "";
  }
}

// Every format the device does not load is refused as HAL_ARCH_MISMATCH, naming the format.
void module_wrong_format(TestContext& t) {
  int tried = 0;
  for (auto [f, name] : kFormats) {
    if (loads(t, name)) continue;
    auto data = junk_module(f);
    std::string mname = fmt::format("cts_wrong_format.{}", name);
    t.expect_error(t.device.load_module(f, t.info.arch, data.data(), data.size(), mname.c_str()), HAL_ARCH_MISMATCH,
                   fmt::format("a {} module", name), {name, mname});
    ++tried;
  }
  if (tried == 0) TestContext::unsupported("the device loads every module format");
  auto data = junk_module(HAL_MODULE_PTX);
  t.expect_error(t.device.load_module(hal_module_format(77), t.info.arch, data.data(), data.size(), "cts_fmt77"),
                 HAL_INVALID_ARGUMENT, "module format 77", {"77"});
  t.expect_error(t.device.load_module(HAL_MODULE_HOST, "host", nullptr, 0, "cts_null"), HAL_INVALID_ARGUMENT,
                 "a module with no data", {"cts_null"});
  t.expect_error(t.device.load_module(HAL_MODULE_HOST, nullptr, data.data(), data.size(), "cts_no_target"),
                 HAL_INVALID_ARGUMENT, "a module with no target", {"cts_no_target"});
}

// A module built for another architecture is refused before any driver call, naming it.
void module_wrong_arch(TestContext& t) {
  int tried = 0;
  static const hal_host_module_image img = host_image();
  for (auto [f, name] : kFormats) {
    if (!loads(t, name)) continue;
    std::string target = foreign_target(f, t.info.arch);
    if (target.empty()) continue;
    std::vector<uint8_t> data;
    const void* p;
    size_t size;
    if (f == HAL_MODULE_HOST) {
      p = &img;
      size = sizeof img;
    } else {
      std::string text = fmt::format(".version 8.0\n.target {}\n.address_size 64\n", target);
      data = f == HAL_MODULE_PTX ? std::vector<uint8_t>(text.begin(), text.end() + 1) : junk_module(f);
      p = data.data();
      size = data.size();
    }
    std::string mname = fmt::format("cts_wrong_arch.{}", name);
    t.expect_error(t.device.load_module(f, target.c_str(), p, size, mname.c_str()), HAL_ARCH_MISMATCH,
                   fmt::format("a {} module for {}", name, target), {target, mname});
    ++tried;
  }
  if (tried == 0) TestContext::unsupported("no architecture-specific module format is loaded by this device");
}

// Corrupt or truncated binaries are errors, never crashes, and name the module.
void module_corrupt(TestContext& t) {
  int tried = 0;
  for (auto [f, name] : kFormats) {
    if (!loads(t, name)) continue;
    std::string mname = fmt::format("cts_corrupt.{}", name);
    if (f == HAL_MODULE_HOST) {
      hal_host_module_image img = host_image();
      t.expect_error(t.device.load_module(f, "host", &img, 4, mname.c_str()), HAL_INVALID_ARGUMENT,
                     "a 4-byte host image", {mname});
      img.struct_size = 3;
      t.expect_error(t.device.load_module(f, "host", &img, sizeof img, mname.c_str()), HAL_INVALID_ARGUMENT,
                     "a host image with struct_size 3", {mname});
      img.struct_size = sizeof img;
      hal_host_kernel_entry bad_entry = kHostKernels[0];
      const hal_kernel_arg past[] = {{12, 8, HAL_ARG_VALUE}};  // 12+8 > 16
      bad_entry.args = past;
      bad_entry.arg_count = 1;
      img.kernels = &bad_entry;
      img.kernel_count = 1;
      t.expect_error(t.device.load_module(f, "host", &img, sizeof img, mname.c_str()), HAL_INVALID_ARGUMENT,
                     "a host kernel whose argument lies past its blob", {mname});
      img.kernels = nullptr;
      t.expect_error(t.device.load_module(f, "host", &img, sizeof img, mname.c_str()), HAL_INVALID_ARGUMENT,
                     "a host image with a NULL kernel table", {mname});
    } else {
      auto data = junk_module(f);
      auto r = t.device.load_module(f, t.info.arch, data.data(), data.size(), mname.c_str());
      if (r.ok()) {
        t.fail(fmt::format("a corrupt {} module loaded", name));
      } else {
        hal_status st = r.error().status();
        CTS_CHECK(t, st == HAL_INVALID_ARGUMENT || st == HAL_DEVICE_ERROR,
                  "a corrupt {} module: {}, expected HAL_INVALID_ARGUMENT or HAL_DEVICE_ERROR", name,
                  r.error().to_string());
        CTS_CHECK(t, r.error().message().find(mname) != std::string::npos, "the message does not name '{}': {}",
                  mname, r.error().message());
      }
    }
    ++tried;
  }
  if (tried == 0) TestContext::unsupported("the device loads no module format");
}

void module_kernels(TestContext& t) {
  Module m = load_host_module(t);
  Kernel k = t.must(m.kernel("cts_iota"), "kernel cts_iota");
  auto info = t.must(k.info(), "kernel info");
  CTS_CHECK(t, std::string_view(info.name) == "cts_iota", "kernel name '{}'", info.name);
  CTS_CHECK(t, info.arg_count == 3 && info.args_size == 16, "arg_count {} args_size {}, expected 3 and 16",
            info.arg_count, info.args_size);
  auto args = t.must(k.args(), "kernel args");
  for (size_t i = 0; i < args.size() && i < 3; ++i)
    CTS_CHECK(t, args[i].offset == kIotaArgs[i].offset && args[i].size == kIotaArgs[i].size &&
                     args[i].kind == kIotaArgs[i].kind,
              "argument {} is ({}, {}, {})", i, args[i].offset, args[i].size, int(args[i].kind));
  hal_kernel_arg a{};
  t.check_error(Error::adopt(hal_kernel_get_arg(k.get(), 3, &a)), HAL_OUT_OF_RANGE, "argument index 3", {"3"});
  auto missing = m.kernel("cts_no_such_kernel");
  t.expect_error(missing, HAL_NOT_FOUND, "an unknown kernel name", {"cts_no_such_kernel"});
  // The kernel keeps its module alive.
  m.reset();
  info = t.must(k.info(), "kernel info after its module handle was released");
}

// ---- launches -----------------------------------------------------------------------------

// cts_iota over 64 elements of a buffer poisoned with 0x5A, for tests of refused launches.
struct PoisonedIota {
  Module m;
  Kernel k;
  Stream s;
  Buffer out;
  IotaArgs args;
};

PoisonedIota poisoned_iota(TestContext& t) {
  PoisonedIota p;
  p.m = load_host_module(t);
  p.k = t.must(p.m.kernel("cts_iota"), "kernel cts_iota");
  p.s = make_stream(t);
  p.out = allocate(t, 4 * 64);
  p.args = iota_args(p.out, 64, 1);
  t.must(p.s.fill(p.out, 0, p.out.size(), uint8_t(0x5A)), "poison");
  t.must(p.s.synchronize(), "synchronize");
  return p;
}

// None of the refused launches ran: the buffer still holds its poison.
void expect_poison(TestContext& t, const PoisonedIota& p) {
  auto got = read_all(t, p.s, p.out, 0, p.out.size());
  CTS_CHECK(t, std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == 0x5A; }), "a refused launch wrote data");
}

void launch_validation(TestContext& t) {
  PoisonedIota p = poisoned_iota(t);
  auto& [m, k, s, out, args] = p;
  std::vector<uint8_t> big(32, 0);
  t.expect_error(launch_raw(s, k, {1, 1, 1}, {1, 1, 1}, big.data(), 15), HAL_INVALID_ARGUMENT, "15-byte blob", {"16", "15"});
  t.expect_error(launch_raw(s, k, {1, 1, 1}, {1, 1, 1}, big.data(), 17), HAL_INVALID_ARGUMENT, "17-byte blob", {"17"});
  t.expect_error(launch_raw(s, k, {1, 1, 1}, {1, 1, 1}, nullptr, 0), HAL_INVALID_ARGUMENT, "no blob", {"16"});
  t.expect_error(launch_raw(s, k, {1, 1, 1}, {1, 1, 1}, nullptr, 16), HAL_INVALID_ARGUMENT, "NULL args");
  for (int d = 0; d < 3; ++d) {
    std::array<uint32_t, 3> grid{1, 1, 1}, block{1, 1, 1};
    grid[d] = 0;
    t.expect_error(launch_raw(s, k, grid, block, &args, sizeof args), HAL_INVALID_ARGUMENT,
                   fmt::format("grid dimension {} = 0", d));
    grid[d] = 1;
    block[d] = 0;
    t.expect_error(launch_raw(s, k, grid, block, &args, sizeof args), HAL_INVALID_ARGUMENT,
                   fmt::format("block dimension {} = 0", d));
  }
  auto kinfo = t.must(k.info(), "kernel info");
  uint32_t max_threads = kinfo.max_threads_per_block ? kinfo.max_threads_per_block : t.info.max_threads_per_block;
  t.expect_error(launch_raw(s, k, {1, 1, 1}, {max_threads + 1, 1, 1}, &args, sizeof args), HAL_INVALID_ARGUMENT,
                 "one thread too many", {fmt::format("{}", max_threads)});
  t.expect_error(launch_raw(s, k, {1, 1, 1}, {max_threads, 2, 1}, &args, sizeof args), HAL_INVALID_ARGUMENT,
                 "block of 2 x max threads");
  if (t.info.max_shared_per_block > 0)
    t.expect_error(launch_raw(s, k, {1, 1, 1}, {1, 1, 1}, &args, sizeof args, t.info.max_shared_per_block + 1),
                   HAL_INVALID_ARGUMENT, "one byte of shared memory too many",
                   {fmt::format("{}", t.info.max_shared_per_block + 1)});
  expect_poison(t, p);
}

// hal.h's grid is 3 x 32 bits, up to 2^96 blocks; blocks (and kernels their threads) are
// numbered in 64 bits. A launch of 2^64 or more blocks, threads per block or threads in all is
// refused naming its grid or block (hal_stream_launch, before any backend sees it): a wrapped
// count would run a few blocks or none. The shapes whose blocks fit in 64 bits come last: were
// one accepted, it would run for centuries.
void launch_grid_overflow(TestContext& t) {
  PoisonedIota p = poisoned_iota(t);
  auto& [m, k, s, out, args] = p;
  constexpr uint32_t kMax = UINT32_MAX;
  struct Shape {
    std::array<uint32_t, 3> grid, block;
    const char* what;
    bool names_block;  // the block is the bad value, not the grid
  };
  for (const Shape& sh : {
           Shape{{kMax, kMax, kMax}, {1, 1, 1}, "the largest grid (about 2^96 blocks)", false},
           Shape{{kMax, kMax, 2}, {1, 1, 1}, "a grid of about 2^65 blocks", false},
           Shape{{2, kMax, kMax}, {1, 1, 1}, "a grid of about 2^65 blocks (x = 2)", false},
           Shape{{1u << 22, 1u << 21, 1u << 21}, {1, 1, 1}, "a grid of exactly 2^64 blocks", false},
           Shape{{1, 1, 1}, {1u << 31, 1u << 31, 4}, "a block of exactly 2^64 threads (0 if wrapped)", true},
           Shape{{1, 1, 1}, {kMax, kMax, kMax}, "a block of about 2^96 threads", true},
           Shape{{kMax, kMax, 1}, {2, 1, 1}, "2^64 - 2^33 + 1 blocks of 2 threads", false},
           Shape{{1u << 31, 1u << 31, 1}, {4, 1, 1}, "2^62 blocks of 4 threads: exactly 2^64 threads", false},
       }) {
    std::string grid = fmt::format("grid ({},{},{}) block ({},{},{})", sh.grid[0], sh.grid[1], sh.grid[2],
                                   sh.block[0], sh.block[1], sh.block[2]);
    const auto& bad = sh.names_block ? sh.block : sh.grid;
    // Each distinct value once ("" is in every message).
    std::string x = fmt::format("{}", bad[0]), y = bad[1] == bad[0] ? "" : fmt::format("{}", bad[1]),
                z = bad[2] == bad[0] || bad[2] == bad[1] ? "" : fmt::format("{}", bad[2]);
    t.expect_error(launch_raw(s, k, sh.grid, sh.block, &args, sizeof args), HAL_INVALID_ARGUMENT,
                   fmt::format("{}: {}", sh.what, grid), {x, y, z});
  }
  // None of the refused launches ran, and the stream still runs a launch that fits.
  expect_poison(t, p);
  t.must(launch_raw(s, k, {64, 1, 1}, {1, 1, 1}, &args, sizeof args), "launch grid (64,1,1) after the refusals");
  std::vector<uint32_t> v(64);
  t.must(s.read(out, 0, v.data(), out.size()), "read");
  t.must(s.synchronize(), "synchronize");
  for (uint32_t i = 0; i < 64; ++i)
    if (v[i] != i + 1) {
      t.fail(fmt::format("after the refusals: element {} is 0x{:x}, expected {}", i, v[i], i + 1));
      break;
    }
}

void launch_writes(TestContext& t) {
  Module m = load_host_module(t);
  Kernel k = t.must(m.kernel("cts_iota"), "kernel cts_iota");
  Stream s = make_stream(t);
  struct Shape {
    std::array<uint32_t, 3> grid, block;
    uint32_t n;
  };
  const uint32_t max_threads = t.info.max_threads_per_block;
  for (const Shape& sh : {Shape{{1, 1, 1}, {1, 1, 1}, 1}, Shape{{3, 2, 1}, {7, 1, 1}, 40},
                          Shape{{2, 3, 5}, {3, 2, 1}, 179}, Shape{{13, 1, 1}, {max_threads, 1, 1}, 13 * max_threads - 5}}) {
    uint32_t cap = sh.n + 17;
    Buffer out = allocate(t, uint64_t(cap) * 4);
    t.must(s.fill(out, 0, out.size(), uint32_t(0xDEADBEEF)), "poison");
    IotaArgs args = iota_args(out, sh.n, 3);
    t.must(launch_raw(s, k, sh.grid, sh.block, &args, sizeof args),
           fmt::format("launch grid ({},{},{}) block ({},{},{})", sh.grid[0], sh.grid[1], sh.grid[2], sh.block[0],
                       sh.block[1], sh.block[2]));
    std::vector<uint32_t> got(cap);
    t.must(s.read(out, 0, got.data(), out.size()), "read");
    t.must(s.synchronize(), "synchronize");
    for (uint32_t i = 0; i < cap; ++i) {
      uint32_t want = i < sh.n ? i * 3 + 1 : 0xDEADBEEF;
      if (got[i] != want) {
        t.fail(fmt::format("grid ({},{},{}) block ({},{},{}) n {}: element {} is 0x{:x}, expected 0x{:x}", sh.grid[0],
                           sh.grid[1], sh.grid[2], sh.block[0], sh.block[1], sh.block[2], sh.n, i, got[i], want));
        break;
      }
    }
  }
  // A kernel with no arguments takes an empty blob.
  Kernel empty = t.must(m.kernel("cts_empty"), "kernel cts_empty");
  t.must(launch_raw(s, empty, {4, 1, 1}, {1, 1, 1}, nullptr, 0), "launch a kernel without arguments");
  t.must(s.synchronize(), "synchronize");
}

void launch_shared(TestContext& t) {
  Module m = load_host_module(t);
  Kernel k = t.must(m.kernel("cts_shared"), "kernel cts_shared");
  Stream s = make_stream(t);
  const uint32_t blocks = 37;
  Buffer out = allocate(t, blocks * 4);
  for (uint32_t bytes : {4u, 1024u, t.info.max_shared_per_block / 4 * 4}) {
    if (bytes == 0) continue;
    IotaArgs args = iota_args(out, blocks, 0);
    t.must(s.fill(out, 0, out.size(), uint32_t(0)), "clear");
    t.must(launch_raw(s, k, {blocks, 1, 1}, {1, 1, 1}, &args, sizeof args, bytes),
           fmt::format("launch with {} bytes of shared memory", bytes));
    std::vector<uint32_t> got(blocks);
    t.must(s.read(out, 0, got.data(), blocks * 4), "read");
    t.must(s.synchronize(), "synchronize");
    uint32_t words = bytes / 4;
    for (uint32_t b = 0; b < blocks; ++b) {
      uint32_t want = 0;
      for (uint32_t w = 0; w < words; ++w) want += b + w;
      if (got[b] != want) {
        t.fail(fmt::format("{} bytes of shared memory: block {} computed {}, expected {}", bytes, b, got[b], want));
        break;
      }
    }
  }
}

// ---- compute partitions -------------------------------------------------------------------

void partition_split(TestContext& t) {
  if (t.info.compute_units < 2)
    TestContext::unsupported(fmt::format("the device has {} compute unit(s); a split needs 2", t.info.compute_units));
  {
    auto parts = t.must(t.device.split(1), "split off 1 unit");
    auto a = t.must(parts.first.info(), "partition info");
    auto b = t.must(parts.second.info(), "remainder info");
    CTS_CHECK(t, a.units_granted >= 1, "1 unit asked, {} granted", a.units_granted);
    CTS_CHECK(t, a.granularity >= 1, "granularity {}", a.granularity);
    CTS_CHECK(t, a.units_granted % a.granularity == 0, "{} units granted in steps of {}", a.units_granted,
              a.granularity);
    CTS_CHECK(t, a.units_granted + b.units_granted <= t.info.compute_units,
              "{} + {} units granted on a device of {}", a.units_granted, b.units_granted, t.info.compute_units);
    if (a.first_unit != UINT32_MAX && b.first_unit != UINT32_MAX)
      CTS_CHECK(t, a.first_unit != b.first_unit, "both partitions start at unit {}", a.first_unit);
    if (t.device.has("partition.enforced"))
      CTS_CHECK(t, a.enforced == 1 && b.enforced == 1,
                "the device advertises partition.enforced, but enforced is {} and {}", a.enforced, b.enforced);
    t.note(fmt::format("1 unit -> {} granted (+{} remaining), mechanism {}, enforced {}", a.units_granted,
                       b.units_granted, int(a.mechanism), a.enforced));
    // Work queued on each partition's streams runs and is correct.
    for (const Partition* p : {&parts.first, &parts.second}) {
      Stream s = t.must(t.device.create_stream(p), "stream on a partition");
      const uint64_t n = 4099;
      Buffer buf = allocate(t, n);
      auto data = random_bytes(t, n);
      t.must(s.write(buf, 0, data.data(), n), "write on a partition stream");
      auto got = read_all(t, s, buf, 0, n);
      expect_bytes(t, got, data.data(), "round trip on a partition stream");
      if (loads(t, "host")) {
        Module m = load_host_module(t);
        Kernel k = t.must(m.kernel("cts_iota"), "kernel cts_iota");
        Buffer out = allocate(t, 4 * 100);
        IotaArgs args = iota_args(out, 100, 2);
        t.must(launch_raw(s, k, {10, 1, 1}, {10, 1, 1}, &args, sizeof args), "launch on a partition stream");
        std::vector<uint32_t> v(100);
        t.must(s.read(out, 0, v.data(), 400), "read");
        t.must(s.synchronize(), "synchronize");
        for (uint32_t i = 0; i < 100; ++i)
          if (v[i] != i * 2 + 1) {
            t.fail(fmt::format("kernel on a partition: element {} is {}", i, v[i]));
            break;
          }
      }
    }
    auto over = t.device.split(t.info.compute_units);
    CTS_CHECK(t, !over.ok(), "a second split of all {} units succeeded while partitions are live",
              t.info.compute_units);
  }
  // Releasing the partitions returns their units.
  auto again = t.must(t.device.split(1), "split again after the partitions were released");
  hal_partition_desc d{};
  d.struct_size = sizeof d;
  d.units = t.info.compute_units + 1;
  hal_partition p = nullptr;
  Status s = check(hal_device_split(t.device.get(), &d, &p, nullptr));
  if (p) hal_error_free(hal_partition_release(p));
  CTS_CHECK(t, !s.ok(), "asking for {} of {} units succeeded", d.units, t.info.compute_units);
}

// What a split can grant is stated before splitting, and agrees with what a split grants.
void partition_caps(TestContext& t) {
  for (uint32_t flags : {0u, uint32_t(HAL_PARTITION_FINE_GRAINED)}) {
    auto c = t.must(t.device.partition_caps(flags), "partition caps");
    CTS_CHECK(t, c.units == t.info.compute_units, "caps say {} units, the device {}", c.units, t.info.compute_units);
    CTS_CHECK(t, c.units_free == c.units, "{} of {} units free with no partition live", c.units_free, c.units);
    CTS_CHECK(t, c.min_units >= 1 && c.step_units >= 1, "min {} step {}", c.min_units, c.step_units);
    CTS_CHECK(t, c.mechanism_name[0] != '\0', "no mechanism name");
    if (t.device.has("partition.enforced"))
      CTS_CHECK(t, c.enforced == 1, "the device advertises partition.enforced, caps say enforced {}", c.enforced);
    if (flags == 0)
      t.note(fmt::format("{} units, partitions of {} + k*{}, mechanism {} ({}), enforced {}", c.units, c.min_units,
                         c.step_units, c.mechanism_name, int(c.mechanism), c.enforced));
  }
}

// Two named partitions in one call ("comm" = the smallest, "compute" = the rest): disjoint,
// reserved (a third split cannot take their units), reported by their streams, released.
void partition_split_n(TestContext& t) {
  auto c = t.must(t.device.partition_caps(), "partition caps");
  if (c.units < 2 * c.min_units)
    TestContext::unsupported(fmt::format("{} units cannot hold two partitions of at least {}", c.units, c.min_units));
  {
    auto parts = t.must(t.device.split_n({{"comm", c.min_units}, {"compute", 0}}), "split_n comm + compute");
    CTS_CHECK(t, parts.size() == 2, "{} partitions for 2 requests", parts.size());
    if (parts.size() != 2) return;
    auto comm = t.must(parts[0].info(), "comm info");
    auto compute = t.must(parts[1].info(), "compute info");
    CTS_CHECK(t, std::string_view(comm.name) == "comm" && std::string_view(compute.name) == "compute",
              "names '{}' and '{}'", comm.name, compute.name);
    CTS_CHECK(t, comm.units_granted >= c.min_units, "comm: {} asked, {} granted", c.min_units, comm.units_granted);
    CTS_CHECK(t, comm.units_granted + compute.units_granted == c.units, "{} + {} units of {}", comm.units_granted,
              compute.units_granted, c.units);
    CTS_CHECK(t, comm.mechanism == c.mechanism && comm.enforced == c.enforced,
              "granted mechanism {} enforced {}, caps said {} {}", int(comm.mechanism), comm.enforced,
              int(c.mechanism), c.enforced);
    auto now = t.must(t.device.partition_caps(), "caps with partitions live");
    CTS_CHECK(t, now.units_free == 0, "{} units free while comm and compute hold all", now.units_free);
    CTS_CHECK(t, !t.device.split(1).ok(), "a split succeeded while every unit is in a partition");
    for (size_t i = 0; i < parts.size(); ++i) {
      Stream s = t.must(t.device.create_stream(&parts[i]), "stream on a partition");
      auto si = t.must(s.info(), "stream info");
      const uint32_t want = i == 0 ? comm.units_granted : compute.units_granted;
      CTS_CHECK(t, si.partition == parts[i].get() && si.units == want, "stream info: partition {}, {} units (want {})",
                static_cast<void*>(si.partition), si.units, want);
      t.must(s.synchronize(), "synchronize");
    }
    Stream whole = t.must(t.device.create_stream(), "stream on the whole device");
    auto wi = t.must(whole.info(), "stream info");
    CTS_CHECK(t, !wi.partition && wi.units == c.units && wi.mechanism == HAL_PARTITION_WHOLE_DEVICE,
              "whole-device stream info: partition {}, {} units, mechanism {}", static_cast<void*>(wi.partition),
              wi.units, int(wi.mechanism));
  }
  auto after = t.must(t.device.partition_caps(), "caps after release");
  CTS_CHECK(t, after.units_free == c.units, "{} of {} units free after the partitions were released",
            after.units_free, c.units);
  // Bad requests: two rests, a name too long, more than the device.
  hal_partition_request a{sizeof a, nullptr, "a", 0, 0}, b{sizeof b, nullptr, "b", 0, 0};
  const hal_partition_request* two_rests[] = {&a, &b};
  hal_partition out[2] = {};
  CTS_CHECK(t, !check(hal_device_split_n(t.device.get(), two_rests, 2, out)).ok(), "two rest requests accepted");
  hal_partition_request big{sizeof big, nullptr, "big", c.units + 1, 0};
  const hal_partition_request* too_big[] = {&big};
  CTS_CHECK(t, !check(hal_device_split_n(t.device.get(), too_big, 1, out)).ok(), "{} units of {} granted",
            big.units, c.units);
  CTS_CHECK(t, out[0] == nullptr && out[1] == nullptr, "a failed split_n left partitions behind");
}

}  // namespace

std::vector<TestCase> api_tests() {
  return {
      {"api.device.info", {}, device_info},
      {"api.device.open_errors", {}, device_open_errors},
      {"api.handles.invalid", {}, handles_invalid},
      {"api.alloc.sizes", {}, alloc_sizes},
      {"api.alloc.alignment", {}, alloc_alignment},
      {"api.alloc.invalid", {}, alloc_invalid},
      {"api.copy.roundtrip", {}, copy_roundtrip},
      {"api.copy.device_to_device", {}, copy_device_to_device},
      {"api.copy.out_of_range", {}, copy_out_of_range},
      {"api.buffer.import", {}, buffer_import},
      {"api.copy.largest", {}, copy_largest},
      {"api.fill.patterns", {}, fill_patterns},
      {"api.stream.order", {}, stream_order},
      {"api.stream.many", {}, stream_many},
      {"api.stream.import", {}, stream_import},
      {"api.event.query", {}, event_query},
      {"api.event.cross_stream", {}, event_cross_stream},
      {"api.event.cross_stream_kernel", {"module.host"}, event_cross_stream_kernel},
      {"api.event.timing", {"events.timing"}, event_timing},
      {"api.module.wrong_format", {}, module_wrong_format},
      {"api.module.wrong_arch", {"module.*"}, module_wrong_arch},
      {"api.module.corrupt", {"module.*"}, module_corrupt},
      {"api.module.kernels", {"module.host"}, module_kernels},
      {"api.launch.validation", {"module.host"}, launch_validation},
      {"api.launch.grid_overflow", {"module.host"}, launch_grid_overflow},
      {"api.launch.writes", {"module.host"}, launch_writes},
      {"api.launch.shared_memory", {"module.host"}, launch_shared},
      {"api.partition.split", {"partition.*"}, partition_split},
      {"api.partition.caps", {}, partition_caps},
      {"api.partition.split_n", {}, partition_split_n},
  };
}

}  // namespace halcyon::cts
