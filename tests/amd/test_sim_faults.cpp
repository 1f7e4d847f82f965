// The simulator reports what it cannot or must not run: an instruction it does not know (by
// name and address), an out-of-bounds access (address and buffer), registers past the
// descriptor's allocation, LDS past the workgroup's size, endless loops, and code objects for
// another architecture. None of these may be skipped or crash.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "executor.hpp"
#include "sim_harness.hpp"

using namespace amdtest;

namespace {

halcyon::Error launch_error(Sim& sim, const halcyon::Kernel& k, uint32_t grid, uint32_t block,
                            const halcyon::ArgPack& args) {
  auto st = sim.stream.launch(k, {grid}, {block}, args);
  REQUIRE_MESSAGE(!st, "the launch was expected to fail");
  return st.error();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("an out-of-bounds store names the instruction, the address and the buffer it missed") {
  Sim sim("gfx942");
  auto co = test_object("vector_ops", "gfx942");
  auto mod = sim.load(co, "vector_ops");
  auto k = must(mod.kernel("vector_add"), "kernel");
  const uint32_t n = 256;
  auto a = random_floats(n, 8);
  auto da = sim.upload(a), db = sim.upload(a);
  auto dc = must(sim.dev.allocate(100 * sizeof(float)), "allocate");  // too small on purpose
  halcyon::ArgPack args;
  args.pointer(da).pointer(db).pointer(dc).value(n);
  auto e = launch_error(sim, k, 1, 256, args);
  CHECK(e.status() == HAL_DEVICE_ERROR);
  std::string m = e.message();
  CAPTURE(m);
  CHECK(has(m, "global_store_dword"));
  CHECK(has(m, "out-of-bounds write"));
  CHECK(has(m, "past the end of buffer #"));
  CHECK(has(m, "(400 bytes)"));
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", static_cast<unsigned long long>(dc.address() + 400));
  CHECK(has(m, addr));  // lane 100 is the first one past the end
}

namespace {

// The hand-written faulting kernels (kernels/faults.s), each launched as one workgroup of 64 lanes.
struct Faults {
  Sim sim{"gfx942"};
  halcyon::Module mod = sim.load(test_object("faults", "gfx942"), "faults");
  halcyon::Buffer scratch = must(sim.dev.allocate(64), "allocate");
  halcyon::Error launch(const char* kernel) {
    halcyon::ArgPack args;
    args.pointer(scratch);
    return launch_error(sim, must(mod.kernel(kernel), "kernel"), 1, 64, args);
  }
};

}  // namespace

TEST_CASE("faulting hand-written kernels are reported, never skipped") {
  Faults f;
  SUBCASE("unknown instruction, by name and address") {
    auto e = f.launch("fault_unsupported");
    CAPTURE(e.message());
    CHECK(has(e.message(), "v_sin_f32"));
    CHECK(has(e.message(), "is not supported by the simulator"));
    CHECK(has(e.message(), " at 0x"));
  }
  SUBCASE("a VGPR past the descriptor's allocation") {
    auto e = f.launch("fault_vgpr");
    CAPTURE(e.message());
    CHECK(has(e.message(), "uses v40 but the kernel descriptor allocates 4 VGPRs"));
  }
  SUBCASE("LDS past the workgroup's allocation") {
    auto e = f.launch("fault_lds");
    CAPTURE(e.message());
    CHECK(has(e.message(), "ds_write_b32"));
    CHECK(has(e.message(), "LDS access of 4 bytes at 0x10000 is out of bounds"));
  }
}

// The budget is the backend option amdgpu-sim.max_instructions, fixed when hal_init creates the
// backend: this case is skipped in the default run and run by CTest amd.sim_instruction_budget
// (--no-skip, with --backend-option=amdgpu-sim.max_instructions=100000 given to main.cpp).
TEST_CASE("an endless loop hits the instruction budget of amdgpu-sim.max_instructions" * doctest::skip()) {
  auto e = Faults().launch("fault_loop");
  CAPTURE(e.message());
  CHECK(has(e.message(), "did not finish within 100000 instructions"));
}

TEST_CASE("amdgpu-sim options: a malformed value is refused, naming the option and the value") {
  halcyon::amdsim::LaunchParams p{};
  CHECK(halcyon::amdsim::sim_options(nullptr, nullptr, &p).empty());
  CHECK(p.max_instructions == 0);  // not given: the default
  CHECK(halcyon::amdsim::sim_options("100000", "/tmp/cov.txt", &p).empty());
  CHECK(p.max_instructions == 100000);
  for (const char* bad : {"", "abc", "0", "12x", "-5", "4611686018427387905"}) {
    std::string why = halcyon::amdsim::sim_options(bad, nullptr, &p);
    CAPTURE(bad);
    CHECK(has(why, std::string("amdgpu-sim.max_instructions='") + bad + "' is not a whole number"));
  }
  CHECK(has(halcyon::amdsim::sim_options(nullptr, "", &p), "amdgpu-sim.coverage is empty"));
}

TEST_CASE("halcyon refuses a bad amdgpu-sim option with one line and exit status 2") {
  std::string log = "/tmp/halcyon_amd_sim_option_" + std::to_string(getpid()) + ".log";
  std::string cmd = std::string(HALCYON_CLI) + " --backend-option amdgpu-sim.max_instructions=lots version > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(log.c_str());
  CAPTURE(out);
  CHECK(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 2);
  CHECK(has(out, "amdgpu-sim.max_instructions='lots' is not a whole number in [1, 2^62]"));
}

TEST_CASE("a code object for another architecture is refused, naming both") {
  Sim sim("gfx942");
  auto co = test_object("vector_ops", "gfx90a");
  auto r = sim.dev.load_module(HAL_MODULE_HSACO, "gfx90a", co.data(), co.size(), "vector_ops.gfx90a");
  REQUIRE(!r);
  CHECK(r.error().status() == HAL_ARCH_MISMATCH);
  CHECK(has(r.error().message(), "gfx90a"));
  CHECK(has(r.error().message(), "gfx942"));
  // A wrong tag does not get past the ELF header either.
  auto r2 = sim.dev.load_module(HAL_MODULE_HSACO, "gfx942", co.data(), co.size(), "mislabelled");
  REQUIRE(!r2);
  CHECK(r2.error().status() == HAL_ARCH_MISMATCH);
  CHECK(has(r2.error().message(), "its code object is for gfx90a"));
}

TEST_CASE("device selectors and unknown kernels") {
  for (const char* uri : {"amdgpu-sim", "amdgpu-sim:0", "amdgpu-sim:gfx942", "amdgpu-sim:1", "amdgpu-sim:gfx90a"}) {
    CAPTURE(uri);
    auto d = must(halcyon::Device::open(uri), "open");
    auto info = must(d.info(), "info");
    std::string want = (std::string(uri).find('1') != std::string::npos || std::string(uri).find("90a") != std::string::npos)
                           ? "gfx90a" : "gfx942";
    CHECK(std::string(info.arch) == want);
    CHECK(d.has("module.hsaco"));
    CHECK(info.simd_width == 64);
  }
  CHECK(!halcyon::Device::open("amdgpu-sim:gfx1100"));
  Sim sim("gfx90a");
  auto co = test_object("vector_ops", "gfx90a");
  auto mod = sim.load(co, "vector_ops");
  auto k = mod.kernel("no_such_kernel");
  REQUIRE(!k);
  CHECK(k.error().status() == HAL_NOT_FOUND);
  CHECK(has(k.error().message(), "vector_add"));
}
