// moe_permute reference: expert-contiguous, stable gather of token rows. See
// docs/kernels/moe.md.
#include <halcyon/kernels/reference/moe.hpp>

#include "check.hpp"

#include <algorithm>
#include <vector>

namespace halcyon::ref {
namespace {
constexpr const char* kOp = "moe_permute";
}  // namespace

Status moe_permute_plan(const int32_t* topk_ids, int64_t T, int64_t K, int64_t E,
                        int64_t expert_begin, int64_t expert_end, int32_t* expert_counts,
                        int32_t* expert_offsets, int32_t* row_to_slot, int32_t* slot_to_row,
                        int32_t* num_rows) {
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "K", K, 1));
  HALCYON_TRY(detail::check_size(kOp, "E", E, 1));
  if (T * K > detail::kMaxI32) {
    return detail::invalid("{}: T * K = {} does not fit int32 row indices", kOp, T * K);
  }
  if (E > detail::kMaxI32) return detail::invalid("{}: E = {} does not fit int32", kOp, E);
  if (expert_begin < 0 || expert_end < expert_begin || expert_end > E) {
    return detail::invalid("{}: local experts [{}, {}) are not within [0, E = {})", kOp,
                           expert_begin, expert_end, E);
  }
  const int64_t E_local = expert_end - expert_begin;
  const int64_t slots = T * K;
  HALCYON_TRY(detail::check_ptr(kOp, "topk_ids", topk_ids, slots > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "expert_counts", expert_counts, E_local > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "expert_offsets", expert_offsets, true));
  HALCYON_TRY(detail::check_ptr(kOp, "row_to_slot", row_to_slot, slots > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "slot_to_row", slot_to_row, slots > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "num_rows", num_rows, true));
  for (int64_t s = 0; s < slots; ++s) {
    if (topk_ids[s] < 0 || topk_ids[s] >= E) {
      return detail::invalid("{}: topk_ids[token {}, k {}] = {} is not in [0, E = {})", kOp,
                             s / K, s % K, topk_ids[s], E);
    }
  }

  auto local = [&](int32_t id) { return id >= expert_begin && id < expert_end; };
  std::fill(expert_counts, expert_counts + E_local, 0);
  for (int64_t s = 0; s < slots; ++s) {
    if (local(topk_ids[s])) ++expert_counts[topk_ids[s] - expert_begin];
  }
  expert_offsets[0] = 0;
  for (int64_t e = 0; e < E_local; ++e) expert_offsets[e + 1] = expert_offsets[e] + expert_counts[e];
  *num_rows = expert_offsets[E_local];

  // Visiting slots in increasing order makes each expert's rows stable (increasing slot).
  std::vector<int32_t> next(expert_offsets, expert_offsets + E_local);
  for (int64_t s = 0; s < slots; ++s) {
    if (!local(topk_ids[s])) {
      slot_to_row[s] = -1;
      continue;
    }
    const int32_t row = next[topk_ids[s] - expert_begin]++;
    slot_to_row[s] = row;
    row_to_slot[row] = static_cast<int32_t>(s);
  }
  return {};
}

Status moe_permute_gather(const bf16* x, int64_t T, int64_t H, int64_t K,
                          const int32_t* row_to_slot, int64_t num_rows, bf16* permuted,
                          RowRange rows) {
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "H", H, 1));
  HALCYON_TRY(detail::check_size(kOp, "K", K, 1));
  if (num_rows < 0 || num_rows > T * K) {
    return detail::invalid("{}: num_rows = {} is not in [0, T * K = {}]", kOp, num_rows, T * K);
  }
  HALCYON_ASSIGN_OR_RETURN(const RowRange r,
                           detail::resolve_rows(kOp, "permuted rows", rows, num_rows));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(kOp, "x", x, any));
  HALCYON_TRY(detail::check_ptr(kOp, "row_to_slot", row_to_slot, any));
  HALCYON_TRY(detail::check_ptr(kOp, "permuted", permuted, any));
  for (int64_t row = r.begin; row < r.end; ++row) {
    if (row_to_slot[row] < 0 || row_to_slot[row] >= T * K) {
      return detail::invalid("{}: row_to_slot[{}] = {} is not in [0, T * K = {})", kOp, row,
                             row_to_slot[row], T * K);
    }
  }
  for (int64_t row = r.begin; row < r.end; ++row) {
    const bf16* src = x + (row_to_slot[row] / K) * H;
    std::copy(src, src + H, permuted + row * H);
  }
  return {};
}

Status moe_permute(const bf16* x, const int32_t* topk_ids, int64_t T, int64_t K, int64_t H,
                   int64_t E, int64_t expert_begin, int64_t expert_end, bf16* permuted,
                   int32_t* expert_counts, int32_t* expert_offsets, int32_t* row_to_slot,
                   int32_t* slot_to_row, int32_t* num_rows, bool write_permuted) {
  // What the gather checks, checked before the plan writes anything.
  HALCYON_TRY(detail::check_size(kOp, "H", H, 1));
  HALCYON_TRY(detail::check_ptr(kOp, "x", x, write_permuted && T * K > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "permuted", permuted, write_permuted && T * K > 0));
  HALCYON_TRY(moe_permute_plan(topk_ids, T, K, E, expert_begin, expert_end, expert_counts,
                               expert_offsets, row_to_slot, slot_to_row, num_rows));
  if (!write_permuted) return {};
  return moe_permute_gather(x, T, H, K, row_to_slot, *num_rows, permuted);
}

}  // namespace halcyon::ref
