// Device properties, memory kinds and transfers on the GPU.
#include "gpu_support.hpp"

#include "cuda_driver.hpp"

#include <fmt/format.h>

#include <cstring>

using test::expect_error;
using test::unwrap;

TEST_CASE("cuda: device info describes the GPU") {
  auto dev = gpu::open();
  auto i = unwrap(dev.info());
  MESSAGE(i.name << " " << i.arch << " SMs " << i.compute_units << " memory " << i.memory_bytes << " L2 "
                 << i.l2_cache_bytes << " smem/block " << i.max_shared_per_block << " caps: " << i.capabilities);
  std::string why;
  const halcyon::cuda::Driver* d = halcyon::cuda::load_driver(&why);
  REQUIRE(d);
  MESSAGE("driver CUDA " << halcyon::cuda::version_string(d->version) << "; optional symbols missing: "
                         << (d->missing_optional.empty() ? "none" : d->missing_optional));
  CHECK(std::string(i.vendor) == "NVIDIA");
  CHECK(std::string(i.arch).starts_with("sm_"));
  CHECK(i.compute_units > 0);
  CHECK(i.simd_width == 32);
  CHECK(i.memory_bytes > (1ull << 30));
  CHECK(i.max_shared_per_block >= 48 * 1024);
  CHECK(i.max_threads_per_block >= 1024);
  CHECK(i.l2_cache_bytes > 0);
  // Peak bandwidth from clock and bus width: between 100 GB/s and 100 TB/s for any NVIDIA GPU.
  CHECK(i.memory_bytes_per_s > 100'000'000'000ull);
  CHECK(i.memory_bytes_per_s < 100'000'000'000'000ull);
  CHECK(dev.has("module.ptx"));
  CHECK(dev.has("module.cubin"));
  CHECK_FALSE(dev.has("module.host"));
}

TEST_CASE("cuda: 256 MiB of random data survives write, device copy and read") {
  auto dev = gpu::open();
  auto s = unwrap(dev.create_stream());
  const size_t n = 64u << 20;  // floats
  auto data = gpu::random_floats(n, 11);
  auto a = unwrap(dev.allocate(n * 4));
  auto b = unwrap(dev.allocate(n * 4));
  unwrap(s.fill<uint32_t>(b, 0, n * 4, 0xFFFFFFFFu));  // poison
  unwrap(s.write(a, 0, data.data(), n * 4));
  unwrap(s.copy(b, 0, a, 0, n * 4));
  std::vector<float> back(n);
  unwrap(s.read(b, 0, back.data(), n * 4));
  unwrap(s.synchronize());
  CHECK(std::memcmp(back.data(), data.data(), n * 4) == 0);
}

TEST_CASE("cuda: pinned host memory is host-visible and usable by kernels") {
  auto dev = gpu::open();
  auto s = unwrap(dev.create_stream());
  const uint32_t n = 100003;  // a prime: the last block is partial
  auto pa = unwrap(dev.allocate(n * 4, HAL_MEMORY_HOST_PINNED));
  auto pb = unwrap(dev.allocate(n * 4, HAL_MEMORY_HOST_PINNED));
  auto out = unwrap(dev.allocate(n * 4));
  REQUIRE(pa.host_pointer() != nullptr);
  auto x = gpu::random_floats(n, 1), y = gpu::random_floats(n, 2);
  std::memcpy(pa.host_pointer(), x.data(), n * 4);
  std::memcpy(pb.host_pointer(), y.data(), n * 4);
  unwrap(s.fill<uint32_t>(out, 0, n * 4, 0x7FC00001u));  // NaN poison
  auto mod = gpu::load(dev, "vector_add");
  auto k = unwrap(mod.kernel("vector_add"));
  halcyon::ArgPack args;
  args.pointer(pa).pointer(pb).pointer(out).value(n);
  unwrap(s.launch(k, {(n + 255) / 256}, {256}, args));
  std::vector<float> got(n);
  unwrap(s.read(out, 0, got.data(), n * 4));
  unwrap(s.synchronize());
  size_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) bad += got[i] != x[i] + y[i];
  CHECK(bad == 0);
}

TEST_CASE("cuda: buffers are reused from the stream-ordered pool and stay correct") {
  auto dev = gpu::open();
  MESSAGE("memory.stream_ordered: " << dev.has("memory.stream_ordered"));
  auto s = unwrap(dev.create_stream());
  for (uint32_t round = 0; round < 50; ++round) {
    auto b = unwrap(dev.allocate((1u << 20) + round * 4096));
    CHECK(b.address() % 256 == 0);
    unwrap(s.fill<uint32_t>(b, 0, 1u << 20, round));
    uint32_t v = 0;
    unwrap(s.read(b, (1u << 20) - 4, &v, 4));
    unwrap(s.synchronize());
    CHECK(v == round);
  }
}

TEST_CASE("cuda: an allocation larger than the device is refused as out of memory") {
  auto dev = gpu::open();
  auto i = unwrap(dev.info());
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.size = i.memory_bytes - (64ull << 20);  // passes the core's size check, fails in the driver
  hal_buffer b = nullptr;
  auto big1 = dev.allocate(bd.size);
  if (big1.ok()) {  // the whole card was free: a second one cannot fit
    expect_error(hal_buffer_create(dev.get(), &bd, &b), HAL_OUT_OF_MEMORY, "allocating");
  } else {
    CHECK(big1.error().status() == HAL_OUT_OF_MEMORY);
  }
}

// hal.h: a buffer released while queued work still uses it is not freed under that work. With
// a memory pool the release neither waits for the device nor lets the pool hand the memory out
// before that work is done (cuda_buffer.cpp).
TEST_CASE("cuda: a buffer released under queued work is freed after it, without waiting for it") {
  auto dev = gpu::open();
  if (!dev.has("memory.stream_ordered")) {
    MESSAGE("no memory pool on this driver: releases wait for the device's streams instead");
    return;
  }
  auto s1 = unwrap(dev.create_stream()), s2 = unwrap(dev.create_stream());
  const uint64_t n = 256ull << 20;
  auto done = unwrap(dev.create_event(false));
  {
    auto a = unwrap(dev.allocate(n));
    for (uint32_t i = 0; i < 100; ++i) unwrap(s1.fill<uint32_t>(a, 0, n, 0xA0A0A000u + i));  // 25 GiB: ~10 ms
    unwrap(s1.record(done));
  }  // released here, with the fills still queued
  CHECK_FALSE(unwrap(done.query()));  // the release returned before s1's work was done
  // A buffer of the same size, written on another stream while s1 may still be filling: the
  // pool must not have handed out a's memory yet.
  auto b = unwrap(dev.allocate(n));
  unwrap(s2.fill<uint32_t>(b, 0, n, 0x5A5A5A5Au));
  unwrap(s1.synchronize());
  unwrap(s2.synchronize());
  std::vector<uint32_t> back(n / 4);
  unwrap(s2.read(b, 0, back.data(), n));
  unwrap(s2.synchronize());
  size_t bad = 0;
  for (uint32_t v : back) bad += v != 0x5A5A5A5Au;
  CHECK(bad == 0);
}

namespace {

// 1 MiB from cuMemAlloc in cuda:0's primary context, as PyTorch's allocator gets memory:
// memory the backend does not own, of a known extent.
struct DriverAllocation {
  const halcyon::cuda::Driver* d = nullptr;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUdeviceptr base = 0;
  uint64_t bytes = 1u << 20;

  DriverAllocation() {
    std::string why;
    d = halcyon::cuda::load_driver(&why);
    REQUIRE_MESSAGE(d, why);
    REQUIRE(d->cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
    REQUIRE(d->cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
    REQUIRE(d->cuCtxPushCurrent(ctx) == CUDA_SUCCESS);
    CUresult r = d->cuMemAlloc(&base, bytes);
    CUcontext popped = nullptr;
    d->cuCtxPopCurrent(&popped);
    REQUIRE(r == CUDA_SUCCESS);
  }
  ~DriverAllocation() {
    if (d->cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
      d->cuMemFree(base);
      CUcontext popped = nullptr;
      d->cuCtxPopCurrent(&popped);
    }
    d->cuDevicePrimaryCtxRelease(dev);
  }
};

hal_error* import_range(const halcyon::Device& dev, uint64_t address, uint64_t size, hal_buffer* out) {
  hal_buffer_import_desc id{};
  id.struct_size = HAL_BUFFER_IMPORT_DESC_SIZE;
  id.kind = HAL_MEMORY_DEVICE;
  id.device_address = address;
  id.size = size;
  return hal_buffer_import(dev.get(), &id, out);
}

}  // namespace

// The core's range checks trust an imported buffer's size: a range that runs past the memory's
// allocation is refused, so no write through the buffer can land outside it.
TEST_CASE("cuda: an import is refused where its range runs past the allocation") {
  auto dev = gpu::open();
  DriverAllocation mem;
  // The extent the driver gives the allocation (cuMemAlloc may round the 1 MiB up): its end is
  // where imports must stop.
  CUdeviceptr start = 0;
  size_t extent = 0;
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[2] = {&start, &extent};
  REQUIRE_MESSAGE(bool(mem.d->cuPointerGetAttributes), "the driver lacks cuPointerGetAttributes");
  REQUIRE(mem.d->cuPointerGetAttributes(2, attrs, data, mem.base) == CUDA_SUCCESS);
  MESSAGE("cuMemAlloc of " << mem.bytes << " bytes: the driver's range is " << extent << " bytes");
  REQUIRE(start == mem.base);
  REQUIRE(extent >= mem.bytes);
  REQUIRE(extent < (1ull << 30));
  auto s = unwrap(dev.create_stream());
  hal_buffer b = nullptr;
  // Inside the allocation: accepted, and usable in place.
  test::expect_ok(import_range(dev, mem.base + 4096, 64 << 10, &b));
  {
    halcyon::Buffer inside(b);
    CHECK(inside.size() == (64u << 10));
    unwrap(s.fill<uint32_t>(inside, 0, 64 << 10, 0x0BADF00Du));
    unwrap(s.synchronize());
  }
  test::expect_ok(import_range(dev, mem.base, extent, &b));  // the whole range, to its last byte
  halcyon::Buffer whole(b);
  // Past it: 1 GiB at the start, and 512 bytes straddling the end.
  expect_error(import_range(dev, mem.base, 1ull << 30, &b), HAL_INVALID_ARGUMENT, "runs past its allocation");
  expect_error(import_range(dev, mem.base + extent - 256, 512, &b), HAL_INVALID_ARGUMENT,
               fmt::format("[0x{:x}, +{})", mem.base, extent));
}
