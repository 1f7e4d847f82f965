// FP8 references: moe_quantize_fp8 and the block-scaled grouped GEMMs. docs/kernels/fp8.md.
#include <halcyon/kernels/reference/moe_fp8.hpp>

#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace halcyon::ref {
namespace {

// One row and group of moe_quantize_fp8 (n <= 128 values). amax skips NaNs (std::max(amax, NaN)
// keeps amax); a NaN x still gives the NaN code when the scale is 0, so no NaN is lost.
void quantize_group(const bf16* x, int64_t n, e4m3* q, float* scale) {
  float amax = 0.0f;
  for (int64_t k = 0; k < n; ++k) amax = std::max(amax, std::fabs(bf16_to_float(x[k])));
  const float s = amax / kE4m3Max;
  *scale = s;
  for (int64_t k = 0; k < n; ++k) {
    const float v = bf16_to_float(x[k]);
    q[k] = s > 0.0f || std::isnan(v) ? float_to_e4m3(v / s) : e4m3{};
  }
}

// The local expert that owns row `row` (offsets[e] <= row < offsets[e+1]).
int64_t owner(const int32_t* offsets, int64_t E_local, int64_t row) {
  return (std::upper_bound(offsets, offsets + E_local + 1, row) - offsets) - 1;
}

// e4m3_to_float of every bit pattern, as doubles (the GEMM loops decode each weight once per row).
const double* e4m3_table() {
  static const auto table = [] {
    std::vector<double> t(256);
    for (int i = 0; i < 256; ++i) t[size_t(i)] = e4m3_to_float(e4m3{static_cast<std::uint8_t>(i)});
    return t;
  }();
  return table.data();
}

// acc[n] = sum_g (a_scale[g] * w_scale[n/128, g]) * sum_{k in g} a[k] * w[n, k], n < N, for one
// row a [K] and one expert's w [N, K], w_scale [ceil(N/128), KG].
void block_scaled_row(const e4m3* a, const float* a_scale, const e4m3* w, const float* w_scale,
                      int64_t K, int64_t N, double* acc) {
  const int64_t KG = fp8_groups(K);
  const double* lut = e4m3_table();
  std::vector<double> av(size_t(K), 0.0);
  for (int64_t k = 0; k < K; ++k) av[size_t(k)] = lut[a[k].bits];
  for (int64_t n = 0; n < N; ++n) {
    const e4m3* wn = w + n * K;
    double total = 0.0;
    for (int64_t g = 0; g < KG; ++g) {
      double part = 0.0;
      for (int64_t k = g * kFp8Group; k < std::min(K, (g + 1) * kFp8Group); ++k)
        part += av[size_t(k)] * lut[wn[k].bits];
      total += double(a_scale[g]) * double(w_scale[(n / kFp8Group) * KG + g]) * part;
    }
    acc[n] = total;
  }
}

Result<RowRange> check_fp8(const char* op, const char* a_name, const void* a, const void* a_scale,
                           const void* w, const void* w_scale, const int32_t* offsets,
                           int64_t offsets_len, int64_t E_local, int64_t R, const char* k_name,
                           int64_t K, const char* n_name, int64_t N, const void* out,
                           RowRange rows, const char* out_name = "out") {
  HALCYON_TRY(detail::check_size(op, "R", R, 0));
  HALCYON_TRY(detail::check_size(op, k_name, K, 1));
  HALCYON_TRY(detail::check_size(op, n_name, N, 1));
  HALCYON_TRY(detail::check_offsets(op, offsets, offsets_len, E_local, R));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(op, "rows", rows, R));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(op, a_name, a, any));
  HALCYON_TRY(detail::check_ptr(op, "a_scale", a_scale, any));
  HALCYON_TRY(detail::check_ptr(op, "w", w, any));
  HALCYON_TRY(detail::check_ptr(op, "w_scale", w_scale, any));
  HALCYON_TRY(detail::check_ptr(op, out_name, out, any));
  return r;
}

bf16 to_bf16(double v) { return float_to_bf16(static_cast<float>(v)); }

// SwiGLU rows of both forms: row_of(row) gives the token row index into a / a_scale.
template <typename RowOf>
void swiglu_rows(RowOf row_of, const e4m3* a, const float* a_scale, const e4m3* w,
                 const float* w_scale, const int32_t* offsets, int64_t E_local, int64_t H,
                 int64_t I, bf16* out, RowRange r) {
  const int64_t HG = fp8_groups(H), NG = fp8_groups(2 * I);
  std::vector<double> acc(static_cast<size_t>(2 * I));
  const int64_t used_end = std::min<int64_t>(r.end, offsets[E_local]);
  for (int64_t row = r.begin; row < used_end; ++row) {
    const int64_t e = owner(offsets, E_local, row), src = row_of(row);
    block_scaled_row(a + src * H, a_scale + src * HG, w + e * 2 * I * H, w_scale + e * NG * HG, H,
                     2 * I, acc.data());
    for (int64_t j = 0; j < I; ++j) {
      const double g = acc[size_t(j)], u = acc[size_t(I + j)];
      out[row * I + j] = to_bf16(g / (1.0 + std::exp(-g)) * u);
    }
  }
}

}  // namespace

Status moe_quantize_fp8(const bf16* x, int64_t R, int64_t K, e4m3* q, float* scale,
                        RowRange rows) {
  constexpr const char* kOp = "moe_quantize_fp8";
  HALCYON_TRY(detail::check_size(kOp, "R", R, 0));
  HALCYON_TRY(detail::check_size(kOp, "K", K, 1));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "rows", rows, R));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(kOp, "x", x, any));
  HALCYON_TRY(detail::check_ptr(kOp, "q", q, any));
  HALCYON_TRY(detail::check_ptr(kOp, "scale", scale, any));
  const int64_t KG = fp8_groups(K);
  for (int64_t row = r.begin; row < r.end; ++row)
    for (int64_t g = 0; g < KG; ++g) {
      const int64_t k0 = g * kFp8Group;
      quantize_group(x + row * K + k0, std::min(kFp8Group, K - k0), q + row * K + k0, scale + row * KG + g);
    }
  return {};
}

Status moe_permute_fp8_scatter(const bf16* x, int64_t T, int64_t H, int64_t K,
                               const int32_t* slot_to_row, int64_t num_rows, e4m3* permuted,
                               float* permuted_scale, RowRange tokens) {
  constexpr const char* kOp = "moe_permute_fp8";
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "H", H, 1));
  HALCYON_TRY(detail::check_size(kOp, "K", K, 1));
  if (num_rows < 0 || num_rows > T * K)
    return detail::invalid("{}: num_rows = {} is not in [0, T * K = {}]", kOp, num_rows, T * K);
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "tokens", tokens, T));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(kOp, "x", x, any));
  HALCYON_TRY(detail::check_ptr(kOp, "slot_to_row", slot_to_row, any));
  for (int64_t s = r.begin * K; s < r.end * K; ++s)
    if (slot_to_row[s] < -1 || slot_to_row[s] >= num_rows)
      return detail::invalid("{}: slot_to_row[{}] = {} is not -1 or in [0, num_rows = {})", kOp, s, slot_to_row[s],
                             num_rows);
  HALCYON_TRY(detail::check_ptr(kOp, "permuted", permuted, any && num_rows > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "permuted_scale", permuted_scale, any && num_rows > 0));
  const int64_t HG = fp8_groups(H);
  std::vector<e4m3> q(static_cast<size_t>(H));
  std::vector<float> scale(static_cast<size_t>(HG));
  for (int64_t t = r.begin; t < r.end; ++t) {
    const int32_t* rows = slot_to_row + t * K;
    if (std::none_of(rows, rows + K, [](int32_t row) { return row >= 0; })) continue;
    HALCYON_TRY(moe_quantize_fp8(x + t * H, 1, H, q.data(), scale.data()));
    for (int64_t k = 0; k < K; ++k) {
      if (rows[k] < 0) continue;
      std::copy(q.begin(), q.end(), permuted + rows[k] * H);
      std::copy(scale.begin(), scale.end(), permuted_scale + rows[k] * HG);
    }
  }
  return {};
}

Status moe_permute_fp8(const bf16* x, const int32_t* topk_ids, int64_t T, int64_t K, int64_t H,
                       int64_t E, int64_t expert_begin, int64_t expert_end, e4m3* permuted,
                       float* permuted_scale, int32_t* expert_counts, int32_t* expert_offsets,
                       int32_t* row_to_slot, int32_t* slot_to_row, int32_t* num_rows) {
  // What the row pass checks, checked before the plan writes anything.
  constexpr const char* kOp = "moe_permute_fp8";
  HALCYON_TRY(detail::check_size(kOp, "H", H, 1));
  HALCYON_TRY(detail::check_ptr(kOp, "x", x, T * K > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "permuted", permuted, T * K > 0));
  HALCYON_TRY(detail::check_ptr(kOp, "permuted_scale", permuted_scale, T * K > 0));
  HALCYON_TRY(moe_permute_plan(topk_ids, T, K, E, expert_begin, expert_end, expert_counts, expert_offsets,
                               row_to_slot, slot_to_row, num_rows));
  return moe_permute_fp8_scatter(x, T, H, K, slot_to_row, *num_rows, permuted, permuted_scale);
}

Status moe_grouped_gemm_fp8_swiglu(const e4m3* a, const float* a_scale, const e4m3* w_gate_up,
                                   const float* w_scale, const int32_t* expert_offsets,
                                   int64_t offsets_len, int64_t E_local, int64_t R, int64_t H,
                                   int64_t I, bf16* out, RowRange rows) {
  HALCYON_ASSIGN_OR_RETURN(const RowRange r,
                           check_fp8("moe_grouped_gemm_fp8_swiglu", "a", a, a_scale, w_gate_up, w_scale,
                                     expert_offsets, offsets_len, E_local, R, "H", H, "I", I, out, rows));
  swiglu_rows([](int64_t row) { return row; }, a, a_scale, w_gate_up, w_scale, expert_offsets, E_local, H, I, out, r);
  return {};
}

Status moe_grouped_gemm_fp8_swiglu_quant(const e4m3* a, const float* a_scale, const e4m3* w_gate_up,
                                         const float* w_scale, const int32_t* expert_offsets,
                                         int64_t offsets_len, int64_t E_local, int64_t R, int64_t H,
                                         int64_t I, e4m3* q, float* q_scale, RowRange rows) {
  constexpr const char* kOp = "moe_grouped_gemm_fp8_swiglu_quant";
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, check_fp8(kOp, "a", a, a_scale, w_gate_up, w_scale, expert_offsets,
                                                       offsets_len, E_local, R, "H", H, "I", I, q, rows, "q"));
  HALCYON_TRY(detail::check_ptr(kOp, "q_scale", q_scale, r.end > r.begin));
  // Row by row through one bf16 row of h: the same two steps as the composition.
  const int64_t used_end = std::min<int64_t>(r.end, expert_offsets[E_local]), IG = fp8_groups(I);
  std::vector<bf16> h(static_cast<size_t>(I));
  for (int64_t row = r.begin; row < used_end; ++row) {
    // h of row `row` alone: swiglu_rows with h as a one-row output whose row 0 is `row`.
    const int32_t one_row[2] = {0, 1};
    const int64_t e = owner(expert_offsets, E_local, row);
    swiglu_rows([row](int64_t) { return row; }, a, a_scale, w_gate_up + e * 2 * I * H,
                w_scale + e * fp8_groups(2 * I) * fp8_groups(H), one_row, 1, H, I, h.data(), RowRange{0, 1});
    HALCYON_TRY(moe_quantize_fp8(h.data(), 1, I, q + row * I, q_scale + row * IG));
  }
  return {};
}

Status moe_grouped_gemm_fp8_swiglu_gather(const e4m3* x, const float* x_scale, int64_t T,
                                          int64_t topk, const int32_t* row_to_slot,
                                          const e4m3* w_gate_up, const float* w_scale,
                                          const int32_t* expert_offsets, int64_t offsets_len,
                                          int64_t E_local, int64_t R, int64_t H, int64_t I,
                                          bf16* out, RowRange rows) {
  constexpr const char* kOp = "moe_grouped_gemm_fp8_swiglu_gather";
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "topk", topk, 1));
  if (T * topk > detail::kMaxI32)
    return detail::invalid("{}: T * topk = {} does not fit int32 slot indices", kOp, T * topk);
  HALCYON_ASSIGN_OR_RETURN(const RowRange r,
                           check_fp8(kOp, "x", x, x_scale, w_gate_up, w_scale, expert_offsets, offsets_len,
                                     E_local, R, "H", H, "I", I, out, rows));
  const int64_t used_end = std::min<int64_t>(r.end, expert_offsets[E_local]);
  HALCYON_TRY(detail::check_ptr(kOp, "row_to_slot", row_to_slot, used_end > r.begin));
  for (int64_t row = r.begin; row < used_end; ++row)
    if (row_to_slot[row] < 0 || row_to_slot[row] >= T * topk)
      return detail::invalid("{}: row_to_slot[{}] = {} is not in [0, T * topk = {})", kOp, row, row_to_slot[row],
                             T * topk);
  swiglu_rows([&](int64_t row) { return int64_t(row_to_slot[row]) / topk; }, x, x_scale, w_gate_up, w_scale,
              expert_offsets, E_local, H, I, out, r);
  return {};
}

Status moe_grouped_gemm_fp8(const e4m3* a, const float* a_scale, const e4m3* w,
                            const float* w_scale, const int32_t* expert_offsets,
                            int64_t offsets_len, int64_t E_local, int64_t R, int64_t I, int64_t H,
                            bf16* out, RowRange rows) {
  HALCYON_ASSIGN_OR_RETURN(const RowRange r,
                           check_fp8("moe_grouped_gemm_fp8", "a", a, a_scale, w, w_scale, expert_offsets,
                                     offsets_len, E_local, R, "I", I, "H", H, out, rows));
  const int64_t IG = fp8_groups(I), HGN = fp8_groups(H);
  std::vector<double> acc(static_cast<size_t>(H));
  const int64_t used_end = std::min<int64_t>(r.end, expert_offsets[E_local]);
  for (int64_t row = r.begin; row < used_end; ++row) {
    const int64_t e = owner(expert_offsets, E_local, row);
    block_scaled_row(a + row * I, a_scale + row * IG, w + e * H * I, w_scale + e * HGN * IG, I, H, acc.data());
    for (int64_t n = 0; n < H; ++n) out[row * H + n] = to_bf16(acc[size_t(n)]);
  }
  return {};
}

}  // namespace halcyon::ref
