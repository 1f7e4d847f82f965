// MLA decode for Hopper (sm_90a): each KV tile is read once for a block of 64 query rows (the
// Sq x Hq rows of one sequence, 64 at a time), FlashMLA's structure without its warp
// specialisation:
//
//   CTA      256 threads = 2 warpgroups; owns (64-row block, sequence b, split of the keys).
//   smem     Q [64][576] (9 SW128 blocks of [64 rows][128 B]), two KV stages of the same
//            shape (64 tokens x 576, cp.async double-buffered), P [64][64] bf16 (one block).
//   S        warpgroup w computes S[:, 32w .. 32w + 32) = Q K^T with wgmma m64n32k16 (A = Q,
//            B = K, both K-major in shared memory), 36 steps of 16.
//   softmax  row maxima exchanged between the two warpgroups through shared memory; P goes
//            to shared memory as bf16; each warpgroup keeps its own partial row sums (same
//            running max), added at the end.
//   O += PV  warpgroup w owns output dims [256w, 256w + 256): wgmma m64n256k16 with A = P
//            (shared memory, K-major) and B = V = dims [0, 512) of the same KV tile
//            (MN-major, the transposed operand), 4 steps of 16 keys. 128 fp32 a thread.
//
// Split-KV partials (normalised O and lse in f32) are merged by hc_attn_combine_sm80.
// Shared memory: 1024 (alignment) + 3 x 73728 + 8192 + 1792 = 232192 bytes, all dynamic: fits
// the 227 KiB a block may take on the H100/H200, not on sm_80/sm_89 (the launcher's predicate).
#include "attention_common.cuh"
#include "../moe/sm90_common.cuh"

namespace hc {
namespace {

constexpr int kMlaThreads = 256;
constexpr uint32_t kBlk = 64 * 128;                 // one SW128 block: 64 rows x 128 bytes
constexpr uint32_t kTile = (kMlaQk / 64) * kBlk;    // 73728: Q or one KV stage
// 1024 (alignment) + Q + 2 KV stages + P + row_q, row_vis, red, krow (ops/ptx/attention_ops.cpp).
constexpr uint32_t kMlaShared = 1024 + 3 * kTile + 64 * 128 + 64 * (8 + 4 + 8 + 8);
static_assert(kMlaShared <= 232448, "more shared memory than a block may take on the H100");

__device__ __forceinline__ void wgmma_m64n32k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
      "%12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// Byte offset of 16-byte chunk c of row r in a [64 rows][576] SW128 tile.
__device__ __forceinline__ uint32_t mla_sw(int row, int chunk) {
  return (chunk >> 3) * kBlk + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// CHAINS: independent accumulator sets for S (1 or 2). OVERLAP: tile it + 1's S queued behind
// tile it's P V (see the loop).
template <int CHAINS, bool OVERLAP>
__device__ void mla_sm90(const unsigned short* q, const unsigned short* kv, unsigned short* out, float* lse,
                         const int* table, const int* seq_lens, float* part_o, float* part_lse, long long B,
                         long long Sq, long long Hq, long long NB, long long BS, long long MB, long long split_len,
                         float scale_log2) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sq = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t skv = sq + kTile, sp = sq + 3 * kTile;
  // After P: the rows' query indices and visible key counts, and the warpgroups' row maxima
  // (then sums). Everything is dynamic shared memory (kMlaShared bytes, no static part).
  unsigned char* small = smem_raw + (sp + 64 * 128 - smem_addr(smem_raw));
  long long* row_q = reinterpret_cast<long long*>(small);
  int* row_vis = reinterpret_cast<int*>(small + 64 * 8);
  float(*red)[64] = reinterpret_cast<float(*)[64]>(small + 64 * 12);
  // The cache rows of the keys of the next tiles (two buffers; -1 past the split): looked up
  // once a key, 64 lanes at a time, instead of once a 16-byte chunk on the copy's issue path.
  int(*krow)[64] = reinterpret_cast<int(*)[64]>(small + 64 * 20);
  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  Problem p;
  mla_rows<64>(p, row_q, row_vis, q, table, seq_lens, Sq, Hq, NB, BS, MB, split_len);
  for (int c = tid; c < 64 * kMlaCpr; c += kMlaThreads) {
    const int row = c / kMlaCpr, chunk = c % kMlaCpr;
    const bool ok = row_q[row] >= 0;
    cp_async16(sq + mla_sw(row, chunk), q + (ok ? row_q[row] * kMlaQk + chunk * 8 : 0), ok ? 16 : 0);
  }
  // Tile `tile`'s cache rows into krow[tile & 1] (threads 0..63; read after a barrier).
  auto find_rows = [&](int tile) {
    const int j = p.kbeg + tile * 64 + tid;
    if (tid < 64) krow[tile & 1][tid] = j < p.kend ? key_index(p, j) : -1;
  };
  // Tile `tile` into stage `dst`: 18 chunks a thread, rows from krow (zeros past the split).
  auto load_tile = [&](uint32_t dst, int tile) {
#pragma unroll
    for (int i = 0; i < 64 * kMlaCpr / kMlaThreads; ++i) {
      const int c = tid + i * kMlaThreads, row = c / kMlaCpr, chunk = c % kMlaCpr;
      const int kr = krow[tile & 1][row];
      cp_async16(dst + mla_sw(row, chunk), kv + (kr >= 0 ? (long long)kr * kMlaQk + chunk * 8 : 0), kr >= 0 ? 16 : 0);
    }
  };
  const int n_tiles = p.kend > p.kbeg ? (p.kend - p.kbeg + 63) / 64 : 0;
  find_rows(0);
  find_rows(1);
  __syncthreads();
  if (n_tiles > 0) load_tile(skv, 0);
  cp_async_commit();

  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int vis0 = min(row_vis[r0], p.kend), vis1 = min(row_vis[r1], p.kend);
  float o[32][4];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};
  float s[4][4] = {}, s2[CHAINS > 1 ? 4 : 1][4] = {};

  // S[:, 32 wg .. 32 wg + 32) = Q K^T for the tile in stage ck: 36 steps of 16 along the 576
  // dims, in CHAINS independent accumulator sets (step kk into set kk % CHAINS). Queued.
  auto issue_s = [&](uint32_t ck) {
    if (!OVERLAP) {  // (with P V in flight, any instruction on these registers serialises the wgmma)
      keep<16>(&s[0][0]);
      if (CHAINS > 1) keep<16>(&s2[0][0]);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kMlaQk / 16; ++kk) {
      const uint32_t off = (kk >> 2) * kBlk + (kk & 3) * 32;
      wgmma_m64n32k16_ss(CHAINS > 1 && (kk & 1) ? &s2[0][0] : &s[0][0], make_desc(sq + off, 16, 1024),
                         make_desc(ck + off + wg * 32 * 128, 16, 1024), kk >= CHAINS ? 1 : 0);
    }
    wgmma_commit();
  };
  auto s_done = [&]() {  // after the wait for issue_s's group
    keep<16>(&s[0][0]);
    if (CHAINS > 1) {
      keep<16>(&s2[0][0]);
#pragma unroll
      for (int i = 0; i < 16; ++i) (&s[0][0])[i] += (&s2[0][0])[i];
    }
  };
  // Online softmax of tile `it` over its 64 keys (this warpgroup's 32, the other's maxima from
  // `red`); P to shared memory; O rescaled. Ends with a barrier (P complete for both).
  auto softmax_to_p = [&](int it) {
    float mx0, mx1, base0, base1, a0, a1;
    mask_max<4>(s, p.kbeg + it * 64 + wg * 32, vis0, vis1, scale_log2, &mx0, &mx1);
    if (t == 0) red[wg][r0] = mx0, red[wg][r1] = mx1;
    __syncthreads();
    advance_max(st, fmaxf(red[0][r0], red[1][r0]), fmaxf(red[0][r1], red[1][r1]), &base0, &base1, &a0, &a1);
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const float p0 = exp2f(s[n][0] - base0), p1 = exp2f(s[n][1] - base0);
      const float p2 = exp2f(s[n][2] - base1), p3 = exp2f(s[n][3] - base1);
      sum0 += p0 + p1;
      sum1 += p2 + p3;
      const int chunk = wg * 4 + n;  // keys 8 chunk .. 8 chunk + 7 of the tile
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sp + r0 * 128 + ((chunk ^ (r0 & 7)) << 4) + 4 * t),
                   "r"(pack_bf16x2(p0, p1)) : "memory");
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sp + r1 * 128 + ((chunk ^ (r1 & 7)) << 4) + 4 * t),
                   "r"(pack_bf16x2(p2, p3)) : "memory");
    }
    st.l0 = st.l0 * a0 + sum0;
    st.l1 = st.l1 * a1 + sum1;
    scale_rows<32>(o, a0, a1);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // P's stores -> wgmma reads
    __syncthreads();
  };
  // O[:, 256 wg .. 256 wg + 256) += P V: 4 steps of 16 keys; V = dims [256 wg, +256) of stage ck.
  auto issue_pv = [&](uint32_t ck) {
    keep<128>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64n256k16(&o[0][0], make_desc(sp + kk * 32, 16, 1024),
                       make_desc(ck + wg * 4 * kBlk + kk * 2048, kBlk, 1024), 1);
    wgmma_commit();
  };
  auto landed = [&]() {  // after the cp.async wait: every thread's copies visible to wgmma
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
  };

  if (!OVERLAP) {
    for (int it = 0; it < n_tiles; ++it) {
      if (it + 1 < n_tiles) load_tile(skv + ((it + 1) & 1) * kTile, it + 1);
      cp_async_commit();   // one group a tile, empty after the last
      cp_async_wait<1>();  // tile `it` has landed
      landed();
      find_rows(it + 2);  // krow[it & 1] was last read for tile `it`, before this barrier
      const uint32_t ck = skv + (it & 1) * kTile;
      issue_s(ck);
      wgmma_wait<0>();
      s_done();
      softmax_to_p(it);
      issue_pv(ck);
      wgmma_wait<0>();
      keep<128>(&o[0][0]);
      __syncthreads();  // the next iteration's load overwrites this stage, P and `red`
    }
  } else {
    // Tile it + 1 is resident while tile it's P V runs: its S is queued behind it, so the
    // tensor cores go from one product to the next without the barrier and softmax between.
    // Tile it + 2's copy starts once both warpgroups' P V of tile it is done (its stage).
    if (n_tiles > 1) load_tile(skv + kTile, 1);
    cp_async_commit();
    cp_async_wait<1>();  // Q and tile 0
    landed();
    if (n_tiles > 0) {
      issue_s(skv);
      wgmma_wait<0>();
      s_done();
    }
    for (int it = 0; it < n_tiles; ++it) {
      const uint32_t ck = skv + (it & 1) * kTile;
      find_rows(it + 2);  // krow[it & 1]: tile it's copy was issued before a barrier
      softmax_to_p(it);
      issue_pv(ck);
      if (it + 1 < n_tiles) {
        cp_async_wait<0>();  // tile it + 1 (the one copy in flight)
        landed();
        issue_s(skv + ((it + 1) & 1) * kTile);
        wgmma_wait<1>();  // this warpgroup's P V of tile it (o is fenced after the next wait:
                          // touching it with S in flight would serialise the wgmma)
      } else {
        wgmma_wait<0>();
      }
      __syncthreads();  // both warpgroups' P V of tile it: its stage and P are free
      if (it + 2 < n_tiles) load_tile(ck, it + 2);
      cp_async_commit();
      wgmma_wait<0>();
      keep<128>(&o[0][0]);
      if (it + 1 < n_tiles) s_done();
    }
  }
  cp_async_wait<0>();  // no copy outlives the CTA (n_tiles = 0 leaves Q's in flight)

  // Row sums: the quad's, then the two warpgroups'; the rows written.
  mla_store_2wg(o, st, red, row_q, wg, [] { __syncthreads(); }, out, lse, part_o, part_lse, B * Sq * Hq);
}

}  // namespace
}  // namespace hc

// Parameters (8 bytes each; ops/ptx/attention_ops.cpp mirrors them, as hc_attn_mla_sm80's):
//   q kv out lse block_table seq_lens part_o part_lse B Sq Hq NB BS MB split_len scale_log2.
// Grid: (ceil(Sq * Hq / 64), B, splits); 256 threads; kMlaShared = 232192 bytes of dynamic shared memory.
#define HC_MLA_SM90_FN(CHAINS, OVERLAP) hc::mla_sm90<CHAINS, OVERLAP>
HC_ATTN_MLA_ENTRY(hc_attn_mla_sm90, hc::kMlaThreads, HC_MLA_SM90_FN(1, false))
// The same with S in two independent accumulator chains (36 dependent wgmma m64n32k16 in one).
HC_ATTN_MLA_ENTRY(hc_attn_mla_sm90_c2, hc::kMlaThreads, HC_MLA_SM90_FN(2, false))
// Two chains, and tile it + 1's S queued behind tile it's P V.
HC_ATTN_MLA_ENTRY(hc_attn_mla_sm90_ov, hc::kMlaThreads, HC_MLA_SM90_FN(2, true))
