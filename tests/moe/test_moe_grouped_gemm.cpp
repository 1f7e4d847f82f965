// Grouped GEMMs: SwiGLU and down projection computed by hand, the gate/up column layout,
// empty experts, a single rounding, row ranges and argument errors.
#include "moe_test_util.hpp"

#include <cmath>

using halcyon::ref::moe_grouped_gemm;
using halcyon::ref::moe_grouped_gemm_swiglu;
using halcyon::ref::RowRange;
using moe_test::bf16;
using moe_test::expect_invalid;
using moe_test::kPoison;
using moe_test::to_bf16;

namespace {

double silu(double x) { return x / (1.0 + std::exp(-x)); }
bf16 bf(double v) { return moe_test::float_to_bf16(static_cast<float>(v)); }

// a [3, 2]; rows 0-1 belong to expert 0, row 2 to the last expert.
const std::vector<float> kA{1, 2, 0.5f, -1, 2, 1};

// [H = 2, 2I = 4] per expert: columns 0-1 gate, 2-3 up.
const std::vector<float> kGateUp0{1, 0, 0.5f, 1,  //
                                  0.5f, 1, 1, -1};
const std::vector<float> kGateUp1{2, 0, 0, 1,  //
                                  0, 1, 3, 0};

std::vector<bf16> swiglu(const std::vector<float>& w, const std::vector<int32_t>& offsets,
                         RowRange rows = {}) {
  const int64_t E_local = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<bf16> out(3 * 2, kPoison);
  const auto a = to_bf16(kA), wb = to_bf16(w);
  const auto s = moe_grouped_gemm_swiglu(a.data(), wb.data(), offsets.data(),
                                         static_cast<int64_t>(offsets.size()), E_local, 3, 2,
                                         2, out.data(), rows);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message()));
  return out;
}

std::vector<float> concat(std::initializer_list<std::vector<float>> parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST_CASE("moe_grouped_gemm_swiglu: a hand-computed case, gate columns first") {
  // row 0 = [1, 2] @ expert 0: g = [2, 2], u = [2.5, -1]
  // row 1 = [0.5, -1] @ expert 0: g = [0, -1], u = [-0.75, 1.5] (silu(0) * -0.75 = -0)
  // row 2 = [2, 1] @ expert 1: g = [4, 1], u = [3, 2]
  const std::vector<bf16> want{bf(silu(2) * 2.5), bf(silu(2) * -1.0),
                               bf(silu(0) * -0.75), bf(silu(-1) * 1.5),
                               bf(silu(4) * 3.0), bf(silu(1) * 2.0)};
  CHECK(swiglu(concat({kGateUp0, kGateUp1}), {0, 2, 3}) == want);
  // The values are not symmetric in gate and up: a swapped layout would differ.
  CHECK(bf(silu(2.5) * 2.0) != want[0]);

  // An expert with no rows in the middle changes nothing, whatever its weights.
  const std::vector<float> junk(8, 100.0f);
  CHECK(swiglu(concat({kGateUp0, junk, kGateUp1}), {0, 2, 2, 3}) == want);
  // Leading and trailing empty experts too.
  CHECK(swiglu(concat({junk, kGateUp0, kGateUp1, junk}), {0, 0, 2, 3, 3}) == want);

  // A row range writes its rows only.
  const auto part = swiglu(concat({kGateUp0, kGateUp1}), {0, 2, 3}, RowRange{1, 2});
  CHECK(part == std::vector<bf16>{kPoison, kPoison, want[2], want[3], kPoison, kPoison});
}

TEST_CASE("moe_grouped_gemm: a hand-computed down projection") {
  const auto a = to_bf16(kA);
  const auto w = to_bf16({1, 2, 3, 4, 5, 6,  //
                          -1, 0, 1, 0.5f, 0.5f, 0.5f});
  const std::vector<int32_t> offsets{0, 2, 3};
  std::vector<bf16> out(3 * 3, kPoison);
  REQUIRE(moe_grouped_gemm(a.data(), w.data(), offsets.data(), 3, 2, 3, 2, 3, out.data()).ok());
  CHECK(moe_test::to_float(out) ==
        std::vector<float>{9, 12, 15, -3.5f, -4, -4.5f, -1.5f, 0.5f, 2.5f});
}

TEST_CASE("moe_grouped_gemm: the sum is rounded to bf16 once, at the end") {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7 is a bf16; rounding after each addition would give 1
  // (1 + 2^-8 is a tie that goes to the even 1).
  const auto a = to_bf16({1, 1, 1});
  const auto w = to_bf16({1, std::ldexp(1.0f, -8), std::ldexp(1.0f, -8)});
  const std::vector<int32_t> offsets{0, 1};
  bf16 out = kPoison;
  REQUIRE(moe_grouped_gemm(a.data(), w.data(), offsets.data(), 2, 1, 1, 3, 1, &out).ok());
  CHECK(moe_test::bf16_to_float(out) == 1.0f + std::ldexp(1.0f, -7));
}

TEST_CASE("grouped GEMMs: row ranges across expert boundaries equal the whole call") {
  const int64_t R = 37, E_local = 5, H = 20, I = 12;
  const std::vector<int32_t> offsets{0, 9, 9, 21, 36, 37};
  std::mt19937 rng(7);
  const auto x = moe_test::random_bf16(R * H, rng);
  const auto wgu = moe_test::random_bf16(E_local * H * 2 * I, rng);
  const auto wd = moe_test::random_bf16(E_local * I * H, rng);
  std::vector<bf16> h(R * I), y(R * H), hp(R * I, kPoison), yp(R * H, kPoison);
  REQUIRE(moe_grouped_gemm_swiglu(x.data(), wgu.data(), offsets.data(), 6, E_local, R, H, I,
                                  h.data())
              .ok());
  REQUIRE(moe_grouped_gemm(h.data(), wd.data(), offsets.data(), 6, E_local, R, I, H, y.data())
              .ok());
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 13}, {13, 14}, {14, R}}) {
    REQUIRE(moe_grouped_gemm_swiglu(x.data(), wgu.data(), offsets.data(), 6, E_local, R, H, I,
                                    hp.data(), RowRange{b, e})
                .ok());
    REQUIRE(moe_grouped_gemm(h.data(), wd.data(), offsets.data(), 6, E_local, R, I, H,
                             yp.data(), RowRange{b, e})
                .ok());
  }
  CHECK(hp == h);
  CHECK(yp == y);
}

TEST_CASE("grouped GEMMs: bad offsets and sizes are reported and nothing is written") {
  const auto a = to_bf16(kA);
  const auto w = to_bf16(concat({kGateUp0, kGateUp1}));
  std::vector<bf16> out(6, kPoison);
  auto run = [&](const std::vector<int32_t>& off, int64_t len, int64_t E_local, int64_t R,
                 int64_t I = 2, RowRange rows = {}) {
    return moe_grouped_gemm_swiglu(a.data(), w.data(), off.data(), len, E_local, R, 2, I,
                                   out.data(), rows);
  };
  expect_invalid(run({0, 2, 3}, 3, 3, 3), {"expert_offsets has 3 entries", "E_local + 1 = 4"});
  expect_invalid(run({1, 2, 3}, 3, 2, 3), {"expert_offsets[0] = 1"});
  expect_invalid(run({0, 3, 2}, 3, 2, 2), {"decreases at expert 1", "3 then 2"});
  expect_invalid(run({0, 2, 4}, 3, 2, 3), {"expert_offsets[E_local = 2] = 4", "past R = 3"});
  expect_invalid(run({0, 2, 3}, 3, 2, 3, 0), {"moe_grouped_gemm_swiglu", "I = 0"});
  expect_invalid(run({0, 2, 3}, 3, 2, 3, 2, RowRange{2, 4}), {"row range [2, 4)"});
  CHECK(out == std::vector<bf16>(6, kPoison));

  const std::vector<int32_t> off{0, 2, 3};
  expect_invalid(moe_grouped_gemm(a.data(), nullptr, off.data(), 3, 2, 3, 2, 2, out.data()),
                 {"moe_grouped_gemm", "w is null"});
  expect_invalid(moe_grouped_gemm(a.data(), w.data(), off.data(), 3, 2, 3, 2, -1, out.data()),
                 {"H = -1"});
  CHECK(out == std::vector<bf16>(6, kPoison));
}

TEST_CASE("grouped GEMMs: rows past expert_offsets[E_local] are capacity, never read or written") {
  // 2 experts own rows [0, 1) and [1, 3); R = 5 rows of capacity, rows 3 and 4 stay poisoned.
  const int64_t R = 5, H = 2, I = 2, E_local = 2;
  std::vector<bf16> a(size_t(R * H)), w(size_t(E_local * H * 2 * I)), wd(size_t(E_local * I * H));
  for (size_t i = 0; i < a.size(); ++i) a[i] = halcyon::ref::float_to_bf16(0.25f * float(i % 7) - 0.5f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = halcyon::ref::float_to_bf16(0.125f * float(i % 5) - 0.25f);
  for (size_t i = 0; i < wd.size(); ++i) wd[i] = halcyon::ref::float_to_bf16(0.5f - 0.125f * float(i % 6));
  const std::vector<int32_t> off{0, 1, 3};
  std::vector<bf16> h(size_t(R * I), kPoison), y(size_t(R * H), kPoison);
  REQUIRE(moe_grouped_gemm_swiglu(a.data(), w.data(), off.data(), 3, E_local, R, H, I, h.data()).ok());
  REQUIRE(moe_grouped_gemm(h.data(), wd.data(), off.data(), 3, E_local, R, I, H, y.data()).ok());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < I; ++j) CHECK((h[size_t(r * I + j)] == kPoison) == (r >= 3));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < H; ++j) CHECK((y[size_t(r * H + j)] == kPoison) == (r >= 3));
}
