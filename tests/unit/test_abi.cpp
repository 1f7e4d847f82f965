// The ABI versioning rules of hal.h: older (smaller) structs are accepted, newer fields are
// ignored by an older reader, outputs never write past the caller's struct_size, and the
// size macros track each struct's last field.
#include "test_support.hpp"

#include <cstring>

// Each *_SIZE macro must name the struct's last field: sizeof may only add tail padding.
#define CHECK_TRACKS_LAST_FIELD(T, SIZE) static_assert(sizeof(T) - (SIZE) < alignof(T), #SIZE " does not name the last field of " #T)
CHECK_TRACKS_LAST_FIELD(hal_init_desc, HAL_INIT_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_backend_record, HAL_BACKEND_RECORD_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_device_info, HAL_DEVICE_INFO_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_partition_desc, HAL_PARTITION_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_partition_info, HAL_PARTITION_INFO_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_buffer_desc, HAL_BUFFER_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_buffer_info, HAL_BUFFER_INFO_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_stream_desc, HAL_STREAM_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_stream_info, HAL_STREAM_INFO_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_event_desc, HAL_EVENT_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_module_desc, HAL_MODULE_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_kernel_info, HAL_KERNEL_INFO_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_launch_desc, HAL_LAUNCH_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_host_api, HAL_HOST_API_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_backend_api, HAL_BACKEND_API_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_tensor_map_desc, HAL_TENSOR_MAP_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_comm_desc, HAL_COMM_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_comm_info, HAL_COMM_INFO_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_stream_import_desc, HAL_STREAM_IMPORT_DESC_SIZE);
CHECK_TRACKS_LAST_FIELD(hal_buffer_import_desc, HAL_BUFFER_IMPORT_DESC_SIZE);
// Sizes of earlier versions never change: ABI 1.1 appended tensor_map_encode to the table.
static_assert(HAL_BACKEND_API_1_0_SIZE == offsetof(hal_backend_api, tensor_map_encode));
static_assert(HAL_BACKEND_API_1_2_SIZE == offsetof(hal_backend_api, device_can_run));
// ABI 1.4 appended buffer_import, then the communicator entries, after partition_caps.
static_assert(HAL_BACKEND_API_1_3_SIZE == offsetof(hal_backend_api, buffer_import));
static_assert(offsetof(hal_backend_api, comm_create) == HAL_BACKEND_API_1_3_SIZE + sizeof(void*));
static_assert(HAL_BACKEND_API_1_3_SIZE < HAL_BACKEND_API_SIZE);
// ABI 1.5 appended stream_import after comm_all_to_all.
static_assert(HAL_BACKEND_API_1_4_SIZE == offsetof(hal_backend_api, stream_import));
static_assert(HAL_BACKEND_API_1_4_SIZE + sizeof(void*) == HAL_BACKEND_API_1_10_SIZE);
// ABI 1.11 appended stream_native after stream_import.
static_assert(HAL_BACKEND_API_1_10_SIZE == offsetof(hal_backend_api, stream_native));
static_assert(HAL_BACKEND_API_1_10_SIZE + sizeof(void*) == HAL_BACKEND_API_SIZE);
static_assert(sizeof(hal_comm_handle) == HAL_COMM_HANDLE_BYTES);
static_assert(HAL_BACKEND_API_MIN_SIZE < HAL_BACKEND_API_1_0_SIZE && HAL_BACKEND_API_1_0_SIZE < HAL_BACKEND_API_1_2_SIZE &&
              HAL_BACKEND_API_1_2_SIZE < HAL_BACKEND_API_SIZE);
static_assert(HAL_TENSOR_MAP_DESC_MIN_SIZE == sizeof(hal_tensor_map_desc));

using test::expect_error;
using test::expect_ok;

namespace {
hal_device open_device() {
  hal_device d = nullptr;
  expect_ok(hal_device_open(test::device_uri(), &d));
  REQUIRE(d != nullptr);
  return d;
}
}  // namespace

TEST_CASE("abi: version") {
  uint32_t major = 0, minor = 99;
  hal_abi_version(&major, &minor);
  CHECK(major == HAL_ABI_MAJOR);
  CHECK(minor == HAL_ABI_MINOR);
}

TEST_CASE("abi: an older, smaller input struct is accepted and its missing fields take defaults") {
  hal_device d = open_device();
  hal_buffer_desc desc;
  std::memset(&desc, 0xAB, sizeof desc);  // garbage past the old struct's end must not be read
  desc.struct_size = HAL_BUFFER_DESC_MIN_SIZE;  // a caller built before `alignment` existed
  desc.next = nullptr;
  desc.kind = HAL_MEMORY_DEVICE;
  desc.flags = 0;
  desc.size = 100;
  hal_buffer b = nullptr;
  expect_ok(hal_buffer_create(d, &desc, &b));  // 0xABAB... alignment would be rejected if read
  hal_buffer_info info{};
  info.struct_size = sizeof info;
  expect_ok(hal_buffer_get_info(b, &info));
  CHECK(info.size == 100);
  expect_ok(hal_buffer_release(b));
  expect_ok(hal_device_release(d));
}

TEST_CASE("abi: a newer, larger input struct is accepted and its unknown fields ignored") {
  hal_device d = open_device();
  struct FutureBufferDesc {
    hal_buffer_desc known;
    uint64_t field_from_abi_1_9;  // appended by a later minor version
  } desc{};
  desc.known.struct_size = sizeof desc;
  desc.known.kind = HAL_MEMORY_DEVICE;
  desc.known.size = 64;
  desc.field_from_abi_1_9 = 0xDEADBEEF;
  hal_buffer b = nullptr;
  expect_ok(hal_buffer_create(d, &desc.known, &b));
  expect_ok(hal_buffer_release(b));
  expect_ok(hal_device_release(d));
}

TEST_CASE("abi: a struct smaller than its first version is refused") {
  hal_device d = open_device();
  hal_buffer_desc desc{};
  desc.struct_size = HAL_BUFFER_DESC_MIN_SIZE - 1;
  desc.size = 64;
  hal_buffer b = nullptr;
  expect_error(hal_buffer_create(d, &desc, &b), HAL_VERSION_MISMATCH, "hal_buffer_desc.struct_size");
  CHECK(b == nullptr);
  expect_error(hal_buffer_create(d, nullptr, &b), HAL_INVALID_ARGUMENT, "NULL");
  expect_ok(hal_device_release(d));
}

TEST_CASE("abi: an output struct is filled only up to the caller's struct_size") {
  hal_device d = open_device();
  // An older caller whose hal_device_info ended at `capabilities` (no l2_cache_bytes).
  struct {
    hal_device_info info;
    unsigned char canary[16];
  } old_caller;
  std::memset(&old_caller, 0x5A, sizeof old_caller);
  old_caller.info.struct_size = offsetof(hal_device_info, l2_cache_bytes);
  old_caller.info.next = nullptr;
  expect_ok(hal_device_get_info(d, &old_caller.info));
  CHECK(std::string(old_caller.info.uri) == test::device_uri());
  CHECK(old_caller.info.compute_units > 0);
  CHECK(old_caller.info.struct_size == offsetof(hal_device_info, l2_cache_bytes));  // unchanged
  const unsigned char* tail = reinterpret_cast<const unsigned char*>(&old_caller.info.l2_cache_bytes);
  for (size_t i = 0; i < sizeof(uint64_t); ++i) CHECK(tail[i] == 0x5A);  // not written
  for (unsigned char c : old_caller.canary) CHECK(c == 0x5A);

  hal_device_info tiny{};
  tiny.struct_size = 4;  // not even the header
  expect_error(hal_device_get_info(d, &tiny), HAL_VERSION_MISMATCH, "struct_size");
  expect_ok(hal_device_release(d));
}

TEST_CASE("abi: a buffer's and a stream's device URI (1.8), not written for a 1.7 caller") {
  hal_device d = open_device();
  hal_buffer b = nullptr;
  hal_buffer_desc desc{};
  desc.struct_size = sizeof desc;
  desc.size = 16;
  expect_ok(hal_buffer_create(d, &desc, &b));
  hal_stream s = nullptr;
  expect_ok(hal_stream_create(d, nullptr, &s));
  hal_buffer_info bi{};
  bi.struct_size = sizeof bi;
  expect_ok(hal_buffer_get_info(b, &bi));
  CHECK(std::string(bi.device_uri) == test::device_uri());
  hal_stream_info si{};
  si.struct_size = sizeof si;
  expect_ok(hal_stream_get_info(s, &si));
  CHECK(std::string(si.device_uri) == test::device_uri());
  // A caller built against 1.7 (the structs ended before device_uri).
  hal_buffer_info old_b;
  std::memset(&old_b, 0x5A, sizeof old_b);
  old_b.struct_size = offsetof(hal_buffer_info, device_uri);
  old_b.next = nullptr;
  expect_ok(hal_buffer_get_info(b, &old_b));
  CHECK(old_b.size == 16);
  for (char c : old_b.device_uri) CHECK(c == 0x5A);
  hal_stream_info old_s;
  std::memset(&old_s, 0x5A, sizeof old_s);
  old_s.struct_size = offsetof(hal_stream_info, device_uri);
  old_s.next = nullptr;
  expect_ok(hal_stream_get_info(s, &old_s));
  CHECK(old_s.units > 0);
  for (char c : old_s.device_uri) CHECK(c == 0x5A);
  expect_ok(hal_stream_release(s));
  expect_ok(hal_buffer_release(b));
  expect_ok(hal_device_release(d));
}

TEST_CASE("abi: errors are values with names and messages") {
  CHECK(hal_error_status(nullptr) == HAL_OK);
  CHECK(std::string(hal_error_message(nullptr)).empty());
  hal_error_free(nullptr);
  hal_error* e = hal_error_new(HAL_OUT_OF_RANGE, "offset 9 past 8");
  CHECK(hal_error_status(e) == HAL_OUT_OF_RANGE);
  CHECK(std::string(hal_error_message(e)) == "offset 9 past 8");
  hal_error_free(e);
  CHECK(std::string(hal_status_name(HAL_ARCH_MISMATCH)) == "HAL_ARCH_MISMATCH");
  CHECK(std::string(hal_status_name(static_cast<hal_status>(999))) == "HAL_UNKNOWN_STATUS");
}

TEST_CASE("abi: hal_init after discovery is refused") {
  hal_init_desc d{};
  d.struct_size = sizeof d;
  expect_error(hal_init(&d), HAL_FAILED_PRECONDITION, "already");
}
