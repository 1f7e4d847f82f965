// MLA decode for Hopper (sm_90a) by pairs of key tiles ("sm90.pair"): the schedule FlashMLA's
// authors describe for their 2025-04 kernel ("seesaw"), written here from that description.
// attention_mla_sm90_ws.cu passes the running maxima from tile to tile, and between two hand-offs
// one warpgroup runs the other's P V, its own S and its softmax: the chain of maxima holds ~40%
// of a warpgroup's time (docs/PERFORMANCE.md, 2026-12-01). Here both warpgroups start the S of
// a pair of tiles at once; only the two softmaxes chain.
//
//   CTA      384 threads: warpgroup 0 the producer, 1 and 2 the consumers (setmaxnreg 40 / 232),
//            as sm90.ws.tma; owns (64-row block, sequence b, split of the keys).
//   smem     Q [64][576] and two slots of the same shape (9 SW128 blocks of [64 rows][128 B]),
//            P_a's buffer (one block), row data, 28 mbarriers: 232416 bytes. Pair j holds tile 2j
//            in slot 0 and 2j + 1 in slot 1. Consumer w (0, 1) owns slot w's tile (its S and softmax) and the output dims
//            [256 w, +256) of every tile (O_w, 64 x 256 f32 in registers).
//   groups   each slot is copied in two groups, each with its full / empty mbarrier: "own" =
//            the V half its owner reads (blocks 4w .. 4w + 3), "other" = the V half the other
//            warpgroup reads; the rope block 8 goes with dims 0..255 (slot 0: its own group,
//            free once S_a is done; slot 1: its other group, where P_b waits for consumer 0's
//            P_b V_b[0]). A group is refilled as soon as its last reader is done; S reads first
//            the group that is refilled first. PER_BLOCK ("sm90.pair.blk"): each block of a group
//            completes its own full barrier, and S takes the blocks as they land.
//   producer 128 threads copy Q (cp.async, the rows gathered); thread 0 then issues the pairs'
//            groups by TMA (9 boxes of 64 columns x 64 rows a tile), each when its "empty"
//            barrier has completed, in the order the consumers free them.
//   pair j   with a = 2j (consumer 0) and b = 2j + 1 (consumer 1), M_t the reference maxima after
//            tile t (advance_max<true>: they move only by more than kMaxSlack):
//            [0] S_a = Q K_a^T;  [1] S_b = Q K_b^T  (both at once)
//            [0] M_a from M_(a-1) and S_a; publish M_a; P_a = exp2(S_a - M_a) to shared memory;
//                O_0 = O_0 * 2^(M_(a-1) - M_a) + P_a V_a[0]
//            [1] waits for M_a; M_b from M_a and S_b; publish M_b; P_b to shared memory;
//                O_1 = O_1 * 2^(M_(a-1) - M_a) + P_a V_a[1]  (P_a from shared memory: slot 0 is
//                free for the next pair's copy while P_b V_b[1] runs), O_1 = O_1 * 2^(M_a - M_b)
//                (rarely other than 1: only then does it wait for the first product) + P_b V_b[1]
//            [0] waits for M_b; O_0 = O_0 * 2^(M_a - M_b) + P_b V_b[0]  (P_b from shared memory)
//            Both end the pair on M_b, where consumer 0's next pair starts. Each warpgroup's
//            registers are touched only while none of its wgmma is in flight (ptxas otherwise
//            serialises every wgmma, C7514); the overlap is between the two warpgroups.
//   order    every hand-off is an mbarrier at which the publishing threads arrive after their
//            own accesses: maxpub(w) (smax[w], 128 arrivals), ppub(w) (P_a in its buffer, P_b in
//            slot 1's block 8; 128 arrivals, after fence.proxy.async), the slots' empty barriers
//            (a group read only by wgmma: lane 0 of each reading warp after its wait; slot 1's
//            "other" group also all 128 threads of consumer 1 after their P_b stores; P_a's
//            buffer is rewritten only after slot 0 was refilled, which waited for P_a V_a[1]). Each barrier completes once a pair, and no
//            warpgroup gets a phase ahead of its waiter: consumer 0 publishes M_a of pair j + 1
//            only after it waited for M_b of pair j, which consumer 1 published after reading
//            M_a of pair j (likewise for P and the slots), so parity waits are exact.
//   end      an odd last tile is consumer 0's alone (consumer 1 adds its P V on O_1); the row
//            sums (each warpgroup's own tiles, both on the final maxima) are added through
//            shared memory after the mbarrier `sums` (256 consumer arrivals).
//
// Semantics are hc_attn_mla_sm90's (attention_mla_sm90.cu): rows that see no key write zeros
// and lse = -inf; split-KV partials (normalised O and lse, f32) go to hc_attn_combine_sm80. The
// rows of the last tile past the split's keys are cache rows (TMA copies whole tiles): the owner
// zeroes their V dims before any P V reads them (their P is 0, and 0 * NaN is not).
#include "attention_common.cuh"
#include "../moe/sm90_common.cuh"

namespace hc {
namespace {

constexpr int kMpThreads = 384;
constexpr uint32_t kMpTile = (kMlaQk / 64) * kMlaBlk;  // 73728: Q or one slot
// After the slots: row_q (8 B a row), row_vis (4), smax[2] (4 each), red[2] (4 each), then 14
// mbarriers.
constexpr uint32_t kMpSmall = 64 * (8 + 4 + 8 + 8) + 28 * 8;
// Q, the two slots, P_a's buffer (one SW128 block), the row data: ops/ptx/attention_ops.cpp's
// kMlaSm90PairShared.
constexpr uint32_t kMpShared = 1024 + 3 * kMpTile + kMlaBlk + kMpSmall;
static_assert(kMpShared == 232416 && kMpShared <= 232448, "more shared memory than a block may take on the H100");

// The blocks of slot s's group g (0: own, the V half of s's owner; 1: other, the other half):
// the V half, and block 8 with the half of dims 0..255 (slot 0: consumer 0's own group, free
// once S_a is done, P_a having a buffer of its own; slot 1: the other group, where P_b lives
// until consumer 0's P_b V_b[0]).
__device__ __forceinline__ int group_blocks(int s, int g) { return (s ^ g) == 0 ? 5 : 4; }
__device__ __forceinline__ int group_block(int s, int g, int i) { return i == 4 ? 8 : 4 * (s ^ g) + i; }

template <bool PER_BLOCK>
__device__ void mla_sm90_pair(const TensorMap* tkv, const unsigned short* q, const unsigned short* kv,
                              unsigned short* out, float* lse, const int* table, const int* seq_lens, float* part_o,
                              float* part_lse, long long B, long long Sq, long long Hq, long long NB, long long BS,
                              long long MB, long long split_len, float scale_log2) {
  (void)kv;  // read through the tensor map
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sq = (smem_addr(smem_raw) + 1023) & ~1023u;
  const auto slot = [&](int s) { return sq + (1 + s) * kMpTile; };
  const uint32_t pa_buf = sq + 3 * kMpTile;  // P_a (consumer 0's P); P_b lives in slot 1's block 8
  const auto p_of = [&](int v) { return v ? slot(1) + 8 * kMlaBlk : pa_buf; };
  unsigned char* small = smem_raw + (pa_buf + kMlaBlk - smem_addr(smem_raw));
  long long* row_q = reinterpret_cast<long long*>(small);
  int* row_vis = reinterpret_cast<int*>(small + 64 * 8);
  float(*smax)[64] = reinterpret_cast<float(*)[64]>(small + 64 * 12);  // M of a warpgroup's last tile
  float(*red)[64] = reinterpret_cast<float(*)[64]>(small + 64 * 20);   // row sums at the end
  const uint32_t bars = pa_buf + kMlaBlk + 64 * 28;
  const uint32_t q_full = bars;
  // full(s, g, blk): block blk of slot s has landed (PER_BLOCK), or all of group g.
  const auto full = [&](int s, int g, int blk) { return bars + 8 * (1 + 9 * s + (PER_BLOCK ? blk : g)); };
  const auto empty = [&](int s, int g) { return bars + 8 * (19 + 2 * s + g); };
  const auto maxpub = [&](int v) { return bars + 8 * (23 + v); };
  const auto ppub = [&](int v) { return bars + 8 * (25 + v); };
  const uint32_t sums = bars + 8 * 27;
  if (threadIdx.x == 0) {
    mbar_init(q_full, 128);
    for (int s = 0; s < 2; ++s) {
      for (int b = 0; b < (PER_BLOCK ? 9 : 2); ++b) mbar_init(bars + 8 * (1 + 9 * s + b), 1);  // full(s, ...)
      for (int g = 0; g < 2; ++g) mbar_init(empty(s, g), s && g ? 128 + 4 : 4);
    }
    for (int v = 0; v < 2; ++v) mbar_init(maxpub(v), 128), mbar_init(ppub(v), 128);
    mbar_init(sums, 256);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  Problem p;
  mla_rows<64>(p, row_q, row_vis, q, table, seq_lens, Sq, Hq, NB, BS, MB, split_len);  // ends with a barrier
  const int n = p.kend > p.kbeg ? (p.kend - p.kbeg + 63) / 64 : 0;
  const int pairs = (n + 1) / 2;

  if (threadIdx.x < 128) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    const int row0 = (threadIdx.x >> 5) * 16 + ((threadIdx.x & 31) >> 3), c8 = threadIdx.x & 7;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long qr = row_q[row0 + 4 * i];
      mla_copy_row(sq, qr >= 0 ? q + qr * kMlaQk : nullptr, row0 + 4 * i, c8, q);
    }
    cp_async_arrive(q_full);
    if (threadIdx.x == 0) {
      uint64_t policy;  // as sm90.ws.tma (measured there on the H200)
      asm volatile("createpolicy.fractional.L2::evict_unchanged.b64 %0, 1.0;\n" : "=l"(policy));
      for (int j = 0; j < pairs; ++j) {
        const int tiles = min(2, n - 2 * j);
        int row[2];
        for (int s = 0; s < tiles; ++s) row[s] = key_index(p, p.kbeg + (2 * j + s) * 64);
        // In the order the consumers free the groups of pair j - 1: slot 0's own (consumer 0's
        // P_a V_a[0]), slot 0's other (consumer 1's P_a V_a[1]), slot 1's other (consumer 0's
        // P_b V_b[0]), slot 1's own (consumer 1's P_b V_b[1], its last). Blocking waits: a thread
        // polling the barriers would take issue slots from the consumer warps of its SM quarter.
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int s = k >> 1, g = (k & 1) ^ s;
          if (s >= tiles) break;
          if (j > 0) mbar_wait(empty(s, g), (j - 1) & 1);
          if (!PER_BLOCK) mbar_expect_tx(full(s, g, 0), group_blocks(s, g) * kMlaBlk);
          for (int i = 0; i < group_blocks(s, g); ++i) {
            const int blk = group_block(s, g, i);
            if (PER_BLOCK) mbar_expect_tx(full(s, g, blk), kMlaBlk);
            tma_2d(slot(s) + blk * kMlaBlk, tkv, blk * 64, row[s], full(s, g, blk), policy);
          }
        }
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int w = __shfl_sync(0xffffffffu, (int)(threadIdx.x >> 7) - 1, 0);  // consumer 0 or 1 (warp-uniform)
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int vis0 = min(row_vis[r0], p.kend), vis1 = min(row_vis[r1], p.kend);
  const uint32_t mine = slot(w), theirs = slot(1 - w);
  float o[32][4];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float s[8][4] = {};
  uint32_t pf[4][4];
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};  // m: the maxima O and l are scaled to

  // Moves the reference to the other warpgroup's published maxima (phase `par` of maxpub(v)):
  // returns the factors O must be scaled by; l is scaled here.
  auto take_max = [&](int v, uint32_t par, float* f0, float* f1) {
    mbar_wait(maxpub(v), par);
    const float m0 = smax[v][r0], m1 = smax[v][r1];
    *f0 = m0 == st.m0 ? 1.f : exp2f(st.m0 - (m0 == neg_inf() ? 0.f : m0));
    *f1 = m1 == st.m1 ? 1.f : exp2f(st.m1 - (m1 == neg_inf() ? 0.f : m1));
    st.m0 = m0, st.m1 = m1, st.l0 *= *f0, st.l1 *= *f1;
  };
  // Lane 0 of each warp, after its wgmma reading the group completed (the other lanes' reads
  // are the same instruction's).
  const auto release = [&](int sl, int gr) {
    if (lane == 0) mbar_arrive(empty(sl, gr));
  };
  // P (pf) into p_of(w) (P_a's buffer, or slot 1's block 8 for P_b), swizzled as wgmma's A
  // operand (keys 8 nn .. 8 nn + 7 of rows r0, r1); then published.
  auto publish_p = [&]() {
    const uint32_t pb = p_of(w);
#pragma unroll
    for (int nn = 0; nn < 8; ++nn) {
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(pb + r0 * 128 + ((nn ^ (r0 & 7)) << 4) + 4 * t4),
                   "r"(pf[nn >> 1][(nn & 1) * 2]) : "memory");
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(pb + r1 * 128 + ((nn ^ (r1 & 7)) << 4) + 4 * t4),
                   "r"(pf[nn >> 1][(nn & 1) * 2 + 1]) : "memory");
    }
    fence_async_smem();  // the stores -> the other warpgroup's wgmma reads, and the next TMA copy
    mbar_arrive(ppub(w));
    if (w == 1) mbar_arrive(empty(1, 1));  // P_b's stores before the next copy into block 8
  };
  // O += P V over this warpgroup's dims [256 w, +256) of slot `sl`'s tile, P from registers
  // (pf) or from shared memory (p_of); one commit group.
  auto queue_pv = [&](uint32_t sl, bool from_regs) {
    keep<128>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t vd = make_desc(sl + w * 4 * kMlaBlk + kk * 2048, kMlaBlk, 1024);
      if (from_regs) wgmma_m64n256k16_rs(&o[0][0], pf[kk], vd);
      else wgmma_m64n256k16(&o[0][0], make_desc(p_of(sl == slot(1)) + kk * 32, 16, 1024), vd, 1);
    }
    wgmma_commit();
  };
  // S = Q K^T over the blocks of slot w's group `gr` (4 steps of 16 dims a block), each block as
  // soon as it has landed (PER_BLOCK) or the group.
  auto queue_s = [&](int gr, bool first, uint32_t par) {
    if (!PER_BLOCK) mbar_wait(full(w, gr, 0), par);
#pragma unroll
    for (int i = 0; i < 5; ++i) {
      if (i == group_blocks(w, gr)) break;
      const int blk = group_block(w, gr, i);
      if (PER_BLOCK) mbar_wait(full(w, gr, blk), par);
      const uint32_t off = blk * kMlaBlk;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n64k16_ss(&s[0][0], make_desc(sq + off + kk * 32, 16, 1024), make_desc(mine + off + kk * 32, 16, 1024),
                           first && i == 0 && kk == 0 ? 0 : 1);
    }
    wgmma_commit();
  };

  if (n > 0) mbar_wait(q_full, 0);
  for (int j = 0; j < pairs; ++j) {
    const uint32_t par = j & 1;
    const bool has_b = 2 * j + 1 < n;
    if (w == 1 && !has_b) {  // an odd last tile: consumer 0's; O_1 moves to M_a and takes P_a V_a[1]
      float f0, f1;
      take_max(0, par, &f0, &f1);
      if (any_moved(f0, f1)) scale_rows<32>(o, f0, f1);
      mbar_wait(ppub(0), par);
      queue_pv(theirs, false);
      break;
    }
    const int t = 2 * j + w;
    // This warpgroup's S, the group that lands first first: consumer 0's own group was freed in
    // the middle of the last pair, consumer 1's "other" group before its own (own first: 275 us
    // against 264 at Sq 1 on the H200).
    keep<32>(&s[0][0]);
    wgmma_fence();
    queue_s(w, true, par);
    queue_s(1 - w, false, par);
    wgmma_wait<0>();
    keep<32>(&s[0][0]);
    keep<128>(&o[0][0]);
    const int valid = p.kend - (p.kbeg + t * 64);
    if (valid < 64) {  // V rows past the split's keys: zeros, before any P V reads them
      const uint4 z = make_uint4(0, 0, 0, 0);
      for (int c = (int)(threadIdx.x & 127) + valid * 64; c < 64 * 64; c += 128) {
        const int row = c >> 6, blk = (c >> 3) & 7, ch = c & 7;
        *reinterpret_cast<uint4*>(smem_raw + (mine + blk * kMlaBlk + row * 128 + ((ch ^ (row & 7)) << 4) -
                                              smem_addr(smem_raw))) = z;
      }
      fence_async_smem();
      asm volatile("bar.sync %0, 128;\n" ::"r"(6 + w) : "memory");  // the warpgroup's zeros before its wgmma
    }
    // Softmax of tile t from M_(t-1): consumer 0 holds M_(a-1) (it moved to M_b of the last
    // pair); consumer 1 first moves to M_a (factors fa for O).
    float mx0, mx1, base0, base1, a0, a1, fa0 = 1.f, fa1 = 1.f;
    mask_max<8>(s, p.kbeg + t * 64, vis0, vis1, scale_log2, &mx0, &mx1);
    if (w == 1) take_max(0, par, &fa0, &fa1);
    advance_max<true>(st, mx0, mx1, &base0, &base1, &a0, &a1);
    if (t4 == 0) smax[w][r0] = st.m0, smax[w][r1] = st.m1;
    mbar_arrive(maxpub(w));
    // (exp_to_p, P = exp2(S - M_t) and the row sums, is called in each consumer's branch below:
    // ptxas follows both paths through code they share, and consumer 0 reads O there while
    // consumer 1 has a product on O in flight.)
    if (w == 0) {
      exp_to_p<8>(s, pf, st, base0, base1, a0, a1);
      publish_p();  // P_a at M_a, for consumer 1's P_a V_a[1] (on the chain: it frees slot 0)
      if (any_moved(a0, a1)) scale_rows<32>(o, a0, a1);
      queue_pv(mine, true);  // O_0 = O_0 2^(M_(a-1) - M_a) + P_a V_a[0]
      float fb0 = 1.f, fb1 = 1.f;
      if (has_b) take_max(1, par, &fb0, &fb1);
      wgmma_wait<0>();
      keep<128>(&o[0][0]);
      release(0, 0);
      if (has_b) {
        if (any_moved(fb0, fb1)) scale_rows<32>(o, fb0, fb1);
        mbar_wait(ppub(1), par);
        queue_pv(theirs, false);  // O_0 = O_0 2^(M_a - M_b) + P_b V_b[0]
        // Released at once: consumer 1's next S waits for this group's copy (the wait
        // accounting: 32% of its loop when the release came after consumer 0's next S was queued).
        wgmma_wait<0>();
        keep<128>(&o[0][0]);
        release(1, 1);
      }
    } else {  // P_a V_a[1] at once (it frees slot 0 for the next pair), the exponentials under it
      if (any_moved(fa0, fa1)) scale_rows<32>(o, fa0, fa1);
      mbar_wait(ppub(0), par);
      queue_pv(theirs, false);  // O_1 = O_1 2^(M_(a-1) - M_a) + P_a V_a[1]
      exp_to_p<8>(s, pf, st, base0, base1, a0, a1);
      publish_p();  // P_b at M_b, for consumer 0's P_b V_b[0]
      if (!wg_all(a0 == 1.f && a1 == 1.f, 4)) {  // rare: a row's reference moved at b
        wgmma_wait<0>();
        keep<128>(&o[0][0]);
        scale_rows<32>(o, a0, a1);
      }
      queue_pv(mine, true);  // O_1 = O_1 2^(M_a - M_b) + P_b V_b[1]
      wgmma_wait<1>();
      release(0, 1);  // slot 0 refills while P_b V_b[1] runs
      wgmma_wait<0>();
      keep<128>(&o[0][0]);
      release(1, 0);
    }
  }
  wgmma_wait<0>();
  keep<128>(&o[0][0]);

  // Row sums: the quad's, then the two warpgroups' (both on the final maxima).
  mla_store_2wg(o, st, red, row_q, w, [&] { mbar_arrive(sums), mbar_wait(sums, 0); }, out, lse, part_o, part_lse,
                B * Sq * Hq);
}

}  // namespace
}  // namespace hc

// The tensor map (64 bytes, __grid_constant__), then hc_attn_mla_sm90's parameters (8 bytes
// each; ops/ptx/attention_ops.cpp's MlaArgs): q kv out lse block_table seq_lens part_o part_lse
// B Sq Hq NB BS MB split_len scale_log2. Grid: (ceil(Sq * Hq / 64), B, splits); 384 threads;
// kMpShared = 232416 bytes of dynamic shared memory. BS a multiple of 64 (a tile in one block).
HC_ATTN_MLA_TMA_ENTRY(hc_attn_mla_sm90_pair, hc::kMpThreads, hc::mla_sm90_pair<false>)
// As hc_attn_mla_sm90_pair, each 64-column block's copy with a barrier of its own: S takes the
// blocks as they land.
HC_ATTN_MLA_TMA_ENTRY(hc_attn_mla_sm90_pair_blk, hc::kMpThreads, hc::mla_sm90_pair<true>)
