// attention_prefill reference. See docs/kernels/attention.md.
#include <halcyon/kernels/reference/attention.hpp>

#include "attention_common.hpp"
#include "check.hpp"

#include <algorithm>

namespace halcyon::ref {

Status attention_prefill_check(const AttentionPrefillShape& s) {
  constexpr const char* kOp = "attention_prefill";
  HALCYON_TRY(detail::check_size(kOp, "B", s.B, 0));
  HALCYON_TRY(detail::check_size(kOp, "Tq", s.Tq, 0));
  HALCYON_TRY(detail::check_size(kOp, "Tk", s.Tk, 0));
  HALCYON_TRY(detail::check_size(kOp, "Hkv", s.Hkv, 1));
  HALCYON_TRY(detail::check_size(kOp, "Hq", s.Hq, 1));
  if (s.D != 64 && s.D != 128) return detail::invalid("{}: head dim D = {} is not supported (64 or 128)", kOp, s.D);
  if (s.Hq % s.Hkv != 0)
    return detail::invalid("{}: Hq = {} (heads of q) is not a multiple of Hkv = {} (heads of k and v)", kOp, s.Hq, s.Hkv);
  if (s.Tq > detail::kMaxI32 || s.Tk > detail::kMaxI32)
    return detail::invalid("{}: Tq = {} or Tk = {} does not fit the int32 offsets", kOp, s.Tq, s.Tk);
  if (!std::isfinite(s.scale)) return detail::invalid("{}: scale = {} is not finite", kOp, s.scale);
  return {};
}

Status attention_check_cu_seqlens(const char* op, const char* name, const int32_t* cu, int64_t B, int64_t T) {
  HALCYON_TRY(detail::check_ptr(op, name, cu, true));
  if (cu[0] != 0) return detail::invalid("{}: {}[0] = {}, expected 0", op, name, cu[0]);
  for (int64_t b = 0; b < B; ++b)
    if (cu[b + 1] < cu[b])
      return detail::invalid("{}: {} decreases at sequence {}: {} then {}", op, name, b, cu[b], cu[b + 1]);
  if (cu[B] > T) return detail::invalid("{}: {}[B = {}] = {} lies past the {} tokens", op, name, B, cu[B], T);
  return {};
}

Status attention_prefill(const bf16* q, const bf16* k, const bf16* v, const int32_t* cu_q, const int32_t* cu_k,
                         const AttentionPrefillShape& s, bf16* out, float* lse, RowRange rows) {
  constexpr const char* kOp = "attention_prefill";
  HALCYON_TRY(attention_prefill_check(s));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "query tokens", rows, s.Tq));
  HALCYON_TRY(attention_check_cu_seqlens(kOp, "cu_seqlens_q", cu_q, s.B, s.Tq));
  HALCYON_TRY(attention_check_cu_seqlens(kOp, "cu_seqlens_k", cu_k, s.B, s.Tk));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(kOp, "q", q, any));
  HALCYON_TRY(detail::check_ptr(kOp, "k", k, any && s.Tk > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "v", v, any && s.Tk > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "out", out, any));
  HALCYON_TRY(detail::check_ptr(kOp, "lse", lse, any));

  const double scale = attention_scale(s.scale, s.D);
  const int64_t group = s.Hq / s.Hkv, D = s.D;
  std::vector<double> scores, acc;
  for (int64_t t = r.begin; t < r.end && t < cu_q[s.B]; ++t) {
    // The sequence of token t: the last b with cu_q[b] <= t (empty sequences skipped).
    const int64_t b = std::upper_bound(cu_q, cu_q + s.B + 1, int32_t(t)) - cu_q - 1;
    const int64_t q_len = cu_q[b + 1] - cu_q[b], k_len = cu_k[b + 1] - cu_k[b];
    const int64_t i = t - cu_q[b];
    // Causal, aligned bottom-right: query i sees keys j <= i + k_len - q_len.
    const int64_t visible = s.causal ? std::clamp<int64_t>(i + k_len - q_len + 1, 0, k_len) : k_len;
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t hk = h / group;
      auto kv = [&](int64_t j) {
        const int64_t row = (cu_k[b] + j) * s.Hkv + hk;
        return std::pair{k + row * D, v + row * D};
      };
      detail::attend_row(q + (t * s.Hq + h) * D, D, D, visible, kv, scale, out + (t * s.Hq + h) * D,
                         lse + t * s.Hq + h, scores, acc);
    }
  }
  return {};
}

}  // namespace halcyon::ref
