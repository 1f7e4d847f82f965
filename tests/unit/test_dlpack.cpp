// DLPack (halcyon/dlpack.h): export of runtime tensors, zero-copy import of someone else's
// memory (here host arrays on the CPU device, as NumPy's would be), the checks on device,
// dtype, strides and shape, and the lifetime rule (the producer's deleter runs once, after the
// last reference, and never on an error).
#include <halcyon/dlpack.h>
#include <halcyon/ops/op.hpp>
#include <halcyon/runtime/dlpack.hpp>

#include <string>
#include <vector>

#include "runtime_test_support.hpp"

using namespace halcyon;
using test::unwrap;

namespace {

// A host array offered through DLPack, counting its deleter's calls.
struct HostArray {
  std::vector<float> data;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
  int deleted = 0;

  HostArray(std::vector<int64_t> s, float first) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.resize(size_t(n));
    for (size_t i = 0; i < data.size(); ++i) data[i] = first + float(i);
    DLTensor& t = managed.dl_tensor;
    t.data = data.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = int(shape.size());
    t.dtype = DLDataType{kDLFloat, 32, 1};
    t.shape = shape.data();
    t.strides = nullptr;
    managed.manager_ctx = this;
    managed.deleter = [](DLManagedTensor* m) { ++static_cast<HostArray*>(m->manager_ctx)->deleted; };
  }
};

Device cpu() { return unwrap(Device::open("cpu:0")); }

void expect_refused(const Result<ops::Tensor>& r, const std::string& needle) {
  REQUIRE_FALSE(r);
  CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(r.error().message().find(needle) != std::string::npos, r.error().message());
}

}  // namespace

TEST_CASE("dlpack: imported host arrays run an operator in place, without a copy") {
  Device dev = cpu();
  Stream s = unwrap(dev.create_stream());
  HostArray a({3, 5}, 1.0f), b({3, 5}, 100.0f), c({3, 5}, -1.0f);
  {
    std::map<std::string, ops::Tensor, std::less<>> t;
    t["a"] = unwrap(rt::from_dlpack(dev, &a.managed, "a"));
    t["b"] = unwrap(rt::from_dlpack(dev, &b.managed, "b"));
    t["c"] = unwrap(rt::from_dlpack(dev, &c.managed, "c"));
    CHECK(t["a"].address() == reinterpret_cast<uint64_t>(a.data.data()));  // zero copy
    CHECK(t["c"].shape == std::vector<int64_t>{3, 5});
    // vector_add is 1-D: view c as [15] (same buffer).
    for (auto* name : {"a", "b", "c"}) t[name].shape = {15};
    unwrap(ops::run_op(dev, s, "vector_add", t));
    unwrap(s.synchronize());
    CHECK(a.deleted == 0);
  }
  // The tensors (and their buffers) are gone: each producer's deleter ran exactly once.
  CHECK(a.deleted == 1);
  CHECK(b.deleted == 1);
  CHECK(c.deleted == 1);
  for (size_t i = 0; i < c.data.size(); ++i) CHECK(c.data[i] == a.data[i] + b.data[i]);
}

TEST_CASE("dlpack: refused imports name the tensor and the value, and leave the deleter to the caller") {
  Device dev = cpu();
  HostArray x({4, 6}, 0.0f);
  x.strides = {1, 4};  // a [4, 6] view with column-major strides
  x.managed.dl_tensor.strides = x.strides.data();
  expect_refused(rt::from_dlpack(dev, &x.managed, "x"), "'x': it is not contiguous (shape [4, 6], strides [1, 4]");
  x.strides = {6, 1};  // row-major strides are fine
  CHECK(rt::from_dlpack(dev, &x.managed, "x"));
  CHECK(x.deleted == 1);
  x.deleted = 0;
  x.managed.dl_tensor.strides = nullptr;

  x.managed.dl_tensor.device = DLDevice{kDLCUDA, 1};
  expect_refused(rt::from_dlpack(dev, &x.managed, "x"), "it is on cuda:1, the device is cpu:0");
  x.managed.dl_tensor.device = DLDevice{kDLCPU, 0};

  x.managed.dl_tensor.dtype = DLDataType{kDLUInt, 16, 1};
  expect_refused(rt::from_dlpack(dev, &x.managed, "x"), "dtype (code 1, 16 bits, 1 lanes) has no halcyon dtype");
  x.managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 4};
  expect_refused(rt::from_dlpack(dev, &x.managed, "x"), "4 lanes");
  x.managed.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  expect_refused(rt::from_dlpack(dev, &x.managed, "x", ops::DType::bf16), "cannot be read as bf16");

  x.shape[1] = -6;
  expect_refused(rt::from_dlpack(dev, &x.managed, "x"), "dimension 1 is -6");
  x.shape = {1ll << 40, 1ll << 30};
  expect_refused(rt::from_dlpack(dev, &x.managed, "x"), "more bytes than an address space");
  x.shape = {4, 6};
  x.managed.dl_tensor.ndim = HRT_MAX_RANK + 1;
  expect_refused(rt::from_dlpack(dev, &x.managed, "x"), "rank 9");
  x.managed.dl_tensor.ndim = 2;
  CHECK(x.deleted == 0);  // nothing refused was taken
}

TEST_CASE("dlpack: a runtime tensor exports with its device, dtype, shape, strides and a reference") {
  Device dev = cpu();
  Stream s = unwrap(dev.create_stream());
  auto t = unwrap(ops::make_tensor(dev, ops::DType::bf16, {2, 3, 4}));
  DLManagedTensor* m = unwrap(rt::to_dlpack(dev, t));
  const uint64_t address = t.address();
  t = ops::Tensor{};  // the export alone keeps the buffer alive
  CHECK(reinterpret_cast<uint64_t>(m->dl_tensor.data) == address);
  CHECK(m->dl_tensor.device.device_type == kDLCPU);
  CHECK(m->dl_tensor.dtype.code == kDLBfloat);
  CHECK(m->dl_tensor.dtype.bits == 16);
  REQUIRE(m->dl_tensor.ndim == 3);
  CHECK(std::vector<int64_t>(m->dl_tensor.shape, m->dl_tensor.shape + 3) == std::vector<int64_t>{2, 3, 4});
  CHECK(std::vector<int64_t>(m->dl_tensor.strides, m->dl_tensor.strides + 3) == std::vector<int64_t>{12, 4, 1});
  static_cast<uint16_t*>(m->dl_tensor.data)[23] = 0x3f80;  // still valid memory

  // Round trip: the import of an export is the same memory.
  auto back = unwrap(rt::from_dlpack(dev, m, "back"));
  CHECK(back.address() == address);
  CHECK(back.dtype == ops::DType::bf16);
  back = ops::Tensor{};  // releases the import, which calls the export's deleter
}

TEST_CASE("dlpack: an export with a zero dimension has strides that fit int64, or is refused") {
  Device dev = cpu();
  auto t = unwrap(ops::make_tensor(dev, ops::DType::f32, {4}));
  t.shape = {0, 3, 5};  // 0 bytes: fits any buffer
  DLManagedTensor* m = unwrap(rt::to_dlpack(dev, t));
  CHECK(std::vector<int64_t>(m->dl_tensor.strides, m->dl_tensor.strides + 3) == std::vector<int64_t>{15, 5, 1});
  m->deleter(m);
  // 0 bytes too, but the outer stride would be 2^62 * 2^62: refused rather than wrapped.
  t.shape = {0, int64_t(1) << 62, int64_t(1) << 62};
  auto r = rt::to_dlpack(dev, t);
  REQUIRE_FALSE(r);
  CHECK(r.error().status() == HAL_OUT_OF_RANGE);
  CHECK_MESSAGE(r.error().message().find("strides") != std::string::npos, r.error().message());
  // Only the outermost dimension is never a stride factor: [2^62, 0] exports.
  t.shape = {int64_t(1) << 62, 0};
  m = unwrap(rt::to_dlpack(dev, t));
  m->deleter(m);
}

TEST_CASE("dlpack: the C ABI") {
  Device dev = cpu();
  HostArray x({8}, 2.0f);
  hrt_tensor t{};
  test::expect_error(hrt_dlpack_import(dev.get(), &x.managed, "x", 1234, &t), HAL_INVALID_ARGUMENT, "dtype_override");
  test::expect_ok(hrt_dlpack_import(dev.get(), &x.managed, "x", HRT_DTYPE_FROM_DLPACK, &t));
  CHECK(t.rank == 1);
  CHECK(t.dtype == HRT_F32);
  DLManagedTensor* out = nullptr;
  test::expect_ok(hrt_dlpack_export(dev.get(), &t, &out));
  REQUIRE(out != nullptr);
  CHECK(out->dl_tensor.data == x.data.data());
  hal_error_free(hal_buffer_release(t.buffer));
  CHECK(x.deleted == 0);  // the export still holds the buffer
  out->deleter(out);
  CHECK(x.deleted == 1);
}

TEST_CASE("dlpack: e4m3 crosses as its uint8 bits, and comes back as e4m3 only when asked") {
  Device dev = cpu();
  auto t = unwrap(ops::make_tensor(dev, ops::DType::e4m3, {4, 16}));
  DLManagedTensor* m = unwrap(rt::to_dlpack(dev, t));
  CHECK(m->dl_tensor.dtype.code == kDLUInt);
  CHECK(m->dl_tensor.dtype.bits == 8);
  CHECK(m->dl_tensor.dtype.lanes == 1);
  // Without an override the bits are u8; with HRT_E4M3 (the C ABI's override) they are e4m3 again.
  hrt_tensor c{};
  test::expect_ok(hrt_dlpack_import(dev.get(), m, "q", HRT_E4M3, &c));
  CHECK(c.dtype == HRT_E4M3);
  CHECK(c.rank == 2);
  hal_error_free(hal_buffer_release(c.buffer));  // calls the export's deleter
  m = unwrap(rt::to_dlpack(dev, t));
  auto plain = unwrap(rt::from_dlpack(dev, m, "q"));
  CHECK(plain.dtype == ops::DType::u8);
  CHECK(plain.address() == t.address());
  // The C ABI's export takes an e4m3 hrt_tensor; an override past the last hrt_dtype is refused.
  hrt_tensor e{};
  e.struct_size = HRT_TENSOR_SIZE;
  e.buffer = t.buffer.get();
  e.dtype = HRT_E4M3;
  e.rank = 2;
  e.shape[0] = 4;
  e.shape[1] = 16;
  DLManagedTensor* out = nullptr;
  test::expect_ok(hrt_dlpack_export(dev.get(), &e, &out));
  REQUIRE(out != nullptr);
  CHECK(out->dl_tensor.dtype.code == kDLUInt);
  out->deleter(out);
  HostArray x({8}, 1.0f);
  hrt_tensor r{};
  test::expect_error(hrt_dlpack_import(dev.get(), &x.managed, "x", HRT_E4M3 + 1, &r), HAL_INVALID_ARGUMENT,
                     "dtype_override");
  CHECK(x.deleted == 0);
}
