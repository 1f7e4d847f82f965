// moe_combine: hand-computed weighted sums, skipped non-local slots, row ranges, errors.
#include "moe_test_util.hpp"

#include <cmath>

using halcyon::ref::moe_combine;
using halcyon::ref::RowRange;
using moe_test::bf16;
using moe_test::expect_invalid;
using moe_test::kPoison;

TEST_CASE("moe_combine: weighted sum of the token's rows, -1 slots skipped") {
  const int64_t T = 3, K = 2, H = 2, R = 3;
  const auto rows = moe_test::to_bf16({2, 4,  //
                                       1, -1,  //
                                       8, 8});
  // Token 0: row 0 and a non-local slot (its weight 9 must not count).
  // Token 1: rows 2 and 1. Token 2: nothing local.
  const std::vector<int32_t> slot_to_row{0, -1, 2, 1, -1, -1};
  const std::vector<float> weights{0.5f, 9.0f, 0.25f, 2.0f, 3.0f, 3.0f};
  std::vector<bf16> out(T * H, kPoison);
  REQUIRE(moe_combine(rows.data(), R, weights.data(), slot_to_row.data(), T, K, H, out.data())
              .ok());
  CHECK(moe_test::to_float(out) == std::vector<float>{1, 2, 4, 0, 0, 0});

  std::vector<bf16> part(T * H, kPoison);
  REQUIRE(moe_combine(rows.data(), R, weights.data(), slot_to_row.data(), T, K, H, part.data(),
                      RowRange{1, 2})
              .ok());
  CHECK(part == std::vector<bf16>{kPoison, kPoison, out[2], out[3], kPoison, kPoison});
}

TEST_CASE("moe_combine: the sum is accumulated wide and rounded once") {
  // 1 * 1 + 2^-8 + 2^-8 = 1 + 2^-7; a bf16 running sum would stay at 1.
  const float q = std::ldexp(1.0f, -8);
  const auto rows = moe_test::to_bf16({1, q, q});
  const std::vector<int32_t> slot_to_row{0, 1, 2};
  const std::vector<float> weights{1, 1, 1};
  bf16 out = kPoison;
  REQUIRE(moe_combine(rows.data(), 3, weights.data(), slot_to_row.data(), 1, 3, 1, &out).ok());
  CHECK(moe_test::bf16_to_float(out) == 1.0f + 2 * q);
}

TEST_CASE("moe_combine: bad rows are reported and nothing is written") {
  const auto rows = moe_test::to_bf16({1, 2, 3, 4});
  const std::vector<float> weights{1, 1, 1, 1};
  std::vector<bf16> out(4, kPoison);
  auto run = [&](const std::vector<int32_t>& s2r, int64_t R, int64_t K = 2) {
    return moe_combine(rows.data(), R, weights.data(), s2r.data(), 2, K, 2, out.data());
  };
  expect_invalid(run({0, 1, -1, 2}, 2), {"slot_to_row[token 1, k 1] = 2", "R = 2"});
  expect_invalid(run({0, -2, -1, 1}, 2), {"slot_to_row[token 0, k 1] = -2"});
  expect_invalid(run({0, 1, -1, 1}, 2, 0), {"K = 0"});
  expect_invalid(moe_combine(rows.data(), 2, nullptr, std::vector<int32_t>{0, 1, 1, 0}.data(),
                             2, 2, 2, out.data()),
                 {"topk_weights is null"});
  CHECK(out == std::vector<bf16>(4, kPoison));
  CHECK(run({0, 1, -1, 1}, 2).ok());
}
