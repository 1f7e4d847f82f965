// moe_grouped_gemm_swiglu_gather: the SwiGLU grouped GEMM reading its rows from the tokens
// through row_to_slot must give, bit for bit, what moe_grouped_gemm_swiglu gives on an
// explicitly permuted copy; bad maps are refused before anything is written.
#include "moe_test_util.hpp"

#include <algorithm>

using halcyon::ref::moe_grouped_gemm_swiglu;
using halcyon::ref::moe_grouped_gemm_swiglu_gather;
using halcyon::ref::moe_permute;
using halcyon::ref::RowRange;
using moe_test::bf16;
using moe_test::expect_invalid;
using moe_test::kPoison;

namespace {

struct Problem {
  int64_t T, topk, H, I;
  std::vector<int32_t> offsets;  // E_local + 1 entries
  int64_t R;                     // capacity, >= offsets.back()
  std::vector<bf16> x, w;
  std::vector<int32_t> row_to_slot;

  int64_t E_local() const { return int64_t(offsets.size()) - 1; }
  int64_t used() const { return offsets.back(); }

  // Random x and weights; row_to_slot uniform in [0, T * topk) for the used rows and junk
  // (-5, never read) in the capacity rows past them.
  Problem(int64_t T_, int64_t topk_, int64_t H_, int64_t I_, std::vector<int32_t> off, int64_t R_,
          uint32_t seed)
      : T(T_), topk(topk_), H(H_), I(I_), offsets(std::move(off)), R(R_) {
    std::mt19937 rng(seed);
    x = moe_test::random_bf16(size_t(T * H), rng);
    w = moe_test::random_bf16(size_t(E_local() * H * 2 * I), rng);
    row_to_slot.assign(size_t(R), -5);
    std::uniform_int_distribution<int32_t> slot(0, int32_t(T * topk - 1));
    for (int64_t r = 0; r < used(); ++r) row_to_slot[size_t(r)] = slot(rng);
  }

  std::vector<bf16> gather(RowRange rows = {}) const {
    std::vector<bf16> out(size_t(R * I), kPoison);
    const auto s = moe_grouped_gemm_swiglu_gather(x.data(), T, topk, row_to_slot.data(), w.data(),
                                                  offsets.data(), int64_t(offsets.size()),
                                                  E_local(), R, H, I, out.data(), rows);
    REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message()));
    return out;
  }

  // The non-gather operator on the permuted copy a[r] = x[row_to_slot[r] / topk].
  std::vector<bf16> on_permuted_copy() const {
    std::vector<bf16> a(size_t(R * H), kPoison);
    for (int64_t r = 0; r < used(); ++r) {
      const bf16* src = x.data() + (row_to_slot[size_t(r)] / topk) * H;
      std::copy(src, src + H, a.begin() + r * H);
    }
    std::vector<bf16> out(size_t(R * I), kPoison);
    const auto s = moe_grouped_gemm_swiglu(a.data(), w.data(), offsets.data(),
                                           int64_t(offsets.size()), E_local(), R, H, I, out.data());
    REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message()));
    return out;
  }
};

}  // namespace

TEST_CASE("moe_grouped_gemm_swiglu_gather: equals the non-gather op on a permuted copy") {
  struct Shape {
    const char* what;
    int64_t T, topk, H, I;
    std::vector<int32_t> offsets;
    int64_t R;
  };
  const std::vector<Shape> shapes{
      {"a single row", 1, 1, 16, 8, {0, 1}, 1},
      {"empty experts first, in the middle and last", 6, 4, 20, 12, {0, 0, 9, 9, 21, 23, 23}, 24},
      {"all rows on one expert of three", 8, 8, 13, 5, {0, 0, 61, 61}, 64},
      {"counts that are no multiple of any tile", 11, 6, 129, 65, {0, 7, 20, 37, 61}, 61},
      {"T * topk < R: slots repeat", 3, 2, 48, 24, {0, 17, 37}, 40},
      {"one token for every row", 1, 1, 32, 16, {0, 10, 10, 64}, 64},
      {"capacity rows past the experts' rows", 9, 8, 24, 12, {0, 5, 11}, 72},
      {"H = 7168, small I", 2, 8, 7168, 16, {0, 0, 3}, 3},
      {"no rows at all", 4, 2, 8, 4, {0, 0, 0}, 8},
  };
  uint32_t seed = 11;
  for (const Shape& s : shapes) {
    INFO(s.what);
    const Problem p(s.T, s.topk, s.H, s.I, s.offsets, s.R, seed++);
    const auto got = p.gather();
    CHECK(got == p.on_permuted_copy());
    // Rows past expert_offsets[E_local] stay untouched.
    for (int64_t r = p.used(); r < p.R; ++r)
      for (int64_t j = 0; j < p.I; ++j) CHECK(got[size_t(r * p.I + j)] == kPoison);
  }
}

TEST_CASE("moe_grouped_gemm_swiglu_gather: on moe_permute's map it equals permute then swiglu") {
  const int64_t T = 23, K = 4, H = 40, I = 24, E = 16, e0 = 3, e1 = 11, EL = e1 - e0;
  std::mt19937 rng(5);
  const auto x = moe_test::random_bf16(size_t(T * H), rng);
  const auto w = moe_test::random_bf16(size_t(EL * H * 2 * I), rng);
  std::vector<int32_t> ids(size_t(T * K));
  for (int64_t s = 0; s < T * K; ++s) ids[size_t(s)] = int32_t((s * 11 + s / 5) % E);
  std::vector<bf16> permuted(size_t(T * K * H), kPoison);
  std::vector<int32_t> counts(EL), offsets(EL + 1), r2s(size_t(T * K), -1), s2r(size_t(T * K));
  int32_t R = 0;
  REQUIRE(moe_permute(x.data(), ids.data(), T, K, H, E, e0, e1, permuted.data(), counts.data(),
                      offsets.data(), r2s.data(), s2r.data(), &R)
              .ok());
  REQUIRE(R > 0);
  REQUIRE(R < T * K);  // expert parallelism: capacity rows remain
  std::vector<bf16> want(size_t(T * K * I), kPoison), got(size_t(T * K * I), kPoison);
  REQUIRE(moe_grouped_gemm_swiglu(permuted.data(), w.data(), offsets.data(), EL + 1, EL, T * K, H,
                                  I, want.data())
              .ok());
  // The map of a plan without the copy is the same map.
  std::vector<int32_t> r2s_plan(size_t(T * K), -1);
  int32_t R2 = 0;
  REQUIRE(moe_permute(x.data(), ids.data(), T, K, H, E, e0, e1, nullptr, counts.data(),
                      offsets.data(), r2s_plan.data(), s2r.data(), &R2, false)
              .ok());
  CHECK(r2s_plan == r2s);
  REQUIRE(moe_grouped_gemm_swiglu_gather(x.data(), T, K, r2s_plan.data(), w.data(), offsets.data(),
                                         EL + 1, EL, T * K, H, I, got.data())
              .ok());
  CHECK(got == want);
}

TEST_CASE("moe_grouped_gemm_swiglu_gather: row ranges across expert boundaries equal the whole call") {
  const Problem p(7, 3, 20, 12, {0, 9, 9, 17, 20, 21}, 21, 3);
  const auto whole = p.gather();
  std::vector<bf16> parts(size_t(p.R * p.I), kPoison);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 8}, {8, 9}, {9, 20}, {20, 21}}) {
    const auto s = moe_grouped_gemm_swiglu_gather(p.x.data(), p.T, p.topk, p.row_to_slot.data(),
                                                  p.w.data(), p.offsets.data(), 6, 5, p.R, p.H, p.I,
                                                  parts.data(), RowRange{b, e});
    REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message()));
  }
  CHECK(parts == whole);
}

TEST_CASE("moe_grouped_gemm_swiglu_gather: bad maps and arguments are reported, nothing is written") {
  Problem p(3, 2, 8, 4, {0, 2, 5}, 6, 9);  // T * topk = 6 slots; rows 0-4 used, row 5 capacity
  std::vector<bf16> out(size_t(p.R * p.I), kPoison);
  auto run = [&](const std::vector<int32_t>& map, RowRange rows = {}, int64_t topk = 2, int64_t T = 3,
                 int64_t offsets_len = 3) {
    return moe_grouped_gemm_swiglu_gather(p.x.data(), T, topk, map.data(), p.w.data(),
                                          p.offsets.data(), offsets_len, 2, p.R, p.H, p.I, out.data(),
                                          rows);
  };
  const std::string op = "moe_grouped_gemm_swiglu_gather";
  expect_invalid(run({0, 1, 6, 2, 3, 0}), {op, "row_to_slot[2] = 6", "T * topk = 6"});
  expect_invalid(run({0, 1, 2, 3, -1, 0}), {"row_to_slot[4] = -1"});
  // Every used row is checked before the first is written, even the last one.
  expect_invalid(run({0, 1, 2, 3, 4000, 0}), {"row_to_slot[4] = 4000"});
  expect_invalid(run({0, 1, 2, 3, 4, 5}, {}, 0), {op, "topk = 0"});
  expect_invalid(run({0, 1, 2, 3, 4, 5}, {}, 2, -1), {op, "T = -1"});
  expect_invalid(run({0, 1, 2, 3, 4, 5}, {}, 2, 3, 4), {"expert_offsets has 4 entries", "E_local + 1 = 3"});
  expect_invalid(run({0, 1, 2, 3, 4, 5}, RowRange{4, 7}), {"row range [4, 7)"});
  expect_invalid(run({0, 1, 2, 3, 4, 5}, {}, 1 << 16, 1 << 16), {"T * topk = 4294967296", "int32"});
  expect_invalid(moe_grouped_gemm_swiglu_gather(p.x.data(), 3, 2, nullptr, p.w.data(), p.offsets.data(),
                                                3, 2, p.R, p.H, p.I, out.data()),
                 {op, "row_to_slot is null"});
  expect_invalid(moe_grouped_gemm_swiglu_gather(nullptr, 3, 2, p.row_to_slot.data(), p.w.data(),
                                                p.offsets.data(), 3, 2, p.R, p.H, p.I, out.data()),
                 {op, "x is null"});
  CHECK(out == std::vector<bf16>(out.size(), kPoison));

  // Only the rows a call owns are checked: a bad entry outside the range or in the capacity
  // rows past expert_offsets[E_local] is never read.
  CHECK(run({0, 1, 2, 3, 5, -9}).ok());
  CHECK(run({0, 1, 99, 3, 5, 0}, RowRange{3, 6}).ok());
  for (int64_t j = 0; j < p.I; ++j) CHECK(out[size_t(5 * p.I + j)] == kPoison);
}
