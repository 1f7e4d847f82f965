// Paged decode for Hopper (sm_90a): the key-split decode of attention_sm80.cu (a CTA owns at
// most 16 query rows of one KV head, its 4 compute warps share each 64-key tile: warp w takes
// keys [16w, 16w + 16) with its own online-softmax state, merged at the end) fed by a fifth,
// producer warp through the tensor memory accelerator instead of cp.async from every thread:
//
//   warp 4       the producer (one lane): for each key tile of the CTA's range, TMA boxes of
//                R key rows x 1 head x all D dims (R = min(block size, 64): a box never crosses
//                a cache block) of K and of V into a ring of STAGES stages, completing on the
//                stage's "full" mbarrier; it refills a stage as soon as the 128 compute threads
//                have arrived on its "empty" mbarrier, so the copies in flight never wait for
//                a CTA-wide barrier;
//   warps 0-3    compute: wait for the stage, S = Q K^T and O += P V with mma.sync
//                (ldmatrix from the boxes' 128-byte-swizzled rows), release the stage.
//
// Tiles of KT = 64 keys (16 a compute warp), or 128 in the k128 builds (32 a warp, one CTA an
// SM): a warp's step costs about the same whatever its share (softmax, the barriers; on an H200
// 780-860 cycles for 16 keys, and 780 for 8 keys in a build with 8 compute warps, measured and
// dropped), so twice the keys a step lift the rate at which a CTA can take its stages. That rate matters though it is above the
// memory's average share an SM: the CTAs of one wave are served unevenly (they ended between
// 97 and 130 us of a 137 us read) and the last ones can only go as fast as their steps; a
// pure TMA read whose consumers hold each stage 300 / 600 / 850 ns took 3-11 us longer than
// one that releases at once (bench/probes/flush_read_rate.cu, docs/PERFORMANCE.md, 2026-11-29
// ninth session).
//
// Keys past the CTA's range: a box of a partial tile brings its block's later rows and boxes
// wholly past the range are not issued, so those rows hold other data; K's are masked (the
// scores are replaced by -inf), V's rows are zeroed before the last tile's P V (P is 0 there,
// but 0 x NaN is not 0).
//
// A first version issued one cp.async.bulk (256 bytes) per key row; on the H100 it ran at 61%
// of the copy rate with two CTAs an SM and 33% with one: the producer warp's issue of 128
// small copies a tile limited each CTA (docs/PERFORMANCE.md).
//
//   hc_attn_decode_d{64,128}_s{STAGES}[_k128]_sm90   grid (row tiles, B x Hkv, splits), 160 threads
#include "attention_common.cuh"
#include "../moe/sm90_common.cuh"

namespace hc {
namespace {

constexpr int kDecRows = 16, kDecCompute = 128, kDecThreads = kDecCompute + 32;

// Shared memory (from a 1024-byte-aligned base): STAGES stages of K then V, each
// [KT keys][D / 64 units][128 bytes] (the TMA 128-byte swizzle, tile_addr below), then the 16
// query rows (padded to D + 8 elements: ldmatrix's 8 rows in 8 bank groups), then
// the 2 x STAGES mbarriers.
template <int D, int STAGES, int KT = kKeys>
struct DecCfg {
  static constexpr uint32_t kTile = KT * D * 2;                // K (or V) of a stage
  static constexpr uint32_t kStage = 2 * kTile;
  static constexpr uint32_t kRowBytes = (D + 8) * 2;           // a query row
  static constexpr uint32_t kQ = STAGES * kStage, kBars = kQ + kDecRows * kRowBytes;
  static constexpr uint32_t kShared = 1024 + kBars + (16 * STAGES + 127) / 128 * 128;  // the launcher's decode_sm90_shared
  static_assert(kShared + 1024 <= 227 * 1024, "more shared memory than an sm_90 block has");
  // merge_warps' scratch (maxima, sums, three warps' accumulators) fits in stage 0.
  static_assert(512 + 3 * (D / 8) * 32 * 16 <= kStage, "merge scratch");
};

// Byte address of 16-byte chunk c (of D / 8) of key row r in a stage's K or V tile, laid out
// [KT rows][D / 64 units][128 bytes] (each TMA box brings rows' whole head slices, a 4-d map);
// the TMA's 128-byte swizzle puts chunk c % 8 of the unit at index u of its 1024-byte block
// at (c % 8) ^ (u % 8).
template <int D>
__device__ __forceinline__ uint32_t tile_addr(uint32_t tile, int r, int c) {
  const int u = r * (D / 64) + (c >> 3);
  return tile + u * 128 + (((c & 7) ^ (u & 7)) << 4);
}

// The 4 compute warps' barrier (named barrier 1): the producer warp never joins it.
struct ComputeSync {
  __device__ void operator()() const { asm volatile("bar.sync 1, %0;\n" ::"n"(kDecCompute) : "memory"); }
};

// The producer warp's copy of its sequence's block table, 32 entries a register: lane l holds
// entries base + l (cur) and base + 32 + l (nxt, loading while cur is used), so that a tile's
// block indices are a shuffle away instead of a global round trip before its copies.
struct BlockCache {
  const int* row;  // the sequence's block table row (MB entries)
  int mb, base, cur, nxt;
  __device__ int load(int i) const { return i < mb ? row[i] : 0; }
  __device__ void init(const int* r, long long MB, int first) {
    row = r, mb = (int)MB, base = first & ~31;
    cur = load(base + (threadIdx.x & 31));
    nxt = load(base + 32 + (threadIdx.x & 31));
  }
  // Entry j (warp-uniform, never below the one asked before).
  __device__ int get(int j) {
    while (j >= base + 32) base += 32, cur = nxt, nxt = load(base + 32 + (threadIdx.x & 31));
    return __shfl_sync(0xffffffffu, cur, j - base);
  }
};

// The producer (warp 4; lane 0 issues): the CTA's key tiles into the ring. Tile it's keys
// [k0, k0 + KT) come in boxes of R rows (R divides 64 or the block size is a multiple of 64, so
// a box starts a block or lies in one); boxes from kend on are not issued.
template <int D, int STAGES, int KT>
__device__ void produce(const Problem& p, BlockCache& blocks, const TensorMap* tk, const TensorMap* tv,
                        uint32_t stages, uint32_t bars, int n_tiles, int hk) {
  using C = DecCfg<D, STAGES, KT>;
  const bool issuer = (threadIdx.x & 31) == 0;
  // The cache lines keep whatever priority L2 gives them (evict_unchanged). After a write that
  // left L2 full of dirty lines (the benches' flush, or real work before the call), evict_first
  // made the kernel 1.9% (Hkv 16) and 3.5% (Hkv 2) slower on an H200 (evict_normal 7-9% slower
  // still); with clean caches (Nsight Compute) evict_first and evict_unchanged ran level
  // (docs/PERFORMANCE.md, 2026-11-29 fourth session).
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_unchanged.b64 %0, 1.0;\n" : "=l"(policy));
  const int R = p.BS < kKeys ? (int)p.BS : kKeys;
  for (int it = 0; it < n_tiles; ++it) {
    const int s = it % STAGES;
    const uint32_t full = bars + 8 * s, empty = bars + 8 * (STAGES + s);
    if (it >= STAGES) mbar_wait(empty, ((it / STAGES) - 1) & 1);
    const int k0 = p.kbeg + it * KT;
    const int boxes = min(KT / R, (p.kend - k0 + R - 1) / R);
    if (issuer) mbar_expect_tx(full, (uint32_t)(boxes * R * D * 4));  // K and V: R rows of D bf16 each
    const uint32_t sk = stages + s * C::kStage, sv = sk + C::kTile;
    for (int b = 0; b < boxes; ++b) {
      const int row = key_index(p, k0 + b * R, [&](unsigned i) { return blocks.get((int)i); });
      if (issuer) {
        tma_4d(sk + b * R * D * 2, tk, 0, 0, hk, row, full, policy);
        tma_4d(sv + b * R * D * 2, tv, 0, 0, hk, row, full, policy);
      }
    }
  }
}

// Zeroes V rows [r0, KT) of a stage (the keys past the CTA's range in its last tile).
template <int D, int KT>
__device__ __forceinline__ void zero_v_rows(uint32_t sv, int r0) {
  for (int c = threadIdx.x; c < (KT - r0) * (D / 8); c += kDecCompute) {
    const uint32_t a = tile_addr<D>(sv, r0 + c / (D / 8), c % (D / 8));
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a), "r"(0) : "memory");
  }
}

// One compute warp's share of a key tile: keys [NK w, NK w + NK) (NK = 16 or 32) of the stage at
// sk (K) / sv (V).
template <int D, int NK>
__device__ __forceinline__ void consume(const uint32_t (&qf)[D / 16][4], uint32_t sk, uint32_t sv,
                                        float (&o)[D / 8][4], RowState& st, int k0, int vis0, int vis1,
                                        float scale_log2) {
  constexpr int NT = NK / 8;           // 8-key blocks
  constexpr int CH = NT == 2 ? 2 : 1;  // S chains a block: with 16 keys even and odd 16-dim steps apart
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, l7 = lane & 7, key0 = warp * NK;
  float s[CH][NT][4];
#pragma unroll
  for (int c = 0; c < CH; ++c)
#pragma unroll
    for (int i = 0; i < NT; ++i) s[c][i][0] = s[c][i][1] = s[c][i][2] = s[c][i][3] = 0.f;
  // B fragments of K, 16 keys an ldmatrix: matrices (keys 0-7, dims lo), (0-7, hi), (8-15, lo),
  // (8-15, hi), each lane addressing its row's chunk through tile_addr.
  const int kr = key0 + l7 + ((lane >> 4) << 3), kc = (lane >> 3) & 1;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int g = 0; g < NT / 2; ++g) {
      uint32_t b[4];
      ldmatrix_x4(b, tile_addr<D>(sk, kr + 16 * g, kk * 2 + kc));
      mma_bf16(s[kk % CH][2 * g], qf[kk], b);
      mma_bf16(s[kk % CH][2 * g + 1], qf[kk], b + 2);
    }
  if constexpr (CH == 2)
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][i][e] += s[1][i][e];
  uint32_t pf[NT / 2][4];
  float a0, a1;
  // The maxima with slack: after a sequence's first tiles a row's reference max seldom moves,
  // and the warp then skips rescaling its accumulators.
  softmax_step<NT, true>(s[0], pf, st, k0 + key0, vis0, vis1, scale_log2, &a0, &a1);
  if (any_moved(a0, a1)) scale_rows<D / 8>(o, a0, a1);
  // V transposed: matrices (keys 0-7, dims 16dp..+7), (keys 8-15, same), (0-7, +8..), (8-15, +8..).
  const int vr = key0 + l7 + (((lane >> 3) & 1) << 3), vc = lane >> 4;
#pragma unroll
  for (int dp = 0; dp < D / 16; ++dp)
#pragma unroll
    for (int g = 0; g < NT / 2; ++g) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, tile_addr<D>(sv, vr + 16 * g, dp * 2 + vc));
      mma_bf16(o[2 * dp], pf[g], b);
      mma_bf16(o[2 * dp + 1], pf[g], b + 2);
    }
}

// PAIR (D = 128 only): the CTA serves two adjacent KV heads of a d64 cache, whose slices lie
// side by side in each cache row, as one 128-dim head (the launcher's maps and Hkv are the
// pairs'). A query row of the first head is [q, 0], of the second [0, q], so its scores over
// the pair's 128 dims are its own head's, and of the 128 dims of its O it keeps its own half.
// Reads are then 256 contiguous bytes a row instead of 128 (on an H200, 128-byte pieces read
// ~7% slower than a stream: bench/probes/paged_read_rate.cu); the math is the d128 kernel's.
// A row r = s x G + j of the pair's G = Hq / Hkv queries a step (row_q in 64-element units)
// belongs to the second head where j >= G / 2.
__device__ __forceinline__ int pair_half(int r, long long Hq, long long Hkv) {
  const int G = (int)(Hq / Hkv);
  return (r % G) >= G / 2;
}

template <int D, int STAGES, int KT, bool PAIR>
__device__ void decode_sm90(const TensorMap* tk, const TensorMap* tv, const unsigned short* q, unsigned short* out,
                            float* lse, const int* table, const int* seq_lens, float* part_o, float* part_lse,
                            long long B, long long Hq, long long Hkv, long long Sq, long long NB, long long BS,
                            long long MB, long long split_len, float scale_log2) {
  using C = DecCfg<D, STAGES, KT>;
  static_assert(!PAIR || D == 128, "head pairs are of d64 heads");
  constexpr int DQ = PAIR ? 64 : D;  // dims of a q / out row
  extern __shared__ __align__(128) unsigned char dsmem[];
  __shared__ long long row_q[kRows];
  __shared__ int row_vis[kRows];
  const uint32_t base = (smem_addr(dsmem) + 1023) & ~1023u;  // the 128-byte swizzle's 1024-byte units
  const uint32_t bars = base + C::kBars, sq = base + C::kQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  Problem p;
  // The producer warp starts its copies without waiting for the compute warps: it makes the
  // ring's mbarriers, lets the compute warps past named barrier 2 (they wait there before their
  // first stage), and loads its first block-table entries while it reads its sequence's length.
  // The compute warps meanwhile set up their rows and load the query rows.
  if (warp == kDecCompute / 32) {
    BlockCache blocks;
    blocks.init(table + (blockIdx.y / Hkv) * MB, MB, (int)((blockIdx.z * split_len) / BS));
    if (lane == 0) {
      for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, 1), mbar_init(bars + 8 * (STAGES + s), kDecCompute);
      asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncwarp();
    asm volatile("bar.arrive 2, %0;\n" ::"n"(kDecThreads) : "memory");
    decode_rows<kDecRows, DQ, NoSync>(p, row_q, row_vis, q, table, seq_lens, Hq, Hkv, Sq, NB, BS, MB, split_len);
    const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + KT - 1) / KT : 0;
    produce<D, STAGES, KT>(p, blocks, tk, tv, base, bars, n_tiles, (int)(blockIdx.y % Hkv));
    return;
  }
  decode_rows<kDecRows, DQ, ComputeSync>(p, row_q, row_vis, q, table, seq_lens, Hq, Hkv, Sq, NB, BS, MB, split_len);
  const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + KT - 1) / KT : 0;
  // The query rows (zeros for rows that do not exist, and with PAIR the other head's half),
  // 16-byte chunks, padded rows.
  for (int c = threadIdx.x; c < kDecRows * (D / 8); c += kDecCompute) {
    const int row = c / (D / 8), chunk = c % (D / 8);
    const bool ok = row_q[row] >= 0 && (!PAIR || chunk / 8 == pair_half(row, Hq, Hkv));
    const long long src = row_q[row] + (PAIR ? chunk % 8 : chunk) * 8;
    cp_async16(sq + row * C::kRowBytes + chunk * 16, q + (ok ? src : 0), ok ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
  ComputeSync{}();  // every compute thread's rows have landed
  asm volatile("bar.sync 2, %0;\n" ::"n"(kDecThreads) : "memory");  // the mbarriers are made
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldmatrix_x4(qf[kk], sq + (lane & 15) * C::kRowBytes + (kk * 2 + (lane >> 4)) * 16);
  const int g = lane >> 2;
  const int vis0 = min(row_vis[g], p.kend), vis1 = min(row_vis[g + 8], p.kend);
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};
  for (int it = 0; it < n_tiles; ++it) {
    const int s = it % STAGES, k0 = p.kbeg + it * KT;
    const uint32_t sk = base + s * C::kStage;
    mbar_wait(bars + 8 * s, (it / STAGES) & 1);
    if (p.kend - k0 < KT) {  // the last tile, partial (uniform across the compute warps)
      zero_v_rows<D, KT>(sk + C::kTile, p.kend - k0);
      ComputeSync{}();
    }
    consume<D, KT / 4>(qf, sk, sk + C::kTile, o, st, k0, vis0, vis1, scale_log2);
    mbar_arrive(bars + 8 * (STAGES + s));
  }
  // Every copy has landed (each stage was waited for); once every compute warp is past its
  // last tile, stage 0 is the merge's scratch.
  ComputeSync{}();
  merge_warps<D>(o, st, reinterpret_cast<unsigned short*>(dsmem + (base - smem_addr(dsmem))), ComputeSync{});
  if (warp > 0) return;
  float* po = part_o ? part_o + (long long)blockIdx.z * B * Sq * Hq * DQ : nullptr;
  float* pl = part_o ? part_lse + (long long)blockIdx.z * B * Sq * Hq : nullptr;
  store_rows<D, DQ>(o, st, row_q, out, lse, po, pl, [&](int r) { return PAIR ? 64 * pair_half(r, Hq, Hkv) : 0; });
}

}  // namespace
}  // namespace hc

// Parameters: the K and V tensor maps (4-d over [NB x BS rows, Hkv, D / 64, 64], boxes of
// min(BS, 64) rows x 1 head x D dims, 128-byte swizzle: head_row_map), then 8 bytes each:
//   q out lse block_table seq_lens part_o part_lse B Hq Hkv Sq NB BS MB split_len scale_log2
// Dynamic shared memory: DecCfg<D, STAGES, KT>::kShared.
#define HC_ATTN_DECODE_SM90(NAME, D, STAGES, CTAS, KT, PAIR)                                                \
  extern "C" __global__ void __launch_bounds__(hc::kDecThreads, CTAS)                                            \
      NAME(const __grid_constant__ hc::TensorMap tk, const __grid_constant__ hc::TensorMap tv,                   \
           const unsigned short* q, unsigned short* out, float* lse, const int* table, const int* seq_lens,      \
           float* part_o, float* part_lse, long long B, long long Hq, long long Hkv, long long Sq, long long NB,  \
           long long BS, long long MB, long long split_len, double scale_log2) {                                 \
    hc::decode_sm90<D, STAGES, KT, PAIR>(&tk, &tv, q, out, lse, table, seq_lens, part_o, part_lse, B, Hq, Hkv,   \
                                         Sq, NB, BS, MB, split_len, (float)scale_log2);                          \
  }
// Two CTAs an SM (3 stages at d128: 2 x 101 KiB; 6 at d64), or one with twice the stages.
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s3_sm90, 128, 3, 2, 64, false)
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s6_sm90, 128, 6, 1, 64, false)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s6_sm90, 64, 6, 2, 64, false)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s12_sm90, 64, 12, 1, 64, false)
// Tiles of 128 keys, one CTA an SM (d128: 3 x 64 KiB stages; d64: 6 x 32 KiB).
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s3_k128_sm90, 128, 3, 1, 128, false)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s6_k128_sm90, 64, 6, 1, 128, false)
// Head pairs of a d64 cache (PAIR): the d128 builds' geometry over two heads' slices a row.
HC_ATTN_DECODE_SM90(hc_attn_decode_d64p_s3_sm90, 128, 3, 2, 64, true)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64p_s3_k128_sm90, 128, 3, 1, 128, true)
