// CPU references of the FP8 (e4m3, block-scaled) MoE operators, DeepSeek-V3's way
// (kernels/moe/moe_*fp8*.contract; semantics in docs/kernels/fp8.md). Same conventions as
// moe.hpp: pure functions, arguments checked before anything is written, RowRange splits.
//
// Block scaling: a group is 128 consecutive elements along K (the last one may be shorter:
// KG = ceil(K / 128) groups). Activations carry one f32 scale per row and group
// ([rows, KG]); weights [E, N, K] e4m3 (K contiguous: row n of expert e is its n-th output)
// carry one f32 scale per 128 x 128 block ([E, ceil(N / 128), KG]). The value an e4m3 q stands
// for is q * scale.
#pragma once

#include <halcyon/kernels/reference/e4m3.hpp>
#include <halcyon/kernels/reference/moe.hpp>

#include <cstdint>

namespace halcyon::ref {

inline constexpr int64_t kFp8Group = 128;
constexpr int64_t fp8_groups(int64_t k) { return (k + kFp8Group - 1) / kFp8Group; }

// moe_quantize_fp8: per row r and group g of x [R, K] bf16,
//   amax = max |x| over the group (fp32), s = amax / 448 (fp32 division, NOT rounded to a
//   power of two: DeepSeek-V3's released inference code), scale[r, g] = s,
//   q[r, k] = e4m3(x[r, k] / s) (fp32 division, nearest even, saturating), or +0 when s == 0.
// Finite input never gives NaN. Special values: amax skips NaNs; an infinity makes the group's
// scale +inf, so its finite values give +-0 and its infinities inf / inf = NaN; every NaN is the
// code 0x7f, and a NaN x gives it even in a group of scale 0. q [R, K] e4m3, scale [R, KG] f32.
// rows: rows of x.
Status moe_quantize_fp8(const bf16* x, int64_t R, int64_t K, e4m3* q, float* scale, RowRange rows = {});

// moe_permute_fp8: moe_permute with the rows quantized on the way. The plan is moe_permute's
// (moe_permute_plan: counts, offsets, both maps, num_rows); then every token row t is quantized
// once as moe_quantize_fp8 quantizes a row and written to each of its permuted rows
// r = slot_to_row[t, k] >= 0: permuted [>= R, H] e4m3, permuted_scale [>= R, HG] f32. So
// permuted[r] = quantize(x[row_to_slot[r] / K]), bit for bit the composition quantize, then
// permute. Rows past R = num_rows are not written.
Status moe_permute_fp8(const bf16* x, const int32_t* topk_ids, int64_t T, int64_t K, int64_t H,
                       int64_t E, int64_t expert_begin, int64_t expert_end, e4m3* permuted,
                       float* permuted_scale, int32_t* expert_counts, int32_t* expert_offsets,
                       int32_t* row_to_slot, int32_t* slot_to_row, int32_t* num_rows);
// Its row pass over the tokens in `tokens` (default: all T), given the plan's slot_to_row
// [T, K] (entries -1 or in [0, num_rows)): a thread pool may run disjoint token ranges at once.
Status moe_permute_fp8_scatter(const bf16* x, int64_t T, int64_t H, int64_t K,
                               const int32_t* slot_to_row, int64_t num_rows, e4m3* permuted,
                               float* permuted_scale, RowRange tokens = {});

// The block-scaled grouped GEMMs. For row r of local expert e and output n:
//   acc = sum over groups g of (a_scale[r, g] * w_scale[e, n / 128, g]) * sum_{k in g} a[r, k] * w[e, n, k]
// in fp64 (e4m3 products are exact), rounded once to bf16. Implementations accumulate each
// group in fp32 (or the tensor cores' narrower accumulator) and promote it to an fp32 total
// with the scales: the "promotion every 128 of K".
// Fused gate/up + SwiGLU: w_gate_up [EL, 2I, H] (rows [0, I) gate, [I, 2I) up), w_scale
// [EL, ceil(2I/128), HG]; out[r, j] = bf16(silu(g) * u). a [R, H], a_scale [R, HG].
Status moe_grouped_gemm_fp8_swiglu(const e4m3* a, const float* a_scale, const e4m3* w_gate_up,
                                   const float* w_scale, const int32_t* expert_offsets,
                                   int64_t offsets_len, int64_t E_local, int64_t R, int64_t H,
                                   int64_t I, bf16* out, RowRange rows = {});
// The same with the output re-quantized for the down projection: per row r < expert_offsets[EL],
// h = moe_grouped_gemm_fp8_swiglu's bf16 row, then q[r] / q_scale[r] = moe_quantize_fp8 of h
// (1x128 groups along I: q [R, I] e4m3, q_scale [R, IG] f32). So the result is bit for bit the
// composition of the two, and what an implementation may differ in is only h's bf16 rounding.
Status moe_grouped_gemm_fp8_swiglu_quant(const e4m3* a, const float* a_scale, const e4m3* w_gate_up,
                                         const float* w_scale, const int32_t* expert_offsets,
                                         int64_t offsets_len, int64_t E_local, int64_t R, int64_t H,
                                         int64_t I, e4m3* q, float* q_scale, RowRange rows = {});
// The same with row r read from the tokens: x [T, H], x_scale [T, HG], row r's input is token
// row_to_slot[r] / topk.
Status moe_grouped_gemm_fp8_swiglu_gather(const e4m3* x, const float* x_scale, int64_t T,
                                          int64_t topk, const int32_t* row_to_slot,
                                          const e4m3* w_gate_up, const float* w_scale,
                                          const int32_t* expert_offsets, int64_t offsets_len,
                                          int64_t E_local, int64_t R, int64_t H, int64_t I,
                                          bf16* out, RowRange rows = {});
// Plain (down): a [R, I], a_scale [R, IG], w [EL, H, I], w_scale [EL, ceil(H/128), IG],
// out [R, H] = bf16(acc).
Status moe_grouped_gemm_fp8(const e4m3* a, const float* a_scale, const e4m3* w,
                            const float* w_scale, const int32_t* expert_offsets,
                            int64_t offsets_len, int64_t E_local, int64_t R, int64_t I, int64_t H,
                            bf16* out, RowRange rows = {});

}  // namespace halcyon::ref
