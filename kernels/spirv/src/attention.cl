// The attention contracts (kernels/attention/*.contract) in OpenCL C, compiled to SPIR-V at
// build time: one work-item per (query token, head), a single pass over the visible keys with
// an online softmax (running max and rescaled sums), fp32 sums, one bf16 rounding. Correct
// first: no tiling through shared local memory. Launchers: ops/spirv/spirv_ops.cpp.
#include "common.h"

#define ATTN_MAX_DV 512  // the value width of MLA; 64 or 128 otherwise

// Where key/value token j of the current sequence starts, in elements: contiguous from token
// `first` (prefill), or through the sequence's block table (paged: a block outside [0, NB)
// gives -1, and that key is skipped).
static inline long kv_row(__global const int* table, long first, long BS, long NB, long row_elems, long head_off,
                          long j) {
  if (!table) return (first + j) * row_elems + head_off;
  long blk = table[j / BS];
  if (blk < 0 || blk >= NB) return -1;
  return (blk * BS + j % BS) * row_elems + head_off;
}

// out[0, Dv) = softmax over the n visible keys of scale * (q . k_j), times v_j; lse = log of the
// sum of exp of the scaled scores. n = 0 writes zeros and lse = -inf.
static inline void attend(__global const ushort* q, __global const ushort* k, __global const ushort* v,
                          __global const int* table, long first, long BS, long NB, long row_elems, long head_off,
                          long n, long Dqk, long Dv, float scale, __global ushort* out, __global float* lse) {
  float acc[ATTN_MAX_DV];
  for (long d = 0; d < Dv; ++d) acc[d] = 0.0f;
  float m = -INFINITY, sum = 0.0f;
  for (long j = 0; j < n; ++j) {
    long row = kv_row(table, first, BS, NB, row_elems, head_off, j);
    if (row < 0) continue;
    float dot = 0.0f;
    for (long d = 0; d < Dqk; ++d) dot += bf16_to_float(q[d]) * bf16_to_float(k[row + d]);
    float s = scale * dot;
    float m_new = fmax(m, s);
    float rescale = exp(m - m_new), w = exp(s - m_new);
    sum = sum * rescale + w;
    for (long d = 0; d < Dv; ++d) acc[d] = acc[d] * rescale + w * bf16_to_float(v[row + d]);
    m = m_new;
  }
  if (sum == 0.0f) {
    for (long d = 0; d < Dv; ++d) out[d] = 0;
    *lse = -INFINITY;
    return;
  }
  for (long d = 0; d < Dv; ++d) out[d] = float_to_bf16(acc[d] / sum);
  *lse = m + log(sum);
}

// attention_prefill: dimension 0 over the Hq heads, dimension 1 over the Tq query tokens.
// The offsets stay on the device unchecked (`halcyon run` checks them on the host): each is
// clamped to [0, T], so that bad ones never address outside q, k, v, out or lse.
__kernel void hc_attention_prefill(__global const ushort* q, __global const ushort* k, __global const ushort* v,
                                   __global const int* cu_q, __global const int* cu_k, __global ushort* out,
                                   __global float* lse, long B, long Tq, long Tk, long Hq, long Hkv, long D,
                                   long causal, float scale) {
  long h = get_global_id(0), i = get_global_id(1);
  if (h >= Hq || i >= Tq || i >= cu_q[B]) return;
  long b = expert_of_row(cu_q, B, i);
  long qs = clamp((long)cu_q[b], 0L, Tq), qe = clamp((long)cu_q[b + 1], qs, Tq);
  long ks = clamp((long)cu_k[b], 0L, Tk), ke = clamp((long)cu_k[b + 1], ks, Tk);
  if (i < qs || i >= qe) return;  // offsets out of order: no sequence holds this row
  long q_len = qe - qs, k_len = ke - ks, pos = i - qs;
  long n = causal ? min(k_len, max(pos + k_len - q_len + 1, 0L)) : k_len;
  long hk = h / (Hq / Hkv);
  attend(q + (i * Hq + h) * D, k, v, 0, ks, 0, 0, Hkv * D, hk * D, n, D, D, scale, out + (i * Hq + h) * D,
         lse + i * Hq + h);
}

// The number of keys query s of sequence b sees: its position + 1, within the table's capacity.
static inline long decode_keys(__global const int* seq_lens, long b, long Sq, long s, long cap) {
  long pos = (long)seq_lens[b] - Sq + s;
  return clamp(pos + 1, 0L, cap);
}

// attention_decode: dimension 0 over the Hq heads, dimension 1 over the B * Sq query tokens.
__kernel void hc_attention_decode(__global const ushort* q, __global const ushort* k_cache,
                                  __global const ushort* v_cache, __global const int* block_table,
                                  __global const int* seq_lens, __global ushort* out, __global float* lse, long B,
                                  long Sq, long Hq, long Hkv, long D, long NB, long BS, long MB, float scale) {
  long h = get_global_id(0), r = get_global_id(1);
  if (h >= Hq || r >= B * Sq) return;
  long b = r / Sq, n = decode_keys(seq_lens, b, Sq, r % Sq, MB * BS);
  long hk = h / (Hq / Hkv);
  attend(q + (r * Hq + h) * D, k_cache, v_cache, block_table + b * MB, 0, BS, NB, Hkv * D, hk * D, n, D, D, scale,
         out + (r * Hq + h) * D, lse + r * Hq + h);
}

// attention_mla_decode: keys are the 576-dim latent rows, values their first 512 dims.
__kernel void hc_attention_mla_decode(__global const ushort* q, __global const ushort* kv_cache,
                                      __global const int* block_table, __global const int* seq_lens,
                                      __global ushort* out, __global float* lse, long B, long Sq, long Hq, long NB,
                                      long BS, long MB, float scale) {
  long h = get_global_id(0), r = get_global_id(1);
  if (h >= Hq || r >= B * Sq) return;
  long b = r / Sq, n = decode_keys(seq_lens, b, Sq, r % Sq, MB * BS);
  attend(q + (r * Hq + h) * 576, kv_cache, kv_cache, block_table + b * MB, 0, BS, NB, 576, 0, n, 576, 512, scale,
         out + (r * Hq + h) * 512, lse + r * Hq + h);
}
