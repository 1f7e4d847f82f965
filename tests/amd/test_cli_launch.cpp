// `halcyon launch` end to end: a hand-written code object run on amdgpu-sim with .npy inputs,
// and the errors for arguments that do not match the kernel's metadata.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <halcyon/runtime/npy.hpp>

#include "sim_harness.hpp"

using namespace amdtest;

namespace {

// One folder per process: ctest may run the built-in and the plugin variants at once.
std::string work_dir() {
  std::string d = HALCYON_LAUNCH_WORK_DIR;
  mkdir(d.c_str(), 0777);
  d += '/';  // appended in two steps: `"/" + std::string&&` trips GCC 12 -O3 -Wrestrict (GCC bug 105329)
  d += std::to_string(getpid());
  mkdir(d.c_str(), 0777);
  return d;
}

void write_f32(const std::string& path, const std::vector<float>& v) {
  auto st = halcyon::rt::write_npy(path, "<f4", {int64_t(v.size())}, v.data(), v.size() * 4);
  REQUIRE_MESSAGE(st.ok(), path);
}

// Runs the CLI; returns its exit status and puts its output (stdout and stderr) in *out.
int cli(const std::string& args, std::string* out) {
  std::string log = work_dir() + "/cli.log";
  std::string cmd = std::string(HALCYON_CLI) + " launch " + args + " > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return rc;
}

}  // namespace

TEST_CASE("halcyon launch runs a code object on .npy files and writes every buffer back") {
  std::string dir = work_dir();
  const uint32_t n = 300;
  auto a = random_floats(n, 60), b = random_floats(n, 61);
  write_f32(dir + "/a.npy", a);
  write_f32(dir + "/b.npy", b);
  write_f32(dir + "/c.npy", std::vector<float>(n, -1.0f));
  std::string co = std::string(HALCYON_GCN_CO_DIR) + "/halcyon_vector_add_f32.gfx942.hsaco";
  std::string common = "--device amdgpu-sim:gfx942 --module " + co + " --kernel halcyon_vector_add_f32 --grid 2 --block 256 ";
  std::string args = "--arg buf:a=" + dir + "/a.npy --arg buf:b=" + dir + "/b.npy --arg buf:c=" + dir + "/c.npy ";
  std::string out;
  REQUIRE_MESSAGE(cli(common + args + "--arg u32:300 --out " + dir + "/out", &out) == 0, out);
  CHECK(out.find("warning") == std::string::npos);  // e.g. objects outliving their device
  CHECK(out.find("wrote " + dir + "/out/c.npy") != std::string::npos);
  auto read = halcyon::rt::read_npy(dir + "/out/c.npy");
  REQUIRE(read.ok());
  const halcyon::rt::NpyArray& c = *read;
  REQUIRE(c.shape == std::vector<int64_t>{n});
  REQUIRE(c.descr == "<f4");
  std::vector<float> got(n);
  std::memcpy(got.data(), c.data.data(), n * 4);
  for (uint32_t i = 0; i < n; ++i) REQUIRE(got[i] == a[i] + b[i]);
  CHECK(halcyon::rt::read_npy(dir + "/out/a.npy").ok());  // inputs are written back too

  SUBCASE("too few arguments") {
    CHECK(cli(common + args + "--out " + dir + "/out", &out) != 0);
    CHECK(out.find("takes 4 arguments, 3 were given") != std::string::npos);
  }
  SUBCASE("a scalar where a buffer belongs") {
    CHECK(cli(common + "--arg u32:1 --arg buf:b=" + dir + "/b.npy --arg buf:c=" + dir + "/c.npy --arg u32:3 --out " + dir, &out) != 0);
    CHECK(out.find("argument 0 of 'halcyon_vector_add_f32' is a buffer") != std::string::npos);
  }
  SUBCASE("a 64-bit scalar where a 32-bit one belongs") {
    CHECK(cli(common + args + "--arg u64:300 --out " + dir, &out) != 0);
    CHECK(out.find("is a 4-byte value, but u64:300 gives a 8-byte value") != std::string::npos);
  }
  SUBCASE("a code object for another architecture") {
    std::string other = std::string(HALCYON_GCN_CO_DIR) + "/halcyon_vector_add_f32.gfx90a.hsaco";
    CHECK(cli("--device amdgpu-sim:gfx942 --module " + other + " --kernel halcyon_vector_add_f32 --grid 2 --block 256 " +
                  args + "--arg u32:300 --out " + dir,
              &out) != 0);
    CHECK(out.find("HAL_ARCH_MISMATCH") != std::string::npos);
  }
}
