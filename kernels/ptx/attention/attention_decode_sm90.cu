// Paged decode for Hopper (sm_90a): the key-split decode of attention_sm80.cu (a CTA owns at
// most 16 query rows of one KV head, its 4 compute warps share each 64-key tile: warp w takes
// keys [16w, 16w + 16) with its own online-softmax state, merged at the end) fed by a fifth,
// producer warp through the bulk copy engine instead of cp.async from every thread:
//
//   warp 4       the producer: for each key tile of the CTA's range, one bulk copy
//                (cp.async.bulk, 256 bytes at d128) per key row of K and of V into a ring of
//                STAGES stages, completing on the stage's "full" mbarrier; it refills a stage
//                as soon as the 128 compute threads have arrived on its "empty" mbarrier, so
//                the copies in flight never wait for a CTA-wide barrier;
//   warps 0-3    compute: wait for the stage, S = Q K^T and O += P V with mma.sync
//                (ldmatrix from shared memory), release the stage.
//
// Paged rows: key j's row is its own bulk copy (block table looked up per row), so any block
// size works and the K / V tiles need no tensor map. Shared rows are padded by 16 bytes (row
// pitch D + 8 elements): ldmatrix's 8 rows of a phase fall in 8 different bank groups without
// a swizzle, which bulk copies cannot apply. Rows past the CTA's keys copy its last key again
// (finite data; their P is 0 after the mask), so every stage brings the same byte count.
//
//   hc_attn_decode_d{64,128}_s{STAGES}_sm90   grid (row tiles, B x Hkv, splits), 160 threads
#include "attention_common.cuh"
#include "../moe/sm90_common.cuh"

namespace hc {
namespace {

constexpr int kDecRows = 16, kDecCompute = 128, kDecThreads = kDecCompute + 32;

template <int D, int STAGES>
struct DecCfg {
  static constexpr int kPitch = D + 8;                        // elements a shared row
  static constexpr uint32_t kRowBytes = kPitch * 2;
  static constexpr uint32_t kTileBytes = kKeys * kRowBytes;  // one K (or V) tile
  static constexpr uint32_t kBars = (16 * STAGES + 127) / 128 * 128;  // the 2 x STAGES mbarriers, first
  static constexpr uint32_t kQ = kBars, kStage0 = kQ + kDecRows * kRowBytes;
  static constexpr uint32_t kShared = kStage0 + STAGES * 2 * kTileBytes;  // the launcher's decode_sm90_shared
  static constexpr uint32_t kTx = 2 * kKeys * D * 2;          // bytes a stage's copies bring
  static_assert(kShared + 1024 <= 227 * 1024, "more shared memory than an sm_90 block has");
  // merge_warps' scratch (maxima, sums, three warps' accumulators) fits in stage 0.
  static_assert(512 + 3 * (D / 8) * 32 * 16 <= 2 * kTileBytes, "merge scratch");
};

// One bulk copy of `bytes` from global to shared memory, completing on mbarrier `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// The 4 compute warps' barrier (named barrier 1): the producer warp never joins it.
struct ComputeSync {
  __device__ void operator()() const { asm volatile("bar.sync 1, %0;\n" ::"n"(kDecCompute) : "memory"); }
};

// The producer warp: the CTA's key tiles into the ring, one bulk copy a key row of K and of V
// (lanes take rows lane, lane + 32).
template <int D, int STAGES>
__device__ void produce(const Problem& p, const unsigned short* k, const unsigned short* v, uint32_t base,
                        int n_tiles) {
  using C = DecCfg<D, STAGES>;
  const int lane = threadIdx.x & 31;
  for (int it = 0; it < n_tiles; ++it) {
    const int s = it % STAGES;
    const uint32_t full = base + 8 * s, empty = base + 8 * (STAGES + s);
    if (it >= STAGES) mbar_wait(empty, ((it / STAGES) - 1) & 1);
    if (lane == 0) mbar_expect_tx(full, C::kTx);
    __syncwarp();
    const uint32_t sk = base + C::kStage0 + s * 2 * C::kTileBytes, sv = sk + C::kTileBytes;
    const int k0 = p.kbeg + it * kKeys;
#pragma unroll
    for (int r = lane; r < kKeys; r += 32) {
      const int j = min(k0 + r, p.kend - 1);  // past the CTA's keys: its last key again (masked)
      const long long src = key_row(p, j);
      bulk_copy(sk + r * C::kRowBytes, k + src, D * 2, full);
      bulk_copy(sv + r * C::kRowBytes, v + src, D * 2, full);
    }
  }
}

// One compute warp's share of a key tile: keys [16w, 16w + 16) of the stage at sk (K) / sv (V).
template <int D, int STAGES>
__device__ __forceinline__ void consume(const uint32_t (&qf)[D / 16][4], uint32_t sk, uint32_t sv,
                                        float (&o)[D / 8][4], RowState& st, int k0, int vis0, int vis1,
                                        float scale_log2) {
  using C = DecCfg<D, STAGES>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, key0 = warp * 16;
  float s[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
  // B fragments of K: matrices (keys 0-7, dims lo), (0-7, hi), (8-15, lo), (8-15, hi).
  const uint32_t krow = sk + (key0 + (lane & 7) + ((lane >> 4) << 3)) * C::kRowBytes + ((lane >> 3) & 1) * 16;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t b[4];
    ldmatrix_x4(b, krow + kk * 32);
    mma_bf16(s[0], qf[kk], b);
    mma_bf16(s[1], qf[kk], b + 2);
  }
  uint32_t pf[1][4];
  float a0, a1;
  softmax_step<2>(s, pf, st, k0 + key0, vis0, vis1, scale_log2, &a0, &a1);
  scale_rows<D / 8>(o, a0, a1);
  // V transposed: matrices (keys 0-7, dims 16dp..+7), (keys 8-15, same), (0-7, +8..), (8-15, +8..).
  const uint32_t vrow = sv + (key0 + (lane & 7) + (((lane >> 3) & 1) << 3)) * C::kRowBytes + (lane >> 4) * 16;
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp) {
    uint32_t b[4];
    ldmatrix_x4_trans(b, vrow + dp * 32);
    mma_bf16(o[2 * dp], pf[0], b);
    mma_bf16(o[2 * dp + 1], pf[0], b + 2);
  }
}

template <int D, int STAGES>
__device__ void decode_sm90(const unsigned short* q, const unsigned short* k, const unsigned short* v,
                            unsigned short* out, float* lse, const int* table, const int* seq_lens, float* part_o,
                            float* part_lse, long long B, long long Hq, long long Hkv, long long Sq, long long NB,
                            long long BS, long long MB, long long split_len, float scale_log2) {
  using C = DecCfg<D, STAGES>;
  extern __shared__ __align__(128) unsigned char dsmem[];
  __shared__ long long row_q[kRows];
  __shared__ int row_vis[kRows];
  const uint32_t base = smem_addr(dsmem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  Problem p;
  decode_rows<kDecRows, D>(p, row_q, row_vis, q, table, seq_lens, Hq, Hkv, Sq, NB, BS, MB, split_len);
  const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + kKeys - 1) / kKeys : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(base + 8 * s, 1), mbar_init(base + 8 * (STAGES + s), kDecCompute);
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  // The query rows (zeros for rows that do not exist), 16-byte chunks, padded rows.
  for (int c = threadIdx.x; c < kDecRows * (D / 8); c += kDecThreads) {
    const int row = c / (D / 8), chunk = c % (D / 8);
    const bool ok = row_q[row] >= 0;
    cp_async16(base + C::kQ + row * C::kRowBytes + chunk * 16, q + (ok ? row_q[row] + chunk * 8 : 0), ok ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();  // Q and the mbarriers are ready; from here the roles part
  if (warp == kDecCompute / 32) {
    produce<D, STAGES>(p, k, v, base, n_tiles);
    return;
  }
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qf[kk], base + C::kQ + (lane & 15) * C::kRowBytes + (kk * 2 + (lane >> 4)) * 16);
  const int g = lane >> 2;
  const int vis0 = min(row_vis[g], p.kend), vis1 = min(row_vis[g + 8], p.kend);
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};
  for (int it = 0; it < n_tiles; ++it) {
    const int s = it % STAGES;
    const uint32_t sk = base + C::kStage0 + s * 2 * C::kTileBytes;
    mbar_wait(base + 8 * s, (it / STAGES) & 1);
    consume<D, STAGES>(qf, sk, sk + C::kTileBytes, o, st, p.kbeg + it * kKeys, vis0, vis1, scale_log2);
    mbar_arrive(base + 8 * (STAGES + s));
  }
  // Every copy has landed (each stage was waited for): stage 0 is the merge's scratch.
  merge_warps<D>(o, st, reinterpret_cast<unsigned short*>(dsmem + C::kStage0), ComputeSync{});
  if (warp > 0) return;
  float* po = part_o ? part_o + (long long)blockIdx.z * B * Sq * Hq * D : nullptr;
  float* pl = part_o ? part_lse + (long long)blockIdx.z * B * Sq * Hq : nullptr;
  store_rows<D>(o, st, row_q, out, lse, po, pl);
}

}  // namespace
}  // namespace hc

// Parameters (8 bytes each; ops/ptx/attention_ops.cpp's FwdArgs with causal unused):
//   q k v out lse block_table seq_lens part_o part_lse B Hq Hkv Sq NB BS MB causal split_len scale_log2
// Dynamic shared memory: DecCfg<D, STAGES>::kShared.
#define HC_ATTN_DECODE_SM90(NAME, D, STAGES, CTAS)                                                                  \
  extern "C" __global__ void __launch_bounds__(hc::kDecThreads, CTAS) NAME(                                        \
      const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* out, float* lse, \
      const int* table, const int* seq_lens, float* part_o, float* part_lse, long long B, long long Hq,          \
      long long Hkv, long long Sq, long long NB, long long BS, long long MB, long long causal,                   \
      long long split_len, double scale_log2) {                                                                 \
    (void)causal;                                                                                               \
    hc::decode_sm90<D, STAGES>(q, k, v, out, lse, table, seq_lens, part_o, part_lse, B, Hq, Hkv, Sq, NB, BS, MB, \
                               split_len, (float)scale_log2);                                                   \
  }
// Two CTAs an SM (3 stages at d128: 2 x 106 KiB), or one with twice the stages.
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s3_sm90, 128, 3, 2)
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s6_sm90, 128, 6, 1)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s5_sm90, 64, 5, 2)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s11_sm90, 64, 11, 1)
