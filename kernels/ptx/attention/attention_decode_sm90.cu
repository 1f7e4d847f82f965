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
// The ring's stages and phases count on from it0 (the tiles of the CTA's earlier work items).
template <int D, int STAGES, int KT>
__device__ void produce(const Problem& p, BlockCache& blocks, const TensorMap* tk, const TensorMap* tv,
                        uint32_t stages, uint32_t bars, int n_tiles, int hk, int it0 = 0) {
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
  for (int it = it0; it < it0 + n_tiles; ++it) {
    const int s = it % STAGES;
    const uint32_t full = bars + 8 * s, empty = bars + 8 * (STAGES + s);
    if (it >= STAGES) mbar_wait(empty, ((it / STAGES) - 1) & 1);
    const int k0 = p.kbeg + (it - it0) * KT;
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

// The compute warps' walk over keys [kbeg, kend) of one work item, its tiles taking the ring's
// stages from index it0 on: wait for a stage, the warp's share of its keys, release it.
template <int D, int STAGES, int KT>
__device__ __forceinline__ void consume_tiles(const uint32_t (&qf)[D / 16][4], uint32_t base, uint32_t bars, int kbeg,
                                              int kend, int it0, int vis0, int vis1, float (&o)[D / 8][4],
                                              RowState& st, float scale_log2) {
  using C = DecCfg<D, STAGES, KT>;
  const int n_tiles = kend > kbeg ? (kend - kbeg + KT - 1) / KT : 0;
  for (int i = 0; i < n_tiles; ++i) {
    const int it = it0 + i, s = it % STAGES, k0 = kbeg + i * KT;
    const uint32_t sk = base + s * C::kStage;
    mbar_wait(bars + 8 * s, (it / STAGES) & 1);
    if (kend - k0 < KT) {  // the item's last tile, partial (uniform across the compute warps)
      zero_v_rows<D, KT>(sk + C::kTile, kend - k0);
      // The stage is the TMA's again after its release (the pool build's next items): order
      // these generic writes before its later async-proxy writes.
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      ComputeSync{}();
    }
    consume<D, KT / 4>(qf, sk, sk + C::kTile, o, st, k0, vis0, vis1, scale_log2);
    mbar_arrive(bars + 8 * (STAGES + s));
  }
}

template <int D, int STAGES, int KT>
__device__ void decode_sm90(const TensorMap* tk, const TensorMap* tv, const unsigned short* q, unsigned short* out,
                            float* lse, const int* table, const int* seq_lens, float* part_o, float* part_lse,
                            long long B, long long Hq, long long Hkv, long long Sq, long long NB, long long BS,
                            long long MB, long long split_len, float scale_log2) {
  using C = DecCfg<D, STAGES, KT>;
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
    decode_rows<kDecRows, D, NoSync>(p, row_q, row_vis, q, table, seq_lens, Hq, Hkv, Sq, NB, BS, MB, split_len);
    const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + KT - 1) / KT : 0;
    produce<D, STAGES, KT>(p, blocks, tk, tv, base, bars, n_tiles, (int)(blockIdx.y % Hkv));
    return;
  }
  decode_rows<kDecRows, D, ComputeSync>(p, row_q, row_vis, q, table, seq_lens, Hq, Hkv, Sq, NB, BS, MB, split_len);
  // The query rows (zeros for rows that do not exist), 16-byte chunks, padded rows.
  for (int c = threadIdx.x; c < kDecRows * (D / 8); c += kDecCompute) {
    const int row = c / (D / 8), chunk = c % (D / 8);
    const bool ok = row_q[row] >= 0;
    cp_async16(sq + row * C::kRowBytes + chunk * 16, q + (ok ? row_q[row] + chunk * 8 : 0), ok ? 16 : 0);
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
  consume_tiles<D, STAGES, KT>(qf, base, bars, p.kbeg, p.kend, 0, vis0, vis1, o, st, scale_log2);
  // Every copy has landed (each stage was waited for); once every compute warp is past its
  // last tile, stage 0 is the merge's scratch.
  ComputeSync{}();
  merge_warps<D>(o, st, reinterpret_cast<unsigned short*>(dsmem + (base - smem_addr(dsmem))), ComputeSync{});
  if (warp > 0) return;
  float* po = part_o ? part_o + (long long)blockIdx.z * B * Sq * Hq * D : nullptr;
  float* pl = part_o ? part_lse + (long long)blockIdx.z * B * Sq * Hq : nullptr;
  store_rows<D>(o, st, row_q, out, lse, po, pl);
}

// ---- The pool build: persistent CTAs, a shared pool of tail chunks ------------------------------
//
// One CTA an SM for the whole call. The keys of each (sequence, KV head) are cut into S0 static
// splits of len0 keys (S0 x B x Hkv <= the CTAs where it fits: one wave), and each split into a
// static part (its first `stat` keys) and P pool chunks of `chunk` keys. CTA c takes static
// parts c, c + CTAs, ...; then every CTA takes pool chunks from a counter in global memory
// (one atomicAdd a chunk, the call's counter zeroed before the launch) until none are left, so
// that the CTAs the memory served first take over the tail of those it served last (the one
// wave's CTAs ended 97-136 us into a 137 us read: docs/PERFORMANCE.md, 2026-11-29 ninth session)
// instead of idling. Every part writes its partial (normalised O and lse, f32) into its own slot,
// s0 x (1 + P) + j (j = 0 the static part, 1 + p pool chunk p), and the combine kernel merges
// the S0 x (1 + P) slots.
//
// The producer warp posts each work item into one of two item slots (rows, key range, partial
// slot) and copies its query rows into the one query buffer (bulk copies on the item's "full"
// mbarrier, once the compute warps have read the previous item's rows into registers:
// "q_empty"); the ring of K/V stages runs on across items, so the copies of the next item are in
// flight while the compute warps merge and store the last one.
struct PoolPlan {
  long long B, Hkv;  // sequences, KV heads
  long long S0;      // static splits of a (sequence, KV head)
  long long len0;    // keys a static split (a multiple of the tile)
  long long stat;    // keys of a split's static part
  long long chunk;   // keys a pool chunk
  long long P;       // pool chunks a split
  __device__ long long units() const { return B * Hkv * S0; }
  __device__ long long items() const { return units() * (1 + P); }
};

// Work item w (below units(): static part w; else pool chunk (w - units()) / units() of unit
// (w - units()) % units(), so that the pool's first chunks spread over every unit): its
// sequence x KV head y, partial slot and key range [kb, ke) before the sequence's length clips it.
struct PoolItem {
  long long y, kb, ke;
  int slot;
};
__device__ __forceinline__ PoolItem pool_item(const PoolPlan& pp, long long w) {
  const long long U = pp.units();
  const long long u = w < U ? w : (w - U) % U, j = w < U ? 0 : 1 + (w - U) / U;
  const long long s0 = u % pp.S0, start = s0 * pp.len0;
  const long long kb = j == 0 ? start : start + pp.stat + (j - 1) * pp.chunk;
  const long long ke = min(start + pp.len0, j == 0 ? start + pp.stat : kb + pp.chunk);
  return {u / pp.S0, kb, ke, (int)(s0 * (1 + pp.P) + j)};
}

// One posted work item (static shared memory, two of them): the CTA's 16 rows, keys, slot.
struct PoolWork {
  long long row_q[kDecRows];  // element offsets of the rows' queries and outputs (-1: none)
  int row_vis[kDecRows];      // keys each row sees
  int kbeg, kend, slot, pad;  // slot -1: no more work
};

// Shared memory (1024-byte-aligned base): the ring (DecCfg's stages), the query rows (one
// buffer, 16 rows padded to D + 8), merge_warps' scratch (its own: the ring is busy with the
// next item while the compute warps merge), then the mbarriers: 2 x STAGES for the ring,
// work_full[2], work_empty[2], q_empty.
template <int D, int STAGES, int KT>
struct PoolCfg {
  using C = DecCfg<D, STAGES, KT>;
  static constexpr uint32_t kQ = STAGES * C::kStage, kScratch = kQ + kDecRows * C::kRowBytes;
  static constexpr uint32_t kScratchBytes = 512 + 3 * (D / 8) * 32 * 16;
  static constexpr uint32_t kBars = kScratch + kScratchBytes, kNumBars = 2 * STAGES + 5;
  static constexpr uint32_t kShared = 1024 + kBars + (8 * kNumBars + 127) / 128 * 128;  // decode_pool_shared
  static_assert(kShared + 1024 + sizeof(PoolWork) * 2 <= 228 * 1024, "more shared memory than an sm_90 SM has");
  static_assert(kShared <= 227 * 1024, "more shared memory than an sm_90 block has");
};

template <int D, int STAGES, int KT>
__device__ void decode_pool_sm90(const TensorMap* tk, const TensorMap* tv, const unsigned short* q,
                                 unsigned short* out, float* lse, const int* table, const int* seq_lens,
                                 float* part_o, float* part_lse, unsigned* counter, PoolPlan pp, long long Hq,
                                 long long Sq, long long NB, long long BS, long long MB, float scale_log2) {
  using C = DecCfg<D, STAGES, KT>;
  using PC = PoolCfg<D, STAGES, KT>;
  extern __shared__ __align__(128) unsigned char dsmem[];
  __shared__ PoolWork works[2];
  const uint32_t base = (smem_addr(dsmem) + 1023) & ~1023u;
  const uint32_t bars = base + PC::kBars, sq = base + PC::kQ;
  const uint32_t work_full = bars + 8 * 2 * STAGES, work_empty = work_full + 16, q_empty = work_empty + 16;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long U = pp.units(), total = pp.items(), rows = pp.B * Sq * Hq;
  if (warp == kDecCompute / 32) {  // the producer warp
    // Rows a work item lacks (past Sq x G) keep what the buffer held: zeros at first, or an
    // earlier item's finite query rows; their outputs are never stored.
    for (uint32_t c = lane; c < kDecRows * C::kRowBytes / 16; c += 32)
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sq + 16 * c), "r"(0) : "memory");
    if (lane == 0) {
      for (int s = 0; s < STAGES; ++s) mbar_init(bars + 8 * s, 1), mbar_init(bars + 8 * (STAGES + s), kDecCompute);
      for (int i = 0; i < 2; ++i) mbar_init(work_full + 8 * i, 32), mbar_init(work_empty + 8 * i, kDecCompute);
      mbar_init(q_empty, kDecCompute);
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the zeros before the bulk copies
    __syncwarp();
    asm volatile("bar.arrive 2, %0;\n" ::"n"(kDecThreads) : "memory");
    auto claim = [&]() -> long long {  // the next pool chunk, or total when none is left
      unsigned i = 0;
      if (lane == 0) i = atomicAdd(counter, 1u);
      i = __shfl_sync(0xffffffffu, i, 0);
      return U + i < total ? U + i : total;
    };
    long long w = blockIdx.x < U ? (long long)blockIdx.x : claim();
    int it = 0;
    BlockCache blocks;
    for (int n = 0;; ++n) {
      const uint32_t full = work_full + 8 * (n & 1);
      PoolWork& wk = works[n & 1];
      if (n >= 2) mbar_wait(work_empty + 8 * (n & 1), ((n >> 1) - 1) & 1);
      if (w >= total) {
        if (lane == 0) wk.slot = -1;
        mbar_arrive(full);
        return;
      }
      const PoolItem item = pool_item(pp, w);
      const long long b = item.y / pp.Hkv, hk = item.y % pp.Hkv;
      const int len = decode_len(seq_lens, b, MB, BS);
      Problem p;
      p.table = table + b * MB;
      p.BS = BS;
      p.NB = NB;
      p.kbeg = (int)item.kb;
      p.kend = (int)min(item.ke, (long long)len);
      const DecodeRow row = lane < kDecRows ? decode_row(lane, b, hk, len, Hq, pp.Hkv, Sq, D) : DecodeRow{-1, 0};
      if (lane < kDecRows) wk.row_q[lane] = row.q, wk.row_vis[lane] = row.vis;
      if (lane == 0) wk.kbeg = p.kbeg, wk.kend = p.kend, wk.slot = item.slot;
      const int n_rows = __popc(__ballot_sync(0xffffffffu, row.q >= 0));
      if (n >= 1) mbar_wait(q_empty, (n - 1) & 1);  // the last item's rows are in registers
      if (lane == 0) mbar_expect_tx(full, (uint32_t)(n_rows * D * 2));
      __syncwarp();
      if (row.q >= 0) bulk_copy(sq + lane * C::kRowBytes, q + row.q, D * 2, full);
      if (lane != 0) mbar_arrive(full);  // each lane releases its own writes of the item
      const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + KT - 1) / KT : 0;
      if (n_tiles > 0) {
        blocks.init(p.table, MB, (int)(p.kbeg / BS));
        produce<D, STAGES, KT>(p, blocks, tk, tv, base, bars, n_tiles, (int)hk, it);
      }
      it += n_tiles;
      if (w < U && w + gridDim.x < U) w += gridDim.x;
      else w = claim();
    }
  }
  asm volatile("bar.sync 2, %0;\n" ::"n"(kDecThreads) : "memory");  // the mbarriers are made
  const int g = lane >> 2;
  unsigned short* scratch = reinterpret_cast<unsigned short*>(dsmem + (base + PC::kScratch - smem_addr(dsmem)));
  int it = 0;
  for (int n = 0;; ++n) {
    mbar_wait(work_full + 8 * (n & 1), (n >> 1) & 1);
    const PoolWork& wk = works[n & 1];
    if (wk.slot < 0) return;
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ldmatrix_x4(qf[kk], sq + (lane & 15) * C::kRowBytes + (kk * 2 + (lane >> 4)) * 16);
    mbar_arrive(q_empty);
    const int kbeg = wk.kbeg, kend = wk.kend, slot = wk.slot;
    const int vis0 = min(wk.row_vis[g], kend), vis1 = min(wk.row_vis[g + 8], kend);
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    RowState st{neg_inf(), neg_inf(), 0.f, 0.f};
    consume_tiles<D, STAGES, KT>(qf, base, bars, kbeg, kend, it, vis0, vis1, o, st, scale_log2);
    it += kend > kbeg ? (kend - kbeg + KT - 1) / KT : 0;
    // The scratch is the merge's own; merge_warps' barriers order one item's merge after the last.
    merge_warps<D>(o, st, scratch, ComputeSync{});
    if (warp == 0) store_rows<D>(o, st, wk.row_q, out, lse, part_o + slot * rows * D, part_lse + slot * rows);
    mbar_arrive(work_empty + 8 * (n & 1));
  }
}

}  // namespace
}  // namespace hc

// Parameters: the K and V tensor maps (4-d over [NB x BS rows, Hkv, D / 64, 64], boxes of
// min(BS, 64) rows x 1 head x D dims, 128-byte swizzle: head_row_map), then 8 bytes each:
//   q out lse block_table seq_lens part_o part_lse B Hq Hkv Sq NB BS MB split_len scale_log2
// Dynamic shared memory: DecCfg<D, STAGES, KT>::kShared.
#define HC_ATTN_DECODE_SM90(NAME, D, STAGES, CTAS, KT)                                                           \
  extern "C" __global__ void __launch_bounds__(hc::kDecThreads, CTAS)                                            \
      NAME(const __grid_constant__ hc::TensorMap tk, const __grid_constant__ hc::TensorMap tv,                   \
           const unsigned short* q, unsigned short* out, float* lse, const int* table, const int* seq_lens,      \
           float* part_o, float* part_lse, long long B, long long Hq, long long Hkv, long long Sq, long long NB,  \
           long long BS, long long MB, long long split_len, double scale_log2) {                                 \
    hc::decode_sm90<D, STAGES, KT>(&tk, &tv, q, out, lse, table, seq_lens, part_o, part_lse, B, Hq, Hkv, Sq, NB, BS, \
                               MB, split_len, (float)scale_log2);                                                \
  }
// Two CTAs an SM (3 stages at d128: 2 x 101 KiB; 6 at d64), or one with twice the stages.
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s3_sm90, 128, 3, 2, 64)
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s6_sm90, 128, 6, 1, 64)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s6_sm90, 64, 6, 2, 64)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s12_sm90, 64, 12, 1, 64)
// Tiles of 128 keys, one CTA an SM (d128: 3 x 64 KiB stages; d64: 6 x 32 KiB).
HC_ATTN_DECODE_SM90(hc_attn_decode_d128_s3_k128_sm90, 128, 3, 1, 128)
HC_ATTN_DECODE_SM90(hc_attn_decode_d64_s6_k128_sm90, 64, 6, 1, 128)

// The pool build (decode_pool_sm90). Parameters: the K and V tensor maps, then 8 bytes each:
//   q out lse block_table seq_lens part_o part_lse counter B Hkv S0 len0 stat chunk P Hq Sq NB BS MB
//   scale_log2
// Dynamic shared memory: PoolCfg<D, STAGES, KT>::kShared; grid: one CTA an SM, 160 threads.
#define HC_ATTN_DECODE_POOL_SM90(NAME, D, STAGES, KT)                                                           \
  extern "C" __global__ void __launch_bounds__(hc::kDecThreads, 1)                                              \
      NAME(const __grid_constant__ hc::TensorMap tk, const __grid_constant__ hc::TensorMap tv,                  \
           const unsigned short* q, unsigned short* out, float* lse, const int* table, const int* seq_lens,     \
           float* part_o, float* part_lse, unsigned* counter, long long B, long long Hkv, long long S0,          \
           long long len0, long long stat, long long chunk, long long P, long long Hq, long long Sq,            \
           long long NB, long long BS, long long MB, double scale_log2) {                                       \
    hc::decode_pool_sm90<D, STAGES, KT>(&tk, &tv, q, out, lse, table, seq_lens, part_o, part_lse, counter,     \
                                        hc::PoolPlan{B, Hkv, S0, len0, stat, chunk, P}, Hq, Sq, NB, BS, MB,    \
                                        (float)scale_log2);                                                     \
  }
HC_ATTN_DECODE_POOL_SM90(hc_attn_decode_d128_s3_k128_pool_sm90, 128, 3, 128)
HC_ATTN_DECODE_POOL_SM90(hc_attn_decode_d64_s6_k128_pool_sm90, 64, 6, 128)
