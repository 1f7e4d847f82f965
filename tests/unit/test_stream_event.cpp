// Streams execute in order; events order work across streams and time it.
#include "test_support.hpp"

#include <string>
#include <thread>
#include <vector>

using test::expect_error;
using test::expect_ok;
using test::unwrap;

TEST_CASE("streams: operations on one stream run in order") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto s = unwrap(dev.create_stream());
  auto buf = unwrap(dev.allocate(4 * 1000));
  std::vector<uint32_t> out(1000);
  for (uint32_t round = 0; round < 20; ++round) unwrap(s.fill<uint32_t>(buf, 0, 4000, round));
  unwrap(s.read(buf, 0, out.data(), 4000));
  unwrap(s.synchronize());
  for (uint32_t v : out) CHECK(v == 19u);
}

// hal_stream_import (ABI 1.5): a stream the caller owns as a hal stream. Arguments are checked
// before the backend is asked; the CUDA backend imports (here the primary context's legacy
// default stream, 0, which is PyTorch's default stream, and the per-thread one, 2), every
// other backend refuses with HAL_UNSUPPORTED and the reason.
TEST_CASE("streams: a native stream is imported where the backend can, refused with the reason elsewhere") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  hal_stream_import_desc id{};
  id.struct_size = HAL_STREAM_IMPORT_DESC_SIZE;
  hal_stream s = nullptr;
  expect_error(hal_stream_import(dev.get(), nullptr, &s), HAL_INVALID_ARGUMENT, "hal_stream_import_desc pointer is NULL");
  expect_error(hal_stream_import(dev.get(), &id, nullptr), HAL_INVALID_ARGUMENT, "out is NULL");
  expect_error(hal_stream_import(nullptr, &id, &s), HAL_INVALID_HANDLE);
  id.flags = 1;
  expect_error(hal_stream_import(dev.get(), &id, &s), HAL_INVALID_ARGUMENT, "flags 0x1 and reserved0 0x0 are reserved");
  id.flags = 0;
  id.struct_size = 8;
  expect_error(hal_stream_import(dev.get(), &id, &s), HAL_VERSION_MISMATCH);
  id.struct_size = HAL_STREAM_IMPORT_DESC_SIZE;
  CHECK(s == nullptr);
  const std::string uri = test::device_uri();
  if (uri.rfind("cuda:", 0) != 0) {
    expect_error(hal_stream_import(dev.get(), &id, &s), HAL_UNSUPPORTED, "cannot import a native stream");
    CHECK(s == nullptr);
    // Nor does a stream of it have a native handle (ABI 1.11), and a 1.10-sized info is still filled.
    auto created = unwrap(dev.create_stream());
    CHECK(unwrap(created.info()).has_native == 0);
    hal_stream_info old{};
    old.struct_size = HAL_SIZE_THROUGH(hal_stream_info, device_uri);
    old.reserved1 = 0xabc;  // past the caller's size: never written
    REQUIRE(hal_stream_get_info(created.get(), &old) == nullptr);
    CHECK(old.reserved1 == 0xabcu);
    CHECK(std::string(old.device_uri) == uri);
    return;
  }
  auto buf = unwrap(dev.allocate(4 * 1000));
  std::vector<uint32_t> out(1000);
  for (uint64_t native : {uint64_t(0), uint64_t(2)}) {
    auto imported = unwrap(dev.import_stream(native));
    auto info = unwrap(imported.info());
    CHECK(info.has_native == 1);  // the CUstream as imported (ABI 1.11)
    CHECK(info.native == native);
    CHECK(info.partition == nullptr);
    CHECK(info.units == unwrap(dev.info()).compute_units);
    for (uint32_t round = 0; round < 20; ++round) unwrap(imported.fill<uint32_t>(buf, 0, 4000, round + uint32_t(native)));
    unwrap(imported.read(buf, 0, out.data(), 4000));  // waits for the imported stream
    for (uint32_t v : out) CHECK(v == 19u + uint32_t(native));
    // Work queued on a created stream after an event on the imported one sees its result.
    auto ev = unwrap(dev.create_event(false));
    unwrap(imported.fill<uint32_t>(buf, 0, 4000, 7u));
    unwrap(imported.record(ev));
    auto other = unwrap(dev.create_stream());
    unwrap(other.wait(ev));
    unwrap(other.read(buf, 0, out.data(), 4000));
    for (uint32_t v : out) CHECK(v == 7u);
  }  // released: the native streams are neither destroyed nor waited for (they still work below)
  auto again = unwrap(dev.import_stream(0));
  unwrap(again.fill<uint32_t>(buf, 0, 4000, 9u));
  unwrap(again.read(buf, 0, out.data(), 4000));
  CHECK(out[999] == 9u);
}

TEST_CASE("events: a stream waits for an event recorded on another") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto producer = unwrap(dev.create_stream());
  auto consumer = unwrap(dev.create_stream());
  auto ev = unwrap(dev.create_event());
  const uint64_t n = 8 << 20;  // big enough that an unordered read would see old data
  auto a = unwrap(dev.allocate(n));
  auto b = unwrap(dev.allocate(n));
  unwrap(producer.fill<uint32_t>(a, 0, n, 0));
  unwrap(producer.synchronize());
  for (int i = 0; i < 8; ++i) unwrap(producer.fill<uint32_t>(a, 0, n, 0x1000u + uint32_t(i)));
  unwrap(producer.record(ev));
  unwrap(consumer.wait(ev));
  unwrap(consumer.copy(b, 0, a, 0, n));
  std::vector<uint32_t> tail(16);
  unwrap(consumer.read(b, n - 64, tail.data(), 64));
  unwrap(consumer.synchronize());
  for (uint32_t v : tail) CHECK(v == 0x1007u);
  CHECK(unwrap(ev.query()));
}

TEST_CASE("events: query, synchronize and elapsed time") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto s = unwrap(dev.create_stream());
  auto start = unwrap(dev.create_event());
  auto end = unwrap(dev.create_event());
  CHECK(unwrap(start.query()));  // never recorded: nothing to wait for
  unwrap(start.synchronize());
  expect_error(hal_event_elapsed_ms(start.get(), end.get(), nullptr), HAL_INVALID_ARGUMENT, "ms is NULL");
  float ms = -1;
  expect_error(hal_event_elapsed_ms(start.get(), end.get(), &ms), HAL_FAILED_PRECONDITION, "never recorded");
  auto buf = unwrap(dev.allocate(64 << 20));
  unwrap(s.record(start));
  unwrap(s.fill<uint32_t>(buf, 0, 64 << 20, 3u));
  unwrap(s.record(end));
  unwrap(end.synchronize());
  CHECK(unwrap(end.query()));
  ms = unwrap(end.elapsed_since(start));
  CHECK(ms > 0.0f);
  CHECK(ms < 60000.0f);
}

TEST_CASE("events: bad event use is refused") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto s = unwrap(dev.create_stream());
  auto no_timing = unwrap(dev.create_event(false));
  auto timing = unwrap(dev.create_event(true));
  unwrap(s.record(no_timing));
  unwrap(s.record(timing));
  unwrap(s.synchronize());
  float ms = 0;
  expect_error(hal_event_elapsed_ms(no_timing.get(), timing.get(), &ms), HAL_INVALID_ARGUMENT, "HAL_EVENT_TIMING");
  hal_event_desc ed{};
  ed.struct_size = sizeof ed;
  ed.flags = 0x80;
  hal_event e = nullptr;
  expect_error(hal_event_create(dev.get(), &ed, &e), HAL_INVALID_ARGUMENT, "unknown flags");
  bool done = false;
  expect_error(hal_event_query(timing.get(), nullptr), HAL_INVALID_ARGUMENT);
  expect_ok(hal_event_query(timing.get(), &done));
  CHECK(done);
  hal_stream_desc sd{};
  sd.struct_size = sizeof sd;
  sd.flags = 2;
  hal_stream st = nullptr;
  expect_error(hal_stream_create(dev.get(), &sd, &st), HAL_INVALID_ARGUMENT, "reserved");
}

// Issue 22: the CPU backend's queued record held a raw pointer to the event, so releasing the
// event before the stream reached the record made the next synchronize hang (or, under ASan,
// a use after free). Every backend must keep what a queued command refers to alive.
TEST_CASE("events: releasing an event whose record or wait is still queued is safe") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto s = unwrap(dev.create_stream());
  auto other = unwrap(dev.create_stream());
  const uint64_t n = 32 << 20;  // keeps the stream busy while the event is released
  auto buf = unwrap(dev.allocate(n));
  for (int round = 0; round < 8; ++round) {
    unwrap(s.fill<uint32_t>(buf, 0, n, uint32_t(round)));
    hal_event ev = nullptr;
    expect_ok(hal_event_create(dev.get(), nullptr, &ev));
    expect_ok(hal_event_record(ev, s.get()));
    expect_ok(hal_stream_wait_event(other.get(), ev));
    expect_ok(hal_event_release(ev));
    std::vector<std::vector<char>> reuse(16, std::vector<char>(256, char(0xA5)));  // recycles the freed memory
    unwrap(s.synchronize());
    unwrap(other.synchronize());
  }
}
