// Attention for NVIDIA sm_80 and later (portable PTX): FlashAttention-2-style forward with
// mma.sync m16n8k16 bf16 (fp32 accumulators), ldmatrix from XOR-swizzled shared memory, an
// online softmax in the exp2 domain, and K/V tiles double-buffered with cp.async.
//
//   hc_attn_fwd_d64_sm80 / _d128   one kernel for attention_prefill (varlen, causal
//                                  bottom-right, GQA) and attention_decode (paged KV cache,
//                                  Sq new tokens causal among themselves), split-KV optional
//   hc_attn_mla_sm80               attention_mla_decode (576-dim latent rows, V = first 512)
//   hc_attn_combine_sm80           merges split-KV partials (normalised O and lse per split)
//
// A CTA owns 64 query rows (4 warps x 16) of one KV head and walks its keys in tiles of 64.
// Prefill: the rows are 64 consecutive queries of one head of one sequence. Decode: the rows
// are the Sq x G queries (G = Hq / Hkv) of one sequence that share KV head hk, so the cache is
// read once per KV head, not once per query head. Keys past the CTA's range are zero-filled
// (never read) and masked; block indices are clamped to [0, NB) so that nothing outside the
// tensors is read even for a table the contract forbids.
#include "attention_common.cuh"

namespace hc {
namespace {

// [rows][D] bf16, 16-byte chunks swizzled: chunk ^ (row & 7) (D / 8 >= 8 chunks a row).
template <int D>
__device__ __forceinline__ int sw(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// Byte offset of chunk c of row r in a [rows][D] tile swizzled as sw<D>.
template <int D>
struct SwOff {
  __device__ uint32_t operator()(int row, int chunk) const { return uint32_t(sw<D>(row, chunk)) * 2; }
};

// The forward pass of one CTA. row_q[r]: element offset of row r's query (and output) row,
// or -1 when row r does not exist; row_vis[r]: keys [0, row_vis[r]) are visible to row r.
// Output: final (out bf16 + lse) or, with part_o, the split's normalised O and lse (f32).
// STAGES key tiles are in flight at once (cp.async groups, one a tile; 2 = double-buffered).
// KSPLIT: the warps split the keys of a tile, not the rows (at most 16 rows; merge_warps).
template <int D, int STAGES = 2, bool KSPLIT = false>
__device__ void attend(const Problem& p, const unsigned short* k, const unsigned short* v, const long long* row_q,
                       const long long* row_o, const int* row_vis, float scale_log2, unsigned short* out, float* lse,
                       float* part_o, float* part_lse, unsigned short* smem) {
  unsigned short* sq = smem;
  unsigned short* sk = sq + kRows * D;            // STAGES stages
  unsigned short* sv = sk + STAGES * kKeys * D;   // STAGES stages
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + kKeys - 1) / kKeys : 0;
  auto load = [&](int tile) {  // one commit group a tile (empty past the last: the count stays uniform)
    if (tile < n_tiles)
      load_kv_tile<D>(smem_addr(sk + (tile % STAGES) * kKeys * D), smem_addr(sv + (tile % STAGES) * kKeys * D), k, v,
                      p, p.kbeg + tile * kKeys, SwOff<D>{});
    cp_async_commit();
  };

  load_q_tile<D>(smem_addr(sq), p, row_q, SwOff<D>{});
#pragma unroll
  for (int i = 0; i < STAGES - 1; ++i) load(i);
  cp_async_wait<STAGES - 2>();  // Q and tile 0
  __syncthreads();

  const int row0 = KSPLIT ? 0 : warp * 16;  // the warp's first row
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qf[kk], smem_addr(sq + sw<D>(row0 + (lane & 15), kk * 2 + (lane >> 4))));

  const int r0 = row0 + g, r1 = r0 + 8;
  const bool warp_active = row_q[row0] >= 0;  // rows exist as a prefix of the tile
  const int vis0 = min(row_vis[r0], p.kend), vis1 = min(row_vis[r1], p.kend);
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};
  constexpr int NT = KSPLIT ? 2 : kKeys / 8;  // 8-key column blocks of S a warp computes
  const int key0 = KSPLIT ? warp * 16 : 0;    // the first of them within the tile

  for (int it = 0; it < n_tiles; ++it) {
    const int k0 = p.kbeg + it * kKeys;
    load(it + STAGES - 1);
    cp_async_wait<STAGES - 1>();  // tile `it` has landed
    __syncthreads();
    const unsigned short* ck = sk + (it % STAGES) * kKeys * D;
    const unsigned short* cv = sv + (it % STAGES) * kKeys * D;

    // S = Q K^T: 16 rows x NT * 8 keys per warp. A warp without rows (decode with few query
    // rows per KV head) only loads: its results are never stored.
    float s[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16 && warp_active; ++kk) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(ck + sw<D>(key0 + np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1))));
        mma_bf16(s[2 * np], qf[kk], b);
        mma_bf16(s[2 * np + 1], qf[kk], b + 2);
      }
    }
    uint32_t pf[NT / 2][4];
    float a0, a1;
    softmax_step<NT>(s, pf, st, k0 + key0, vis0, vis1, scale_log2, &a0, &a1);
    scale_rows<D / 8>(o, a0, a1);
    // O += P V: P's accumulator layout is the A fragment layout (pf[kk] = keys 16kk..16kk+15).
#pragma unroll
    for (int kk = 0; kk < NT / 2 && warp_active; ++kk) {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_addr(cv + sw<D>(key0 + kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                  dp * 2 + (lane >> 4))));
        mma_bf16(o[2 * dp], pf[kk], b);
        mma_bf16(o[2 * dp + 1], pf[kk], b + 2);
      }
    }
    __syncthreads();  // a later iteration's load overwrites this stage
  }
  cp_async_wait<0>();  // the empty groups past the last tile

  if (KSPLIT) {
    merge_warps<D>(o, st, sk);  // the K stages are free: every copy has landed, the loop ended on a barrier
    if (warp > 0) return;
  }
  store_rows<D>(o, st, row_o, out, lse, part_o, part_lse);
}

// Prefill: blockIdx.x walks the 64-row query tiles of the sequences in order, blockIdx.y is
// the query head. Decode (table != 0): blockIdx.x is the 64-row tile of the Sq x G rows of
// KV head blockIdx.y % Hkv of sequence blockIdx.y / Hkv, blockIdx.z the split of the keys
// (KSPLIT: 16-row tiles, attend's key-split mode).
template <int D, int STAGES, bool KSPLIT = false>
__device__ void attn_fwd(const unsigned short* q, const unsigned short* k, const unsigned short* v,
                         unsigned short* out, float* lse, const int* seq_a, const int* seq_b, float* part_o,
                         float* part_lse, long long B, long long Hq, long long Hkv, long long Sq, long long NB,
                         long long BS, long long MB, long long causal, long long split_len, float scale_log2) {
  extern __shared__ __align__(128) unsigned short smem[];
  __shared__ long long row_q[kRows];
  __shared__ int row_vis[kRows];
  Problem p;
  p.kv_stride = Hkv * D;
  p.BS = BS;
  p.NB = NB;
  float* po = nullptr;
  float* pl = nullptr;
  if (seq_a != nullptr && seq_b != nullptr && MB == 0) {
    // ---- prefill: seq_a = cu_seqlens_q, seq_b = cu_seqlens_k, NB = Tq, BS = Tk ----
    if (!prefill_rows<D>(p, row_q, row_vis, q, seq_a, seq_b, B, Hq, Hkv, causal, NB, BS)) return;
  } else {
    // ---- decode: seq_a = block_table [B, MB], seq_b = seq_lens [B] ----
    decode_rows<KSPLIT ? 16 : kRows, D>(p, row_q, row_vis, q, seq_a, seq_b, Hq, Hkv, Sq, NB, BS, MB, split_len);
    if (part_o) {
      po = part_o + (long long)blockIdx.z * B * Sq * Hq * D;
      pl = part_lse + (long long)blockIdx.z * B * Sq * Hq;
    }
  }
  attend<D, STAGES, KSPLIT>(p, k, v, row_q, row_q, row_vis, scale_log2, out, lse, po, pl, smem);
}

}  // namespace
}  // namespace hc

// Parameters (8 bytes each; ops/ptx/attention_ops.cpp mirrors them):
//   q k v out lse seq_a seq_b part_o part_lse B Hq Hkv Sq NB BS MB causal split_len scale_log2
// Prefill: seq_a/seq_b = cu_seqlens_q/k, MB = 0, NB = Tq and BS = Tk (the offsets' bounds).
// Decode: seq_a = block_table, seq_b = seq_lens.
// Dynamic shared memory: (64 + 2 x STAGES x 64) x D x 2 bytes (Q, then K and V stages).
#define HC_ATTN_FWD(NAME, D, STAGES, KSPLIT)                                                           \
  extern "C" __global__ void __launch_bounds__(hc::kThreads) NAME(                                             \
      const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* out,           \
      float* lse, const int* seq_a, const int* seq_b, float* part_o, float* part_lse, long long B, long long Hq, \
      long long Hkv, long long Sq, long long NB, long long BS, long long MB, long long causal,                  \
      long long split_len, double scale_log2) {                                                                \
    hc::attn_fwd<D, STAGES, KSPLIT>(q, k, v, out, lse, seq_a, seq_b, part_o, part_lse, B, Hq, Hkv, Sq, NB, BS, \
                                    MB, causal, split_len, (float)scale_log2);                                 \
  }
HC_ATTN_FWD(hc_attn_fwd_d64_sm80, 64, 2, false)
HC_ATTN_FWD(hc_attn_fwd_d128_sm80, 128, 2, false)
// Deeper pipelines for paged decode (more bytes in flight an SM; the compute per tile is small).
HC_ATTN_FWD(hc_attn_fwd_d64_s4_sm80, 64, 4, false)
HC_ATTN_FWD(hc_attn_fwd_d128_s3_sm80, 128, 3, false)
// Key-split decode (at most 16 rows a KV head; the warps share each tile's keys).
HC_ATTN_FWD(hc_attn_fwd_d64_s4_ks_sm80, 64, 4, true)
HC_ATTN_FWD(hc_attn_fwd_d128_s3_ks_sm80, 128, 3, true)

// Merges the split-KV partials of `rows` rows of D values: part_o [splits, rows, D] holds
// each split's normalised output, part_lse [splits, rows] its lse (-inf: no key in it).
// One CTA of 128 threads per row.
extern "C" __global__ void __launch_bounds__(128)
    hc_attn_combine_sm80(const float* part_o, const float* part_lse, unsigned short* out, float* lse, long long rows,
                         long long splits, long long D) {
  const long long r = blockIdx.x;
  if (r >= rows) return;
  float m = hc::neg_inf();
  for (long long s = 0; s < splits; ++s) m = fmaxf(m, part_lse[s * rows + r]);
  float sum = 0.f;
  for (long long s = 0; s < splits; ++s) {
    const float x = part_lse[s * rows + r];
    sum += x == hc::neg_inf() ? 0.f : __expf(x - m);
  }
  for (long long d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (long long s = 0; s < splits; ++s) {
      const float x = part_lse[s * rows + r];
      if (x != hc::neg_inf()) acc += __expf(x - m) * part_o[(s * rows + r) * D + d];
    }
    out[r * D + d] = hc::to_bf16(sum > 0.f ? acc / sum : 0.f);
  }
  if (threadIdx.x == 0) lse[r] = sum > 0.f ? m + logf(sum) : hc::neg_inf();
}

// ---- MLA decode ---------------------------------------------------------------------------
// A CTA owns 16 query rows (the Sq x Hq rows of one sequence, in tiles of 16) and walks the
// latent cache in tiles of 32 rows of 576. Its 4 warps split the work two ways: for S = Q K^T
// warp w takes keys 8w..8w+7 of the tile (full 576-deep dot products); the row maxima and sums
// are exchanged through shared memory and P goes there as bf16; for O += P V warp w owns
// output dims [128w, 128w + 128) (16 x 128 fp32 accumulators a warp, 64 registers a thread).
namespace hc {
namespace {

constexpr int kMlaRows = 16, kMlaKeys = 32;
__device__ __forceinline__ int msw(int row, int chunk) { return row * kMlaQk + ((chunk ^ (row & 7)) << 3); }

__device__ void mla_fwd(const unsigned short* q, const unsigned short* kv, unsigned short* out, float* lse,
                        const int* table, const int* seq_lens, float* part_o, float* part_lse, long long B,
                        long long Sq, long long Hq, long long NB, long long BS, long long MB, long long split_len,
                        float scale_log2) {
  extern __shared__ __align__(128) unsigned short smem[];
  unsigned short* sq = smem;                         // [16][576]
  unsigned short* skv = sq + kMlaRows * kMlaQk;      // 2 x [32][576]
  unsigned short* sp = skv + 2 * kMlaKeys * kMlaQk;  // [16][32] P in bf16
  __shared__ float red_max[4][kMlaRows], red_sum[4][kMlaRows];
  __shared__ long long row_q[kMlaRows];
  __shared__ int row_vis[kMlaRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  Problem p;
  mla_rows<kMlaRows>(p, row_q, row_vis, q, table, seq_lens, Sq, Hq, NB, BS, MB, split_len);
  for (int c = threadIdx.x; c < kMlaRows * kMlaCpr; c += kThreads) {
    const int row = c / kMlaCpr, chunk = c % kMlaCpr;
    const bool ok = row_q[row] >= 0;
    cp_async16(smem_addr(sq + msw(row, chunk)), q + (ok ? row_q[row] * kMlaQk + chunk * 8 : 0), ok ? 16 : 0);
  }
  auto load_tile = [&](unsigned short* dst, int k0) {
    for (int c = threadIdx.x; c < kMlaKeys * kMlaCpr; c += kThreads) {
      const int row = c / kMlaCpr, chunk = c % kMlaCpr;
      const int j = k0 + row;
      const bool ok = j < p.kend;
      cp_async16(smem_addr(dst + msw(row, chunk)), kv + (ok ? key_row(p, j) + chunk * 8 : 0), ok ? 16 : 0);
    }
  };
  const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + kMlaKeys - 1) / kMlaKeys : 0;
  if (n_tiles > 0) load_tile(skv, p.kbeg);
  cp_async_commit();

  const int vis0 = min(row_vis[g], p.kend), vis1 = min(row_vis[g + 8], p.kend);
  float o[16][4];
#pragma unroll
  for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};  // l: the CTA's full sums (exchanged each tile)

  for (int it = 0; it < n_tiles; ++it) {
    const int k0 = p.kbeg + it * kMlaKeys;
    if (it + 1 < n_tiles) {
      load_tile(skv + ((it + 1) & 1) * kMlaKeys * kMlaQk, k0 + kMlaKeys);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const unsigned short* ck = skv + (it & 1) * kMlaKeys * kMlaQk;
    // S for keys 8w..8w+7: 36 k-steps of 16.
    float s[1][4] = {{0.f, 0.f, 0.f, 0.f}};
#pragma unroll 2
    for (int k2 = 0; k2 < kMlaQk / 32; ++k2) {
      uint32_t a0[4], a1[4], bk[4];
      ldmatrix_x4(a0, smem_addr(sq + msw(lane & 15, 4 * k2 + (lane >> 4))));
      ldmatrix_x4(a1, smem_addr(sq + msw(lane & 15, 4 * k2 + 2 + (lane >> 4))));
      ldmatrix_x4(bk, smem_addr(ck + msw(warp * 8 + (lane & 7), 4 * k2 + (lane >> 3))));
      mma_bf16(s[0], a0, bk);
      mma_bf16(s[0], a1, bk + 2);
    }
    float mx0, mx1;
    mask_max<1>(s, k0 + warp * 8, vis0, vis1, scale_log2, &mx0, &mx1);
    if (t == 0) red_max[warp][g] = mx0, red_max[warp][g + 8] = mx1;
    __syncthreads();
    mx0 = fmaxf(fmaxf(red_max[0][g], red_max[1][g]), fmaxf(red_max[2][g], red_max[3][g]));
    mx1 = fmaxf(fmaxf(red_max[0][g + 8], red_max[1][g + 8]), fmaxf(red_max[2][g + 8], red_max[3][g + 8]));
    float base0, base1, a0, a1;
    advance_max(st, mx0, mx1, &base0, &base1, &a0, &a1);
    const float p0 = exp2f(s[0][0] - base0), p1 = exp2f(s[0][1] - base0);
    const float p2 = exp2f(s[0][2] - base1), p3 = exp2f(s[0][3] - base1);
    *reinterpret_cast<uint32_t*>(sp + g * kMlaKeys + warp * 8 + 2 * t) = pack_bf16x2(p0, p1);
    *reinterpret_cast<uint32_t*>(sp + (g + 8) * kMlaKeys + warp * 8 + 2 * t) = pack_bf16x2(p2, p3);
    float sum0 = p0 + p1, sum1 = p2 + p3;
#pragma unroll
    for (int x = 1; x < 4; x <<= 1) {
      sum0 += __shfl_xor_sync(0xffffffffu, sum0, x);
      sum1 += __shfl_xor_sync(0xffffffffu, sum1, x);
    }
    if (t == 0) red_sum[warp][g] = sum0, red_sum[warp][g + 8] = sum1;
    __syncthreads();
    st.l0 = st.l0 * a0 + (red_sum[0][g] + red_sum[1][g] + red_sum[2][g] + red_sum[3][g]);
    st.l1 = st.l1 * a1 + (red_sum[0][g + 8] + red_sum[1][g + 8] + red_sum[2][g + 8] + red_sum[3][g + 8]);
    scale_rows<16>(o, a0, a1);
    // O[:, 128w .. 128w + 128) += P V.
#pragma unroll
    for (int kk = 0; kk < kMlaKeys / 16; ++kk) {
      uint32_t pa[4];
      ldmatrix_x4(pa, smem_addr(sp + (lane & 15) * kMlaKeys + (kk * 2 + (lane >> 4)) * 8));
#pragma unroll
      for (int dp = 0; dp < 8; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, smem_addr(ck + msw(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                                 warp * 16 + dp * 2 + (lane >> 4))));
        mma_bf16(o[2 * dp], pa, bv);
        mma_bf16(o[2 * dp + 1], pa, bv + 2);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();  // no copy outlives the CTA (n_tiles = 0 leaves Q's in flight)

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    if (row_q[r] >= 0)
      mla_store_row<16>(o, h, h ? st.l1 : st.l0, h ? st.m1 : st.m0, row_q[r], warp * 128, warp == 0 && t == 0, out,
                        lse, part_o, part_lse, B * Sq * Hq);
  }
}

}  // namespace
}  // namespace hc

// Parameters: q kv out lse block_table seq_lens part_o part_lse B Sq Hq NB BS MB split_len scale_log2.
// Grid: (ceil(Sq * Hq / 16), B, splits); 128 threads.
HC_ATTN_MLA_ENTRY(hc_attn_mla_sm80, hc::kThreads, hc::mla_fwd)
