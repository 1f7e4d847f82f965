// The HIP backend against the fake HIP runtime (fake_hip.cpp, kernels on amdgpu-sim's core):
// device discovery and attributes, memory, transfers, launches of the GCN kernels, a kernel
// fault's report, CU-mask partitions (comm_dispatch on one), events, out of device memory, and the imports a
// framework needs (its device memory and its streams, checked to be this device's).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <halcyon/dlpack.h>
#include <halcyon/gcn/kernels.hpp>
#include <halcyon/halcyon.hpp>
#include <halcyon/ops/op.hpp>

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fake_hip.hpp"

using halcyon::ops::DType;
using halcyon::ops::Tensor;
using Tensors = std::map<std::string, Tensor, std::less<>>;

namespace {

// The fake's control functions and HIP entry points, from the same file the backend opened.
struct Fake {
  void* dl = dlopen(FAKE_HIP, RTLD_NOW | RTLD_LOCAL);
  template <typename F>
  F fn(const char* name) const {
    F f = reinterpret_cast<F>(dlsym(dl, name));
    REQUIRE_MESSAGE(bool(f), name);
    return f;
  }
  void reset() const { fn<void (*)()>("fakehip_reset")(); }
  void inject(const char* what) const { REQUIRE(fn<int (*)(const char*)>("fakehip_inject")(what) == 1); }
  int count(const char* name) const { return fn<int (*)(const char*)>("fakehip_count")(name); }
  std::vector<uint32_t> last_cu_mask() const {
    std::vector<uint32_t> m(64);
    m.resize(size_t(fn<int (*)(uint32_t*, int)>("fakehip_last_cu_mask")(m.data(), 64)));
    return m;
  }
  size_t live_bytes() const { return fn<size_t (*)()>("fakehip_live_bytes")(); }
  unsigned last_grid_x() const { return fn<unsigned (*)()>("fakehip_last_grid_x")(); }
  // Memory and streams as a framework would make them, outside halcyon.
  void* malloc_on(int device, size_t size) const {
    REQUIRE(fn<hipError_t (*)(int)>("hipSetDevice")(device) == hipSuccess);
    void* p = nullptr;
    REQUIRE(fn<hipError_t (*)(void**, size_t)>("hipMalloc")(&p, size) == hipSuccess);
    return p;
  }
  hipStream_t stream_on(int device) const {
    REQUIRE(fn<hipError_t (*)(int)>("hipSetDevice")(device) == hipSuccess);
    hipStream_t s = nullptr;
    REQUIRE(fn<hipError_t (*)(hipStream_t*, unsigned)>("hipStreamCreateWithFlags")(&s, 0) == hipSuccess);
    return s;
  }
};

const Fake& fake() {
  static Fake f;
  return f;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

template <typename T>
T unwrap(halcyon::Result<T> r) {
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  return std::move(*r);
}
void ok(const halcyon::Status& s) { REQUIRE_MESSAGE(s.ok(), s.error().to_string()); }

halcyon::Device open_hip(const char* uri = "hip:0") {
  static const bool once = [] {
    auto st = halcyon::init(0, nullptr, (std::string("hip.library=") + FAKE_HIP).c_str());
    REQUIRE_MESSAGE(st.ok(), st.error().to_string());
    return true;
  }();
  (void)once;
  auto d = halcyon::Device::open(uri);
  REQUIRE_MESSAGE(d.ok(), d.error().to_string());
  fake().reset();
  return *d;
}

std::vector<float> iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.5f * float(i);
  return v;
}

// vector_add's tensors in the given buffers (n floats each), a and b uploaded.
Tensors vector_add_tensors(const halcyon::Stream& s, halcyon::Buffer a, halcyon::Buffer b, halcyon::Buffer c, int64_t n) {
  ok(s.write(a, 0, iota(size_t(n), 1.0f).data(), uint64_t(n) * 4));
  ok(s.write(b, 0, iota(size_t(n), -3.0f).data(), uint64_t(n) * 4));
  ok(s.fill(c, 0, uint64_t(n) * 4, 0x7fc0deadu));  // NaN until written
  return {{"a", Tensor{a, 0, DType::f32, {n}}}, {"b", Tensor{b, 0, DType::f32, {n}}}, {"c", Tensor{c, 0, DType::f32, {n}}}};
}

void check_sum(const halcyon::Stream& s, const halcyon::Buffer& c, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  ok(s.read(c, 0, out.data(), uint64_t(n) * 4));
  ok(s.synchronize());
  auto a = iota(size_t(n), 1.0f), b = iota(size_t(n), -3.0f);
  for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == a[i] + b[i]);
}

}  // namespace

TEST_CASE("the HIP backend finds the runtime's devices and reads their attributes") {
  auto d0 = open_hip("hip:0"), d1 = open_hip("hip:1");
  auto i0 = unwrap(d0.info()), i1 = unwrap(d1.info());
  CHECK(std::string(i0.arch) == "gfx942");  // gcnArchName without ":sramecc+:xnack-"
  CHECK(std::string(i1.arch) == "gfx90a");
  CHECK(contains(i0.name, "MI300X"));
  CHECK(std::string(i0.vendor) == "AMD");
  CHECK(i0.compute_units == 304);
  CHECK(i1.compute_units == 110);
  CHECK(i0.simd_width == 64);
  CHECK(i0.max_shared_per_block == 65536);
  CHECK(i0.memory_bytes == 192ull << 30);
  CHECK(i0.memory_bytes_per_s == 2600000ull * 1000 * 2 * 8192 / 8);
  CHECK(d0.has("partition.cu_mask"));
  CHECK(d0.has("partition.enforced"));
  CHECK(d0.has("comm"));  // the fake exports the IPC entry points (tests/hip/test_hip_comm.cpp)
}

TEST_CASE("memory, transfers and fills go through the runtime, and are freed") {
  auto d = open_hip();
  auto s = unwrap(d.create_stream());
  const size_t before = fake().live_bytes();
  {
    auto a = unwrap(d.allocate(4096)), b = unwrap(d.allocate(4096));
    CHECK(fake().live_bytes() == before + 8192);
    std::vector<uint32_t> in(1024), out(1024, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = uint32_t(i * 2654435761u);
    ok(s.write(a, 0, in.data(), 4096));
    ok(s.copy(b, 0, a, 0, 4096));
    ok(s.fill(b, 1024, 16, uint16_t(0xabcd)));
    ok(s.read(b, 0, out.data(), 4096));
    ok(s.synchronize());
    for (size_t i = 0; i < in.size(); ++i) {
      CAPTURE(i);
      REQUIRE(out[i] == (i >= 256 && i < 260 ? 0xabcdabcdu : in[i]));
    }
    CHECK(fake().count("hipMemcpyAsync") == 3);
  }
  CHECK(fake().live_bytes() == before);
  fake().inject("oom");
  auto big = d.allocate(1 << 20);
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().status() == HAL_OUT_OF_MEMORY);
  CHECK(contains(big.error().message(), "hipMalloc"));
}

// The slack hipHostMalloc's memory gets for its alignment once wrapped a size near 2^64 to a
// few bytes, and nothing bounded pinned memory: the buffer was reported at its full size.
TEST_CASE("a pinned or device buffer too large for any memory is refused before the runtime sees it") {
  auto d = open_hip();
  const size_t before = fake().live_bytes();
  for (hal_memory_kind kind : {HAL_MEMORY_HOST_PINNED, HAL_MEMORY_DEVICE}) {
    CAPTURE(int(kind));
    for (uint64_t size : {UINT64_MAX - 15, UINT64_MAX / 2}) {
      auto b = d.allocate(size, kind);
      REQUIRE_FALSE(b.ok());
      CHECK((b.error().status() == HAL_OUT_OF_RANGE || b.error().status() == HAL_OUT_OF_MEMORY));
      CHECK(contains(b.error().message(), std::to_string(size)));
    }
  }
  CHECK(fake().live_bytes() == before);
}

TEST_CASE("operators launch the GCN kernels through hipModuleLaunchKernel on both targets") {
  for (const char* uri : {"hip:0", "hip:1"}) {
    CAPTURE(uri);
    auto d = open_hip(uri);
    auto s = unwrap(d.create_stream());
    const int64_t n = 1000;
    auto t = vector_add_tensors(s, unwrap(d.allocate(4000)), unwrap(d.allocate(4000)), unwrap(d.allocate(4000)), n);
    ok(halcyon::ops::run_op(d, s, "vector_add", t));
    CHECK(fake().count("hipModuleLoadData") == 1);
    CHECK(fake().count("hipModuleLaunchKernel") == 1);
    check_sum(s, t["c"].buffer, n);
  }
}

TEST_CASE("a kernel that faults fails its launch with the simulator's report") {
  auto d = open_hip();
  auto s = unwrap(d.create_stream());
  const auto* img = halcyon::gcn::find("halcyon_vector_add_f32", "gfx942");
  REQUIRE(img != nullptr);
  auto m = unwrap(d.load_module(HAL_MODULE_HSACO, img->target.c_str(), img->data, img->size, "vector_add"));
  auto k = unwrap(m.kernel("halcyon_vector_add_f32"));
  struct {
    uint64_t a, b, c;
    uint32_t count, pad;
  } args{0x1000, 0x2000, 0x3000, 64, 0};  // addresses nothing was allocated at
  auto st = s.launch(k, {1}, {64}, &args, 28);
  REQUIRE_FALSE(st.ok());
  const std::string msg = st.error().message();
  CHECK_MESSAGE(contains(msg, "hipModuleLaunchKernel"), msg);
  CHECK_MESSAGE(contains(msg, "hipErrorLaunchFailure"), msg);
  CHECK_MESSAGE(contains(msg, "amdgpu-sim"), msg);
  CHECK_MESSAGE(contains(msg, "0x1000"), msg);
  // A module for the other target is refused before the runtime sees it.
  const auto* other = halcyon::gcn::find("halcyon_vector_add_f32", "gfx90a");
  REQUIRE(other != nullptr);
  auto wrong = d.load_module(HAL_MODULE_HSACO, other->target.c_str(), other->data, other->size, "vector_add");
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().status() == HAL_ARCH_MISMATCH);
  CHECK(fake().count("hipModuleLoadData") == 1);
}

TEST_CASE("a partition is a CU mask spread evenly over the XCDs, and its stream runs kernels") {
  auto d = open_hip();
  auto parts = unwrap(d.split(24));
  auto info = unwrap(parts.first.info());
  CHECK(info.units_granted == 24);
  CHECK(info.mechanism == HAL_PARTITION_CU_MASK);
  CHECK(info.enforced == 1);
  auto s = unwrap(d.create_stream(&parts.first));
  auto mask = fake().last_cu_mask();
  REQUIRE(mask.size() == 10);  // 304 CUs in 32-bit words
  int per_xcd[8] = {}, total = 0;
  for (size_t w = 0; w < mask.size(); ++w)
    for (int b = 0; b < 32; ++b)
      if (mask[w] >> b & 1u) {
        ++per_xcd[(w * 32 + size_t(b)) % 8];  // CU i lies on XCD i mod 8
        ++total;
      }
  CHECK(total == 24);
  for (int x : per_xcd) CHECK(x == 3);
  const int64_t n = 300;
  auto t = vector_add_tensors(s, unwrap(d.allocate(1200)), unwrap(d.allocate(1200)), unwrap(d.allocate(1200)), n);
  ok(halcyon::ops::run_op(d, s, "vector_add", t));
  check_sum(s, t["c"].buffer, n);
  // The communication kernel on the partition: its grid sized from the partition's 24 CUs (4
  // workgroups a CU), rows whose source is outside [0, T) left untouched.
  const int64_t T = 9, H = 66, R = 200;
  std::vector<uint16_t> x(size_t(T * H));
  for (size_t i = 0; i < x.size(); ++i) x[i] = uint16_t(0x3f80 + i % 97);
  std::vector<int32_t> src(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) src[size_t(r)] = r % 17 == 3 ? -1 : r % 19 == 5 ? int32_t(T) : int32_t((r * 7) % T);
  auto xb = unwrap(d.allocate(x.size() * 2)), sb = unwrap(d.allocate(src.size() * 4)), ob = unwrap(d.allocate(R * H * 2));
  ok(s.write(xb, 0, x.data(), x.size() * 2));
  ok(s.write(sb, 0, src.data(), src.size() * 4));
  ok(s.fill(ob, 0, R * H * 2, uint16_t(0x7fc1)));
  Tensors dt{{"x", Tensor{xb, 0, DType::bf16, {T, H}}}, {"src_row", Tensor{sb, 0, DType::i32, {R}}},
             {"out", Tensor{ob, 0, DType::bf16, {R, H}}}};
  ok(halcyon::ops::run_op(d, s, "comm_dispatch", dt, {{"chunk_rows", "1"}}));
  CHECK(fake().last_grid_x() == 96);
  std::vector<uint16_t> out(static_cast<size_t>(R * H));
  ok(s.read(ob, 0, out.data(), out.size() * 2));
  ok(s.synchronize());
  for (int64_t r = 0; r < R; ++r) {
    CAPTURE(r);
    const int32_t from = src[size_t(r)];
    for (int64_t h = 0; h < H; ++h)
      REQUIRE(out[size_t(r * H + h)] == (from >= 0 && from < T ? x[size_t(from * H + h)] : uint16_t(0x7fc1)));
  }
  // More than what is free is refused, naming the counts.
  auto too_many = d.split(400);
  REQUIRE_FALSE(too_many.ok());
  CHECK(too_many.error().status() == HAL_OUT_OF_RANGE);
}

// Two opens of hip:0 are one device (hal.h): their CU masks are disjoint, not both unit 0.
TEST_CASE("partitions made through two opens of one device get disjoint CUs") {
  auto d1 = open_hip("hip:0"), d2 = open_hip("hip");
  CHECK(d1.get() == d2.get());
  hal_partition_desc pd{};
  pd.struct_size = sizeof pd;
  pd.units = 8;
  hal_partition p1 = nullptr, p2 = nullptr;
  REQUIRE(hal_device_split(d1.get(), &pd, &p1, nullptr) == nullptr);
  REQUIRE(hal_device_split(d2.get(), &pd, &p2, nullptr) == nullptr);
  hal_partition_info i1{}, i2{};
  i1.struct_size = i2.struct_size = sizeof i1;
  REQUIRE(hal_partition_get_info(p1, &i1) == nullptr);
  REQUIRE(hal_partition_get_info(p2, &i2) == nullptr);
  CHECK(i1.enforced);
  CHECK(i2.enforced);
  CHECK(i1.first_unit != i2.first_unit);
  REQUIRE(hal_partition_release(p1) == nullptr);
  REQUIRE(hal_partition_release(p2) == nullptr);
}

TEST_CASE("events time the work between them") {
  auto d = open_hip();
  auto s = unwrap(d.create_stream());
  auto a = unwrap(d.create_event()), b = unwrap(d.create_event());
  auto buf = unwrap(d.allocate(1 << 16));
  ok(s.record(a));
  ok(s.fill(buf, 0, 1 << 16, 1u));
  ok(s.record(b));
  ok(s.synchronize());
  float ms = unwrap(b.elapsed_since(a));
  CHECK(ms >= 0.0f);
  // An event made without timing cannot time.
  auto untimed = unwrap(d.create_event(false));
  ok(s.record(untimed));
  CHECK_FALSE(untimed.elapsed_since(a).ok());
}

namespace {
int g_released = 0;
void count_release(void*) { ++g_released; }

halcyon::Result<halcyon::Buffer> import(const halcyon::Device& d, void* p, uint64_t size, uint32_t flags = 0) {
  return d.import_memory(reinterpret_cast<uint64_t>(p), size, count_release, nullptr, flags);
}
}  // namespace

TEST_CASE("a framework's device memory is imported when it is this device's, and never freed") {
  for (bool rocm6 : {false, true}) {
    CAPTURE(rocm6);
    auto d = open_hip("hip:0");
    if (rocm6) fake().inject("rocm6");  // ROCm 6 numbers hipMemoryType differently
    auto s = unwrap(d.create_stream());
    const int64_t n = 256;
    void* raw[3] = {fake().malloc_on(0, 1024), fake().malloc_on(0, 1024), fake().malloc_on(0, 1024)};
    const size_t live = fake().live_bytes();
    g_released = 0;
    {
      auto t = vector_add_tensors(s, unwrap(import(d, raw[0], 1024)), unwrap(import(d, raw[1], 1024)),
                                  unwrap(import(d, raw[2], 1024, HAL_BUFFER_IMPORT_OWNER_ORDERED)), n);
      ok(halcyon::ops::run_op(d, s, "vector_add", t));
      check_sum(s, t["c"].buffer, n);
    }
    CHECK(g_released == 3);                    // each release callback once
    CHECK(fake().live_bytes() == live);        // the memory is still the owner's
    CHECK(fake().count("hipFree") == 0);

    // Another device's memory, memory HIP does not know, pinned host memory: refused by name.
    void* other = fake().malloc_on(1, 1024);
    auto e1 = import(d, other, 1024);
    REQUIRE_FALSE(e1.ok());
    CHECK(e1.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(contains(e1.error().message(), "it is memory of hip:1"), e1.error().message());
    std::vector<char> host(1024);
    auto e2 = import(d, host.data(), 1024);
    REQUIRE_FALSE(e2.ok());
    CHECK_MESSAGE(contains(e2.error().message(), "not memory the HIP runtime knows"), e2.error().message());
    void* pinned = nullptr;
    REQUIRE(fake().fn<hipError_t (*)(void**, size_t, unsigned)>("hipHostMalloc")(&pinned, 1024, 0) == hipSuccess);
    auto e3 = import(d, pinned, 1024);
    REQUIRE_FALSE(e3.ok());
    CHECK_MESSAGE(contains(e3.error().message(), "not device memory"), e3.error().message());
    CHECK(g_released == 3);  // a refused import does not call release
    auto hip_free = fake().fn<hipError_t (*)(void*)>("hipFree");
    for (void* p : raw) CHECK(hip_free(p) == hipSuccess);
    CHECK(hip_free(other) == hipSuccess);
    CHECK(fake().fn<hipError_t (*)(void*)>("hipHostFree")(pinned) == hipSuccess);
  }
}

// Only the start used to be checked: 1 MiB from inside a 4 KiB allocation was accepted.
TEST_CASE("an imported range must lie within the allocation that holds its start") {
  auto d = open_hip("hip:0");
  char* raw = static_cast<char*>(fake().malloc_on(0, 4096));
  g_released = 0;
  {
    auto inside = import(d, raw + 1024, 3072);  // a view of the allocation's tail is fine
    REQUIRE_MESSAGE(inside.ok(), inside.error().to_string());
  }
  CHECK(g_released == 1);
  for (uint64_t size : {uint64_t(3073), uint64_t(1) << 20}) {
    auto past = import(d, raw + 1024, size);
    REQUIRE_FALSE(past.ok());
    CHECK(past.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(contains(past.error().message(), "runs past its allocation"), past.error().message());
    CHECK_MESSAGE(contains(past.error().message(), "+" + std::to_string(size) + ")"), past.error().message());
  }
  CHECK(g_released == 1);  // refusals do not call release
  CHECK(fake().fn<hipError_t (*)(void*)>("hipFree")(raw) == hipSuccess);
}

TEST_CASE("a framework's stream is imported when it is this device's, and left to its owner") {
  auto d1 = open_hip("hip:1");
  hipStream_t theirs = fake().stream_on(1);
  const int64_t n = 64;
  {
    auto s = unwrap(d1.import_stream(reinterpret_cast<uint64_t>(theirs)));
    auto t = vector_add_tensors(s, unwrap(d1.allocate(256)), unwrap(d1.allocate(256)), unwrap(d1.allocate(256)), n);
    ok(halcyon::ops::run_op(d1, s, "vector_add", t));
    check_sum(s, t["c"].buffer, n);
    CHECK(std::string(unwrap(s.info()).device_uri) == "hip:1");
  }
  CHECK(fake().count("hipStreamDestroy") == 0);  // released, not destroyed
  CHECK(fake().fn<hipError_t (*)(hipStream_t)>("hipStreamSynchronize")(theirs) == hipSuccess);
  // The null stream (0) is the device's own.
  ok(unwrap(d1.import_stream(0)).synchronize());

  // On another device: refused, naming both.
  auto d0 = open_hip("hip:0");
  auto wrong = d0.import_stream(reinterpret_cast<uint64_t>(theirs));
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(contains(wrong.error().message(), "it is a stream of hip:1"), wrong.error().message());
  // A handle the runtime does not know.
  int not_a_stream = 0;
  auto unknown = d0.import_stream(reinterpret_cast<uint64_t>(&not_a_stream));
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(contains(unknown.error().message(), "hipStreamGetDevice"), unknown.error().message());
  // A runtime that cannot say whose a stream is: unsupported, not trusted.
  fake().inject("no_stream_device");
  auto unchecked = d1.import_stream(reinterpret_cast<uint64_t>(theirs));
  REQUIRE_FALSE(unchecked.ok());
  CHECK(unchecked.error().status() == HAL_UNSUPPORTED);
  CHECK(fake().fn<hipError_t (*)(hipStream_t)>("hipStreamDestroy")(theirs) == hipSuccess);
}

TEST_CASE("a ROCm DLPack tensor (kDLROCM) is imported into its hip device without a copy") {
  auto d = open_hip("hip:0");
  void* p = fake().malloc_on(0, 1024);
  struct Owner {
    DLManagedTensor m{};
    int64_t shape[1] = {256};
    bool deleted = false;
  } owner;
  owner.m.dl_tensor = DLTensor{p, DLDevice{kDLROCM, 0}, 1, DLDataType{kDLFloat, 32, 1}, owner.shape, nullptr, 0};
  owner.m.manager_ctx = &owner;
  owner.m.deleter = [](DLManagedTensor* m) { static_cast<Owner*>(m->manager_ctx)->deleted = true; };
  hrt_tensor t{};
  t.struct_size = sizeof t;
  if (hal_error* e = hrt_dlpack_import(d.get(), &owner.m, "x", HRT_DTYPE_FROM_DLPACK, &t)) {
    halcyon::Error err = halcyon::Error::adopt(e);
    FAIL(err.to_string());
  }
  CHECK(halcyon::Buffer(t.buffer).address() == reinterpret_cast<uint64_t>(p));  // adopts the reference
  CHECK(owner.deleted);  // its last reference is gone: the deleter ran
  // A tensor of hip:1 given to hip:0 is refused before the runtime is asked.
  Owner other;
  other.m.dl_tensor = DLTensor{p, DLDevice{kDLROCM, 1}, 1, DLDataType{kDLFloat, 32, 1}, other.shape, nullptr, 0};
  hrt_tensor t2{};
  t2.struct_size = sizeof t2;
  hal_error* e = hrt_dlpack_import(d.get(), &other.m, "x", HRT_DTYPE_FROM_DLPACK, &t2);
  REQUIRE(e != nullptr);
  halcyon::Error err = halcyon::Error::adopt(e);
  CHECK(err.status() == HAL_INVALID_ARGUMENT);
  CHECK_FALSE(other.deleted);
  CHECK(fake().fn<hipError_t (*)(void*)>("hipFree")(p) == hipSuccess);
}
