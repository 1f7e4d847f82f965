// Buffers, transfers and fills, with every range checked before anything is queued.
#include "test_support.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using test::expect_error;
using test::expect_ok;
using test::unwrap;

namespace {
struct Fixture {
  halcyon::Device dev = unwrap(halcyon::Device::open(test::device_uri()));
  halcyon::Stream stream = unwrap(dev.create_stream());
};

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}
}  // namespace

TEST_CASE_FIXTURE(Fixture, "memory: write/read round trip at odd sizes and unaligned offsets") {
  for (uint64_t size : {1ull, 3ull, 255ull, 4097ull, (1ull << 20) + 13}) {
    auto buf = unwrap(dev.allocate(size + 7));
    auto data = random_bytes(size, uint32_t(size));
    std::vector<unsigned char> back(size, 0);
    unwrap(stream.write(buf, 7, data.data(), size));
    unwrap(stream.read(buf, 7, back.data(), size));
    unwrap(stream.synchronize());
    CHECK_MESSAGE(back == data, "size ", size);
  }
}

TEST_CASE_FIXTURE(Fixture, "memory: zero-sized buffers and transfers") {
  auto empty = unwrap(dev.allocate(0));
  CHECK(empty.size() == 0);
  unwrap(stream.write(empty, 0, nullptr, 0));
  expect_error(hal_stream_write(stream.get(), empty.get(), 1, nullptr, 0), HAL_OUT_OF_RANGE);
}

TEST_CASE_FIXTURE(Fixture, "memory: device to device copy and pinned host buffers") {
  const uint64_t n = 10007;
  auto a = unwrap(dev.allocate(n));
  auto b = unwrap(dev.allocate(n + 5));
  auto pinned = unwrap(dev.allocate(n, HAL_MEMORY_HOST_PINNED));
  REQUIRE(pinned.host_pointer() != nullptr);
  auto data = random_bytes(n, 7);
  unwrap(stream.write(a, 0, data.data(), n));
  unwrap(stream.copy(b, 5, a, 0, n));
  unwrap(stream.copy(pinned, 0, b, 5, n));
  unwrap(stream.synchronize());
  CHECK(std::memcmp(pinned.host_pointer(), data.data(), n) == 0);
  auto info = unwrap(pinned.info());
  CHECK(info.kind == HAL_MEMORY_HOST_PINNED);
}

TEST_CASE_FIXTURE(Fixture, "memory: fills with 1, 2 and 4 byte patterns") {
  auto buf = unwrap(dev.allocate(64));
  unwrap(stream.fill<uint8_t>(buf, 0, 64, 0x11));
  unwrap(stream.fill<uint16_t>(buf, 2, 6, 0xBEEF));
  unwrap(stream.fill<uint32_t>(buf, 16, 8, 0x01234567u));
  std::vector<unsigned char> back(64);
  unwrap(stream.read(buf, 0, back.data(), 64));
  unwrap(stream.synchronize());
  CHECK(back[0] == 0x11);
  CHECK(back[1] == 0x11);
  uint16_t h;
  std::memcpy(&h, &back[6], 2);
  CHECK(h == 0xBEEF);
  CHECK(back[8] == 0x11);
  uint32_t w;
  std::memcpy(&w, &back[20], 4);
  CHECK(w == 0x01234567u);
  CHECK(back[24] == 0x11);
  CHECK(back[63] == 0x11);
}

TEST_CASE_FIXTURE(Fixture, "memory: out-of-range and malformed transfers are refused") {
  auto buf = unwrap(dev.allocate(100));
  auto other = unwrap(dev.allocate(10));
  std::vector<unsigned char> host(200);
  expect_error(hal_stream_write(stream.get(), buf.get(), 96, host.data(), 5), HAL_OUT_OF_RANGE, "[96, 96+5)");
  expect_error(hal_stream_write(stream.get(), buf.get(), 101, host.data(), 0), HAL_OUT_OF_RANGE);
  expect_error(hal_stream_read(stream.get(), buf.get(), 0, host.data(), 101), HAL_OUT_OF_RANGE, "100-byte buffer");
  // offset + size overflowing 64 bits must not wrap around into range
  expect_error(hal_stream_read(stream.get(), buf.get(), 50, host.data(), UINT64_MAX - 10), HAL_OUT_OF_RANGE);
  expect_error(hal_stream_copy(stream.get(), other.get(), 0, buf.get(), 0, 11), HAL_OUT_OF_RANGE, "dst");
  expect_error(hal_stream_copy(stream.get(), buf.get(), 0, other.get(), 5, 6), HAL_OUT_OF_RANGE, "src");
  expect_error(hal_stream_copy(stream.get(), buf.get(), 10, buf.get(), 0, 20), HAL_INVALID_ARGUMENT, "overlap");
  expect_error(hal_stream_write(stream.get(), buf.get(), 0, nullptr, 4), HAL_INVALID_ARGUMENT, "src is NULL");
  uint32_t p = 0;
  expect_error(hal_stream_fill(stream.get(), buf.get(), 0, 8, &p, 3), HAL_INVALID_ARGUMENT, "pattern_size 3");
  expect_error(hal_stream_fill(stream.get(), buf.get(), 2, 8, &p, 4), HAL_INVALID_ARGUMENT, "multiples");
  expect_error(hal_stream_fill(stream.get(), buf.get(), 0, 104, &p, 4), HAL_OUT_OF_RANGE);
  expect_error(hal_stream_fill(stream.get(), buf.get(), 0, 8, nullptr, 4), HAL_INVALID_ARGUMENT, "pattern is NULL");
  unwrap(stream.synchronize());
}

TEST_CASE_FIXTURE(Fixture, "memory: bad buffer descriptions are refused") {
  hal_buffer b = nullptr;
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.kind = 7;
  bd.size = 8;
  expect_error(hal_buffer_create(dev.get(), &bd, &b), HAL_INVALID_ARGUMENT, "memory kind 7");
  bd.kind = HAL_MEMORY_DEVICE;
  bd.alignment = 48;
  expect_error(hal_buffer_create(dev.get(), &bd, &b), HAL_INVALID_ARGUMENT, "power of two");
  bd.alignment = 0;
  bd.flags = 1;
  expect_error(hal_buffer_create(dev.get(), &bd, &b), HAL_INVALID_ARGUMENT, "reserved");
  bd.flags = 0;
  bd.size = UINT64_MAX / 2;
  expect_error(hal_buffer_create(dev.get(), &bd, &b), HAL_OUT_OF_MEMORY);
  CHECK(b == nullptr);
  expect_error(hal_buffer_create(dev.get(), &bd, nullptr), HAL_INVALID_ARGUMENT, "out is NULL");
}

// A size that wraps when a backend rounds it up to its alignment used to pass every check for
// pinned memory (only device memory was compared with the device's): the backend allocated a
// few bytes and the core reported, and range-checked against, the full size.
TEST_CASE_FIXTURE(Fixture, "memory: sizes no memory can hold are refused for both kinds") {
  for (uint32_t kind : {uint32_t(HAL_MEMORY_HOST_PINNED), uint32_t(HAL_MEMORY_DEVICE)}) {
    for (uint64_t alignment : {0ull, 64ull, 4096ull}) {
      CAPTURE(kind);
      CAPTURE(alignment);
      hal_buffer b = nullptr;
      hal_buffer_desc bd{};
      bd.struct_size = sizeof bd;
      bd.kind = kind;
      bd.alignment = alignment;
      bd.size = UINT64_MAX - 31;  // rounds up to 0
      expect_error(hal_buffer_create(dev.get(), &bd, &b), HAL_OUT_OF_RANGE, std::to_string(bd.size));
      CHECK(b == nullptr);
      bd.size = UINT64_MAX / 2;  // no host or device has that much
      expect_error(hal_buffer_create(dev.get(), &bd, &b), HAL_OUT_OF_MEMORY, std::to_string(bd.size));
      CHECK(b == nullptr);
    }
  }
}

// hal_buffer_import (ABI 1.4): someone else's memory as a buffer, no copy; `release` once the
// last reference is gone, never on a refusal.
TEST_CASE_FIXTURE(Fixture, "memory: imported memory is used in place and released once") {
  // Memory of this device that someone else owns: here a buffer the test allocated (host memory
  // on the CPU backend, device memory on a GPU), so the same test runs on every backend.
  struct Owner {
    int released = 0;
  } owner;
  auto src = unwrap(dev.allocate(256));
  unwrap(stream.fill<uint32_t>(src, 0, 256, 0x07070707u));
  unwrap(stream.synchronize());
  hal_buffer_import_desc id{};
  id.struct_size = HAL_BUFFER_IMPORT_DESC_SIZE;
  id.kind = HAL_MEMORY_DEVICE;
  id.device_address = src.address();
  id.size = 256;
  id.release = [](void* user) { ++static_cast<Owner*>(user)->released; };
  id.release_user = &owner;
  hal_buffer b = nullptr;
  expect_ok(hal_buffer_import(dev.get(), &id, &b));
  REQUIRE(b != nullptr);
  halcyon::Buffer buf(b);
  CHECK(buf.address() == id.device_address);
  CHECK(buf.size() == 256);
  unwrap(stream.fill(buf, 16, 32, uint32_t(0x01020304)));
  std::vector<unsigned char> back(256);
  unwrap(stream.read(src, 0, back.data(), 256));
  unwrap(stream.synchronize());
  CHECK(back[16] == 0x04);  // written in place: seen through the owner's buffer
  CHECK(back[15] == 7);
  CHECK(back[48] == 7);
  CHECK(owner.released == 0);
  buf.reset();
  CHECK(owner.released == 1);
  // HAL_BUFFER_IMPORT_OWNER_ORDERED (ABI 1.5): the owner orders reuse after the work itself, so
  // the release may call `release` without waiting (CUDA does; a backend may still wait).
  id.flags = HAL_BUFFER_IMPORT_OWNER_ORDERED;
  expect_ok(hal_buffer_import(dev.get(), &id, &b));
  halcyon::Buffer ordered(b);
  unwrap(stream.fill(ordered, 0, 4, uint32_t(0x05050505)));
  unwrap(stream.synchronize());
  ordered.reset();
  CHECK(owner.released == 2);
  id.flags = 0;

  id.kind = HAL_MEMORY_HOST_PINNED;
  expect_error(hal_buffer_import(dev.get(), &id, &b), HAL_INVALID_ARGUMENT, "HAL_MEMORY_DEVICE only");
  id.kind = HAL_MEMORY_DEVICE;
  id.flags = 2;
  expect_error(hal_buffer_import(dev.get(), &id, &b), HAL_INVALID_ARGUMENT, "reserved");
  id.flags = 0;
  id.device_address = 0;
  expect_error(hal_buffer_import(dev.get(), &id, &b), HAL_INVALID_ARGUMENT, "address 0 for 256 bytes");
  id.device_address = UINT64_MAX - 8;
  expect_error(hal_buffer_import(dev.get(), &id, &b), HAL_OUT_OF_RANGE, "wraps around");
  if (std::string(test::device_uri()).rfind("cuda:", 0) == 0) {
    // An address the driver does not know (a host stack address) is refused by name, also
    // through the one-query path (cuPointerGetAttributes answers it with type 0, no error).
    int on_stack = 0;
    id.device_address = reinterpret_cast<uint64_t>(&on_stack);
    expect_error(hal_buffer_import(dev.get(), &id, &b), HAL_INVALID_ARGUMENT, "not memory the CUDA driver knows");
    // Device memory that is not this device's own is refused too; pinned host memory is not
    // device memory.
    auto pinned = unwrap(dev.allocate(256, HAL_MEMORY_HOST_PINNED));
    id.device_address = pinned.address();
    expect_error(hal_buffer_import(dev.get(), &id, &b), HAL_INVALID_ARGUMENT, "it is not device memory");
  }
  id.struct_size = 8;
  expect_error(hal_buffer_import(dev.get(), &id, &b), HAL_VERSION_MISMATCH);
  expect_error(hal_buffer_import(dev.get(), nullptr, &b), HAL_INVALID_ARGUMENT);
  CHECK(owner.released == 2);  // no refusal called it
}

TEST_CASE_FIXTURE(Fixture, "memory: aligned allocations honour the alignment") {
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.size = 100;
  bd.alignment = 4096;
  hal_buffer b = nullptr;
  expect_ok(hal_buffer_create(dev.get(), &bd, &b));
  halcyon::Buffer buf(b);
  CHECK(buf.address() % 4096 == 0);
}

// Issue 22: `halcyon demo` freed a host vector that an asynchronous write had not read yet.
// Stream::write is done with its source when it returns; write_async is the raw, queued form.
TEST_CASE("memory: Stream::write is done with the host memory when it returns") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto stream = unwrap(dev.create_stream());
  const uint64_t busy = 64 << 20;
  auto big = unwrap(dev.allocate(busy));
  auto buf = unwrap(dev.allocate(4096));
  std::vector<uint32_t> host(1024, 0x11111111u), back(1024, 0);
  unwrap(stream.fill<uint32_t>(big, 0, busy, 7u));  // the write queues behind this
  unwrap(stream.write(buf, 0, host.data(), 4096));
  std::fill(host.begin(), host.end(), 0x22222222u);  // after write returned: must not matter
  unwrap(stream.read(buf, 0, back.data(), 4096));
  CHECK(back[0] == 0x11111111u);
  CHECK(back[1023] == 0x11111111u);
  // The async form with memory kept alive until the synchronize.
  unwrap(stream.write_async(buf, 0, host.data(), 4096));
  unwrap(stream.read_async(buf, 0, back.data(), 4096));
  unwrap(stream.synchronize());
  CHECK(back[0] == 0x22222222u);
}
