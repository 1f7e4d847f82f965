// Modules and launches: host kernels on the CPU backend, argument-blob checks, arch and
// format mismatches, launch-shape limits.
#include "test_support.hpp"

#include <atomic>
#include <cstring>
#include <iterator>
#include <vector>

using test::expect_error;
using test::expect_ok;
using test::unwrap;

namespace {

struct IotaArgs {
  uint64_t out;
  uint32_t n;
  float scale;
};
const hal_kernel_arg kIotaArgs[] = {{0, 8, HAL_ARG_POINTER}, {8, 4, HAL_ARG_VALUE}, {12, 4, HAL_ARG_VALUE}};

// out[i] = i * scale, one block covers block[0] elements.
void iota_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  IotaArgs a;
  std::memcpy(&a, blob, sizeof a);
  float* out = reinterpret_cast<float*>(a.out);
  uint64_t begin = uint64_t(ctx->block_id[0]) * ctx->block[0];
  for (uint64_t i = begin; i < begin + ctx->block[0] && i < a.n; ++i) out[i] = float(i) * a.scale;
}

// Each block writes the sum of its shared scratch after filling it: checks shared memory
// is private per block and sized as asked, and that 3-D block ids are right.
void blockid_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  uint64_t outp;
  std::memcpy(&outp, blob, 8);
  uint32_t* out = reinterpret_cast<uint32_t*>(outp);
  auto* sh = static_cast<uint32_t*>(ctx->shared);
  uint32_t words = ctx->shared_bytes / 4;
  uint32_t id = ctx->block_id[0] + ctx->grid[0] * (ctx->block_id[1] + ctx->grid[1] * ctx->block_id[2]);
  for (uint32_t i = 0; i < words; ++i) sh[i] = id;
  uint32_t sum = 0;
  for (uint32_t i = 0; i < words; ++i) sum += sh[i];
  out[id] = sum;
}
const hal_kernel_arg kBlockIdArgs[] = {{0, 8, HAL_ARG_POINTER}};

const hal_host_kernel_entry kKernels[] = {
    {"iota", iota_kernel, 3, kIotaArgs, sizeof(IotaArgs)},
    {"blockid", blockid_kernel, 1, kBlockIdArgs, 8},
};
const hal_host_module_image kImage = {sizeof(hal_host_module_image), nullptr, 2, kKernels};

struct Fixture {
  halcyon::Device dev = unwrap(halcyon::Device::open(test::device_uri()));
  halcyon::Stream stream = unwrap(dev.create_stream());
  halcyon::Module mod = unwrap(dev.load_module(HAL_MODULE_HOST, "host", &kImage, sizeof kImage, "unit-test"));

  // Runs an iota kernel over 64 elements in one block; returns the last one (63 * scale).
  float iota_64_last(const halcyon::Kernel& k, float scale) {
    auto out = unwrap(dev.allocate(64 * 4));
    IotaArgs a{out.address(), 64, scale};
    unwrap(stream.launch(k, {1}, {64}, &a, sizeof a));
    float last = 0;
    unwrap(stream.read(out, 63 * 4, &last, 4));
    unwrap(stream.synchronize());
    return last;
  }
};

}  // namespace

TEST_CASE_FIXTURE(Fixture, "launch: a host kernel runs every block with its arguments") {
  auto k = unwrap(mod.kernel("iota"));
  auto info = unwrap(k.info());
  CHECK(std::string(info.name) == "iota");
  CHECK(info.arg_count == 3);
  CHECK(info.args_size == sizeof(IotaArgs));
  auto args = unwrap(k.args());
  CHECK(args[0].kind == HAL_ARG_POINTER);
  CHECK(args[2].offset == 12);
  const uint32_t n = 1000;
  auto out = unwrap(dev.allocate(n * 4));
  IotaArgs a{out.address(), n, 0.5f};
  unwrap(stream.launch(k, {(n + 63) / 64}, {64}, &a, sizeof a));
  std::vector<float> back(n);
  unwrap(stream.read(out, 0, back.data(), n * 4));
  unwrap(stream.synchronize());
  for (uint32_t i = 0; i < n; ++i) REQUIRE(back[i] == float(i) * 0.5f);
}

TEST_CASE_FIXTURE(Fixture, "launch: 3-D grids and per-block shared memory") {
  auto k = unwrap(mod.kernel("blockid"));
  const halcyon::Dim3 grid{3, 4, 5};
  const uint32_t blocks = 3 * 4 * 5;
  auto out = unwrap(dev.allocate(blocks * 4));
  halcyon::ArgPack pack;
  pack.pointer(out);
  unwrap(stream.launch(k, grid, {1}, pack, 1024));
  std::vector<uint32_t> back(blocks);
  unwrap(stream.read(out, 0, back.data(), blocks * 4));
  unwrap(stream.synchronize());
  for (uint32_t id = 0; id < blocks; ++id) CHECK(back[id] == id * 256);
}

TEST_CASE_FIXTURE(Fixture, "launch: argument blob and launch shape are checked") {
  auto k = unwrap(mod.kernel("iota"));
  IotaArgs a{0, 0, 1.0f};
  hal_launch_desc d{};
  d.struct_size = sizeof d;
  d.grid[0] = d.grid[1] = d.grid[2] = 1;
  d.block[0] = d.block[1] = d.block[2] = 1;
  d.args = &a;
  d.args_size = 12;
  expect_error(hal_stream_launch(stream.get(), k.get(), &d), HAL_INVALID_ARGUMENT, "takes a 16-byte argument blob");
  d.args_size = sizeof a;
  d.args = nullptr;
  expect_error(hal_stream_launch(stream.get(), k.get(), &d), HAL_INVALID_ARGUMENT, "args is NULL");
  d.args = &a;
  d.grid[1] = 0;
  expect_error(hal_stream_launch(stream.get(), k.get(), &d), HAL_INVALID_ARGUMENT, "must be >= 1");
  d.grid[1] = 1;
  d.block[0] = 2048;
  expect_error(hal_stream_launch(stream.get(), k.get(), &d), HAL_INVALID_ARGUMENT, "exceeds its limit");
  d.block[0] = 1;
  d.shared_bytes = 1u << 30;
  expect_error(hal_stream_launch(stream.get(), k.get(), &d), HAL_INVALID_ARGUMENT, "shared memory");
  d.shared_bytes = 0;
  expect_error(hal_stream_launch(stream.get(), k.get(), nullptr), HAL_INVALID_ARGUMENT, "NULL");
  expect_ok(hal_stream_launch(stream.get(), k.get(), &d));  // n = 0: writes nothing
  unwrap(stream.synchronize());
  hal_kernel_arg arg{};
  expect_error(hal_kernel_get_arg(k.get(), 3, &arg), HAL_OUT_OF_RANGE, "has 3 argument(s)");
}

TEST_CASE_FIXTURE(Fixture, "modules: wrong format, wrong architecture and corrupt images are refused") {
  hal_module m = nullptr;
  hal_module_desc d{};
  d.struct_size = sizeof d;
  const char ptx[] = ".version 8.0\n.target sm_90a\n.address_size 64\n";
  d.format = HAL_MODULE_PTX;
  d.target = "sm_90a";
  d.data = ptx;
  d.size = sizeof ptx;
  d.name = "k.sm_90a.ptx";
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_ARCH_MISMATCH, "'k.sm_90a.ptx' is ptx for sm_90a");
  d.format = HAL_MODULE_HOST;
  d.target = "gfx942";
  d.data = &kImage;
  d.size = sizeof kImage;
  d.name = "host-for-gfx942";
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_ARCH_MISMATCH, "gfx942");
  d.target = "host";
  d.size = 4;  // truncated
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_INVALID_ARGUMENT, "too small");
  hal_host_module_image bad = kImage;
  bad.kernels = nullptr;
  d.data = &bad;
  d.size = sizeof bad;
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_INVALID_ARGUMENT, "kernels is NULL");
  d.format = 42;
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_INVALID_ARGUMENT, "unknown format 42");
  d.format = HAL_MODULE_HOST;
  d.target = nullptr;
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_INVALID_ARGUMENT, "target");
  d.target = "host";
  d.data = nullptr;
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_INVALID_ARGUMENT, "no data");
  CHECK(m == nullptr);
  hal_kernel k = nullptr;
  expect_error(hal_module_get_kernel(mod.get(), "missing_kernel", &k), HAL_NOT_FOUND, "missing_kernel");
  expect_error(hal_module_get_kernel(mod.get(), nullptr, &k), HAL_INVALID_ARGUMENT);
}

TEST_CASE_FIXTURE(Fixture, "launch: a kernel stays usable after its module handle is released") {
  auto k = unwrap(mod.kernel("iota"));
  mod.reset();
  CHECK(iota_64_last(k, 2.0f) == 126.0f);
}

// The CPU backend kept the image's name and argument pointers: a caller reusing the image's
// memory after hal_module_load changed the kernel's name and argument layout under it.
TEST_CASE_FIXTURE(Fixture, "modules: a host module is copied at load; the caller may reuse the image") {
  char name[] = "iota";
  std::vector<hal_kernel_arg> args(std::begin(kIotaArgs), std::end(kIotaArgs));
  hal_host_kernel_entry entry{name, iota_kernel, 3, args.data(), sizeof(IotaArgs)};
  hal_host_module_image image{sizeof image, nullptr, 1, &entry};
  auto m = unwrap(dev.load_module(HAL_MODULE_HOST, "host", &image, sizeof image, "reused-image"));
  std::memcpy(name, "oops", sizeof name);  // the caller reuses every byte it passed
  for (auto& a : args) a = {0, 1, HAL_ARG_VALUE};
  args.assign(64, hal_kernel_arg{});  // and frees the old argument array
  entry = {nullptr, nullptr, 0, nullptr, 0};
  auto k = unwrap(m.kernel("iota"));
  auto info = unwrap(k.info());
  CHECK(info.arg_count == 3);
  CHECK(info.args_size == sizeof(IotaArgs));
  auto got = unwrap(k.args());
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(got[i].offset == kIotaArgs[i].offset);
    CHECK(got[i].size == kIotaArgs[i].size);
    CHECK(got[i].kind == kIotaArgs[i].kind);
  }
  CHECK_FALSE(m.kernel("oops").ok());
  CHECK(iota_64_last(k, 3.0f) == 189.0f);
}

// gx*gy*gz wrapped in the CPU backend's block index: (2^22, 2^22, 2^20) ran no block at all.
TEST_CASE_FIXTURE(Fixture, "launch: a grid whose block count overflows 64 bits is refused") {
  auto k = unwrap(mod.kernel("blockid"));
  uint64_t outp = 0;
  hal_launch_desc d{};
  d.struct_size = sizeof d;
  d.grid[0] = 1u << 22;
  d.grid[1] = 1u << 22;
  d.grid[2] = 1u << 20;
  d.block[0] = d.block[1] = d.block[2] = 1;
  d.args = &outp;
  d.args_size = 8;
  expect_error(hal_stream_launch(stream.get(), k.get(), &d), HAL_INVALID_ARGUMENT, "(4194304, 4194304, 1048576)");
  unwrap(stream.synchronize());
}

TEST_CASE("ArgPack: natural alignment by default; a kernel's own layout when given") {
  struct alignas(64) Map {
    unsigned char b[128];
  };
  Map m{};
  for (int i = 0; i < 128; ++i) m.b[i] = static_cast<unsigned char>(i);
  const uint64_t p = 0x1122334455667788ull;
  const int32_t n = -7;

  halcyon::ArgPack natural;
  natural.value(p).value(m).value(n);  // 8 bytes, the map at 64, the int right after it
  CHECK(natural.ok());
  REQUIRE(natural.size() == 64 + 128 + 4);
  const auto* nb = static_cast<const unsigned char*>(natural.data());
  CHECK(std::memcmp(nb, &p, 8) == 0);
  CHECK(std::memcmp(nb + 64, m.b, 128) == 0);
  CHECK(std::memcmp(nb + 192, &n, 4) == 0);

  // A layout as a backend may report it for a module without a parameter list: other offsets.
  std::vector<hal_kernel_arg> layout{{0, 8, 0}, {48, 128, 0}, {176, 4, 0}};
  halcyon::ArgPack own(layout);
  own.value(p).value(m).value(n);
  CHECK(own.ok());
  REQUIRE(own.size() == 180);
  const auto* ob = static_cast<const unsigned char*>(own.data());
  CHECK(std::memcmp(ob, &p, 8) == 0);
  CHECK(std::memcmp(ob + 48, m.b, 128) == 0);
  CHECK(std::memcmp(ob + 176, &n, 4) == 0);

  halcyon::ArgPack short_pack(layout);  // an argument missing
  short_pack.value(p).value(m);
  CHECK_FALSE(short_pack.ok());
  halcyon::ArgPack wrong_size(layout);  // an 8-byte value where the layout has 4 bytes
  wrong_size.value(p).value(m).value(p);
  CHECK_FALSE(wrong_size.ok());
  halcyon::ArgPack too_many(layout);
  too_many.value(p).value(m).value(n).value(n);
  CHECK_FALSE(too_many.ok());
}

TEST_CASE_FIXTURE(Fixture, "hal_device_can_run: the backend's rule, refusals with reasons, bad arguments") {
  std::string why;
  CHECK(unwrap(dev.can_run(HAL_MODULE_HOST, "host")));
  CHECK(unwrap(dev.can_run(HAL_MODULE_HOST, unwrap(dev.info()).arch)));
  CHECK_FALSE(unwrap(dev.can_run(HAL_MODULE_HOST, "gfx942", &why)));
  CHECK(why.find("host code for gfx942 does not run") != std::string::npos);
  CHECK_FALSE(unwrap(dev.can_run(HAL_MODULE_PTX, "sm_80", &why)));  // the CPU loads no PTX
  CHECK(why.find("does not load ptx modules") != std::string::npos);
  bool yes = true;
  char small[8];
  expect_ok(hal_device_can_run(dev.get(), HAL_MODULE_PTX, "sm_80", &yes, small, sizeof small));
  CHECK_FALSE(yes);
  CHECK(std::strlen(small) == sizeof small - 1);  // cut to the caller's capacity, NUL-terminated
  expect_ok(hal_device_can_run(dev.get(), HAL_MODULE_PTX, "sm_80", &yes, nullptr, 0));
  expect_error(hal_device_can_run(dev.get(), 42, "host", &yes, nullptr, 0), HAL_INVALID_ARGUMENT, "unknown module format 42");
  expect_error(hal_device_can_run(dev.get(), HAL_MODULE_HOST, "", &yes, nullptr, 0), HAL_INVALID_ARGUMENT, "target");
  expect_error(hal_device_can_run(dev.get(), HAL_MODULE_HOST, "host", nullptr, nullptr, 0), HAL_INVALID_ARGUMENT, "yes");
  expect_error(hal_device_can_run(nullptr, HAL_MODULE_HOST, "host", &yes, nullptr, 0), HAL_INVALID_HANDLE);
  // A simulated MI300X runs code objects for exactly gfx942 (feature flags aside).
  if (auto sim = halcyon::Device::open("amdgpu-sim:gfx942")) {
    CHECK(unwrap(sim->can_run(HAL_MODULE_HSACO, "gfx942")));
    CHECK(unwrap(sim->can_run(HAL_MODULE_HSACO, "gfx942:sramecc+:xnack-")));
    CHECK_FALSE(unwrap(sim->can_run(HAL_MODULE_HSACO, "gfx90a", &why)));
    CHECK(why.find("gfx90a") != std::string::npos);
  }
}
