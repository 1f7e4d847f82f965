// MLA decode for Hopper (sm_90a), warp-specialised (FlashMLA's structure, written here from
// its description): the KV cache is read once for a block of 64 query rows, by a producer
// warpgroup, while two consumer warpgroups take alternate key tiles.
//
//   CTA      384 threads: warpgroup 0 the producer, 1 and 2 the consumers (setmaxnreg 40 /
//            232); owns (64-row block, sequence b, split of the keys), as hc_attn_mla_sm90.
//   smem     Q [64][576] (9 SW128 blocks of [64 rows][128 B]), a ring of two KV stages of the
//            same shape (tiles of 64 keys), P [64][64] bf16 (one SW128 block), row data, the
//            mbarriers: 232272 bytes of dynamic shared memory.
//   producer copies Q once, then each tile into stage t % 2 after that stage's "empty" barrier
//            (8 consumer warps) completes. cp.async build: every thread copies 4 rows, 9
//            chunks of 16 bytes each (a warp instruction reads 4 whole 128-byte lines) into
//            the swizzled layout wgmma reads, one block-table lookup a row;
//            cp.async.mbarrier.arrive completes the stage's "full" barrier (128 arrivals)
//            when they land. TMA build (block size a multiple of 64): one thread, one lookup a
//            tile, 9 boxes of 64 columns x 64 rows (cp.async.bulk.tensor, 128-byte swizzle),
//            the full barrier by its transaction count.
//   consumer warpgroup w owns the tiles t = w, w + 2, ... and the output dims [256 w, +256).
//            For its tile t: take in the other warpgroup's tile t - 1 (wait on mbarrier
//            maxpub(1 - w), rescale O and l to the maxima after it; wait on ppub(1 - w), O += P(t
//            - 1) V(t - 1) with P from shared memory, release that stage); S = Q K^T for tile t
//            (64 x 64, wgmma m64n64k16 over 576, both operands in shared memory); the online
//            softmax from the maxima after t - 1, whose new maxima are published at once (`smax`,
//            maxpub(w)); publish P(t) (shared memory, ppub(w)); O += P(t) V(t) with P from
//            registers (wgmma m64n256k16); release its stage. When tile t has already landed its S is queued
//            first, before the wait for t - 1 (it runs meanwhile); else t - 1 goes first and its
//            stage is released before this warpgroup waits for its own copy, so the next copy
//            into that stage never waits for this one. One warpgroup's softmax and barriers run
//            under the other's products.
//   order    every hand-off is an mbarrier at which all 128 threads of the publishing warpgroup
//            arrive after their own accesses (an arrival releases only the arriving thread's
//            accesses; compute-sanitizer racecheck tracks them, where it reported the former
//            bar.arrive / bar.sync pairs). P has one buffer, smax one slot a warpgroup:
//            RAW  w stores P(t) / smax[w] -> arrives ppub(w) / maxpub(w) -> the other waits.
//            WAR  the other reads P(t) (its wgmma, waited) and smax[w] before it stores P(t + 1)
//                 and smax[1 - w] and arrives ppub / maxpub(1 - w), which w waits for before it
//                 stores P(t + 2) / smax[w] again (it waits for P(t + 1) before its P store on
//                 both paths). A warpgroup is never two phases ahead of the waiter (parity
//                 waits are exact). The running maximum is passed along the tiles in order, so
//                 the softmaxes are serial (only the maxima: P follows later); the products and
//                 the copies are not.
//   end      each warpgroup's row sums cover its own tiles on the final maximum (both
//            warpgroups end on tile n - 1's); they are added through shared memory after the
//            mbarrier `sums` (256 consumer arrivals; the producer warpgroup has returned).
//
// Semantics are hc_attn_mla_sm90's (attention_mla_sm90.cu): rows that see no key write zeros
// and lse = -inf; split-KV partials (normalised O and lse, f32) go to hc_attn_combine_sm80.
#include "attention_common.cuh"
#include "../moe/sm90_common.cuh"

namespace hc {
namespace {

constexpr int kMwsThreads = 384;
constexpr uint32_t kMwsBlk = kMlaBlk;                   // one SW128 block: 64 rows x 128 bytes
constexpr uint32_t kMwsTile = (kMlaQk / 64) * kMwsBlk;  // 73728: Q or one KV stage
// After P: row_q (8 B a row), row_vis (4), smax[2] (4 each), red[2] (4 each), then 10 mbarriers.
constexpr uint32_t kMwsSmall = 64 * (8 + 4 + 8 + 8) + 10 * 8;
// ops/ptx/attention_ops.cpp's kMlaSm90WsShared.
constexpr uint32_t kMwsShared = 1024 + 3 * kMwsTile + kMwsBlk + kMwsSmall;
static_assert(kMwsShared == 232272 && kMwsShared <= 232448, "more shared memory than a block may take on the H100");

// ADAPT: choose per tile between S first and the other warpgroup's tile first (below); false:
// S first always (the comparison build, "sm90.ws.sfirst"). TMA (tkv: a 2-d tensor map over the
// cache's [NB * BS][576] rows, boxes of 64 columns x 64 rows, 128-byte swizzle; BS a multiple
// of 64, so a tile lies in one block): one producer thread copies each tile as 9 boxes with
// cp.async.bulk.tensor instead of 128 threads' cp.async; the rows of the last tile past the
// split's keys are then cache rows, not zeros, and the owner zeroes them before use.
// PST ("ps" builds): a tile's P goes to its own stage's last block (the rope dims 512..575,
// read only by that tile's S, which has completed), not to the one P buffer: a warpgroup
// publishes P(t) before the other's P V of tile t - 1, so P has a buffer a stage. The stage's
// "empty" barrier then takes all 256 consumer threads' arrivals (their P stores precede the next
// copy into it).
template <bool ADAPT, bool TMA, bool PST = false>
__device__ void mla_sm90_ws(const TensorMap* tkv, const unsigned short* q, const unsigned short* kv,
                            unsigned short* out, float* lse, const int* table, const int* seq_lens, float* part_o,
                            float* part_lse, long long B, long long Sq, long long Hq, long long NB, long long BS,
                            long long MB, long long split_len, float scale_log2) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sq = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t skv = sq + kMwsTile, sp = sq + 3 * kMwsTile;
  unsigned char* small = smem_raw + (sp + kMwsBlk - smem_addr(smem_raw));
  long long* row_q = reinterpret_cast<long long*>(small);
  int* row_vis = reinterpret_cast<int*>(small + 64 * 8);
  float(*smax)[64] = reinterpret_cast<float(*)[64]>(small + 64 * 12);  // a warpgroup's maxima after its last tile
  float(*red)[64] = reinterpret_cast<float(*)[64]>(small + 64 * 20);   // row sums at the end
  const uint32_t bars = sp + kMwsBlk + 64 * 28;
  const uint32_t q_full = bars;
  const auto full = [&](int s) { return bars + 8 * (1 + s); };
  const auto empty = [&](int s) { return bars + 8 * (3 + s); };
  // The consumers' hand-offs, every thread of the warpgroup arriving after its own accesses
  // (an mbarrier arrival releases only the arriving thread's): warpgroup v published its maxima
  // (maxpub), its P (ppub); both warpgroups' row sums are in `red` (sums).
  const auto maxpub = [&](int v) { return bars + 8 * (5 + v); };
  const auto ppub = [&](int v) { return bars + 8 * (7 + v); };
  const uint32_t sums = bars + 8 * 9;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 128);
    for (int s = 0; s < 2; ++s) mbar_init(full(s), TMA ? 1 : 128), mbar_init(empty(s), PST ? 256 : 8);
    for (int v = 0; v < 2; ++v) mbar_init(maxpub(v), 128), mbar_init(ppub(v), 128);
    mbar_init(sums, 256);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  Problem p;
  mla_rows<64>(p, row_q, row_vis, q, table, seq_lens, Sq, Hq, NB, BS, MB, split_len);  // ends with a barrier
  const int n = p.kend > p.kbeg ? (p.kend - p.kbeg + 63) / 64 : 0;

  if (threadIdx.x < 128) {  // the producer warpgroup: rows 16 warp + 4 i + lane / 8 (i < 4)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    const int row0 = (threadIdx.x >> 5) * 16 + ((threadIdx.x & 31) >> 3), c8 = threadIdx.x & 7;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long qr = row_q[row0 + 4 * i];
      mla_copy_row(sq, qr >= 0 ? q + qr * kMlaQk : nullptr, row0 + 4 * i, c8, q);
    }
    cp_async_arrive(q_full);
    if (TMA && threadIdx.x == 0) {
      // evict_unchanged: on an H200 after the bench's write flush 1.5-1.9% faster than
      // evict_normal at Sq 1 and 0.5-0.8% at Sq 2 (two alternations, 2026-11-29 fourth session).
      uint64_t policy;
      asm volatile("createpolicy.fractional.L2::evict_unchanged.b64 %0, 1.0;\n" : "=l"(policy));
      for (int t = 0; t < n; ++t) {
        const int s = t & 1;
        if (t >= 2) mbar_wait(empty(s), ((t >> 1) - 1) & 1);
        const int row = key_index(p, p.kbeg + t * 64);  // the tile's first row; the other 63 follow it
        mbar_expect_tx(full(s), kMwsTile);
#pragma unroll
        for (int b = 0; b < kMlaQk / 64; ++b) tma_2d(skv + s * kMwsTile + b * kMwsBlk, tkv, b * 64, row, full(s), policy);
      }
    }
    for (int t = 0; t < (TMA ? 0 : n); ++t) {
      const int s = t & 1;
      if (t >= 2) mbar_wait(empty(s), ((t >> 1) - 1) & 1);  // both warpgroups are done with tile t - 2
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j = p.kbeg + t * 64 + row0 + 4 * i;
        mla_copy_row(skv + s * kMwsTile, j < p.kend ? kv + (long long)key_index(p, j) * kMlaQk : nullptr, row0 + 4 * i,
                     c8, kv);
      }
      cp_async_arrive(full(s));
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int w = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7) - 1, 0);  // consumer 0 or 1 (warp-uniform)
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int vis0 = min(row_vis[r0], p.kend), vis1 = min(row_vis[r1], p.kend);
  const uint32_t mine = skv + w * kMwsTile, theirs = skv + (1 - w) * kMwsTile;
  const uint32_t p_mine = PST ? mine + 8 * kMwsBlk : sp, p_theirs = PST ? theirs + 8 * kMwsBlk : sp;
  float o[32][4];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float s[8][4] = {};
  uint32_t pf[4][4];
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};  // m: the maxima O and l are scaled to

  // The other warpgroup's tile u = t - 1 (its stage, P in shared memory, its maxima in smax):
  // wait until its maxima are published and rescale O and l to them (`rescale`), wait until its
  // P is published and queue O[:, 256 w, +256) += P V as one commit group (`queue_theirs`).
  // Its k-th publication (u = 2 k + 1 - w) completes phase k of maxpub / ppub(1 - w).
  auto rescale = [&](int u) {
    mbar_wait(maxpub(1 - w), (u >> 1) & 1);
    const float m0 = smax[1 - w][r0], m1 = smax[1 - w][r1];
    const float a0 = exp2f(st.m0 - (m0 == neg_inf() ? 0.f : m0)), a1 = exp2f(st.m1 - (m1 == neg_inf() ? 0.f : m1));
    st.m0 = m0, st.m1 = m1, st.l0 *= a0, st.l1 *= a1;
    if (any_moved(a0, a1)) scale_rows<32>(o, a0, a1);  // most tiles move no row's max (the slack below)
  };
  auto queue_theirs = [&](int u) {
    mbar_wait(ppub(1 - w), (u >> 1) & 1);
    fence_async_smem();
    keep<128>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64n256k16(&o[0][0], make_desc(p_theirs + kk * 32, 16, 1024),
                       make_desc(theirs + w * 4 * kMwsBlk + kk * 2048, kMwsBlk, 1024), 1);
    wgmma_commit();
  };
  const auto release_theirs = [&]() {  // after the wait for queue_theirs's group
    keep<128>(&o[0][0]);
    if (PST || lane == 0) mbar_arrive(empty(1 - w));
  };
  // S = Q K^T for the tile in this warpgroup's stage (fill `par`): 36 steps of 16 along the 576
  // dims, queued as one commit group.
  auto queue_s = [&](uint32_t par, int t) {
    mbar_wait(full(w), par);
    const int valid = p.kend - (p.kbeg + t * 64);
    if (TMA && valid < 64) {  // rows past the split's keys: zeros (their P is 0, and 0 * NaN is not)
      const uint4 z = make_uint4(0, 0, 0, 0);
      for (int c = (int)(threadIdx.x & 127) + valid * 72; c < 64 * 72; c += 128)
        *reinterpret_cast<uint4*>(smem_raw + (mine + (c % 72 >> 3) * kMwsBlk + (c / 72) * 128 +
                                              (((c % 72 & 7) ^ (c / 72 & 7)) << 4) - smem_addr(smem_raw))) = z;
      asm volatile("bar.sync %0, 128;\n" ::"r"(6 + w) : "memory");  // the warpgroup's zeros before its wgmma
    }
    fence_async_smem();
    keep<32>(&s[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kMlaQk / 16; ++kk) {
      const uint32_t off = (kk >> 2) * kMwsBlk + (kk & 3) * 32;
      wgmma_m64n64k16_ss(&s[0][0], make_desc(sq + off, 16, 1024), make_desc(mine + off, 16, 1024), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
  };

  if (n > 0) mbar_wait(q_full, 0);
  for (int t = w; t < n; t += 2) {
    const uint32_t par = (t >> 1) & 1;
    // When this tile has landed, its S goes first: it runs while the warpgroup waits for tile
    // t - 1 to be published; tile t - 1's P V follows the softmax (which must not read S's
    // registers while a wgmma is in flight: ptxas would serialise every wgmma, C7514). Else tile
    // t - 1's P V goes first (its stage is freed sooner for the next copy), then S.
    const bool s_first = t == 0 || !ADAPT || wg_all(mbar_test(full(w), par), 4 + w);
    if (s_first) {
      queue_s(par, t);
      wgmma_wait<0>();
      keep<32>(&s[0][0]);
      if (t >= 1) rescale(t - 1);
    } else {  // (the stage is released before the wait for this tile's copy: the next copy
              // into it must not wait for this one)
      rescale(t - 1);
      queue_theirs(t - 1);
      wgmma_wait<0>();
      release_theirs();
      queue_s(par, t);
      wgmma_wait<0>();
      keep<32>(&s[0][0]);
    }
    // Online softmax on the maxima after tile t - 1, in registers (P as bf16 A fragments).
    float mx0, mx1, base0, base1, a0, a1;
    // The maxima with slack (advance_max<true>): a row's reference max moves only when the tile
    // passes it by more than 2^8, so after the first tiles neither this warpgroup's rescale below
    // nor the other's (rescale) touches O (128 multiplies a thread each, on the serial chain
    // of maxima hand-offs).
    mask_max<8>(s, p.kbeg + t * 64, vis0, vis1, scale_log2, &mx0, &mx1);
    advance_max<true>(st, mx0, mx1, &base0, &base1, &a0, &a1);
    // Publish the maxima now: the other warpgroup's softmax of tile t + 1 needs only them (its P
    // V of tile t waits for P below). The other read smax[w] (tile t - 2's) before it published
    // its maxima of tile t - 1, which rescale waited for.
    if (t4 == 0) smax[w][r0] = st.m0, smax[w][r1] = st.m1;
    mbar_arrive(maxpub(w));
    exp_to_p<8>(s, pf, st, base0, base1, a0, a1);
    if (!PST && s_first && t >= 1) {  // tile t - 1's P V, then P in shared memory is free
      queue_theirs(t - 1);
      wgmma_wait<0>();
      release_theirs();
    }
    // Publish P (keys 8 nn .. 8 nn + 7 of rows r0, r1) for the other warpgroup. One buffer: its P
    // V of tile t - 2 completed before it stored P(t - 1), which queue_theirs waited for. PST: this
    // stage's previous tile (t - 2) was released by all 256 consumer threads before it was refilled.
#pragma unroll
    for (int nn = 0; nn < 8; ++nn) {
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p_mine + r0 * 128 + ((nn ^ (r0 & 7)) << 4) + 4 * t4),
                   "r"(pf[nn >> 1][(nn & 1) * 2]) : "memory");
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(p_mine + r1 * 128 + ((nn ^ (r1 & 7)) << 4) + 4 * t4),
                   "r"(pf[nn >> 1][(nn & 1) * 2 + 1]) : "memory");
    }
    fence_async_smem();  // P's stores -> the other warpgroup's wgmma reads
    mbar_arrive(ppub(w));
    if (PST && s_first && t >= 1) {  // tile t - 1's P V (its P in the other's stage)
      queue_theirs(t - 1);
      wgmma_wait<0>();
      release_theirs();
    }
    // O[:, 256 w, +256) += P V, P from registers; then this tile's stage is released.
    if (any_moved(a0, a1)) scale_rows<32>(o, a0, a1);
    keep<128>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64n256k16_rs(&o[0][0], pf[kk], make_desc(mine + w * 4 * kMwsBlk + kk * 2048, kMwsBlk, 1024));
    wgmma_commit();
    wgmma_wait<0>();
    keep<128>(&o[0][0]);
    if (PST || lane == 0) mbar_arrive(empty(w));
  }
  if (n > 0 && ((n - 1) & 1) != w) {  // the last tile is the other warpgroup's
    rescale(n - 1);
    queue_theirs(n - 1);
    wgmma_wait<0>();
    keep<128>(&o[0][0]);
  }

  // Row sums: the quad's, then the two warpgroups' (both on the maxima after tile n - 1).
  // (The producer warpgroup has returned: the exchange is an mbarrier of the 256 consumer threads.)
  mla_store_2wg(o, st, red, row_q, w, [&] { mbar_arrive(sums), mbar_wait(sums, 0); }, out, lse, part_o, part_lse,
                B * Sq * Hq);
}

// The cp.async builds (no tensor map).
template <bool ADAPT, bool PST = false>
__device__ void mla_sm90_ws_cp(const unsigned short* q, const unsigned short* kv, unsigned short* out, float* lse,
                               const int* table, const int* seq_lens, float* part_o, float* part_lse, long long B,
                               long long Sq, long long Hq, long long NB, long long BS, long long MB,
                               long long split_len, float scale_log2) {
  mla_sm90_ws<ADAPT, false, PST>(nullptr, q, kv, out, lse, table, seq_lens, part_o, part_lse, B, Sq, Hq, NB, BS, MB,
                            split_len, scale_log2);
}

}  // namespace
}  // namespace hc

// Parameters as hc_attn_mla_sm90's (8 bytes each; ops/ptx/attention_ops.cpp's MlaArgs):
//   q kv out lse block_table seq_lens part_o part_lse B Sq Hq NB BS MB split_len scale_log2.
// Grid: (ceil(Sq * Hq / 64), B, splits); 384 threads; kMwsShared = 232272 bytes of dynamic shared memory.
HC_ATTN_MLA_ENTRY(hc_attn_mla_sm90ws, hc::kMwsThreads, hc::mla_sm90_ws_cp<true>)
HC_ATTN_MLA_ENTRY(hc_attn_mla_sm90ws_sfirst, hc::kMwsThreads, hc::mla_sm90_ws_cp<false>)
HC_ATTN_MLA_ENTRY(hc_attn_mla_sm90ws_ps, hc::kMwsThreads, (hc::mla_sm90_ws_cp<true, true>))
// The TMA builds: the tensor map first (64 bytes, __grid_constant__), then the parameters above.
// Grid, threads and shared memory as hc_attn_mla_sm90ws; _ps: P in the stages (PST).
HC_ATTN_MLA_TMA_ENTRY(hc_attn_mla_sm90ws_tma, hc::kMwsThreads, (hc::mla_sm90_ws<true, true>))
HC_ATTN_MLA_TMA_ENTRY(hc_attn_mla_sm90ws_tma_ps, hc::kMwsThreads, (hc::mla_sm90_ws<true, true, true>))
