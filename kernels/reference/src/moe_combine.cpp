// moe_combine reference: weighted un-permute in gather form. See docs/kernels/moe.md.
#include <halcyon/kernels/reference/moe.hpp>

#include "check.hpp"

#include <algorithm>
#include <vector>

namespace halcyon::ref {

Status moe_combine(const bf16* expert_out, int64_t R, const float* topk_weights,
                   const int32_t* slot_to_row, int64_t T, int64_t K, int64_t H, bf16* out,
                   RowRange rows) {
  constexpr const char* kOp = "moe_combine";
  HALCYON_TRY(detail::check_size(kOp, "R", R, 0));
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "K", K, 1));
  HALCYON_TRY(detail::check_size(kOp, "H", H, 1));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "tokens", rows, T));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(kOp, "expert_out", expert_out, any && R > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "topk_weights", topk_weights, any));
  HALCYON_TRY(detail::check_ptr(kOp, "slot_to_row", slot_to_row, any));
  HALCYON_TRY(detail::check_ptr(kOp, "out", out, any));
  for (int64_t s = r.begin * K; s < r.end * K; ++s) {
    if (slot_to_row[s] < -1 || slot_to_row[s] >= R) {
      return detail::invalid("{}: slot_to_row[token {}, k {}] = {} is not -1 or in [0, R = {})",
                             kOp, s / K, s % K, slot_to_row[s], R);
    }
  }

  std::vector<double> acc(H);
  for (int64_t t = r.begin; t < r.end; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int32_t row = slot_to_row[t * K + k];
      if (row < 0) continue;  // expert not local: another rank adds this slot
      const double wk = topk_weights[t * K + k];
      const bf16* src = expert_out + row * H;
      for (int64_t h = 0; h < H; ++h) acc[h] += wk * bf16_to_float(src[h]);
    }
    for (int64_t h = 0; h < H; ++h) out[t * H + h] = float_to_bf16(static_cast<float>(acc[h]));
  }
  return {};
}

}  // namespace halcyon::ref
