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
// moe_permute, step 1 (B blocks of W warps): counts, offsets, both index maps. Block b owns
// slots [b * per_block, (b + 1) * per_block); warp w of it a contiguous run of those;
// hist[w][e] counts its slots per local expert (pass 1), becomes the first row of warp w's
// slots of expert e (column scan + expert scan + the slots of expert e in blocks before b), and
// pass 2 hands out rows in slot order (__match_any_sync ranks equal experts within 32 slots),
// which makes the order stable: by expert, then by slot. With B > 1 every block first counts
// all slots itself (pre[e]: those of expert e before its own slots, tot[e]: all of them; the
// B blocks read T*K ids each, from L2), so no block waits for another and no scratch memory is
// needed; block 0 writes the counts and offsets. No atomic decides an order: the only atomics
// are these shared-memory counts.
// ----------------------------------------------------------------------------------------
// A warp's walk over slots [s0, s1) of topk_ids, eight groups of 32 per step so that their
// loads are all in flight before the first use. f(slot, local, key, peers) runs for every lane
// of each group: key = the local expert (or a per-lane key past EL for slots that are not
// local), peers = the lanes of the group with the same key.
template <typename F>
__device__ __forceinline__ void walk_slots(const int* __restrict__ topk_ids, long long s0, long long s1,
                                           long long expert_begin, long long EL, long long E, F&& f) {
  const int lane = threadIdx.x & 31;
  for (long long b = s0; b < s1; b += 256) {
    int ids[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const long long s = b + j * 32 + lane;
      ids[j] = s < s1 ? topk_ids[s] : -1;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int id = ids[j];
      const bool local = id >= expert_begin && id < expert_begin + EL && id < E;
      const int key = local ? id - (int)expert_begin : (int)EL + lane;
      f(b + j * 32 + lane, local, key, __match_any_sync(0xffffffffu, key));
    }
  }
}

extern "C" __global__ void hc_moe_permute_plan(const int* __restrict__ topk_ids, int* __restrict__ expert_counts,
                                               int* __restrict__ expert_offsets, int* __restrict__ row_to_slot,
                                               int* __restrict__ slot_to_row, int* __restrict__ num_rows,
                                               long long slots, long long E, long long expert_begin,
                                               long long EL_, long long per_block) {
  extern __shared__ __align__(16) int ismem[];
  const int EL = (int)EL_;
  const int W = blockDim.x >> 5, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int* hist = ismem;            // [W][EL]
  int* cnt = hist + W * EL;     // [EL]
  int* scratch = cnt + EL;      // [32]
  int* pre = scratch + 32;      // [EL] with several blocks: slots of expert e before this block's
  int* tot = pre + EL;          // [EL] with several blocks: all slots of expert e
  const bool multi = gridDim.x > 1;
  for (int i = threadIdx.x; i < W * EL; i += blockDim.x) hist[i] = 0;
  if (multi)
    for (int i = threadIdx.x; i < EL; i += blockDim.x) pre[i] = tot[i] = 0;
  __syncthreads();
  const long long bs0 = blockIdx.x * per_block;
  const long long bs1 = bs0 + per_block < slots ? bs0 + per_block : slots;
  if (multi) {  // 16 loads in flight per thread before their counts
    for (long long b = 0; b < slots; b += 16LL * blockDim.x) {
      int ids[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const long long s = b + (long long)j * blockDim.x + threadIdx.x;
        ids[j] = s < slots ? topk_ids[s] : -1;
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const long long s = b + (long long)j * blockDim.x + threadIdx.x;
        const int id = ids[j];
        if (id >= expert_begin && id < expert_begin + EL && id < E) {
          atomicAdd(&tot[id - (int)expert_begin], 1);
          if (s < bs0) atomicAdd(&pre[id - (int)expert_begin], 1);
        }
      }
    }
  }
  const long long seg = ((bs1 - bs0 + W - 1) / W + 31) / 32 * 32;
  const long long s0 = bs0 + warp * seg, s1 = s0 + seg < bs1 ? s0 + seg : bs1;
  int* h = hist + warp * EL;
  const unsigned lt = (1u << lane) - 1u;

  walk_slots(topk_ids, s0, s1, expert_begin, EL, E, [&](long long, bool local, int key, unsigned peers) {
    if (local && (peers & lt) == 0) h[key] += __popc(peers);
    __syncwarp();
  });
  __syncthreads();

  // Column scan: hist[w][e] = slots of expert e in warps before w (plus, with several blocks,
  // in blocks before this one); cnt[e] = the expert's total.
  const int per = (EL + blockDim.x - 1) / blockDim.x;
  const int e0 = threadIdx.x * per;
  int mine = 0;
  for (int e = e0; e < e0 + per && e < EL; ++e) {
    int run = multi ? pre[e] : 0;
    for (int w = 0; w < W; ++w) {
      int c = hist[w * EL + e];
      hist[w * EL + e] = run;
      run += c;
    }
    const int total = multi ? tot[e] : run;
    cnt[e] = total;
    if (blockIdx.x == 0) expert_counts[e] = total;
    mine += total;
  }
  // Exclusive scan of the per-thread totals -> expert offsets; hist becomes absolute rows.
  int incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < W; ++w) {
      int c = scratch[w];
      scratch[w] = run;
      run += c;
    }
    if (blockIdx.x == 0) {
      expert_offsets[EL] = run;
      *num_rows = run;
    }
  }
  __syncthreads();
  int run = scratch[warp] + incl - mine;
  for (int e = e0; e < e0 + per && e < EL; ++e) {
    if (blockIdx.x == 0) expert_offsets[e] = run;
    for (int w = 0; w < W; ++w) hist[w * EL + e] += run;
    run += cnt[e];
  }
  __syncthreads();

  walk_slots(topk_ids, s0, s1, expert_begin, EL, E, [&](long long s, bool local, int key, unsigned peers) {
    const int row = local ? h[key] + __popc(peers & lt) : -1;
    __syncwarp();
    if (local && (peers & lt) == 0) h[key] += __popc(peers);
    __syncwarp();
    if (s < s1) slot_to_row[s] = row;
    if (row >= 0) row_to_slot[row] = (int)s;
  });
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
    const uint4* src = reinterpret_cast<const uint4*>(x + t * H);
    const long long n = H >> 3;
    const long long step = blockDim.x;
    for (long long c0 = threadIdx.x; c0 < n; c0 += 4 * step) {
      uint4 v[4];  // four chunks in flight before the stores
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (c0 + q * step < n) v[q] = src[c0 + q * step];
      for (long long k = 0; k < K; ++k) {
        const int r = rows[k];
        if (r < 0) continue;
        uint4* dst = reinterpret_cast<uint4*>(permuted + (long long)r * H);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (c0 + q * step < n) dst[c0 + q * step] = v[q];
      }
    }
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
