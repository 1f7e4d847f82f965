// The Level Zero backend against the fake driver (fake_ze.cpp): device discovery and
// properties, memory and its bounds, streams, events and timestamps, SPIR-V modules and
// launches, sub-device partitions, and the failure paths a real driver has (a module that
// does not build, with its build log; out of device memory; a lost device).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <halcyon/halcyon.hpp>
#include <halcyon/spirv_kernels.hpp>

#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

// The fake's control functions, from the same file the backend opened.
struct Fake {
  void* dl = dlopen(FAKE_ZE, RTLD_NOW | RTLD_LOCAL);
  template <typename F>
  F fn(const char* name) const {
    F f = reinterpret_cast<F>(dlsym(dl, name));
    REQUIRE_MESSAGE(bool(f), name);
    return f;
  }
  void reset() const { fn<void (*)()>("fakeze_reset")(); }
  void inject(const char* what) const { REQUIRE(fn<int (*)(const char*)>("fakeze_inject")(what) == 1); }
  int count(const char* name) const { return fn<int (*)(const char*)>("fakeze_count")(name); }
  int last_list_device() const { return fn<int (*)()>("fakeze_last_list_device")(); }
  void set_tiles(int n) const { fn<void (*)(int)>("fakeze_set_tiles")(n); }
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

const Fake& fake() {
  static Fake f;
  return f;
}

halcyon::Device open_ze() {
  static const bool once = [] {
    // A malformed option fails hal_init, naming the entry, and discovers nothing: the next
    // hal_init may still run.
    auto bad = halcyon::init(0, nullptr, "ze.loader=/x;loader_without_backend=/y");
    REQUIRE(!bad.ok());
    CHECK(bad.error().status() == HAL_INVALID_ARGUMENT);
    CHECK(contains(bad.error().message(), "loader_without_backend=/y"));
    std::string options = std::string("ze.loader=") + FAKE_ZE;
    auto st = halcyon::init(0, nullptr, options.c_str());
    REQUIRE_MESSAGE(st.ok(), st.error().to_string());
    return true;
  }();
  (void)once;
  auto d = halcyon::Device::open("ze:0");
  REQUIRE_MESSAGE(d.ok(), d.error().to_string());
  fake().reset();
  return *d;
}

template <typename T>
T unwrap(halcyon::Result<T> r) {
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  return std::move(*r);
}

const halcyon::spirv_kernels::Image& basic() {
  const auto* img = halcyon::spirv_kernels::find("basic");
  REQUIRE(img != nullptr);
  return *img;
}

}  // namespace

TEST_CASE("device discovery reads the driver's properties") {
  auto d = open_ze();
  auto info = unwrap(d.info());
  CHECK(std::string(info.name) == "halcyon fake Level Zero GPU");
  CHECK(std::string(info.arch) == "ze_ffff_0001");
  CHECK(info.compute_units == 64);  // 1 slice x 8 sub-slices x 8 EUs
  CHECK(info.simd_width == 8);
  CHECK(info.memory_bytes == (256ull << 20));
  CHECK(info.max_shared_per_block == 64 * 1024);
  CHECK(info.max_threads_per_block == 1024);
  CHECK(info.memory_bytes_per_s == 64000000000ull);
  CHECK(contains(info.capabilities, "module.spirv"));
  CHECK(contains(info.capabilities, "partition.sub_device"));
}

TEST_CASE("memory round trips, fills and refuses ranges past the end") {
  auto d = open_ze();
  auto s = unwrap(d.create_stream());
  auto b = unwrap(d.allocate(1000));
  std::vector<uint8_t> in(1000), out(1000, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i * 7);
  REQUIRE(s.write(b, 0, in.data(), in.size()).ok());
  REQUIRE(s.read(b, 0, out.data(), out.size()).ok());
  CHECK(out == in);
  REQUIRE(s.fill<uint16_t>(b, 10, 20, uint16_t(0xABCD)).ok());
  REQUIRE(s.read(b, 10, out.data(), 20).ok());
  for (int i = 0; i < 20; i += 2) CHECK((out[i] | out[i + 1] << 8) == 0xABCD);
  auto past = s.write(b, 990, in.data(), 11);
  REQUIRE(!past.ok());
  CHECK(past.error().status() == HAL_OUT_OF_RANGE);
  CHECK(fake().count("zeMemAllocDevice") == 1);
  CHECK(fake().count("zeCommandListAppendMemoryCopy") == 3);  // the refused write never reached the driver
}

TEST_CASE("out of device memory is HAL_OUT_OF_MEMORY naming the size") {
  auto d = open_ze();
  auto big = d.allocate(1ull << 30);  // more than the fake's 256 MiB
  REQUIRE(!big.ok());
  CHECK(big.error().status() == HAL_OUT_OF_MEMORY);
  CHECK(contains(big.error().message(), "1073741824 bytes"));
  fake().inject("oom");
  auto small = d.allocate(64);
  REQUIRE(!small.ok());
  CHECK(small.error().status() == HAL_OUT_OF_MEMORY);
}

TEST_CASE("a SPIR-V kernel runs, its arguments laid out from the module") {
  auto d = open_ze();
  auto m = unwrap(d.load_module(HAL_MODULE_SPIRV, basic().target, basic().data, basic().size, "basic.spv"));
  auto k = unwrap(m.kernel("hc_vector_add"));
  auto info = unwrap(k.info());
  CHECK(info.arg_count == 4);
  CHECK(info.args_size == 32);
  auto args = unwrap(k.args());
  CHECK(args[0].kind == HAL_ARG_POINTER);
  CHECK(args[3].kind == HAL_ARG_VALUE);
  CHECK(args[3].offset == 24);
  auto s = unwrap(d.create_stream());
  const int n = 1000;
  auto a = unwrap(d.allocate(n * 4)), b = unwrap(d.allocate(n * 4)), c = unwrap(d.allocate(n * 4));
  std::vector<float> x(n), y(n), z(n, -1);
  for (int i = 0; i < n; ++i) x[i] = float(i), y[i] = 0.5f * float(i);
  REQUIRE(s.write(a, 0, x.data(), n * 4).ok());
  REQUIRE(s.write(b, 0, y.data(), n * 4).ok());
  struct {
    uint64_t a, b, c;
    int64_t n;
  } blob{unwrap(a.info()).device_address, unwrap(b.info()).device_address, unwrap(c.info()).device_address, n};
  REQUIRE(s.launch(k, {(n + 255) / 256}, {256}, &blob, sizeof blob).ok());
  REQUIRE(s.read(c, 0, z.data(), n * 4).ok());
  for (int i = 0; i < n; ++i) REQUIRE(z[i] == 1.5f * float(i));
  CHECK(fake().count("zeKernelSetArgumentValue") == 4);
  CHECK(fake().count("zeCommandListAppendLaunchKernel") == 1);
  // The fake faults as a GPU would on an address outside every allocation.
  auto wild = blob;
  wild.c = 0x1000;
  auto fault = s.launch(k, {1}, {256}, &wild, sizeof wild);
  REQUIRE(!fault.ok());
  CHECK(fault.error().status() == HAL_DEVICE_ERROR);
  CHECK(contains(fault.error().message(), "zeKernelSetArgumentValue"));
  auto missing = m.kernel("hc_no_such_kernel");
  REQUIRE(!missing.ok());
  CHECK(missing.error().status() == HAL_NOT_FOUND);
  CHECK(contains(missing.error().message(), "hc_vector_add"));  // it lists what the module has
}

TEST_CASE("modules: wrong target and bad bytes are refused before the driver, a build failure carries its log") {
  auto d = open_ze();
  auto foreign = d.load_module(HAL_MODULE_SPIRV, "intel_0bd5", basic().data, basic().size, "foreign.spv");
  REQUIRE(!foreign.ok());
  CHECK(foreign.error().status() == HAL_ARCH_MISMATCH);
  CHECK(contains(foreign.error().message(), "intel_0bd5"));
  CHECK(contains(foreign.error().message(), "ze_ffff_0001"));
  std::vector<uint32_t> junk = {0x07230203, 0x00010000, 0, 10, 0, 0xffff0001};
  auto corrupt = d.load_module(HAL_MODULE_SPIRV, "spirv64", junk.data(), junk.size() * 4, "junk.spv");
  REQUIRE(!corrupt.ok());
  CHECK(corrupt.error().status() == HAL_INVALID_ARGUMENT);
  CHECK(contains(corrupt.error().message(), "junk.spv"));
  // What the SPIR-V reader refuses, each with its reason, none reaching the driver.
  const std::vector<std::pair<std::vector<uint8_t>, const char*>> bad = {
      {{0x03, 0x02, 0x23, 0x07, 0, 0, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1}, "whole number of 4-byte words"},
      {std::vector<uint8_t>(20, 0), "magic number"},
      {{0x03, 0x02, 0x23, 0x07, 0, 0, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0}, "no kernel entry point"},
  };
  for (const auto& [bytes, why] : bad) {
    auto r = d.load_module(HAL_MODULE_SPIRV, "spirv64", bytes.data(), bytes.size(), "bad.spv");
    REQUIRE(!r.ok());
    CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(contains(r.error().message(), why), r.error().message());
  }
  CHECK(fake().count("zeModuleCreate") == 0);
  fake().inject("module_build");
  auto failed = d.load_module(HAL_MODULE_SPIRV, "spirv64", basic().data, basic().size, "basic.spv");
  REQUIRE(!failed.ok());
  CHECK(failed.error().status() == HAL_DEVICE_ERROR);
  CHECK(contains(failed.error().message(), "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE"));
  CHECK(contains(failed.error().message(), "undefined reference to `__hc_missing_builtin'"));
  CHECK(fake().count("zeModuleBuildLogDestroy") == 1);
}

TEST_CASE("events: order across streams and timestamps") {
  auto d = open_ze();
  auto s1 = unwrap(d.create_stream()), s2 = unwrap(d.create_stream());
  auto e0 = unwrap(d.create_event()), e1 = unwrap(d.create_event());
  CHECK(unwrap(e0.query()));  // never recorded: complete
  REQUIRE(s1.record(e0).ok());
  auto b = unwrap(d.allocate(4096));
  REQUIRE(s1.fill<uint32_t>(b, 0, 4096, 7u).ok());
  REQUIRE(s1.record(e1).ok());
  REQUIRE(s2.wait(e1).ok());
  REQUIRE(e1.synchronize().ok());
  float ms = unwrap(e1.elapsed_since(e0));
  CHECK(ms >= 0.0f);
  CHECK(fake().count("zeCommandListAppendWriteGlobalTimestamp") == 2);
  CHECK(fake().count("zeCommandListAppendWaitOnEvents") == 1);
}

TEST_CASE("partitions are whole sub-devices, and their streams go to their tile") {
  auto d = open_ze();
  auto caps = unwrap(d.partition_caps());
  CHECK(caps.mechanism == HAL_PARTITION_SUB_DEVICE);
  CHECK(caps.enforced == 1);
  CHECK(caps.min_units == 32);
  CHECK(caps.step_units == 32);
  auto [comm, rest] = unwrap(d.split(20));
  auto ci = unwrap(comm.info()), ri = unwrap(rest.info());
  CHECK(ci.units_granted == 32);  // 20 EUs round up to one tile
  CHECK(ci.mechanism == HAL_PARTITION_SUB_DEVICE);
  CHECK(ci.enforced == 1);
  CHECK(ri.units_granted == 32);
  CHECK(ri.first_unit == 32);
  auto s = unwrap(d.create_stream(&rest));
  CHECK(fake().last_list_device() == 2);  // sub-device 1
  auto again = d.split(1);
  REQUIRE(!again.ok());  // both tiles are taken
}

TEST_CASE("without sub-devices, partitions are soft caps") {
  open_ze();  // initialises the registry with the fake
  fake().set_tiles(0);
  auto d = unwrap(halcyon::Device::open("ze:0"));
  fake().set_tiles(2);
  CHECK(!d.has("partition.enforced"));
  auto caps = unwrap(d.partition_caps());
  CHECK(caps.mechanism == HAL_PARTITION_SOFT_CAP);
  CHECK(caps.enforced == 0);
  CHECK(caps.min_units == 1);
  auto [comm, rest] = unwrap(d.split(20));
  auto ci = unwrap(comm.info()), ri = unwrap(rest.info());
  CHECK(ci.units_granted == 20);
  CHECK(ci.mechanism == HAL_PARTITION_SOFT_CAP);
  CHECK(ci.enforced == 0);
  CHECK(ri.units_granted == 44);
  auto s = unwrap(d.create_stream(&comm));
  auto si = unwrap(s.info());
  CHECK(si.units == 20);  // what a persistent grid on this stream is sized by
  CHECK(fake().last_list_device() == 0);  // the root device: nothing enforces the cap
}

TEST_CASE("a lost device makes every later call an error that says so") {
  auto d = open_ze();
  auto s = unwrap(d.create_stream());
  auto b = unwrap(d.allocate(64));
  fake().inject("device_lost");
  auto st = s.fill<uint32_t>(b, 0, 64, 1u);
  REQUIRE(!st.ok());
  CHECK(st.error().status() == HAL_DEVICE_ERROR);
  CHECK(contains(st.error().message(), "ZE_RESULT_ERROR_DEVICE_LOST"));
  CHECK(contains(st.error().message(), "the device was lost"));
  auto sync = s.synchronize();
  REQUIRE(!sync.ok());
  CHECK(contains(sync.error().message(), "DEVICE_LOST"));
  fake().reset();  // the handles above are released with a working device
}
