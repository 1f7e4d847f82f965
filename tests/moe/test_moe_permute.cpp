// moe_permute: hand-computed plans (all local, expert parallel, empty experts, one expert
// for every token, no tokens), the gather, row ranges and argument errors.
#include "moe_test_util.hpp"

using halcyon::ref::moe_permute;
using halcyon::ref::moe_permute_gather;
using halcyon::ref::moe_permute_plan;
using halcyon::ref::RowRange;
using moe_test::bf16;
using moe_test::expect_invalid;
using moe_test::kPoison;

namespace {

struct Permuted {
  std::vector<bf16> rows;
  std::vector<int32_t> counts, offsets, row_to_slot, slot_to_row;
  int32_t num_rows = -7;
};

// Token t's row is filled with t + 1 + h / 8 (exact in bf16), so rows are recognisable.
std::vector<bf16> token_rows(int64_t T, int64_t H) {
  std::vector<float> x(T * H);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) x[t * H + h] = float(t + 1) + float(h) / 8.0f;
  }
  return moe_test::to_bf16(x);
}

Permuted permute(const std::vector<bf16>& x, const std::vector<int32_t>& ids, int64_t T,
                 int64_t K, int64_t H, int64_t E, int64_t e0, int64_t e1,
                 bool write_permuted = true) {
  Permuted p;
  p.rows.assign(T * K * H, kPoison);
  p.counts.assign(e1 - e0, -7);
  p.offsets.assign(e1 - e0 + 1, -7);
  p.row_to_slot.assign(T * K, -7);
  p.slot_to_row.assign(T * K, -7);
  const auto s = moe_permute(x.data(), ids.data(), T, K, H, E, e0, e1, p.rows.data(),
                             p.counts.data(), p.offsets.data(), p.row_to_slot.data(),
                             p.slot_to_row.data(), &p.num_rows, write_permuted);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message()));
  return p;
}

// The permuted rows hold the right tokens; rows past R are untouched.
void check_rows(const Permuted& p, const std::vector<bf16>& x, int64_t T, int64_t K,
                int64_t H) {
  for (int64_t r = 0; r < T * K; ++r) {
    for (int64_t h = 0; h < H; ++h) {
      const bf16 want = r < p.num_rows ? x[(p.row_to_slot[r] / K) * H + h] : kPoison;
      CHECK(p.rows[r * H + h] == want);
    }
  }
}

}  // namespace

TEST_CASE("moe_permute: all experts local, rows grouped by expert then by slot") {
  const int64_t T = 3, K = 2, H = 5, E = 4;
  // slot: 0 1 | 2 3 | 4 5
  const std::vector<int32_t> ids{1, 0, 1, 3, 2, 1};
  const auto x = token_rows(T, H);
  const auto p = permute(x, ids, T, K, H, E, 0, E);
  CHECK(p.num_rows == 6);
  CHECK(p.counts == std::vector<int32_t>{1, 3, 1, 1});
  CHECK(p.offsets == std::vector<int32_t>{0, 1, 4, 5, 6});
  CHECK(p.row_to_slot == std::vector<int32_t>{1, 0, 2, 5, 4, 3});
  CHECK(p.slot_to_row == std::vector<int32_t>{1, 0, 2, 5, 4, 3});
  check_rows(p, x, T, K, H);
  // Row 3 is token 2's copy for expert 1: value 3 + h/8.
  CHECK(moe_test::bf16_to_float(p.rows[3 * H + 4]) == 3.5f);
}

TEST_CASE("moe_permute: expert parallelism keeps only the local experts") {
  const int64_t T = 3, K = 2, H = 4, E = 4;
  const std::vector<int32_t> ids{1, 0, 1, 3, 2, 1};
  const auto x = token_rows(T, H);
  const auto p = permute(x, ids, T, K, H, E, 1, 3);  // experts 1 and 2 are local
  CHECK(p.num_rows == 4);
  CHECK(p.counts == std::vector<int32_t>{3, 1});
  CHECK(p.offsets == std::vector<int32_t>{0, 3, 4});
  CHECK(std::vector<int32_t>(p.row_to_slot.begin(), p.row_to_slot.begin() + 4) ==
        std::vector<int32_t>{0, 2, 5, 4});
  CHECK(p.row_to_slot[4] == -7);  // past R: not written
  CHECK(p.slot_to_row == std::vector<int32_t>{0, -1, 1, -1, 3, 2});
  check_rows(p, x, T, K, H);

  const auto none = permute(x, ids, T, K, H, E, 2, 2);  // no local expert
  CHECK(none.num_rows == 0);
  CHECK(none.offsets == std::vector<int32_t>{0});
  CHECK(none.slot_to_row == std::vector<int32_t>(T * K, -1));
  check_rows(none, x, T, K, H);
}

TEST_CASE("moe_permute: experts without tokens, every token to one expert, no tokens") {
  const int64_t H = 3;
  {
    const int64_t T = 4, K = 2, E = 6;
    const std::vector<int32_t> ids{5, 0, 0, 5, 5, 2, 0, 2};
    const auto x = token_rows(T, H);
    const auto p = permute(x, ids, T, K, H, E, 0, E);
    CHECK(p.counts == std::vector<int32_t>{3, 0, 2, 0, 0, 3});
    CHECK(p.offsets == std::vector<int32_t>{0, 3, 3, 5, 5, 5, 8});
    CHECK(p.row_to_slot == std::vector<int32_t>{1, 2, 6, 5, 7, 0, 3, 4});
    check_rows(p, x, T, K, H);
  }
  {
    const int64_t T = 5, K = 1, E = 4;
    const std::vector<int32_t> ids(T, 2);
    const auto x = token_rows(T, H);
    const auto p = permute(x, ids, T, K, H, E, 0, E);
    CHECK(p.counts == std::vector<int32_t>{0, 0, 5, 0});
    CHECK(p.offsets == std::vector<int32_t>{0, 0, 0, 5, 5});
    CHECK(p.row_to_slot == std::vector<int32_t>{0, 1, 2, 3, 4});
    CHECK(p.slot_to_row == std::vector<int32_t>{0, 1, 2, 3, 4});
    check_rows(p, x, T, K, H);
  }
  {
    const auto p = permute({}, {}, 0, 8, H, 4, 0, 4);
    CHECK(p.num_rows == 0);
    CHECK(p.counts == std::vector<int32_t>{0, 0, 0, 0});
    CHECK(p.offsets == std::vector<int32_t>{0, 0, 0, 0, 0});
  }
}

TEST_CASE("moe_permute: the gather by row ranges equals the whole gather") {
  const int64_t T = 7, K = 3, H = 6, E = 5;
  std::vector<int32_t> ids(T * K);
  for (int64_t s = 0; s < T * K; ++s) ids[s] = static_cast<int32_t>((s * 7 + 3) % E);
  const auto x = token_rows(T, H);
  const auto whole = permute(x, ids, T, K, H, E, 0, E);
  std::vector<bf16> rows(T * K * H, kPoison);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}, {5, whole.num_rows}}) {
    REQUIRE(moe_permute_gather(x.data(), T, H, K, whole.row_to_slot.data(), whole.num_rows,
                               rows.data(), RowRange{b, e})
                .ok());
    if (e < whole.num_rows) CHECK(rows[e * H] == kPoison);
  }
  CHECK(rows == whole.rows);
}

TEST_CASE("moe_permute: bad arguments are reported and nothing is written") {
  const int64_t T = 2, K = 2, H = 3, E = 4;
  const auto x = token_rows(T, H);
  std::vector<bf16> rows(T * K * H, kPoison);
  std::vector<int32_t> counts(E, -7), offsets(E + 1, -7), r2s(T * K, -7), s2r(T * K, -7);
  int32_t R = -7;
  auto run = [&](const std::vector<int32_t>& ids, int64_t e0, int64_t e1) {
    return moe_permute(x.data(), ids.data(), T, K, H, E, e0, e1, rows.data(), counts.data(),
                       offsets.data(), r2s.data(), s2r.data(), &R);
  };
  expect_invalid(run({0, 1, 4, 2}, 0, E), {"topk_ids[token 1, k 0] = 4", "E = 4"});
  expect_invalid(run({0, -1, 3, 2}, 0, E), {"topk_ids[token 0, k 1] = -1"});
  expect_invalid(run({0, 1, 3, 2}, 2, 5), {"[2, 5)", "E = 4"});
  expect_invalid(run({0, 1, 3, 2}, 3, 2), {"[3, 2)"});
  expect_invalid(moe_permute(x.data(), nullptr, T, K, H, E, 0, E, rows.data(), counts.data(),
                             offsets.data(), r2s.data(), s2r.data(), &R),
                 {"topk_ids is null"});
  expect_invalid(moe_permute(x.data(), r2s.data(), T, K, 0, E, 0, E, rows.data(),
                             counts.data(), offsets.data(), r2s.data(), s2r.data(), &R),
                 {"H = 0"});
  CHECK(R == -7);
  CHECK(counts == std::vector<int32_t>(E, -7));
  CHECK(s2r == std::vector<int32_t>(T * K, -7));
  CHECK(rows == std::vector<bf16>(T * K * H, kPoison));

  const std::vector<int32_t> bad_map{0, 4};
  expect_invalid(
      moe_permute_gather(x.data(), T, H, K, bad_map.data(), 2, rows.data(), RowRange{}),
      {"row_to_slot[1] = 4", "T * K = 4"});
  expect_invalid(moe_permute_gather(x.data(), T, H, K, bad_map.data(), 5, rows.data()),
                 {"num_rows = 5"});
  expect_invalid(moe_permute_gather(x.data(), T, H, K, bad_map.data(), 2, rows.data(),
                                    RowRange{1, 3}),
                 {"row range [1, 3)"});
  CHECK(rows == std::vector<bf16>(T * K * H, kPoison));
}

TEST_CASE("moe_permute: write_permuted = false runs the plan alone") {
  const int64_t T = 5, K = 3, H = 4, E = 6;
  std::vector<int32_t> ids(T * K);
  for (int64_t s = 0; s < T * K; ++s) ids[s] = static_cast<int32_t>((s * 5 + 1) % E);
  const auto x = token_rows(T, H);
  for (auto [e0, e1] : {std::pair<int64_t, int64_t>{0, E}, {1, 4}, {3, 3}}) {
    const auto whole = permute(x, ids, T, K, H, E, e0, e1);
    auto p = permute(x, ids, T, K, H, E, e0, e1, /*write_permuted=*/false);
    CHECK(p.num_rows == whole.num_rows);
    CHECK(p.counts == whole.counts);
    CHECK(p.offsets == whole.offsets);
    CHECK(p.row_to_slot == whole.row_to_slot);
    CHECK(p.slot_to_row == whole.slot_to_row);
    CHECK(p.rows == std::vector<bf16>(T * K * H, kPoison));  // not a row copied

    // Neither x nor permuted is touched, so both may be null.
    int32_t R = -7;
    REQUIRE(moe_permute(nullptr, ids.data(), T, K, H, E, e0, e1, nullptr, p.counts.data(),
                        p.offsets.data(), p.row_to_slot.data(), p.slot_to_row.data(), &R, false)
                .ok());
    CHECK(R == whole.num_rows);
  }
  // With the copy, a null permuted is still an error, before anything is written.
  std::vector<int32_t> counts(E, -7), offsets(E + 1, -7), r2s(T * K, -7), s2r(T * K, -7);
  int32_t R = -7;
  expect_invalid(moe_permute(x.data(), ids.data(), T, K, H, E, 0, E, nullptr, counts.data(),
                             offsets.data(), r2s.data(), s2r.data(), &R, true),
                 {"permuted is null"});
  CHECK(R == -7);
}
