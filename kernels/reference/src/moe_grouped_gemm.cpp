// Grouped GEMM references (fused gate/up + SwiGLU, with its rows from a permuted copy or
// gathered from the tokens, and plain) over per-expert row segments.
// See docs/kernels/moe.md.
#include <halcyon/kernels/reference/moe.hpp>

#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace halcyon::ref {
namespace {

// Checks what the grouped GEMMs share: a [R, Kd] (or x, named a_name), w [E_local, Kd, N],
// out [R, Nout].
Result<RowRange> check_grouped(const char* op, const char* a_name, const bf16* a, const bf16* w,
                               const int32_t* offsets, int64_t offsets_len, int64_t E_local,
                               int64_t R, const char* k_name, int64_t Kd, const char* n_name,
                               int64_t N, const bf16* out, RowRange rows) {
  HALCYON_TRY(detail::check_size(op, "R", R, 0));
  HALCYON_TRY(detail::check_size(op, k_name, Kd, 1));
  HALCYON_TRY(detail::check_size(op, n_name, N, 1));
  HALCYON_TRY(detail::check_offsets(op, offsets, offsets_len, E_local, R));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(op, "rows", rows, R));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(op, a_name, a, any));
  HALCYON_TRY(detail::check_ptr(op, "w", w, any));
  HALCYON_TRY(detail::check_ptr(op, "out", out, any));
  return r;
}

// The local expert that owns permuted row `row`: the e with offsets[e] <= row < offsets[e+1].
// Experts with no rows have offsets[e] == offsets[e+1] and own none.
int64_t expert_of_row(const int32_t* offsets, int64_t E_local, int64_t row) {
  const int32_t* past = std::upper_bound(offsets, offsets + E_local + 1, row);
  return (past - offsets) - 1;
}

// acc[n] = sum_k a[k] * w[k, n] for w [Kd, N] row-major. Products of two bf16 values and
// their sums over realistic Kd are exact or nearly so in fp64.
void row_times_matrix(const bf16* a, const bf16* w, int64_t Kd, int64_t N, double* acc) {
  std::fill(acc, acc + N, 0.0);
  for (int64_t k = 0; k < Kd; ++k) {
    const double ak = bf16_to_float(a[k]);
    const bf16* wk = w + k * N;
    for (int64_t n = 0; n < N; ++n) acc[n] += ak * bf16_to_float(wk[n]);
  }
}

bf16 to_bf16(double v) { return float_to_bf16(static_cast<float>(v)); }

// The SwiGLU rows [r.begin, min(r.end, offsets[E_local])) of both the plain and the gather
// form, so that the two give the same bits for the same input row: a_row(row) is the H
// inputs of row `row`.
template <typename RowSource>
void swiglu_rows(RowSource a_row, const bf16* w_gate_up, const int32_t* expert_offsets,
                 int64_t E_local, int64_t H, int64_t I, bf16* out, RowRange r) {
  std::vector<double> acc(2 * I);
  const int64_t used_end = std::min<int64_t>(r.end, expert_offsets[E_local]);
  for (int64_t row = r.begin; row < used_end; ++row) {
    const int64_t e = expert_of_row(expert_offsets, E_local, row);
    row_times_matrix(a_row(row), w_gate_up + e * H * 2 * I, H, 2 * I, acc.data());
    for (int64_t j = 0; j < I; ++j) {
      const double g = acc[j], u = acc[I + j];
      out[row * I + j] = to_bf16(g / (1.0 + std::exp(-g)) * u);
    }
  }
}

}  // namespace

Status moe_grouped_gemm_swiglu(const bf16* a, const bf16* w_gate_up,
                               const int32_t* expert_offsets, int64_t offsets_len,
                               int64_t E_local, int64_t R, int64_t H, int64_t I, bf16* out,
                               RowRange rows) {
  constexpr const char* kOp = "moe_grouped_gemm_swiglu";
  HALCYON_ASSIGN_OR_RETURN(const RowRange r,
                           check_grouped(kOp, "a", a, w_gate_up, expert_offsets, offsets_len,
                                         E_local, R, "H", H, "I", I, out, rows));
  swiglu_rows([&](int64_t row) { return a + row * H; }, w_gate_up, expert_offsets, E_local, H,
              I, out, r);
  return {};
}

Status moe_grouped_gemm_swiglu_gather(const bf16* x, int64_t T, int64_t topk,
                                      const int32_t* row_to_slot, const bf16* w_gate_up,
                                      const int32_t* expert_offsets, int64_t offsets_len,
                                      int64_t E_local, int64_t R, int64_t H, int64_t I,
                                      bf16* out, RowRange rows) {
  constexpr const char* kOp = "moe_grouped_gemm_swiglu_gather";
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "topk", topk, 1));
  if (T * topk > detail::kMaxI32) {
    return detail::invalid("{}: T * topk = {} does not fit int32 slot indices", kOp, T * topk);
  }
  HALCYON_ASSIGN_OR_RETURN(const RowRange r,
                           check_grouped(kOp, "x", x, w_gate_up, expert_offsets, offsets_len,
                                         E_local, R, "H", H, "I", I, out, rows));
  // Only the rows the experts own are read; their slots must name a token of x.
  const int64_t used_end = std::min<int64_t>(r.end, expert_offsets[E_local]);
  HALCYON_TRY(detail::check_ptr(kOp, "row_to_slot", row_to_slot, used_end > r.begin));
  for (int64_t row = r.begin; row < used_end; ++row) {
    if (row_to_slot[row] < 0 || row_to_slot[row] >= T * topk) {
      return detail::invalid("{}: row_to_slot[{}] = {} is not in [0, T * topk = {})", kOp, row,
                             row_to_slot[row], T * topk);
    }
  }
  swiglu_rows([&](int64_t row) { return x + (row_to_slot[row] / topk) * H; }, w_gate_up,
              expert_offsets, E_local, H, I, out, r);
  return {};
}

Status moe_grouped_gemm(const bf16* a, const bf16* w, const int32_t* expert_offsets,
                        int64_t offsets_len, int64_t E_local, int64_t R, int64_t I, int64_t H,
                        bf16* out, RowRange rows) {
  constexpr const char* kOp = "moe_grouped_gemm";
  HALCYON_ASSIGN_OR_RETURN(const RowRange r,
                           check_grouped(kOp, "a", a, w, expert_offsets, offsets_len, E_local, R,
                                         "I", I, "H", H, out, rows));
  std::vector<double> acc(H);
  const int64_t used_end = std::min<int64_t>(r.end, expert_offsets[E_local]);
  for (int64_t row = r.begin; row < used_end; ++row) {
    const int64_t e = expert_of_row(expert_offsets, E_local, row);
    row_times_matrix(a + row * I, w + e * I * H, I, H, acc.data());
    for (int64_t n = 0; n < H; ++n) out[row * H + n] = to_bf16(acc[n]);
  }
  return {};
}

}  // namespace halcyon::ref
