// The PTX embedded by kernels/ptx: every image is there, tagged, and matches its .target.
#include <doctest/doctest.h>

#include <halcyon/ptx_kernels.hpp>

#include "ptx_info.hpp"

#include <string>

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
  }
}

TEST_CASE("ptx registry: best_for picks the exact tag, else the newest portable one") {
  auto* h = halcyon::ptx::best_for("vector_add", "sm_90a");
  REQUIRE(h);
  CHECK(std::string(h->target) == "sm_90a");
  auto* a = halcyon::ptx::best_for("vector_add", "sm_86");
  REQUIRE(a);
  CHECK(std::string(a->target) == "sm_80");
  CHECK(halcyon::ptx::best_for("vector_add", "sm_75") == nullptr);
  auto* s = halcyon::ptx::best_for("smid_record", "sm_90a");
  REQUIRE(s);
  CHECK(std::string(s->target) == "sm_80");
  auto* blackwell = halcyon::ptx::best_for("vector_add", "sm_100a");  // sm_90a never runs there
  REQUIRE(blackwell);
  CHECK(std::string(blackwell->target) == "sm_80");
}
