// The MoE family (kernels/moe/*.contract) in OpenCL C, compiled to SPIR-V at build time:
// correct first, simple parallel decompositions (one work-item per token, per output element
// or per row), no vendor extensions. Launchers: ops/spirv/spirv_ops.cpp.
#include "common.h"

#define GATE_MAX_EXPERTS 256

// Higher first, ties to the lower index; a NaN ranks below every number.
static inline bool ranks_before(float a, long ia, float b, long ib) {
  float ka = isnan(a) ? -INFINITY : a, kb = isnan(b) ? -INFINITY : b;
  return ka > kb || (ka == kb && ia < ib);
}

// The best eligible item of [first, first + count), made ineligible; -1 if none.
static inline long pick_best(const float* value, uchar* eligible, long first, long count) {
  long best = -1;
  for (long i = first; i < first + count; ++i)
    if (eligible[i] && (best < 0 || ranks_before(value[i], i, value[best], best))) best = i;
  if (best >= 0) eligible[best] = 0;
  return best;
}

// moe_gate: one work-item per token, E <= 256 (the launcher checks it).
__kernel void hc_moe_gate(__global const float* logits, __global const float* bias, __global int* topk_ids,
                          __global float* topk_weights, long T, long E, long softmax, long n_groups, long topk_groups,
                          long topk, long normalize, float routed_scale) {
  long t = get_global_id(0);
  if (t >= T) return;
  float score[GATE_MAX_EXPERTS], select[GATE_MAX_EXPERTS], group_score[GATE_MAX_EXPERTS];
  uchar eligible[GATE_MAX_EXPERTS], group_eligible[GATE_MAX_EXPERTS];
  __global const float* lg = logits + t * E;
  if (softmax) {
    float m = -INFINITY, s = 0.0f;
    for (long e = 0; e < E; ++e) m = fmax(m, lg[e]);
    for (long e = 0; e < E; ++e) s += exp(lg[e] - m);
    for (long e = 0; e < E; ++e) score[e] = exp(lg[e] - m) / s;
  } else {
    for (long e = 0; e < E; ++e) score[e] = 1.0f / (1.0f + exp(-lg[e]));
  }
  for (long e = 0; e < E; ++e) {
    select[e] = score[e] + (bias ? bias[e] : 0.0f);
    eligible[e] = 1;
  }
  // Group score: the sum of its two best selection scores (its one score for a group of one).
  long gs = E / n_groups;
  for (long g = 0; g < n_groups; ++g) {
    long b0 = pick_best(select, eligible, g * gs, gs);
    long b1 = gs >= 2 ? pick_best(select, eligible, g * gs, gs) : -1;
    group_score[g] = select[b0] + (b1 >= 0 ? select[b1] : 0.0f);
    group_eligible[g] = 1;
  }
  for (long e = 0; e < E; ++e) eligible[e] = 0;
  for (long j = 0; j < topk_groups; ++j) {
    long g = pick_best(group_score, group_eligible, 0, n_groups);
    for (long e = g * gs; e < (g + 1) * gs; ++e) eligible[e] = 1;
  }
  __global int* ids = topk_ids + t * topk;
  __global float* w = topk_weights + t * topk;
  float sum = 0.0f;
  for (long k = 0; k < topk; ++k) {
    long e = pick_best(select, eligible, 0, E);
    ids[k] = (int)e;
    sum += score[e];
  }
  float denom = normalize && sum != 0.0f ? sum : 1.0f;
  for (long k = 0; k < topk; ++k) w[k] = score[ids[k]] / denom * routed_scale;
}

// moe_permute, the index part: one work-item walks the T*K slots twice (count, then place), so
// the order is stable (by expert, then slot) and deterministic.
__kernel void hc_moe_permute_index(__global const int* topk_ids, __global int* expert_counts,
                                   __global int* expert_offsets, __global int* row_to_slot, __global int* slot_to_row,
                                   __global int* num_rows, long T, long K, long E, long begin, long end) {
  if (get_global_id(0) != 0) return;
  long EL = end - begin, TK = T * K;
  for (long e = 0; e < EL; ++e) expert_counts[e] = 0;
  for (long s = 0; s < TK; ++s) {
    int id = topk_ids[s];
    if (id >= 0 && id < E && id >= begin && id < end) expert_counts[id - begin] += 1;
  }
  int acc = 0;
  for (long e = 0; e < EL; ++e) {
    expert_offsets[e] = acc;
    acc += expert_counts[e];
  }
  expert_offsets[EL] = acc;
  *num_rows = acc;
  // expert_counts is rebuilt as each expert's fill level while placing.
  for (long e = 0; e < EL; ++e) expert_counts[e] = 0;
  for (long s = 0; s < TK; ++s) {
    int id = topk_ids[s];
    if (id >= 0 && id < E && id >= begin && id < end) {
      int row = expert_offsets[id - begin] + expert_counts[id - begin]++;
      row_to_slot[row] = (int)s;
      slot_to_row[s] = row;
    } else {
      slot_to_row[s] = -1;
    }
  }
}

// moe_permute, the rows: permuted[r] = x[row_to_slot[r] / K] for r < num_rows; dimension 0
// over the H columns, dimension 1 over rows.
__kernel void hc_moe_permute_rows(__global const ushort* x, __global const int* row_to_slot,
                                  __global const int* num_rows, __global ushort* permuted, long TK, long K, long H) {
  long h = get_global_id(0), r = get_global_id(1);
  if (h >= H || r >= TK || r >= *num_rows) return;
  permuted[r * H + h] = x[(row_to_slot[r] / K) * H + h];
}

// moe_grouped_gemm: out[r, n] = bf16(a[r] @ w[e][:, n]) for the rows the experts own; dimension 0
// over N, dimension 1 over rows.
__kernel void hc_moe_grouped_gemm(__global const ushort* a, __global const ushort* w, __global const int* offsets,
                                  __global ushort* out, long R, long I, long H, long EL) {
  long n = get_global_id(0), r = get_global_id(1);
  if (n >= H || r >= R || r >= offsets[EL]) return;
  __global const ushort* we = w + expert_of_row(offsets, EL, r) * I * H;
  float acc = 0.0f;
  for (long k = 0; k < I; ++k) acc += bf16_to_float(a[r * I + k]) * bf16_to_float(we[k * H + n]);
  out[r * H + n] = float_to_bf16(acc);
}

// The SwiGLU output j of one row whose input is `row` (H elements) with expert weights we [H, 2I].
static inline ushort swiglu_at(__global const ushort* row, __global const ushort* we, long H, long I, long j) {
  float g = 0.0f, u = 0.0f;
  for (long k = 0; k < H; ++k) {
    float x = bf16_to_float(row[k]);
    g += x * bf16_to_float(we[k * 2 * I + j]);
    u += x * bf16_to_float(we[k * 2 * I + I + j]);
  }
  return float_to_bf16(silu_mul(g, u));
}

// moe_grouped_gemm_swiglu: dimension 0 over the I outputs, dimension 1 over rows.
__kernel void hc_moe_grouped_gemm_swiglu(__global const ushort* a, __global const ushort* w,
                                         __global const int* offsets, __global ushort* out, long R, long H, long I,
                                         long EL) {
  long j = get_global_id(0), r = get_global_id(1);
  if (j >= I || r >= R || r >= offsets[EL]) return;
  out[r * I + j] = swiglu_at(a + r * H, w + expert_of_row(offsets, EL, r) * H * 2 * I, H, I, j);
}

// moe_grouped_gemm_swiglu_gather: row r's input is x[row_to_slot[r] / topk]; a slot outside
// [0, T * topk) leaves the row unwritten (a caller error: the contract's bounds).
__kernel void hc_moe_grouped_gemm_swiglu_gather(__global const ushort* x, __global const ushort* w,
                                                __global const int* offsets, __global const int* row_to_slot,
                                                __global ushort* out, long R, long T, long H, long I, long EL,
                                                long topk) {
  long j = get_global_id(0), r = get_global_id(1);
  if (j >= I || r >= R || r >= offsets[EL]) return;
  long slot = row_to_slot[r];
  if (slot < 0 || slot >= T * topk) return;
  out[r * I + j] = swiglu_at(x + (slot / topk) * H, w + expert_of_row(offsets, EL, r) * H * 2 * I, H, I, j);
}

// moe_combine: out[t, h] = sum over k of w[t, k] * expert_out[slot_to_row[t, k], h], skipping
// slots outside [0, R); dimension 0 over H, dimension 1 over tokens.
__kernel void hc_moe_combine(__global const ushort* expert_out, __global const float* topk_weights,
                             __global const int* slot_to_row, __global ushort* out, long T, long K, long H, long R) {
  long h = get_global_id(0), t = get_global_id(1);
  if (h >= H || t >= T) return;
  float acc = 0.0f;
  for (long k = 0; k < K; ++k) {
    int row = slot_to_row[t * K + k];
    if (row >= 0 && row < R) acc += topk_weights[t * K + k] * bf16_to_float(expert_out[(long)row * H + h]);
  }
  out[t * H + h] = float_to_bf16(acc);
}
