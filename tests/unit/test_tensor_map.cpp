// hal_device_encode_tensor_map: the core's checks, each error naming the field and its value,
// all before the backend is asked. On a device without tensor maps (the CPU backend) a valid
// request is HAL_UNSUPPORTED; on one with them (capability "tensor_map") it is encoded.
#include "test_support.hpp"

#include <cstring>

using namespace test;

namespace {

// 64 x 32 bf16 elements, rows 128 bytes apart: within every backend's limits that hal.h or
// the CUDA driver documents. The box is taller than the tensor, which is allowed.
struct Fixture {
  halcyon::Device dev = unwrap(halcyon::Device::open(test::device_uri()));
  halcyon::Buffer buf = unwrap(dev.allocate(64 * 32 * 2));
  hal_tensor_map_desc desc = valid();
  unsigned char out[HAL_TENSOR_MAP_BYTES + 8];

  hal_tensor_map_desc valid() const {
    auto d = halcyon::tensor_map_desc(buf.get(), HAL_TENSOR_MAP_BF16, {64, 32}, {64, 64});  // strides {2, 128}
    d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
    d.l2_promotion = HAL_TENSOR_MAP_L2_128B;
    // Entries past the rank are not read: values that would be refused there.
    d.dims[2] = 0;
    d.box[2] = 0;
    d.strides[2] = ~uint64_t(0);
    return d;
  }
  // Encodes `d`; expects the error `status` naming `needle`, and `out` left as it was.
  void refused(const hal_tensor_map_desc& d, hal_status status, const std::string& needle) {
    std::memset(out, 0xCD, sizeof out);
    expect_error(hal_device_encode_tensor_map(dev.get(), &d, out, HAL_TENSOR_MAP_BYTES), status, needle);
    for (unsigned char c : out) REQUIRE(c == 0xCD);
  }
};

}  // namespace

TEST_CASE_FIXTURE(Fixture, "tensor map: a valid desc is encoded where the device has tensor maps, else HAL_UNSUPPORTED") {
  std::memset(out, 0xCD, sizeof out);
  hal_error* e = hal_device_encode_tensor_map(dev.get(), &desc, out, sizeof out);
  if (dev.has("tensor_map")) {
    expect_ok(e);
    for (size_t i = HAL_TENSOR_MAP_BYTES; i < sizeof out; ++i) CHECK(out[i] == 0xCD);  // 128 bytes only
    auto map = unwrap(dev.encode_tensor_map(desc));
    CHECK(std::memcmp(map.bytes, out, HAL_TENSOR_MAP_BYTES) == 0);  // same desc, same map
  } else {
    const std::string uri = unwrap(dev.info()).uri;
    expect_error(e, HAL_UNSUPPORTED, uri + " (backend ");
    for (unsigned char c : out) CHECK(c == 0xCD);
    // The C++ API fills struct_size when the caller left it 0.
    hal_tensor_map_desc d = desc;
    d.struct_size = 0;
    auto r = dev.encode_tensor_map(d);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().status() == HAL_UNSUPPORTED);
  }
}

TEST_CASE_FIXTURE(Fixture, "tensor map: a newer, larger desc is accepted, its unknown fields ignored") {
  struct {
    hal_tensor_map_desc known;
    uint64_t field_from_abi_1_9;
  } newer{};
  newer.known = desc;
  newer.known.struct_size = sizeof newer;
  newer.field_from_abi_1_9 = 0xDEADBEEF;
  hal_error* e = hal_device_encode_tensor_map(dev.get(), &newer.known, out, sizeof out);
  if (dev.has("tensor_map")) expect_ok(e);
  else expect_error(e, HAL_UNSUPPORTED);
}

TEST_CASE_FIXTURE(Fixture, "tensor map: handles, pointers and sizes") {
  expect_error(hal_device_encode_tensor_map(nullptr, &desc, out, sizeof out), HAL_INVALID_HANDLE);
  expect_error(hal_device_encode_tensor_map(dev.get(), nullptr, out, sizeof out), HAL_INVALID_ARGUMENT,
               "hal_tensor_map_desc pointer is NULL");
  hal_tensor_map_desc d = desc;
  d.struct_size = HAL_TENSOR_MAP_DESC_MIN_SIZE - 1;
  refused(d, HAL_VERSION_MISMATCH, "hal_tensor_map_desc.struct_size is");
  expect_error(hal_device_encode_tensor_map(dev.get(), &desc, nullptr, sizeof out), HAL_INVALID_ARGUMENT, "out is NULL");
  expect_error(hal_device_encode_tensor_map(dev.get(), &desc, out, 64), HAL_INVALID_ARGUMENT,
               "out_size is 64; a tensor map takes HAL_TENSOR_MAP_BYTES (128)");
  d = desc;
  d.buffer = nullptr;
  refused(d, HAL_INVALID_HANDLE, "desc->buffer");
  d.buffer = reinterpret_cast<hal_buffer>(dev.get());  // a device handle is no buffer
  refused(d, HAL_INVALID_HANDLE, "desc->buffer");
  hal_buffer gone = nullptr;
  {
    auto b = unwrap(dev.allocate(4096));
    gone = b.get();
  }
  d.buffer = gone;  // released
  refused(d, HAL_INVALID_HANDLE, "desc->buffer");
}

TEST_CASE_FIXTURE(Fixture, "tensor map: every field is checked, and the error names it") {
  auto with = [&](auto change) {
    hal_tensor_map_desc d = desc;
    change(d);
    return d;
  };
  refused(with([](auto& d) { d.rank = 0; }), HAL_INVALID_ARGUMENT, "rank is 0; a tensor map has 1 to 5 dimensions");
  refused(with([](auto& d) { d.rank = 6; }), HAL_INVALID_ARGUMENT, "rank is 6");
  refused(with([](auto& d) { d.dtype = 0; }), HAL_INVALID_ARGUMENT, "dtype 0 is not a hal_tensor_map_dtype");
  refused(with([](auto& d) { d.dtype = HAL_TENSOR_MAP_F64 + 1; }), HAL_INVALID_ARGUMENT, "dtype 11 is not");
  refused(with([](auto& d) { d.swizzle = 4; }), HAL_INVALID_ARGUMENT, "swizzle 4 is not a hal_tensor_map_swizzle");
  refused(with([](auto& d) { d.l2_promotion = 7; }), HAL_INVALID_ARGUMENT, "l2_promotion 7 is not a hal_tensor_map_l2");
  refused(with([](auto& d) { d.oob_nan = 2; }), HAL_INVALID_ARGUMENT, "oob_nan is 2; it must be 0 or 1");
  refused(with([](auto& d) { d.dtype = HAL_TENSOR_MAP_U16; d.oob_nan = 1; }), HAL_INVALID_ARGUMENT,
          "oob_nan is 1 but dtype u16 is not a floating-point type");
  refused(with([](auto& d) { d.dims[1] = 0; }), HAL_INVALID_ARGUMENT, "dims[1] is 0");
  refused(with([](auto& d) { d.box[0] = 0; }), HAL_INVALID_ARGUMENT, "box[0] is 0");
  refused(with([](auto& d) { d.strides[0] = 4; }), HAL_INVALID_ARGUMENT,
          "strides[0] is 4, but a bf16 element is 2 bytes");
  refused(with([](auto& d) { d.dtype = HAL_TENSOR_MAP_F32; }), HAL_INVALID_ARGUMENT,
          "strides[0] is 2, but a f32 element is 4 bytes");
  // The whole tensor must lie in the buffer: 4096 bytes here.
  refused(with([](auto& d) { d.dims[1] = 33; }), HAL_OUT_OF_RANGE,
          "the tensor (dims {64, 33}, strides {2, 128}) spans 4224 bytes from offset 0, past the end of the 4096-byte buffer");
  refused(with([](auto& d) { d.offset = 16; }), HAL_OUT_OF_RANGE, "spans 4096 bytes from offset 16");
  refused(with([](auto& d) { d.offset = ~uint64_t(0); }), HAL_OUT_OF_RANGE, "past the end of the 4096-byte buffer");
  refused(with([](auto& d) { d.dims[1] = uint64_t(1) << 40; d.strides[1] = uint64_t(1) << 40; }), HAL_OUT_OF_RANGE,
          "spans more than 2^64 bytes");
  // What does fit: a 1-D tail of the buffer, and the last row as a tensor of its own.
  auto ok_or_unsupported = [&](const hal_tensor_map_desc& d) {
    hal_error* e = hal_device_encode_tensor_map(dev.get(), &d, out, sizeof out);
    if (dev.has("tensor_map")) expect_ok(e);
    else expect_error(e, HAL_UNSUPPORTED);
  };
  ok_or_unsupported(with([](auto& d) { d.rank = 1; d.dims[0] = 2048; d.box[0] = 64; }));
  ok_or_unsupported(with([](auto& d) { d.offset = 31 * 128; d.dims[1] = 1; }));
  ok_or_unsupported(with([](auto& d) { d.dtype = HAL_TENSOR_MAP_F16; d.oob_nan = 1; }));
}

TEST_CASE("tensor map: ArgPack places a TensorMap at a multiple of 64, as a kernel's .align 64 parameter") {
  static_assert(sizeof(halcyon::TensorMap) == HAL_TENSOR_MAP_BYTES && alignof(halcyon::TensorMap) == 64);
  halcyon::TensorMap map{};
  for (int i = 0; i < HAL_TENSOR_MAP_BYTES; ++i) map.bytes[i] = static_cast<unsigned char>(i + 1);
  halcyon::ArgPack pack;
  pack.value(uint64_t(0x1122334455667788)).value(map).value(int32_t(-3));
  REQUIRE(pack.size() == 64 + HAL_TENSOR_MAP_BYTES + 4);
  const auto* blob = static_cast<const unsigned char*>(pack.data());
  CHECK(std::memcmp(blob + 64, map.bytes, HAL_TENSOR_MAP_BYTES) == 0);
  int32_t tail = 0;
  std::memcpy(&tail, blob + 64 + HAL_TENSOR_MAP_BYTES, 4);
  CHECK(tail == -3);
}

TEST_CASE("tensor map: tensor_map_desc fills dense strides where none are given") {
  auto d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_F32, {10, 20, 30}, {8, 4, 2});
  CHECK(d.struct_size == sizeof d);
  CHECK(d.rank == 3);
  CHECK(d.strides[0] == 4);
  CHECK(d.strides[1] == 40);
  CHECK(d.strides[2] == 800);
  CHECK(d.box[2] == 2);
  d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_U16, {10, 20, 30}, {8, 4, 2}, {32}, 64);
  CHECK(d.offset == 64);
  CHECK(d.strides[1] == 32);
  CHECK(d.strides[2] == 640);  // dense after the given padded stride
  d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_U8, {1, 2, 3, 4, 5, 6}, {1});
  CHECK(d.rank == 6);  // passed on for hal_device_encode_tensor_map to refuse
  CHECK(d.dims[4] == 5);
}

TEST_CASE("tensor map: dtype sizes and swizzle spans") {
  CHECK(halcyon::tensor_map_dtype_info(HAL_TENSOR_MAP_BF16)->bytes == 2);
  CHECK(halcyon::tensor_map_dtype_info(HAL_TENSOR_MAP_I64)->bytes == 8);
  CHECK_FALSE(halcyon::tensor_map_dtype_info(HAL_TENSOR_MAP_I64)->is_float);
  CHECK(halcyon::tensor_map_dtype_info(HAL_TENSOR_MAP_F64)->is_float);
  CHECK(halcyon::tensor_map_dtype_info(0) == nullptr);
  CHECK(halcyon::tensor_map_swizzle_span(HAL_TENSOR_MAP_SWIZZLE_NONE) == 0);
  CHECK(halcyon::tensor_map_swizzle_span(HAL_TENSOR_MAP_SWIZZLE_64B) == 64);
  CHECK(halcyon::tensor_map_swizzle_span(9) == UINT32_MAX);
}
