// Handles: null, released and wrong-typed handles are errors that name the problem; a
// device released before its children stays alive for them and the mistake is reported.
#include "test_support.hpp"

#include <mutex>
#include <string>
#include <vector>

using test::expect_error;
using test::expect_ok;

TEST_CASE("handles: null handles are reported, never dereferenced") {
  hal_device_info info{};
  info.struct_size = sizeof info;
  expect_error(hal_device_get_info(nullptr, &info), HAL_INVALID_HANDLE, "NULL device handle");
  expect_error(hal_buffer_release(nullptr), HAL_INVALID_HANDLE, "NULL buffer");
  expect_error(hal_stream_synchronize(nullptr), HAL_INVALID_HANDLE, "stream");
  expect_error(hal_event_synchronize(nullptr), HAL_INVALID_HANDLE, "event");
  expect_error(hal_module_release(nullptr), HAL_INVALID_HANDLE, "module");
  expect_error(hal_kernel_release(nullptr), HAL_INVALID_HANDLE, "kernel");
  expect_error(hal_partition_release(nullptr), HAL_INVALID_HANDLE, "partition");
  hal_buffer b = nullptr;
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.size = 8;
  expect_error(hal_buffer_create(nullptr, &bd, &b), HAL_INVALID_HANDLE, "device");
}

TEST_CASE("handles: released handles and handles of another type are reported") {
  auto dev = test::unwrap(halcyon::Device::open(test::device_uri()));
  auto buf = test::unwrap(dev.allocate(16));
  auto stream = test::unwrap(dev.create_stream());
  hal_buffer raw = buf.release_ownership();
  expect_ok(hal_buffer_release(raw));
  // The slot may be reused by a new object; the stale handle must still be refused.
  auto buf2 = test::unwrap(dev.allocate(16));
  expect_error(hal_buffer_release(raw), HAL_INVALID_HANDLE, "already released");
  int x = 1;
  expect_error(hal_stream_write(stream.get(), raw, 0, &x, 4), HAL_INVALID_HANDLE, "dst");
  // A stream handle where a buffer is expected.
  expect_error(hal_stream_write(stream.get(), reinterpret_cast<hal_buffer>(stream.get()), 0, &x, 4),
               HAL_INVALID_HANDLE, "is a stream handle, not a buffer handle");
  // Something that was never a handle.
  expect_error(hal_buffer_retain(reinterpret_cast<hal_buffer>(uintptr_t(0x1234))), HAL_INVALID_HANDLE);
}

TEST_CASE("handles: retain and release count references") {
  auto dev = test::unwrap(halcyon::Device::open(test::device_uri()));
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.size = 32;
  hal_buffer b = nullptr;
  expect_ok(hal_buffer_create(dev.get(), &bd, &b));
  expect_ok(hal_buffer_retain(b));
  expect_ok(hal_buffer_release(b));
  hal_buffer_info info{};
  info.struct_size = sizeof info;
  expect_ok(hal_buffer_get_info(b, &info));  // one reference is left
  expect_ok(hal_buffer_release(b));
  expect_error(hal_buffer_get_info(b, &info), HAL_INVALID_HANDLE, "already released");
}

namespace {
struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;
  static void fn(void* user, hal_log_level level, const char* msg) {
    auto* self = static_cast<LogCapture*>(user);
    std::lock_guard lock(self->mu);
    if (level >= HAL_LOG_WARNING) self->lines.emplace_back(msg);
  }
};

// Writes a word to b at off through s and reads it back.
void check_round_trip(hal_stream s, hal_buffer b, uint64_t off) {
  uint32_t v = 0xCAFEF00D, back = 0;
  expect_ok(hal_stream_write(s, b, off, &v, 4));
  expect_ok(hal_stream_read(s, b, off, &back, 4));
  expect_ok(hal_stream_synchronize(s));
  CHECK(back == v);
}
}  // namespace

TEST_CASE("handles: a device released before its buffers is reported and stays usable for them") {
  LogCapture cap;
  hal_set_log_callback(&LogCapture::fn, &cap);
  hal_device d = nullptr;
  expect_ok(hal_device_open(test::device_uri(), &d));
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.size = 64;
  hal_buffer b = nullptr;
  hal_stream s = nullptr;
  expect_ok(hal_buffer_create(d, &bd, &b));
  expect_ok(hal_stream_create(d, nullptr, &s));
  expect_ok(hal_device_release(d));  // wrong order
  hal_set_log_callback(nullptr, nullptr);
  REQUIRE(cap.lines.size() == 1);
  CHECK(cap.lines[0].find("released while 2 object(s)") != std::string::npos);
  // The children still work: the device is closed after them.
  check_round_trip(s, b, 8);
  expect_ok(hal_stream_release(s));
  expect_ok(hal_buffer_release(b));
}

namespace {
// The device's URI spelled another way: "cpu:0" and "cpu" name the same device.
std::string other_spelling(const std::string& uri) {
  return uri.size() > 2 && uri.compare(uri.size() - 2, 2, ":0") == 0 ? uri.substr(0, uri.size() - 2) : uri + ":0";
}

hal_buffer make_buffer(hal_device d, uint64_t size) {
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.size = size;
  hal_buffer b = nullptr;
  expect_ok(hal_buffer_create(d, &bd, &b));
  return b;
}
}  // namespace

// Two opens of one device used to make two backend devices, which the core took for one (same
// URI): a buffer of the first could be queued on a stream of the second, and releasing it
// waited only for the first's streams, so it was freed under the queued work.
TEST_CASE("handles: opening an open device again shares it, however its URI is spelled") {
  hal_device d1 = nullptr, d2 = nullptr;
  expect_ok(hal_device_open(test::device_uri(), &d1));
  expect_ok(hal_device_open(other_spelling(test::device_uri()).c_str(), &d2));
  REQUIRE(d1 == d2);  // one device, two references
  hal_stream s = nullptr;
  expect_ok(hal_stream_create(d2, nullptr, &s));
  hal_buffer slow = make_buffer(d2, 64 << 20), b = make_buffer(d1, 16 << 20);
  uint32_t pattern = 0x41414141;
  for (int i = 0; i < 4; ++i) expect_ok(hal_stream_fill(s, slow, 0, 64 << 20, &pattern, 4));
  expect_ok(hal_stream_fill(s, b, 0, 16 << 20, &pattern, 4));
  expect_ok(hal_buffer_release(b));  // must wait for the fill queued on the other handle's stream
  expect_ok(hal_stream_synchronize(s));
  expect_ok(hal_buffer_release(slow));
  // One release per open: the device stays open for the other reference.
  expect_ok(hal_device_release(d1));
  hal_device_info info{};
  info.struct_size = sizeof info;
  expect_ok(hal_device_get_info(d2, &info));
  CHECK(std::string(info.uri) == test::device_uri());
  // Every reference gone while a stream still holds the device: opening it again gives a new
  // handle to that same device, and the stream works with the buffers of the new handle.
  expect_ok(hal_device_release(d2));
  expect_error(hal_device_get_info(d2, &info), HAL_INVALID_HANDLE, "already released");
  hal_device d3 = nullptr;
  expect_ok(hal_device_open(test::device_uri(), &d3));
  hal_buffer c = make_buffer(d3, 64);
  check_round_trip(s, c, 0);
  expect_ok(hal_buffer_release(c));
  expect_ok(hal_stream_release(s));
  expect_ok(hal_device_release(d3));
}
