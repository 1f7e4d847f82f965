// Attention prefill for Hopper (sm_90a), warp-specialised in the FlashAttention-3 manner:
//
//   warpgroup 0  the producer: after setmaxnreg.dec one thread issues the TMA copies: the CTA's
//                128 query rows once, then each key tile's K and V (KN keys) into a ring of
//                stages, with "full" and "empty" mbarriers for K and for V apart, so that a
//                stage's K is refilled as soon as its S GEMM is done (the first version's
//                one barrier a stage held K until the P V GEMM a tile later);
//   warpgroups 1, 2  the consumers (setmaxnreg.inc 240 or 232), each owning 64 of the 128 query rows:
//                S = Q K^T as wgmma m64n128k16 with both operands in shared memory (K-major,
//                128-byte swizzle, the layout TMA writes), the online softmax in registers
//                (exp2, the scale folded into log2 e), P converted to bf16 in registers and
//                fed as wgmma's register A operand against V in shared memory, read MN-major
//                through the descriptor's transpose bit (no transposing copy).
//
// Scheduling: the two consumers take turns at the tensor cores through two named barriers
// (ping-pong): a consumer issues its S GEMM of tile j and its P V GEMM of tile j - 1, lets the
// other go, and does tile j's softmax while the other's GEMMs run. Within a consumer the
// softmax of tile j overlaps its own P V GEMM of tile j - 1 (the O rescale and the bf16 P
// wait for that GEMM). A stage's K is released (one arrival per consumer warp) once the S GEMM
// that read it has completed, its V once the P V GEMM has.
//
// Grids: one CTA a tile (the kernels named ..._sm90ws), or persistent (..._sm90wsp: one CTA an
// SM walks every gridDim-th tile; its producer loads the next tile's Q once the last tile's S
// GEMMs are done, and K and V as the ring's stages free, while the consumers finish the last
// tile's P V GEMM and store it). The launcher (ops/ptx/attention_prefill_ws.cpp) chooses.
//
// Semantics are the contract's and the other prefill kernels' (attention_sm90.cu): packed
// variable-length sequences (cu_seqlens, clamped to [0, T] and made non-decreasing before
// use), GQA (query head h reads KV head h / (Hq / Hkv)), causal with the bottom-right
// alignment, rows that see no key write zeros and lse = -inf. Tensor maps are 3-d over
// [T, H, D]: a 128-row box of one head may run past its sequence (into the next one, or past T
// where TMA fills zeros); keys past a row's visible count are masked to -inf before the max,
// and rows past the sequence are never stored.
#include "attention_common.cuh"
#include "../moe/sm90_common.cuh"

namespace hc {
namespace {

constexpr int kWsRows = 128, kWsThreads = 384;

// Shared memory: the Q tile (D / 64 blocks of [128 rows][128 bytes]), then kStages K tiles,
// then kStages V tiles (D / 64 blocks of [KN keys][128 bytes] each), 1024-byte aligned as the
// 128-byte swizzle needs. KN: keys a tile (128; 176 for the d128 build that FlashAttention-3
// uses without a causal mask).
template <int D, int KN>
struct WsCfg {
  static constexpr int kStages = D == 64 ? 4 : 2;
  static constexpr uint32_t kQBlock = kWsRows * 128, kKvBlock = KN * 128;
  static constexpr uint32_t kQTile = kWsRows * D * 2, kKvTile = KN * D * 2;
  static constexpr uint32_t kShared = kQTile + 2 * kStages * kKvTile + 1024;  // the launcher's ws_shared
  static_assert(kShared + 2048 <= 227 * 1024, "more shared memory than an sm_90 block has");
  static_assert(KN % 16 == 0 && KN <= 256, "a key tile is a wgmma N and a TMA box");
};

__device__ __forceinline__ void wgmma_m64n128k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_m64n176k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}, %88, %89, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_m64n64k16_rs_acc(float* d, const uint32_t* a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
__device__ __forceinline__ void wgmma_m64n128k16_rs_acc(float* d, const uint32_t* a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// Named barriers 1 and 2: consumer c waits on 1 + c for its turn at the tensor cores and
// arrives on the other's when it has issued its GEMMs (256 threads: one consumer's syncs and
// the other's arrivals).
__device__ __forceinline__ void turn_wait(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void turn_pass(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// Keeps the compiler from moving accumulator / fragment accesses across wgmma boundaries.
template <int N>
__device__ __forceinline__ void keep_f32(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void keep_u32(uint32_t* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ long long clampll(long long v, long long lo, long long hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// Query tiles: a head's 128-row tiles numbered as find_seq_tile's (attention_common.cuh: a
// sequence by a binary search, numbers between sequences empty; causal: a sequence's last tile,
// which sees the most keys, first). Offsets are clamped to [0, T], so a bad cu_seqlens never
// addresses outside q, k, v, out or lse.
struct WsTile {
  int q0, q_len;  // the sequence's first row in q / out and its number of queries
  int k0, k_len;  // ... in k / v, and its number of keys
  int m0;         // the tile's first query within the sequence
  int kend;       // keys the tile reads: [0, kend)
};

// Tile number `tile` of a head (B, Tq and Tk fit in 32 bits: the launcher checks); false: the
// number is empty.
__device__ __forceinline__ bool ws_tile(WsTile& t, int tile, const int* cu_q, const int* cu_k, int B, int Tq, int Tk,
                                        bool causal) {
  SeqTile st;
  if (!find_seq_tile<kWsRows>(st, cu_q, B, Tq, tile)) return false;
  const SeqRange keys = seq_range(cu_k, st.b, Tk);
  t.q0 = st.q0;
  t.q_len = st.q_len;
  t.k0 = keys.start;
  t.k_len = keys.len;
  const int tiles = (t.q_len + kWsRows - 1) / kWsRows;
  t.m0 = (causal ? tiles - 1 - st.tile : st.tile) * kWsRows;
  const int last = min(t.m0 + kWsRows, t.q_len) - 1;
  t.kend = causal ? (int)clampll(last + t.k_len - t.q_len + 1, 0, t.k_len) : t.k_len;
  return true;
}

// Keys a query row sees: query i of a sequence of q_len queries and k_len keys.
__device__ __forceinline__ int ws_visible(const WsTile& t, int i, bool causal) {
  if (i >= t.q_len) return 0;
  return causal ? (int)clampll(i + t.k_len - t.q_len + 1, 0, t.k_len) : t.k_len;
}

// One key tile's online-softmax step on the thread's two rows (g and g + 8 of its warp's 16)
// of S (m64n128: s[n] = keys 8n .. 8n + 7 of the tile). MASK: keys at or past a row's visible
// count (vis0, vis1; k0 = the tile's first key) become -inf. The max is taken on the raw
// scores (c = scale * log2 e > 0), p = 2^(s c - m) by one FFMA and ex2 each, written over s;
// a0, a1 = the factors the rows' O must be scaled by. A row that has seen no key keeps m =
// -inf: its p are 0 and so is its factor.
template <bool MASK, bool SLACK, int KN>
__device__ __forceinline__ void ws_softmax(float (&s)[KN / 8][4], RowState& st, int k0, int vis0, int vis1,
                                           float c, float& a0, float& a1) {
  const int t = threadIdx.x & 3;
  float mx0 = neg_inf(), mx1 = neg_inf();
#pragma unroll
  for (int n = 0; n < KN / 8; ++n) {
    if (MASK) {
      const int j = k0 + n * 8 + 2 * t;
      if (j >= vis0) s[n][0] = neg_inf();
      if (j + 1 >= vis0) s[n][1] = neg_inf();
      if (j >= vis1) s[n][2] = neg_inf();
      if (j + 1 >= vis1) s[n][3] = neg_inf();
    }
    mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
    mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int x = 1; x < 4; x <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
  }
  // A row's reference max moves only when the tile's max passes it by more than kMaxSlack (log2
  // units): every p = 2^(s c - m) stays below 2^kMaxSlack (exact in f32, and as the bf16 P), the
  // lse is m + log2 l whatever m is, and most tiles leave every row's m as it was, so that the
  // warp skips the O rescale (a0 = a1 = 1). FlashAttention-4 does the same.
  // SLACK = false (D = 64, where the skipped rescale measured 2% slower): m is the running max.
  const float t0 = mx0 * c, t1 = mx1 * c;
  const float mn0 = next_max<SLACK>(st.m0, t0), mn1 = next_max<SLACK>(st.m1, t1);
  const float base0 = mn0 == neg_inf() ? 0.f : mn0, base1 = mn1 == neg_inf() ? 0.f : mn1;
  if constexpr (SLACK) {
    a0 = mn0 == st.m0 ? 1.f : ex2(st.m0 - base0);
    a1 = mn1 == st.m1 ? 1.f : ex2(st.m1 - base1);
  } else {
    a0 = ex2(st.m0 - base0);
    a1 = ex2(st.m1 - base1);
  }
  st.m0 = mn0;
  st.m1 = mn1;
  float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
  for (int n = 0; n < KN / 8; ++n) {
    s[n][0] = ex2(fmaf(s[n][0], c, -base0));
    s[n][1] = ex2(fmaf(s[n][1], c, -base0));
    s[n][2] = ex2(fmaf(s[n][2], c, -base1));
    s[n][3] = ex2(fmaf(s[n][3], c, -base1));
    sum0 += s[n][0] + s[n][1];
    sum1 += s[n][2] + s[n][3];
  }
  st.l0 = st.l0 * a0 + sum0;
  st.l1 = st.l1 * a1 + sum1;
}

template <bool SLACK, int KN>
__device__ __forceinline__ void ws_softmax_step(float (&s)[KN / 8][4], RowState& st, int k0, int vis0, int vis1,
                                                float c, float& a0, float& a1) {
  if (__all_sync(0xffffffffu, k0 + KN <= min(vis0, vis1))) ws_softmax<false, SLACK, KN>(s, st, k0, vis0, vis1, c, a0, a1);
  else ws_softmax<true, SLACK, KN>(s, st, k0, vis0, vis1, c, a0, a1);
}

// P (in s, f32) as bf16 wgmma A fragments: pf[kk] = keys 16 kk .. 16 kk + 15.
template <int KN>
__device__ __forceinline__ void ws_pack(const float (&s)[KN / 8][4], uint32_t (&pf)[KN / 16][4]) {
#pragma unroll
  for (int n = 0; n < KN / 8; ++n) {
    pf[n >> 1][(n & 1) * 2] = pack_bf16x2(s[n][0], s[n][1]);
    pf[n >> 1][(n & 1) * 2 + 1] = pack_bf16x2(s[n][2], s[n][3]);
  }
}

// S = Q K^T for the consumer's 64 rows (qa) and the stage's KN keys (ck): 16 d a step, 32
// bytes along each 128-byte row, the next 64-column block every 4 steps.
template <int D, int KN>
__device__ __forceinline__ void ws_gemm_s(float (&s)[KN / 8][4], uint32_t qa, uint32_t ck) {
  using C = WsCfg<D, KN>;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t da = make_desc(qa + (kk >> 2) * C::kQBlock + (kk & 3) * 32, 16, 1024);
    const uint64_t db = make_desc(ck + (kk >> 2) * C::kKvBlock + (kk & 3) * 32, 16, 1024);
    if constexpr (KN == 176) wgmma_m64n176k16_ss(&s[0][0], da, db, kk > 0 ? 1 : 0);
    else wgmma_m64n128k16_ss(&s[0][0], da, db, kk > 0 ? 1 : 0);
  }
}

// O += P V: V MN-major (transposed B): 16 keys a step = 16 rows of 128 bytes; the 64-column
// blocks of D are kKvBlock apart (LBO).
template <int D, int KN>
__device__ __forceinline__ void ws_gemm_pv(float (&o)[D / 8][4], const uint32_t (&pf)[KN / 16][4], uint32_t cv) {
#pragma unroll
  for (int kk = 0; kk < KN / 16; ++kk) {
    const uint64_t desc_v = make_desc(cv + kk * 2048, WsCfg<D, KN>::kKvBlock, 1024);
    if constexpr (D == 128) wgmma_m64n128k16_rs_acc(&o[0][0], pf[kk], desc_v);
    else wgmma_m64n64k16_rs_acc(&o[0][0], pf[kk], desc_v);
  }
}

// PERSIST: the grid's CTAs walk tiles j = blockIdx.x, + gridDim.x, ... over (head, query
// tile), a head's tiles together (they share its K and V in the L2), the producer loading the
// next tile's Q, K and V while the consumers finish the last; `qi` counts the CTA's tiles with
// keys, `g` their key tiles, so that the ring's stages and phases run on from tile to tile. Else
// one CTA a tile: blockIdx.x the tile, blockIdx.y the head (the grid an upper bound). The two are
// separate builds so that the one-tile kernel keeps its constant stage indices.
template <int D, int KN, bool PERSIST>
__device__ void prefill_ws(const TensorMap* tq, const TensorMap* tk, const TensorMap* tv, unsigned short* out,
                           float* lse, const int* cu_q, const int* cu_k, long long B, long long Tq, long long Tk,
                           long long Hq, long long Hkv, bool causal, float c) {
  using C = WsCfg<D, KN>;
  constexpr int S = C::kStages;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // Q full, Q empty; K full, V full, K empty, V empty a stage
  __shared__ __align__(8) unsigned long long bars[2 + 4 * S];
  const uint32_t sq = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t sk = sq + C::kQTile, sv = sk + S * C::kKvTile;
  const uint32_t q_full = smem_addr(&bars[0]), q_empty = q_full + 8;
  const auto k_full = [&](int s) { return q_full + 8 * (2 + s); };
  const auto v_full = [&](int s) { return q_full + 8 * (2 + S + s); };
  const auto k_empty = [&](int s) { return q_full + 8 * (2 + 2 * S + s); };
  const auto v_empty = [&](int s) { return q_full + 8 * (2 + 3 * S + s); };
  // Registers a thread after setmaxnreg: producer 24 / consumers 240, or 32 / 232 (both within the
  // 384 x 168 of the launch). The persistent d128 build's producer spilled 16 bytes at 24 (the
  // tile numbers' binary search, find_seq_tile), and at 32 / 232 it ran level with 24 / 240 and d64
  // ~1.5% faster, while the one-tile d128 build ran ~1.5% slower on causal calls (H200, paired
  // with cuDNN, 2026-11-29 sixth session): 24 / 240 for that one only.
  constexpr int kConsumerRegs = D == 128 && !PERSIST ? 240 : 232;
  const int Bi = (int)B, Tqi = (int)Tq, Tki = (int)Tk, group = (int)(Hq / Hkv);  // < 2^31: the launcher checks
  int per_head = 0, total = 1;
  WsTile t0;
  if constexpr (PERSIST) {
    per_head = seq_tile_count<kWsRows>(cu_q, Bi, Tqi);  // numbers, some empty (ws_tile)
    total = per_head * (int)Hq;
  } else if (!ws_tile(t0, blockIdx.x, cu_q, cu_k, Bi, Tqi, Tki, causal)) {
    return;
  }
  // Tile j of the CTA's walk: its rows and keys, and its head; -1: an empty number (both roles
  // skip it).
  const auto tile_of = [&](int j, WsTile& t) {
    if constexpr (PERSIST) {
      return ws_tile(t, j % per_head, cu_q, cu_k, Bi, Tqi, Tki, causal) ? j / per_head : -1;
    } else {
      t = t0;
      return (int)blockIdx.y;
    }
  };
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 8);  // one arrival per consumer warp, after the tile's last S GEMM
    for (int s = 0; s < S; ++s) {
      mbar_init(k_full(s), 1), mbar_init(v_full(s), 1);
      mbar_init(k_empty(s), 8), mbar_init(v_empty(s), 8);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  if (threadIdx.x < 128) {  // the producer warpgroup: thread 0 issues every copy
    if constexpr (kConsumerRegs == 240) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    else asm volatile("setmaxnreg.dec.sync.aligned.u32 32;\n");
    if (threadIdx.x != 0) return;
    uint64_t once, kept;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(once));
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(kept));
    unsigned qi = 0, g = 0;
    for (int j = PERSIST ? blockIdx.x : 0; j < total; j += PERSIST ? gridDim.x : 1) {
      WsTile t;
      const int h = tile_of(j, t), hk = h / group;
      const int n = h < 0 ? 0 : (t.kend + KN - 1) / KN;
      if (n == 0) continue;
      if (qi > 0) mbar_wait(q_empty, (qi - 1) & 1);  // the last tile's S GEMMs are done with Q
      mbar_expect_tx(q_full, C::kQTile);
      for (int b = 0; b < D / 64; ++b) tma_3d(sq + b * C::kQBlock, tq, b * 64, h, t.q0 + t.m0, q_full, once);
      for (int it = 0; it < n; ++it) {
        const unsigned gi = g + it;
        const int s = gi % S;
        const int row = t.k0 + it * KN;
        if (gi >= S) mbar_wait(k_empty(s), ((gi / S) - 1) & 1);  // K: free once S of tile gi - S is done
        mbar_expect_tx(k_full(s), C::kKvTile);
        for (int b = 0; b < D / 64; ++b) tma_3d(sk + s * C::kKvTile + b * C::kKvBlock, tk, b * 64, hk, row, k_full(s), kept);
        if (gi >= S) mbar_wait(v_empty(s), ((gi / S) - 1) & 1);  // V: once its P V GEMM is done
        mbar_expect_tx(v_full(s), C::kKvTile);
        for (int b = 0; b < D / 64; ++b) tma_3d(sv + s * C::kKvTile + b * C::kKvBlock, tv, b * 64, hk, row, v_full(s), kept);
      }
      g += n;
      ++qi;
    }
    return;
  }

  if constexpr (kConsumerRegs == 240) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
  else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int cw = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0) - 1;  // warp-uniform  // consumer 0 or 1: rows 64 cw .. 64 cw + 63 of the tile
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const uint32_t qa = sq + cw * 64 * 128;
  const int mine = 1 + cw, other = 2 - cw;
  // The epilogue of the other kernels (attention_common.cuh): it finds the thread's rows at
  // 16 warp + g and + 8, warps counted over the CTA; -1: past the sequence, not written.
  __shared__ long long row_o[kWsThreads / 32 * 16];
  const int rr = (threadIdx.x >> 5) * 16 + (lane >> 2);
  unsigned qi = 0, g = 0;
  for (int j = PERSIST ? blockIdx.x : 0; j < total; j += PERSIST ? gridDim.x : 1) {
    WsTile t;
    const int h = tile_of(j, t);
    if (h < 0) continue;  // warp-uniform (the same number in every thread)
    const int n = (t.kend + KN - 1) / KN;
    const int r0 = t.m0 + cw * 64 + warp * 16 + (lane >> 2);  // the thread's rows r0, r0 + 8
    const int vis0 = ws_visible(t, r0, causal), vis1 = ws_visible(t, r0 + 8, causal);
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    RowState st{neg_inf(), neg_inf(), 0.f, 0.f};
    if (n > 0) {
      float s[KN / 8][4];
      uint32_t pf[KN / 16][4];
      float a0, a1;
      if (cw == 1) turn_pass(1);  // consumer 0 goes first
      mbar_wait(q_full, qi & 1);
      mbar_wait(k_full(g % S), (g / S) & 1);
      turn_wait(mine);
      wgmma_fence();
      ws_gemm_s<D, KN>(s, qa, sk + (g % S) * C::kKvTile);
      wgmma_commit();
      if (cw == 0 || n > 1) turn_pass(other);  // consumer 1's last turn passes nothing on
      wgmma_wait<0>();
      keep_f32<KN / 2>(&s[0][0]);
      if (lane == 0) mbar_arrive(k_empty(g % S));
      ws_softmax_step<D == 128, KN>(s, st, 0, vis0, vis1, c, a0, a1);
      ws_pack<KN>(s, pf);
      for (int it = 1; it < n; ++it) {
        const unsigned gi = g + it;
        const int cur = gi % S, prev = (gi - 1) % S;
        mbar_wait(k_full(cur), (gi / S) & 1);
        turn_wait(mine);
        keep_f32<D / 2>(&o[0][0]);
        keep_u32<KN / 4>(&pf[0][0]);
        wgmma_fence();
        ws_gemm_s<D, KN>(s, qa, sk + cur * C::kKvTile);
        wgmma_commit();
        mbar_wait(v_full(prev), ((gi - 1) / S) & 1);
        wgmma_fence();  // P and O as the P V GEMM reads them (else ptxas injects one)
        ws_gemm_pv<D, KN>(o, pf, sv + prev * C::kKvTile);
        wgmma_commit();
        if (cw == 0 || it + 1 < n) turn_pass(other);
        wgmma_wait<1>();  // S of tile it; P V of tile it - 1 may still run
        keep_f32<KN / 2>(&s[0][0]);
        if (lane == 0) mbar_arrive(k_empty(cur));
        ws_softmax_step<D == 128, KN>(s, st, it * KN, vis0, vis1, c, a0, a1);
        wgmma_wait<0>();
        keep_f32<D / 2>(&o[0][0]);
        keep_u32<KN / 4>(&pf[0][0]);
        if (lane == 0) mbar_arrive(v_empty(prev));
        if (D == 64 || any_moved(a0, a1)) scale_rows<D / 8>(o, a0, a1);
        ws_pack<KN>(s, pf);
      }
      const unsigned gl = g + n - 1;
      const int last = gl % S;
      if constexpr (PERSIST)
        if (lane == 0) mbar_arrive(q_empty);  // every S GEMM of the tile has completed
      mbar_wait(v_full(last), (gl / S) & 1);
      keep_f32<D / 2>(&o[0][0]);
      keep_u32<KN / 4>(&pf[0][0]);
      wgmma_fence();
      ws_gemm_pv<D, KN>(o, pf, sv + last * C::kKvTile);
      wgmma_commit();
      wgmma_wait<0>();
      keep_f32<D / 2>(&o[0][0]);
      if constexpr (PERSIST)
        if (lane == 0) mbar_arrive(v_empty(last));  // the next tile's copies may reuse the stage
      g += n;
      ++qi;
    }
    row_o[rr] = r0 < t.q_len ? ((long long)(t.q0 + r0) * (int)Hq + h) * D : -1;
    row_o[rr + 8] = r0 + 8 < t.q_len ? ((long long)(t.q0 + r0 + 8) * (int)Hq + h) * D : -1;
    __syncwarp();
    store_rows<D>(o, st, row_o, out, lse, nullptr, nullptr);
    if constexpr (PERSIST) __syncwarp();  // row_o is rewritten for the warp's next tile
  }
}

}  // namespace
}  // namespace hc

// Parameters: three 64-byte tensor maps (q [Tq, Hq, D], k and v [Tk, Hkv, D]; 3-d, boxes of
// 64 x 1 x 128 for q and 64 x 1 x KN for k and v, 128-byte swizzle), then 8 bytes each: out lse
// cu_seqlens_q cu_seqlens_k B Tq Tk Hq Hkv causal scale_log2 (> 0). 384 threads; dynamic shared
// memory WsCfg<D, KN>::kShared bytes. Grid: one CTA a tile, (ceil(Tq / 128) + B, Hq) (an upper
// bound); the "...wsp" builds (PERSIST) any 1-d grid, one CTA an SM.
#define HC_ATTN_PREFILL_WS(NAME, D, KN, PERSIST)                                                                  \
  extern "C" __global__ void __launch_bounds__(hc::kWsThreads, 1)                                                 \
      NAME(const __grid_constant__ hc::TensorMap tq, const __grid_constant__ hc::TensorMap tk,                     \
           const __grid_constant__ hc::TensorMap tv, unsigned short* out, float* lse, const int* cu_q,             \
           const int* cu_k, long long B, long long Tq, long long Tk, long long Hq, long long Hkv, long long causal, \
           double scale_log2) {                                                                                    \
    hc::prefill_ws<D, KN, PERSIST>(&tq, &tk, &tv, out, lse, cu_q, cu_k, B, Tq, Tk, Hq, Hkv, causal != 0,          \
                                   (float)scale_log2);                                                             \
  }
HC_ATTN_PREFILL_WS(hc_attn_prefill_d64_sm90ws, 64, 128, false)
HC_ATTN_PREFILL_WS(hc_attn_prefill_d128_sm90ws, 128, 128, false)
HC_ATTN_PREFILL_WS(hc_attn_prefill_d128n176_sm90ws, 128, 176, false)
HC_ATTN_PREFILL_WS(hc_attn_prefill_d64_sm90wsp, 64, 128, true)
HC_ATTN_PREFILL_WS(hc_attn_prefill_d128_sm90wsp, 128, 128, true)
