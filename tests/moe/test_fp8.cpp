// The e4m3 conversions (e4m3.hpp) and the FP8 references (moe_fp8.hpp): rounding and
// saturation rules, block-scale semantics against a plain dequantize-then-multiply, scales of
// zero and of extreme magnitude, empty experts, argument errors; moe_permute_fp8 against the
// composition it stands for (quantize, then permute); moe_grouped_gemm_fp8_swiglu_quant against
// its composition (the SwiGLU GEMM, then moe_quantize_fp8).
#include <doctest/doctest.h>

#include <halcyon/kernels/reference/moe_fp8.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <random>
#include <vector>

namespace ref = halcyon::ref;
using ref::e4m3;

namespace {
uint8_t enc(float f) { return ref::float_to_e4m3(f).bits; }
float dec(uint8_t b) { return ref::e4m3_to_float(e4m3{b}); }
}  // namespace

TEST_CASE("e4m3: every code decodes and re-encodes to itself (both NaN codes to 0x7f, the one NaN written)") {
  for (int b = 0; b < 256; ++b) {
    const float f = dec(uint8_t(b));
    if ((b & 0x7f) == 0x7f) {
      CHECK(std::isnan(f));
      CHECK(enc(f) == 0x7f);
    } else {
      INFO("code ", b);
      CHECK(std::isfinite(f));
      CHECK(enc(f) == uint8_t(b));
    }
  }
  CHECK(dec(0x7e) == 448.f);
  CHECK(dec(0x01) == 0x1p-9f);
  CHECK(dec(0x08) == 0x1p-6f);
  CHECK(dec(0x38) == 1.f);
}

TEST_CASE("e4m3: round to nearest even, saturate to +-448, never NaN from a finite value") {
  CHECK(enc(1.0625f) == 0x38);     // tie between 1 (even) and 1.125: 1
  CHECK(enc(1.1875f) == 0x3a);     // tie between 1.125 and 1.25 (even): 1.25
  CHECK(enc(1.07f) == 0x39);       // nearer 1.125
  CHECK(enc(0x1p-10f) == 0x00);    // half the smallest denormal: ties to 0
  CHECK(enc(3 * 0x1p-10f) == 0x02);  // between 1 and 2 units of 2^-9: the even one
  CHECK(enc(15 * 0x1p-10f) == 0x08);  // between the largest denormal and 2^-6: 2^-6
  CHECK(enc(-0.0f) == 0x80);
  CHECK(enc(447.f) == 0x7e);
  CHECK(enc(464.f) == 0x7e);
  CHECK(enc(1e30f) == 0x7e);
  CHECK(enc(-1e30f) == 0xfe);
  CHECK(enc(std::numeric_limits<float>::infinity()) == 0x7e);
  CHECK(enc(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(enc(-std::numeric_limits<float>::quiet_NaN()) == 0x7f);  // the sign of a NaN is dropped
  CHECK(enc(std::bit_cast<float>(0xffc00000u)) == 0x7f);          // x86's default NaN (inf / inf)
  // Against brute force: the nearest code (ties to the even code) for random magnitudes.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-12.f, 9.5f);
  for (int i = 0; i < 20000; ++i) {
    const float f = std::exp2(u(rng)) * (i & 1 ? -1.f : 1.f);
    int best = -1;
    float best_d = INFINITY;
    for (int b = 0; b < 256; ++b) {
      if ((b & 0x7f) == 0x7f) continue;
      const float d = std::fabs(dec(uint8_t(b)) - std::fmin(std::fmax(f, -448.f), 448.f));
      if (d < best_d || (d == best_d && (b & 1) == 0 && dec(uint8_t(b)) != 0)) best = b, best_d = d;
    }
    INFO("f = ", f);
    CHECK(dec(enc(f)) == dec(uint8_t(best)));
  }
}

TEST_CASE("moe_quantize_fp8: amax / 448 scales, zero groups, extreme magnitudes, short last group") {
  const int64_t R = 3, K = 300, KG = 3;
  std::vector<ref::bf16> x(size_t(R * K));
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.f, 1.f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const float mag = r == 0 ? 1.f : r == 1 ? 0x1p100f : 0x1p-100f;
      x[size_t(r * K + k)] = ref::float_to_bf16(k >= 128 && k < 256 && r == 0 ? 0.f : n(rng) * mag);
    }
  std::vector<e4m3> q(size_t(R * K), e4m3{0x55});
  std::vector<float> s(size_t(R * KG), -1.f);
  REQUIRE(ref::moe_quantize_fp8(x.data(), R, K, q.data(), s.data()));
  CHECK(s[1] == 0.f);  // row 0, group 1: all zeros
  for (int64_t k = 128; k < 256; ++k) CHECK(q[size_t(k)].bits == 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t g = 0; g < KG; ++g) {
      float amax = 0;
      for (int64_t k = g * 128; k < std::min<int64_t>(K, g * 128 + 128); ++k)
        amax = std::max(amax, std::fabs(ref::bf16_to_float(x[size_t(r * K + k)])));
      CHECK(s[size_t(r * KG + g)] == amax / 448.f);
      for (int64_t k = g * 128; k < std::min<int64_t>(K, g * 128 + 128); ++k) {
        const float v = dec(q[size_t(r * K + k)].bits);
        CHECK(std::isfinite(v));
        // Dequantized within half an e4m3 step (2^-4 relative) or the denormal step.
        const float xv = ref::bf16_to_float(x[size_t(r * K + k)]), sc = s[size_t(r * KG + g)];
        if (sc > 0) CHECK(std::fabs(v * sc - xv) <= std::max(std::fabs(xv) * 0.0625f, 0x1p-10f * sc) * 1.0001f);
      }
    }
  CHECK_FALSE(ref::moe_quantize_fp8(x.data(), R, 0, q.data(), s.data()));
}

TEST_CASE("moe_quantize_fp8: special values (amax skips NaN; inf gives scale inf; one NaN code, never lost)") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Row 0: 1, -2, +inf, -3 (a group with an infinity). Row 1: 0.5, NaN, -NaN, -1 (NaNs beside
  // values). Row 2: -0, +0, -NaN, 0 (only zeros and a NaN: scale 0). Row 3: -inf, NaN, +0, -0.
  const float rows[4][4] = {{1, -2, inf, -3}, {0.5f, nan, -nan, -1}, {-0.f, 0, -nan, 0}, {-inf, nan, 0, -0.f}};
  std::vector<ref::bf16> x;
  for (auto& r : rows)
    for (float v : r) x.push_back(ref::float_to_bf16(v));
  std::vector<e4m3> q(16, e4m3{0x55});
  std::vector<float> s(4, -1.f);
  REQUIRE(ref::moe_quantize_fp8(x.data(), 4, 4, q.data(), s.data()));
  const uint8_t want[4][4] = {{0x00, 0x80, 0x7f, 0x80},   // finite / inf = +-0, inf / inf = NaN
                              {0x76, 0x7f, 0x7f, 0xfe},   // scale 1 / 448: 0.5 -> 224, -1 -> -448
                              {0x00, 0x00, 0x7f, 0x00},   // scale 0: +0 for the zeros, the NaN kept
                              {0x7f, 0x7f, 0x00, 0x80}};  // -inf / inf = NaN
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 4; ++k) {
      INFO("row ", r, " column ", k);
      CHECK(q[size_t(4 * r + k)].bits == want[r][k]);
    }
  CHECK(s[0] == inf);
  CHECK(s[1] == 1.f / 448.f);
  CHECK(s[2] == 0.f);
  CHECK(s[3] == inf);
}

TEST_CASE("moe_permute_fp8: quantize then permute, bit for bit; a local expert range; bad ids refused unwritten") {
  const int64_t T = 37, K = 3, H = 300, HG = 3, E = 16;
  std::mt19937 rng(9);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<ref::bf16> x(size_t(T * H));
  for (size_t i = 0; i < x.size(); ++i) x[i] = ref::float_to_bf16(i / 128 % 5 == 2 ? 0.f : n(rng) * 3.f);
  std::vector<int32_t> ids(size_t(T * K));
  std::uniform_int_distribution<int32_t> pick(0, int32_t(E - 1));
  for (auto& id : ids) id = pick(rng);
  // The composition it stands for: the token rows quantized, then their rows moved by the plan.
  std::vector<e4m3> tq(size_t(T * H));
  std::vector<float> ts(size_t(T * HG));
  REQUIRE(ref::moe_quantize_fp8(x.data(), T, H, tq.data(), ts.data()));
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, E}, {5, 9}, {15, 16}}) {
    CAPTURE(begin);
    const int64_t EL = end - begin;
    std::vector<int32_t> counts(static_cast<size_t>(EL)), offsets(size_t(EL + 1)), nr(1);
    std::vector<int32_t> r2s(size_t(T * K), -7), s2r(size_t(T * K));
    std::vector<e4m3> q(size_t(T * K * H), e4m3{0x55});
    std::vector<float> sc(size_t(T * K * HG), -1.f);
    REQUIRE(ref::moe_permute_fp8(x.data(), ids.data(), T, K, H, E, begin, end, q.data(), sc.data(), counts.data(),
                                 offsets.data(), r2s.data(), s2r.data(), nr.data()));
    std::vector<int32_t> counts2(static_cast<size_t>(EL)), offsets2(size_t(EL + 1)), nr2(1);
    std::vector<int32_t> r2s2(size_t(T * K), -7), s2r2(size_t(T * K));
    REQUIRE(ref::moe_permute_plan(ids.data(), T, K, E, begin, end, counts2.data(), offsets2.data(), r2s2.data(),
                                  s2r2.data(), nr2.data()));
    CHECK(counts == counts2);
    CHECK(offsets == offsets2);
    CHECK(r2s == r2s2);
    CHECK(s2r == s2r2);
    CHECK(nr == nr2);
    const int64_t R = nr[0];
    int64_t bad = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r2s[size_t(r)] / K;
      for (int64_t h = 0; h < H; ++h) bad += q[size_t(r * H + h)].bits != tq[size_t(t * H + h)].bits;
      for (int64_t g = 0; g < HG; ++g) bad += sc[size_t(r * HG + g)] != ts[size_t(t * HG + g)];
    }
    CHECK(bad == 0);
    for (size_t i = size_t(R * H); i < q.size(); ++i) bad += q[i].bits != 0x55;  // rows past R untouched
    CHECK(bad == 0);
  }
  std::vector<int32_t> wrong = ids;
  wrong[4] = int32_t(E);  // an id past n_experts
  std::vector<int32_t> counts(static_cast<size_t>(E)), offsets(size_t(E + 1)), nr(1, -3);
  std::vector<int32_t> r2s(size_t(T * K)), s2r(size_t(T * K));
  std::vector<e4m3> q(size_t(T * K * H), e4m3{0x55});
  std::vector<float> sc(size_t(T * K * HG), -1.f);
  CHECK_FALSE(ref::moe_permute_fp8(x.data(), wrong.data(), T, K, H, E, 0, E, q.data(), sc.data(), counts.data(),
                                   offsets.data(), r2s.data(), s2r.data(), nr.data()));
  CHECK(nr[0] == -3);
  CHECK(q[0].bits == 0x55);
}

TEST_CASE("moe_grouped_gemm_fp8 and _swiglu: block scales as dequantize-then-multiply; empty experts") {
  // 2 experts (the first with no rows), K = 200 (groups of 128 and 72), N = 130 (scale blocks of
  // 128 and 2 rows), scales including 0 and 2^+-30.
  const int64_t EL = 2, R = 5, K = 200, N = 130, KG = 2;  // NB = 2 scale blocks of rows
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-448.f, 448.f);
  std::vector<e4m3> a(size_t(R * K)), w(size_t(EL * N * K));
  for (auto& v : a) v = ref::float_to_e4m3(u(rng));
  for (auto& v : w) v = ref::float_to_e4m3(u(rng));
  std::vector<float> as{0.01f, 0x1p-30f, 0.f, 0x1p30f, 0.02f, 0.03f, 0.001f, 0.002f, 0.5f, 0.25f};
  std::vector<float> ws{1, 1, 1, 1, 0.003f, 0x1p30f, 0.f, 0.004f};  // [EL, NB, KG]
  std::vector<int32_t> off{0, 0, 4};                                   // row 4 is capacity
  std::vector<ref::bf16> out(size_t(R * N), ref::bf16{0x7fc0});
  REQUIRE(ref::moe_grouped_gemm_fp8(a.data(), as.data(), w.data(), ws.data(), off.data(), 3, EL, R, K, N, out.data()));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double want = 0;
      for (int64_t k = 0; k < K; ++k)
        want += double(dec(a[size_t(r * K + k)].bits)) * as[size_t(r * KG + k / 128)] *
                dec(w[size_t((N + n) * K + k)].bits) * ws[size_t(4 + (n / 128) * KG + k / 128)];
      const float got = ref::bf16_to_float(out[size_t(r * N + n)]);
      INFO("row ", r, " col ", n);
      CHECK(std::isfinite(got));
      CHECK(std::fabs(got - want) <= std::fabs(want) * 0x1p-8 + 1e-30);
    }
  CHECK(out[size_t(4 * N)].bits == 0x7fc0);  // past expert_offsets[EL]: untouched
  // SwiGLU with I = 65 (2I = 130 rows: gate [0, 65), up [65, 130)).
  std::vector<ref::bf16> h(size_t(R * 65), ref::bf16{0x7fc0});
  REQUIRE(ref::moe_grouped_gemm_fp8_swiglu(a.data(), as.data(), w.data(), ws.data(), off.data(), 3, EL, R, K, 65,
                                           h.data()));
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t j = 0; j < 65; ++j) {
      auto dot = [&](int64_t n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(dec(a[size_t(r * K + k)].bits)) * as[size_t(r * KG + k / 128)] *
               dec(w[size_t((N + n) * K + k)].bits) * ws[size_t(4 + (n / 128) * KG + k / 128)];
        return s;
      };
      const double g = dot(j), up = dot(65 + j), want = g / (1 + std::exp(-g)) * up;
      const float got = ref::bf16_to_float(h[size_t(r * 65 + j)]);
      CHECK_FALSE(std::isnan(got));
      // silu(g) * u squares the 2^30 scales: past bf16's range it overflows to infinity.
      if (std::fabs(want) > 3.4e38) CHECK(std::isinf(got));
      else CHECK(std::fabs(got - want) <= std::fabs(want) * 0x1p-8 + 1e-30);
    }
  // A bad offsets array is refused before anything is written.
  std::vector<int32_t> bad{0, 3, 2};
  std::vector<ref::bf16> untouched(size_t(R * N), ref::bf16{0x1234});
  CHECK_FALSE(ref::moe_grouped_gemm_fp8(a.data(), as.data(), w.data(), ws.data(), bad.data(), 3, EL, R, K, N,
                                        untouched.data()));
  CHECK(untouched[0].bits == 0x1234);
}

TEST_CASE("moe_grouped_gemm_fp8_swiglu_quant: the SwiGLU rows quantized, bit for bit; rows past the experts untouched") {
  // 3 experts (the second empty), H = 300 (groups of 128, 128, 44), I = 200 (groups of 128, 72).
  const int64_t EL = 3, R = 9, H = 300, I = 200, HG = 3, NB = 4, IG = 2;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> u(-448.f, 448.f), sc(0.0005f, 0.004f);
  std::vector<e4m3> a(size_t(R * H)), w(size_t(EL * 2 * I * H));
  for (auto& v : a) v = ref::float_to_e4m3(u(rng));
  for (auto& v : w) v = ref::float_to_e4m3(u(rng));
  std::vector<float> as(size_t(R * HG)), ws(size_t(EL * NB * HG));
  for (auto& v : as) v = sc(rng);
  for (auto& v : ws) v = sc(rng);
  as[0] = 0.f;  // a group of row 0 scaled to nothing
  const std::vector<int32_t> off{0, 3, 3, 7};  // rows 7 and 8 are capacity
  std::vector<ref::bf16> h(size_t(R * I));
  REQUIRE(ref::moe_grouped_gemm_fp8_swiglu(a.data(), as.data(), w.data(), ws.data(), off.data(), EL + 1, EL, R, H, I,
                                           h.data()));
  std::vector<e4m3> want_q(size_t(7 * I));
  std::vector<float> want_s(size_t(7 * IG));
  REQUIRE(ref::moe_quantize_fp8(h.data(), 7, I, want_q.data(), want_s.data()));
  std::vector<e4m3> q(size_t(R * I), e4m3{0x55});
  std::vector<float> s(size_t(R * IG), -1.f);
  REQUIRE(ref::moe_grouped_gemm_fp8_swiglu_quant(a.data(), as.data(), w.data(), ws.data(), off.data(), EL + 1, EL, R, H,
                                                 I, q.data(), s.data()));
  for (int64_t i = 0; i < 7 * I; ++i) CHECK(q[size_t(i)].bits == want_q[size_t(i)].bits);
  for (int64_t i = 0; i < 7 * IG; ++i) CHECK(s[size_t(i)] == want_s[size_t(i)]);
  for (int64_t i = 7 * I; i < R * I; ++i) CHECK(q[size_t(i)].bits == 0x55);
  for (int64_t i = 7 * IG; i < R * IG; ++i) CHECK(s[size_t(i)] == -1.f);
  // A slice of rows writes only those rows; a missing q_scale is refused before anything is written.
  std::vector<e4m3> q2(size_t(R * I), e4m3{0x55});
  std::vector<float> s2(size_t(R * IG), -1.f);
  REQUIRE(ref::moe_grouped_gemm_fp8_swiglu_quant(a.data(), as.data(), w.data(), ws.data(), off.data(), EL + 1, EL, R, H,
                                                 I, q2.data(), s2.data(), ref::RowRange{2, 5}));
  CHECK(q2[size_t(1 * I)].bits == 0x55);
  CHECK(q2[size_t(2 * I)].bits == want_q[size_t(2 * I)].bits);
  CHECK(q2[size_t(5 * I)].bits == 0x55);
  // A missing output is refused before any row is written, by its own name.
  std::vector<e4m3> q3(size_t(R * I), e4m3{0x55});
  auto refused = [&](e4m3* q, float* q_scale, const char* says) {
    const halcyon::Status st = ref::moe_grouped_gemm_fp8_swiglu_quant(a.data(), as.data(), w.data(), ws.data(),
                                                                       off.data(), EL + 1, EL, R, H, I, q, q_scale);
    REQUIRE_FALSE(st);
    CHECK(st.error().message().find(says) != std::string::npos);
  };
  refused(q3.data(), nullptr, ": q_scale is null");
  CHECK(q3[0].bits == 0x55);
  refused(nullptr, s2.data(), ": q is null");
}
