// CPU reference implementations of the MoE operators (kernels/moe/*.contract).
//
// These are the CPU backend's kernels and the oracle of every conformance check on every
// other backend, so they are written to be obviously right, not fast: plain loops, fp32
// inputs widened to fp64 for sums (products of bf16 values are exact in fp64), one rounding
// to the output type at the end. docs/kernels/moe.md gives the full semantics.
//
// Conventions shared by every function here:
// - Pure functions over host pointers and sizes; nothing is allocated for the caller, nothing
//   is kept between calls, no global state, no threads.
// - Arguments are validated before anything is written: a bad argument returns
//   HAL_INVALID_ARGUMENT with a message naming the parameter and the bad value, and leaves
//   every output untouched.
// - Work is split by independent rows. Each function takes a RowRange (default: all rows) of
//   the rows it owns - tokens for moe_gate and moe_combine, permuted rows for
//   moe_permute_gather and the grouped GEMMs - and writes only those rows' outputs, so a
//   thread pool may call it on disjoint ranges concurrently. Only moe_permute_plan (integer
//   bookkeeping, O(T*K)) is one sequential pass.
// - Layouts are row-major and dense. Tensors are described as [dim0, dim1, ...] with the
//   last dimension contiguous.
#pragma once

#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/result.hpp>

#include <cstdint>

namespace halcyon::ref {

// Half-open range [begin, end) of the rows a call computes. end == kToLastRow means "up to
// the last row", so RowRange{} is every row.
struct RowRange {
  static constexpr int64_t kToLastRow = -1;
  int64_t begin = 0;
  int64_t end = kToLastRow;
};

// ---------------------------------------------------------------------------------------
// moe_gate: router logits -> top-k expert ids and weights per token.
// ---------------------------------------------------------------------------------------

enum class ScoreFunction {
  kSigmoid,  // score[e] = 1 / (1 + exp(-logit[e]))
  kSoftmax,  // score[e] = exp(logit[e]) / sum over all E experts of exp(logit)
};

struct MoeGateParams {
  ScoreFunction score = ScoreFunction::kSigmoid;
  int64_t n_groups = 1;     // experts are split into n_groups equal groups of E / n_groups
  int64_t topk_groups = 1;  // groups kept, by group score (sum of its two best biased scores)
  int64_t topk = 8;         // experts chosen among the kept groups
  bool normalize = true;    // weights divided by their sum (per token)
  float routed_scale = 1.0f;  // weights multiplied by this (after normalising)

  // DeepSeek-V3: 256 experts, sigmoid, 8 groups, top-4 groups, top-8, normalised, x 2.5.
  static MoeGateParams deepseek_v3() {
    return {ScoreFunction::kSigmoid, 8, 4, 8, true, 2.5f};
  }
};

// logits [T, E] f32, bias [E] f32 or nullptr (selection only),
// topk_ids [T, topk] i32 (descending selection score, ties to the lower expert index),
// topk_weights [T, topk] f32 (unbiased scores; normalised if asked; times routed_scale).
// rows: tokens.
Status moe_gate(const float* logits, const float* bias, int64_t T, int64_t E,
                const MoeGateParams& p, int32_t* topk_ids, float* topk_weights,
                RowRange rows = {});

// Checks T, E and p alone (what moe_gate checks before touching data).
Status moe_gate_check(int64_t T, int64_t E, const MoeGateParams& p);

// ---------------------------------------------------------------------------------------
// moe_permute: token rows gathered into expert-contiguous order, for the local experts
// [expert_begin, expert_end) of E (expert parallelism; [0, E) when every expert is local).
// A "slot" is one (token t, choice k) pair, numbered t * K + k. R is the number of slots
// routed to a local expert; permuted rows are ordered by local expert, then by slot.
// ---------------------------------------------------------------------------------------

// The bookkeeping, one sequential pass over topk_ids [T, K] (every id must be in [0, E)):
//   expert_counts  [E_local]     rows of each local expert (E_local = end - begin)
//   expert_offsets [E_local + 1] exclusive prefix sums of the counts; [E_local] = R
//   row_to_slot    [T * K]       slot each permuted row comes from (first R entries written)
//   slot_to_row    [T, K]        permuted row of each slot, -1 if its expert is not local
//   num_rows       [1]           R
Status moe_permute_plan(const int32_t* topk_ids, int64_t T, int64_t K, int64_t E,
                        int64_t expert_begin, int64_t expert_end, int32_t* expert_counts,
                        int32_t* expert_offsets, int32_t* row_to_slot, int32_t* slot_to_row,
                        int32_t* num_rows);

// The data movement: permuted[r] = x[row_to_slot[r] / K] for the permuted rows r in `rows`
// (default: all R = num_rows rows). x [T, H] bf16, permuted [>= R, H] bf16.
Status moe_permute_gather(const bf16* x, int64_t T, int64_t H, int64_t K,
                          const int32_t* row_to_slot, int64_t num_rows, bf16* permuted,
                          RowRange rows = {});

// Both of the above over every row. permuted has capacity T * K rows; rows past R are not
// written (nor are row_to_slot entries past R). With write_permuted false only the plan runs:
// permuted is not written (x and permuted may then be null), for a caller whose next step
// reads the rows from x through row_to_slot (moe_grouped_gemm_swiglu_gather).
Status moe_permute(const bf16* x, const int32_t* topk_ids, int64_t T, int64_t K, int64_t H,
                   int64_t E, int64_t expert_begin, int64_t expert_end, bf16* permuted,
                   int32_t* expert_counts, int32_t* expert_offsets, int32_t* row_to_slot,
                   int32_t* slot_to_row, int32_t* num_rows, bool write_permuted = true);

// ---------------------------------------------------------------------------------------
// Grouped GEMMs over per-expert row segments: the rows [offsets[e], offsets[e+1]) of `a`
// belong to local expert e and are multiplied by that expert's weights. offsets must have
// offsets_len == E_local + 1 entries, start at 0, never decrease, and end at or before R:
// R is the rows' capacity, and rows from offsets[E_local] to R are neither read nor written.
// bf16 inputs, fp64 accumulation (exact products), one rounding to bf16. rows: permuted rows.
// ---------------------------------------------------------------------------------------

// Fused gate/up projection and SwiGLU.
//   a          [R, H] bf16
//   w_gate_up  [E_local, H, 2 * I] bf16: for expert e, columns [0, I) are the gate
//              projection and columns [I, 2I) the up projection
//   out        [R, I] bf16: out[r, j] = bf16(silu(g) * u), g = a[r] . w[e][:, j],
//              u = a[r] . w[e][:, I + j], silu(g) = g / (1 + exp(-g)), from unrounded sums
Status moe_grouped_gemm_swiglu(const bf16* a, const bf16* w_gate_up,
                               const int32_t* expert_offsets, int64_t offsets_len,
                               int64_t E_local, int64_t R, int64_t H, int64_t I, bf16* out,
                               RowRange rows = {});

// The same with the rows read from the tokens: row r's input is x[row_to_slot[r] / topk]
// (moe_permute's map, so that the permuted copy of x is never materialised). out[r] is
// exactly what moe_grouped_gemm_swiglu gives for that row.
//   x            [T, H] bf16 token rows
//   row_to_slot  [R] i32: the slot (token * topk + k) of each row; the rows the experts own
//                ([0, expert_offsets[E_local]) within `rows`) must hold values in
//                [0, T * topk), the rest is never read
Status moe_grouped_gemm_swiglu_gather(const bf16* x, int64_t T, int64_t topk,
                                      const int32_t* row_to_slot, const bf16* w_gate_up,
                                      const int32_t* expert_offsets, int64_t offsets_len,
                                      int64_t E_local, int64_t R, int64_t H, int64_t I,
                                      bf16* out, RowRange rows = {});

// Plain grouped GEMM (the down projection): out[r] = a[r] @ w[e].
//   a [R, I] bf16, w [E_local, I, H] bf16, out [R, H] bf16
Status moe_grouped_gemm(const bf16* a, const bf16* w, const int32_t* expert_offsets,
                        int64_t offsets_len, int64_t E_local, int64_t R, int64_t I, int64_t H,
                        bf16* out, RowRange rows = {});

// ---------------------------------------------------------------------------------------
// moe_combine: weighted un-permute, gather form (no atomics).
//   out[t] = bf16( sum over k with slot_to_row[t, k] != -1 of
//                  topk_weights[t, k] * expert_out[slot_to_row[t, k]] )
// expert_out [R, H] bf16, topk_weights [T, K] f32, slot_to_row [T, K] i32 in [-1, R),
// out [T, H] bf16. A token with no local expert gets zeros. rows: tokens.
// ---------------------------------------------------------------------------------------
Status moe_combine(const bf16* expert_out, int64_t R, const float* topk_weights,
                   const int32_t* slot_to_row, int64_t T, int64_t K, int64_t H, bf16* out,
                   RowRange rows = {});

}  // namespace halcyon::ref
