// The FP8 grouped GEMM kernel, on both targets, on the codes the conformance suite's random
// inputs rarely or never hold: every e4m3fn code, -0 (0x80: gfx942 must map it to +0, as fnuz it
// is NaN; gfx90a decodes it to the bf16 -0), the NaNs 0x7f / 0xff (which must stay NaN: as bf16
// on gfx90a, not 480), the largest +-448 and the denormals (gfx90a: m * 2^-9 exactly), against
// the CPU reference; rows past the experts stay untouched.
#include <halcyon/kernels/reference/e4m3.hpp>
#include <halcyon/kernels/reference/moe_fp8.hpp>
#include <halcyon/ops/op.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "sim_harness.hpp"

using namespace amdtest;
namespace ref = halcyon::ref;
using halcyon::ops::DType;
using halcyon::ops::Tensor;

TEST_CASE("FP8 down GEMM on gfx942 and gfx90a: -0, NaN, +-448 and denormal codes match the reference") {
  // Two experts (rows [0, 20), [20, 37)) of a 40-row capacity; K = 136: a partial last group;
  // H = 160: a partial column tile and two weight scale blocks.
  const int64_t R = 40, I = 136, H = 160, EL = 2, IG = 2, HB = 2;
  const std::vector<int32_t> offsets{0, 20, 37};
  std::mt19937 rng(7);
  std::vector<ref::e4m3> a(size_t(R * I)), w(size_t(EL * H * I));
  for (size_t i = 0; i < a.size(); ++i) a[i].bits = uint8_t(i % 254 < 127 ? i % 254 : i % 254 + 1);  // no NaN
  for (auto& x : w) {
    x.bits = uint8_t(rng() % 256);
    if ((x.bits & 0x7f) == 0x7f) x.bits = 0x80;  // -0 for the NaNs: many more of them
  }
  // Denormals and zeros only (+-m * 2^-9, m = k % 8) in token row 7 and in expert 1's weight row 3:
  // beside the normal codes their products vanish, so these outputs alone check their decoding.
  for (int64_t k = 0; k < I; ++k) {
    const uint8_t d = uint8_t((k % 8) | (k % 16 >= 8 ? 0x80 : 0));
    a[size_t(7 * I + k)].bits = d;
    w[size_t((1 * H + 3) * I + k)].bits = d;
  }
  a[size_t(5 * I + 3)].bits = 0x7f;   // NaN in row 5
  a[size_t(25 * I + 130)].bits = 0xff;  // and in row 25, in the partial group
  std::vector<float> a_scale(size_t(R * IG)), w_scale(size_t(EL * HB * IG));
  for (auto& s : a_scale) s = std::ldexp(1.0f + float(rng() % 16) / 16, -9);
  for (auto& s : w_scale) s = std::ldexp(1.0f + float(rng() % 16) / 16, -9);
  std::vector<ref::bf16> want(size_t(R * H));
  REQUIRE(ref::moe_grouped_gemm_fp8(a.data(), a_scale.data(), w.data(), w_scale.data(), offsets.data(), EL + 1, EL, R, I,
                                    H, want.data())
              .ok());

  for (const std::string arch : {"gfx942", "gfx90a"}) {
    CAPTURE(arch);
    Sim sim(arch);
    std::map<std::string, Tensor, std::less<>> t{
        {"a", Tensor{sim.upload(a), 0, DType::e4m3, {R, I}}},
        {"a_scale", Tensor{sim.upload(a_scale), 0, DType::f32, {R, IG}}},
        {"w", Tensor{sim.upload(w), 0, DType::e4m3, {EL, H, I}}},
        {"w_scale", Tensor{sim.upload(w_scale), 0, DType::f32, {EL, HB, IG}}},
        {"expert_offsets", Tensor{sim.upload(offsets), 0, DType::i32, {EL + 1}}},
        {"out", Tensor{sim.poisoned<uint16_t>(size_t(R * H)), 0, DType::bf16, {R, H}}}};
    must(halcyon::ops::run_op(sim.dev, sim.stream, "moe_grouped_gemm_fp8", t), "moe_grouped_gemm_fp8");
    const auto out = sim.download<uint16_t>(t["out"].buffer, size_t(R * H));
    const auto poison = sim.download<uint16_t>(sim.poisoned<uint16_t>(2), 2);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t n = 0; n < H; ++n) {
        CAPTURE(r);
        CAPTURE(n);
        const size_t i = size_t(r * H + n);
        if (r >= offsets.back()) {
          REQUIRE(out[i] == poison[i % 2]);  // not an expert's row: not written
          continue;
        }
        const float g = from_bf16(out[i]), e = from_bf16(want[i].bits);
        if (r == 5 || r == 25) {
          REQUIRE(std::isnan(g));
          continue;
        }
        // The reference sums in fp64 and rounds once; the kernel sums groups in fp32. The
        // denormal rows' outputs are small (about 1e-4): relative only.
        const bool denormal = r == 7 || (r >= offsets[1] && n == 3);
        REQUIRE(std::fabs(g - e) <= 8e-3f * std::fabs(e) + (denormal ? 1e-8f : 1e-3f));
      }
  }
}
