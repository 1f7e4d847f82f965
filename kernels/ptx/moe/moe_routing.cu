// MoE routing kernels for NVIDIA sm_80 and later (portable PTX): gate, permute (plan +
// scatter) and combine. Memory-bound, so they are written for bytes: every input is read once
// and every output written once (permute reads each token row once and writes it to its K
// destination rows; combine is the gather form: no atomics, a deterministic sum order).
// Device code only (compiled with `nvcc -ptx`).
#include "gemm_common.cuh"  // bf16 conversions

namespace {

// ----------------------------------------------------------------------------------------
// moe_gate: one warp per token. Per-warp shared memory (dynamic): scores [E], selection
// scores [E], chosen ids [E] (i32), expert eligibility [E] (u8), group scores [G], kept
// groups [G] (u8). Numerics follow the reference exactly where it decides ids: the scores
// are computed in fp64 and rounded once to fp32, selection and group scores are fp32 adds.
// ----------------------------------------------------------------------------------------

__device__ __forceinline__ bool ranks_before(float a, int ia, float b, int ib) {
  const float ka = isnan(a) ? -INFINITY : a;
  const float kb = isnan(b) ? -INFINITY : b;
  return ka > kb || (ka == kb && ia < ib);
}

// The best (value, index) of the warp; index -1 means none.
__device__ __forceinline__ int warp_best(float v, int i) {
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (oi >= 0 && (i < 0 || ranks_before(ov, oi, v, i))) v = ov, i = oi;
  }
  return i;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace

extern "C" __global__ void hc_moe_gate(const float* __restrict__ logits, const float* __restrict__ bias,
                                       int* __restrict__ topk_ids, float* __restrict__ topk_weights, long long T,
                                       long long E_, long long softmax, long long G_, long long topk_groups,
                                       long long topk, long long normalize, double routed_scale,
                                       long long per_warp_bytes) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int E = (int)E_, G = (int)G_, K = (int)topk;
  const long long t = (long long)blockIdx.x * (blockDim.x >> 5) + warp;
  if (t >= T) return;
  unsigned char* base = smem + warp * per_warp_bytes;
  float* sc = reinterpret_cast<float*>(base);
  float* sel = sc + E;
  int* ids = reinterpret_cast<int*>(sel + E);
  float* gs = reinterpret_cast<float*>(ids + E);
  unsigned char* elig = reinterpret_cast<unsigned char*>(gs + G);
  unsigned char* kept = elig + E;
  const float* lg = logits + t * E;

  if (!softmax) {
    for (int e = lane; e < E; e += 32) sc[e] = (float)(1.0 / (1.0 + exp(-(double)lg[e])));
  } else {
    double m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmax(m, (double)lg[e]);
    m = warp_max(m);
    double s = 0;
    for (int e = lane; e < E; e += 32) s += exp((double)lg[e] - m);
    s = warp_sum(s);
    for (int e = lane; e < E; e += 32) sc[e] = (float)(exp((double)lg[e] - m) / s);
  }
  for (int e = lane; e < E; e += 32) sel[e] = sc[e] + (bias ? bias[e] : 0.0f);
  __syncwarp();

  // Group score: the sum of the group's two best selection scores.
  const int gsize = E / G;
  const int two = gsize < 2 ? gsize : 2;
  for (int g = lane; g < G; g += 32) {
    int b1 = -1, b2 = -1;
    for (int e = g * gsize; e < (g + 1) * gsize; ++e) {
      if (b1 < 0 || ranks_before(sel[e], e, sel[b1], b1)) b2 = b1, b1 = e;
      else if (b2 < 0 || ranks_before(sel[e], e, sel[b2], b2)) b2 = e;
    }
    gs[g] = sel[b1] + (two == 2 ? sel[b2] : 0.0f);
    kept[g] = 0;
  }
  __syncwarp();
  for (int j = 0; j < (int)topk_groups; ++j) {
    int best = -1;
    float bv = 0.f;
    for (int g = lane; g < G; g += 32)
      if (!kept[g] && (best < 0 || ranks_before(gs[g], g, bv, best))) best = g, bv = gs[g];
    best = warp_best(bv, best);
    __syncwarp();
    if (lane == 0) kept[best] = 1;
    __syncwarp();
  }
  for (int e = lane; e < E; e += 32) elig[e] = kept[e / gsize];
  __syncwarp();

  // Top-k among the kept groups' experts, best first.
  for (int j = 0; j < K; ++j) {
    int best = -1;
    float bv = 0.f;
    for (int e = lane; e < E; e += 32)
      if (elig[e] && (best < 0 || ranks_before(sel[e], e, bv, best))) best = e, bv = sel[e];
    best = warp_best(bv, best);
    if (lane == (best & 31)) elig[best] = 0;
    if (lane == 0) ids[j] = best;
    __syncwarp();
  }
  // Weights: the unbiased scores, summed in fp64 in the reference's order.
  if (lane == 0) {
    double sum = 0.0;
    for (int k = 0; k < K; ++k) sum += sc[ids[k]];
    const double denom = normalize && sum != 0.0 ? sum : 1.0;
    for (int k = 0; k < K; ++k) {
      topk_ids[t * K + k] = ids[k];
      topk_weights[t * K + k] = (float)((double)sc[ids[k]] / denom * routed_scale);
    }
  }
}

// ----------------------------------------------------------------------------------------
// moe_gate fast path (the launcher picks it where it applies, else hc_moe_gate): sigmoid
// scores, E = 32 * P experts (P <= 16), a group of gs = E / n_groups experts that fits the
// layout below (or all groups kept), n_groups <= 32, topk <= 32. One warp per token with the
// row in registers: lane l holds experts W*q + V*l + j (W = 32 * V, chunk q < P / V, j < V;
// V = 4, 2 or 1 as P allows), so the row is read with coalesced V-wide loads and a group lies
// in gs / V adjacent lanes of one chunk (gs <= W) or in whole chunks (gs a multiple of W): its
// top two are an in-lane step and a few shuffles. Rankings compare rank_key: 32 bits ordered
// as ranks_before orders values, so an arg-max round is two redux.sync (the best key, then the
// lowest expert with it) and no shared memory is used. Same arithmetic as hc_moe_gate where a
// number is computed, so ids and weights come out bit for bit the same.
// ----------------------------------------------------------------------------------------
namespace {

// A key per value, ordered as ranks_before orders values: NaN ranks as -inf, -0 ties with +0.
// Every key of a value is > 0, so 0 stands for "no candidate".
__device__ __forceinline__ unsigned rank_key(float v) {
  unsigned b = __float_as_uint(v);
  if (isnan(v)) b = 0xff800000u;
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) ? ~b : b | 0x80000000u;
}
// The value of a key: NaN comes back as -inf and -0 as +0, which changes no sum's rank.
__device__ __forceinline__ float key_value(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? k & 0x7fffffffu : ~k);
}
__device__ __forceinline__ unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
__device__ __forceinline__ unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
// (t1, t2) = the two largest of the multiset {t1, t2, u1, u2}, given t1 >= t2 and u1 >= u2. A
// group score is the sum of two values, so which of two equal keys is kept does not matter.
__device__ __forceinline__ void top2_merge(unsigned& t1, unsigned& t2, unsigned u1, unsigned u2) {
  t2 = umax(umax(t2, u2), umin(t1, u1));
  t1 = umax(t1, u1);
}

template <int V>
__device__ __forceinline__ void load_vec(const float* p, float* v) {
  if constexpr (V == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  } else if constexpr (V == 2) {
    const float2 a = *reinterpret_cast<const float2*>(p);
    v[0] = a.x, v[1] = a.y;
  } else {
    v[0] = *p;
  }
}

template <int V, int Q>
__device__ __forceinline__ void moe_gate_fast(const float* __restrict__ logits, const float* __restrict__ bias,
                                              int* __restrict__ topk_ids, float* __restrict__ topk_weights,
                                              long long T, int G, int TG, int K, bool normalize,
                                              double routed_scale) {
  constexpr int P = V * Q, W = 32 * V, E = 32 * P;
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const long long t = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= T) return;  // the whole warp: t is per warp

  // Every load is issued before the first use, so the row and the bias are in flight together.
  float x[P], b[P];
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    load_vec<V>(logits + t * E + q * W + lane * V, x + q * V);
    if (bias) {
      load_vec<V>(bias + q * W + lane * V, b + q * V);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) b[q * V + j] = 0.0f;
    }
  }
  float sc[P];
  unsigned key[P];  // selection score keys; 0 once an expert is out (dropped group, or chosen)
#pragma unroll
  for (int i = 0; i < P; ++i) {
    sc[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
    key[i] = rank_key(sc[i] + b[i]);
  }

  // Group scores and the kept groups (nothing to do when every group is kept).
  const int gs = E / G;
  if (TG < G) {
    unsigned t1[Q], t2[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      t1[q] = key[q * V], t2[q] = 0u;
#pragma unroll
      for (int j = 1; j < V; ++j) top2_merge(t1[q], t2[q], key[q * V + j], 0u);
    }
    // A group of C whole chunks: fold them into its last chunk, then copy that back.
    const int C = gs > W ? gs / W : 1;
    if (C > 1) {
#pragma unroll
      for (int q = 1; q < Q; ++q)
        if (q % C) top2_merge(t1[q], t2[q], t1[q - 1], t2[q - 1]);
#pragma unroll
      for (int q = Q - 2; q >= 0; --q)
        if ((q + 1) % C) t1[q] = t1[q + 1], t2[q] = t2[q + 1];
    }
    // Across the L lanes of a group (aligned runs of L, a power of two).
    const int L = gs < W ? gs / V : 32;
    for (int o = 1; o < L; o <<= 1) {
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        const unsigned u1 = __shfl_xor_sync(kAll, t1[q], o), u2 = __shfl_xor_sync(kAll, t2[q], o);
        top2_merge(t1[q], t2[q], u1, u2);
      }
    }
    unsigned gk[Q];
    int rank[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const float v = key_value(t1[q]);
      gk[q] = rank_key(gs > 1 ? v + key_value(t2[q]) : v);
      rank[q] = 0;
    }
    // A group is kept if fewer than TG groups rank before it: every lane reads the G group
    // scores (G independent shuffles, each from the chunk where the group starts) instead of
    // TG dependent arg-max rounds. Group h ranks before this lane's group of chunk q on a tie
    // if it lies before it: (h + 1) * gs <= the lane's first expert there.
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      for (int h = (q * W + gs - 1) / gs; h * gs < (q + 1) * W; ++h) {
        const unsigned kh = __shfl_sync(kAll, gk[q], (h * gs - q * W) / V);
#pragma unroll
        for (int r = 0; r < Q; ++r)
          rank[r] += kh > gk[r] || (kh == gk[r] && (h + 1) * gs <= r * W + lane * V);
      }
    }
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (rank[q] >= TG) key[q * V + j] = 0u;
  }

  // Top-k: K arg-max rounds over each lane's best remaining expert (ties: lower slot = lower
  // expert). Every lane accumulates the chosen scores in k order, lane k keeps choice k.
  unsigned bk;
  int bj;
  float bs;
  auto lane_best = [&]() {
    bk = key[0], bj = 0, bs = sc[0];
#pragma unroll
    for (int j = 1; j < P; ++j)
      if (key[j] > bk) bk = key[j], bj = j, bs = sc[j];
  };
  lane_best();
  double sum = 0.0;
  int id = 0;
  float score = 0.0f;
  for (int k = 0; k < K; ++k) {
    const unsigned m = __reduce_max_sync(kAll, bk);
    const int e = (int)__reduce_min_sync(kAll, bk == m ? (unsigned)((bj / V) * W + lane * V + bj % V) : kAll);
    const int owner = (e % W) / V;
    const float s = __shfl_sync(kAll, bs, owner);
    sum += s;
    if (lane == k) id = e, score = s;
#pragma unroll
    for (int j = 0; j < P; ++j)
      if (lane == owner && j == bj) key[j] = 0u;
    lane_best();
  }
  // Weights as hc_moe_gate computes them (fp64 sum in k order), written by K lanes.
  const double denom = normalize && sum != 0.0 ? sum : 1.0;
  if (lane < K) {
    topk_ids[t * K + lane] = id;
    topk_weights[t * K + lane] = (float)((double)score / denom * routed_scale);
  }
}

}  // namespace

// One entry point per P = E / 32 up to 8, and even P up to 16 (V = 4, 2 or 1 values per load;
// an odd P above 8 would hold 9+ chunks of one value a lane: more registers, a spill at P = 11).
// The argument list is hc_moe_gate's (E, softmax and per_warp_bytes unused): one launcher
// struct serves both.
#define HC_MOE_GATE_FAST(P, V)                                                                                   \
  extern "C" __global__ void __launch_bounds__(128) hc_moe_gate_p##P(                                           \
      const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ topk_ids,             \
      float* __restrict__ topk_weights, long long T, long long, long long, long long G, long long topk_groups, \
      long long topk, long long normalize, double routed_scale, long long) {                                    \
    moe_gate_fast<V, P / V>(logits, bias, topk_ids, topk_weights, T, (int)G, (int)topk_groups, (int)topk,       \
                            normalize != 0, routed_scale);                                                      \
  }
HC_MOE_GATE_FAST(1, 1)
HC_MOE_GATE_FAST(2, 2)
HC_MOE_GATE_FAST(3, 1)
HC_MOE_GATE_FAST(4, 4)
HC_MOE_GATE_FAST(5, 1)
HC_MOE_GATE_FAST(6, 2)
HC_MOE_GATE_FAST(7, 1)
HC_MOE_GATE_FAST(8, 4)
HC_MOE_GATE_FAST(10, 2)
HC_MOE_GATE_FAST(12, 4)
HC_MOE_GATE_FAST(14, 2)
HC_MOE_GATE_FAST(16, 4)
#undef HC_MOE_GATE_FAST

#include "permute_plan.cuh"  // walk_slots, permute_plan_block

extern "C" __global__ void hc_moe_permute_plan(const int* __restrict__ topk_ids, int* __restrict__ expert_counts,
                                               int* __restrict__ expert_offsets, int* __restrict__ row_to_slot,
                                               int* __restrict__ slot_to_row, int* __restrict__ num_rows,
                                               long long slots, long long E, long long expert_begin,
                                               long long EL, long long per_block) {
  permute_plan_block(topk_ids, expert_counts, expert_offsets, row_to_slot, slot_to_row, num_rows, slots, E,
                     expert_begin, EL, per_block);
}

// Copies token row `src` (H % 8 == 0) to its K permuted rows `rows` (entries < 0 skipped): this
// thread's 16-byte chunks are first, first + step, ...; CH of them are loaded before any store.
// `rows` is not __restrict__: the fused kernel wrote it (slot_to_row) in this launch, and a
// const __restrict__ pointer lets the compiler read it through the non-coherent path
// (ld.global.nc), which the PTX memory model leaves undefined for data the kernel writes.
template <int CH>
__device__ __forceinline__ void copy_token_row(const unsigned short* __restrict__ src_row, const int* rows,
                                               long long K, unsigned short* __restrict__ permuted, long long H,
                                               long long first, long long step) {
  const uint4* src = reinterpret_cast<const uint4*>(src_row);
  const long long n = H >> 3;
  for (long long c0 = first; c0 < n; c0 += CH * step) {
    uint4 v[CH];
#pragma unroll
    for (int q = 0; q < CH; ++q)
      if (c0 + q * step < n) v[q] = src[c0 + q * step];
    for (long long k = 0; k < K; ++k) {
      const int r = rows[k];
      if (r < 0) continue;
      uint4* dst = reinterpret_cast<uint4*>(permuted + (long long)r * H);
#pragma unroll
      for (int q = 0; q < CH; ++q)
        if (c0 + q * step < n) dst[c0 + q * step] = v[q];
    }
  }
}

// moe_permute in one launch: the plan as above, with per_block a multiple of K, so that a block
// owns the slots of whole tokens; then the block copies those tokens' rows (each warp a token:
// its row read once, 8 chunks of 16 bytes a lane in flight, written to each of its slots' rows).
// Why: the scatter needs only the rows of its own token's slots, which this block has just
// computed, so a second launch (and the wait for the whole plan) is not needed. H % 8 == 0.
extern "C" __global__ void hc_moe_permute_fused(const int* __restrict__ topk_ids, int* __restrict__ expert_counts,
                                                int* __restrict__ expert_offsets, int* __restrict__ row_to_slot,
                                                int* __restrict__ slot_to_row, int* __restrict__ num_rows,
                                                long long slots, long long E, long long expert_begin, long long EL,
                                                long long per_block, const unsigned short* __restrict__ x,
                                                unsigned short* __restrict__ permuted, long long K, long long H) {
  permute_plan_block(topk_ids, expert_counts, expert_offsets, row_to_slot, slot_to_row, num_rows, slots, E,
                     expert_begin, EL, per_block);
  __syncthreads();  // this block's slot_to_row entries are written (and visible to the block)
  const long long bs0 = blockIdx.x * per_block;
  const long long bs1 = bs0 + per_block < slots ? bs0 + per_block : slots;
  const int lane = threadIdx.x & 31, W = blockDim.x >> 5;
  for (long long t = bs0 / K + (threadIdx.x >> 5); t < bs1 / K; t += W)
    copy_token_row<8>(x + t * H, slot_to_row + t * K, K, permuted, H, lane, 32);
}

// moe_permute, step 2: one block per token reads its row once and writes it to each of its
// slots' permuted rows (16-byte chunks when H is a multiple of 8).
extern "C" __global__ void hc_moe_permute_scatter(const unsigned short* __restrict__ x,
                                                  const int* __restrict__ slot_to_row,
                                                  unsigned short* __restrict__ permuted, long long T, long long K,
                                                  long long H) {
  const long long t = blockIdx.x;
  if (t >= T) return;
  const int* rows = slot_to_row + t * K;
  if ((H & 7) == 0) {
    copy_token_row<4>(x + t * H, rows, K, permuted, H, threadIdx.x, blockDim.x);  // four chunks in flight
  } else {
    for (long long c = threadIdx.x; c < H; c += blockDim.x) {
      const unsigned short v = x[t * H + c];
      for (long long k = 0; k < K; ++k) {
        const int r = rows[k];
        if (r >= 0) permuted[(long long)r * H + c] = v;
      }
    }
  }
}

// ----------------------------------------------------------------------------------------
// moe_combine (gather form): one block per token; each thread owns 8-column chunks and sums
// the token's K rows in k order in fp32, then rounds once to bf16. Entries of slot_to_row
// outside [0, R) are skipped (-1 means "expert not local").
// ----------------------------------------------------------------------------------------
namespace {
__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
}  // namespace

extern "C" __global__ void hc_moe_combine(const unsigned short* __restrict__ expert_out,
                                          const float* __restrict__ topk_weights,
                                          const int* __restrict__ slot_to_row, unsigned short* __restrict__ out,
                                          long long R, long long T, long long K, long long H) {
  const long long t = blockIdx.x;
  if (t >= T) return;
  const int* rows = slot_to_row + t * K;
  const float* wts = topk_weights + t * K;
  if ((H & 7) == 0) {
    const long long n = H >> 3;
    for (long long c = threadIdx.x; c < n; c += blockDim.x) {
      float acc[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] = 0.f;
      long long k = 0;
      for (; k + 4 <= K; k += 4) {  // four rows in flight
        uint4 v[4];
        float w[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = rows[k + q];
          const bool ok = r >= 0 && r < R;
          w[q] = ok ? wts[k + q] : 0.f;
          v[q] = ok ? reinterpret_cast<const uint4*>(expert_out + (long long)r * H)[c] : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = rows[k + q];
          if (!(r >= 0 && r < R)) continue;
          const uint32_t u[4] = {v[q].x, v[q].y, v[q].z, v[q].w};
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            acc[2 * j] += w[q] * bf16_lo(u[j]);
            acc[2 * j + 1] += w[q] * bf16_hi(u[j]);
          }
        }
      }
      for (; k < K; ++k) {
        const int r = rows[k];
        if (!(r >= 0 && r < R)) continue;
        const float w = wts[k];
        const uint4 v = reinterpret_cast<const uint4*>(expert_out + (long long)r * H)[c];
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[2 * j] += w * bf16_lo(u[j]);
          acc[2 * j + 1] += w * bf16_hi(u[j]);
        }
      }
      uint4 o;
      o.x = hc::pack_bf16x2(acc[0], acc[1]);
      o.y = hc::pack_bf16x2(acc[2], acc[3]);
      o.z = hc::pack_bf16x2(acc[4], acc[5]);
      o.w = hc::pack_bf16x2(acc[6], acc[7]);
      reinterpret_cast<uint4*>(out + t * H)[c] = o;
    }
  } else {
    for (long long c = threadIdx.x; c < H; c += blockDim.x) {
      float acc = 0.f;
      for (long long k = 0; k < K; ++k) {
        const int r = rows[k];
        if (r >= 0 && r < R) acc += wts[k] * __uint_as_float(uint32_t(expert_out[(long long)r * H + c]) << 16);
      }
      out[t * H + c] = hc::to_bf16(acc);
    }
  }
}
