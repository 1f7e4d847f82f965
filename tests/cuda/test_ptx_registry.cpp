// The PTX embedded by kernels/ptx: every image is there, tagged, matches its .target, and
// carries a whole cubin.
#include <doctest/doctest.h>

#include <halcyon/ptx_kernels.hpp>

#include "ptx_info.hpp"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

TEST_CASE("ptx registry: test kernels are embedded for their targets") {
  CHECK(halcyon::ptx::find("vector_add", "sm_90a"));
  CHECK(halcyon::ptx::find("vector_add", "sm_80"));
  CHECK(halcyon::ptx::find("empty", "sm_80"));
  CHECK(halcyon::ptx::find("smid_record", "sm_80"));
  CHECK(halcyon::ptx::find("vector_add", "sm_70") == nullptr);
  for (const auto& img : halcyon::ptx::all()) {
    halcyon::cuda::PtxInfo info;
    std::string why;
    REQUIRE_MESSAGE(halcyon::cuda::parse_ptx(std::string(img.text, img.size), &info, &why), why);
    CHECK_MESSAGE(info.target == img.target, img.name);
    CHECK(std::string(img.text).size() == img.size);
    // The cubin ptxas made of it rides along, whole (launchers load it on that exact target).
    REQUIRE_MESSAGE(img.cubin_size > 0, img.name, " ", img.target);
    CHECK_MESSAGE(halcyon::cuda::check_cubin_image(img.cubin, img.cubin_size) == "", img.name, " ", img.target);
  }
}

// best_for with the CUDA backend's rule (check_target, what hal_device_can_run answers on a
// device of compute capability major.minor).
const halcyon::ptx::Image* best_for(const char* name, const char* arch, int major, int minor) {
  return halcyon::ptx::best_for(name, arch, [&](const halcyon::ptx::Image& i) {
    return halcyon::cuda::check_target(i.target, true, major, minor).empty();
  });
}

TEST_CASE("ptx registry: best_for picks the exact tag, else the newest that runs") {
  auto* h = best_for("vector_add", "sm_90a", 9, 0);
  REQUIRE(h);
  CHECK(std::string(h->target) == "sm_90a");
  auto* a = best_for("vector_add", "sm_86", 8, 6);
  REQUIRE(a);
  CHECK(std::string(a->target) == "sm_80");
  CHECK(best_for("vector_add", "sm_75", 7, 5) == nullptr);
  auto* s = best_for("smid_record", "sm_90a", 9, 0);
  REQUIRE(s);
  CHECK(std::string(s->target) == "sm_80");
  auto* blackwell = best_for("vector_add", "sm_100a", 10, 0);  // sm_90a never runs there
  REQUIRE(blackwell);
  CHECK(std::string(blackwell->target) == "sm_80");
}

TEST_CASE("cubin check: ptxas output passes; truncated or foreign images are refused") {
  std::ifstream in(std::string(HALCYON_PTX_BINARY_DIR) + "/vector_add.sm_80.cubin", std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> cubin((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(cubin.size() > 64);
  CHECK(halcyon::cuda::check_cubin_image(cubin.data(), cubin.size()) == "");
  CHECK(halcyon::cuda::check_cubin_image(cubin.data(), 16).find("too short") != std::string::npos);
  CHECK(halcyon::cuda::check_cubin_image(cubin.data(), cubin.size() - 1).find("past the end") != std::string::npos);
  std::vector<char> other = cubin;
  other[18] = 62;  // EM_X86_64
  CHECK(halcyon::cuda::check_cubin_image(other.data(), other.size()).find("EM_CUDA") != std::string::npos);
  const char text[] = "this is not a cubin at all, but it is long enough to hold an ELF header......";
  CHECK(halcyon::cuda::check_cubin_image(text, sizeof text).find("not an ELF") != std::string::npos);
  // A fatbin header whose payload is longer than the data.
  unsigned char fat[32] = {0x50, 0xED, 0x55, 0xBA, 1, 0, 16, 0, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0};
  CHECK(halcyon::cuda::check_cubin_image(fat, sizeof fat).find("fatbin") != std::string::npos);
  // A payload of 2^64 - 8 bytes: header + payload wraps to 8, which once passed as "fits".
  unsigned char wrap[16] = {0x50, 0xED, 0x55, 0xBA, 1, 0, 16, 0, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  CHECK(halcyon::cuda::check_cubin_image(wrap, sizeof wrap).find("a payload of 18446744073709551608 bytes") !=
        std::string::npos);
  // A whole fatbin: its header and payload exactly fill the data.
  unsigned char whole[24] = {0x50, 0xED, 0x55, 0xBA, 1, 0, 16, 0, 8, 0, 0, 0, 0, 0, 0, 0};
  CHECK(halcyon::cuda::check_cubin_image(whole, sizeof whole) == "");
}
