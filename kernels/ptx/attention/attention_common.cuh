// Device code shared by the attention kernels (attention_sm80.cu, attention_sm90.cu): the
// CTA's view of its rows and keys, paged key addressing, the online-softmax step on
// accumulators in the m16n8 layout (mma.sync's, and each warp's share of a wgmma m64nN),
// and the epilogue. Device code only (compiled with `nvcc -ptx`).
#pragma once

#include "../moe/gemm_common.cuh"

namespace hc {
namespace {

constexpr int kRows = 64, kKeys = 64, kThreads = 128;
constexpr float kLn2 = 0.69314718055994530942f;
// How far a row's max may pass its reference max (log2 units) in the kernels that keep a slack
// reference (advance_max<true>, the sm90.ws prefill's ws_softmax): every p = 2^(s c - m) stays
// below 2^8, exact in f32 and as a bf16 P, and the lse is m + log2 l whatever m is.
constexpr float kMaxSlack = 8.f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Everything a CTA needs to know about its rows and keys.
struct Problem {
  const unsigned short* q;  // row r's query: q + row_q[r]
  long long kv_base;        // prefill: first key row of the sequence; paged: unused
  long long kv_stride;      // elements between consecutive key rows (Hkv * D)
  long long kv_head;        // hk * D
  const int* table;         // paged: this sequence's block table row (null: prefill)
  long long BS, NB;
  int kbeg, kend;           // the keys this CTA reads: [kbeg, kend)
};

// Paged: the cache row (block * BS + offset) that holds key j of the sequence; entry(i) gives
// the block table's entry i (the table itself, or the sm90 decode producer's register copy).
template <typename Entry>
__device__ __forceinline__ int key_index(const Problem& p, int j, Entry&& entry) {
  // 32-bit division (j >= 0, BS <= 256): a 64-bit one costs several times the instructions,
  // and every 16-byte chunk a tile loads asks for its row.
  const unsigned bs = (unsigned)p.BS, blk_j = (unsigned)j / bs;
  int blk = entry(blk_j);
  blk = blk < 0 ? 0 : (blk >= p.NB ? (int)p.NB - 1 : blk);  // a bad table reads block 0 or NB-1, never outside
  return blk * (int)bs + (int)((unsigned)j - blk_j * bs);
}
__device__ __forceinline__ int key_index(const Problem& p, int j) {
  return key_index(p, j, [&](unsigned i) { return p.table[i]; });
}

// Element offset of key j's row (head included) in k / v.
__device__ __forceinline__ long long key_row(const Problem& p, int j) {
  if (!p.table) return (p.kv_base + j) * p.kv_stride + p.kv_head;
  return (long long)key_index(p, j) * p.kv_stride + p.kv_head;
}

// Loads key rows [k0, k0 + 64) of k and v into shared memory (zeros past p.kend, which are
// never read): 16-byte chunk c of tile row r lands at byte sk + off(r, c) (and sv + ...).
template <int D, typename Off>
__device__ __forceinline__ void load_kv_tile(uint32_t sk, uint32_t sv, const unsigned short* k,
                                             const unsigned short* v, const Problem& p, int k0, Off off) {
  constexpr int CPR = D / 8;  // chunks a row
#pragma unroll
  for (int i = 0; i < kKeys * CPR / kThreads; ++i) {
    const int c = threadIdx.x + i * kThreads;
    const int row = c / CPR, chunk = c % CPR;
    const int j = k0 + row;
    const bool ok = j < p.kend;
    const long long src = ok ? key_row(p, j) + chunk * 8 : 0;
    cp_async16(sk + off(row, chunk), k + src, ok ? 16 : 0);
    cp_async16(sv + off(row, chunk), v + src, ok ? 16 : 0);
  }
}

// The CTA's 64 query rows (zeros for rows that do not exist), laid out as load_kv_tile's.
template <int D, typename Off>
__device__ __forceinline__ void load_q_tile(uint32_t sq, const Problem& p, const long long* row_q, Off off) {
  constexpr int CPR = D / 8;
#pragma unroll
  for (int i = 0; i < kRows * CPR / kThreads; ++i) {
    const int c = threadIdx.x + i * kThreads;
    const int row = c / CPR, chunk = c % CPR;
    const bool ok = row_q[row] >= 0;
    cp_async16(sq + off(row, chunk), p.q + (ok ? row_q[row] + chunk * 8 : 0), ok ? 16 : 0);
  }
}

// Offset b of packed sequences' cumulative offsets `cu`, clamped to [0, T].
__device__ __forceinline__ int clamped_offset(const int* cu, int b, int T) { return min(max(__ldg(cu + b), 0), T); }
// Sequence b's rows [start, start + len) in [0, T]: both offsets clamped, an end below the start
// read as the start. A bad cu_seqlens (the device does not check it) gives wrong rows, never
// rows outside [0, T).
struct SeqRange {
  int start, len;
};
__device__ __forceinline__ SeqRange seq_range(const int* cu, int b, int T) {
  const int s = clamped_offset(cu, b, T);
  return {s, min(max(__ldg(cu + b + 1), s), T) - s};
}

// Query tiles of R rows over packed sequences (cu_q: B + 1 offsets, each clamped to [0, Tq]),
// numbered so that a tile finds its sequence by a binary search over cu_q (log2 B loads; a walk
// over the sequences cost B loads a tile, which thousands of short sequences make slower than
// the tile's math): sequence b owns the numbers [F(b), F(b) + ceil(len_b / R)), F(b) =
// ceil(cq_b / R) + b. Since ceil(x + y) >= ceil(x) + ceil(y) - 1, F(b + 1) - F(b) >= ceil(len_b /
// R): the ranges never overlap, the numbers between them are empty, and all lie below F(B) <=
// ceil(Tq / R) + B (the launchers' grids). Offsets that decrease or leave [0, Tq] (the device
// does not check them: `halcyon run` does, on the host) give wrong rows, never rows outside
// [0, Tq).
struct SeqTile {
  int b;           // the sequence
  int tile;        // the tile within it (from its first row)
  int q0, q_len;   // the sequence's first row and its number of rows (clamped)
};
template <int R>
__device__ __forceinline__ int seq_tile_base(const int* cu_q, int b, int Tq) {
  return (int)(((unsigned)clamped_offset(cu_q, b, Tq) + R - 1) / R) + b;  // < 2^31 + R: unsigned
}
// The numbers a head's tiles take: [0, F(B)).
template <int R>
__device__ __forceinline__ int seq_tile_count(const int* cu_q, int B, int Tq) {
  return B > 0 ? seq_tile_base<R>(cu_q, B, Tq) : 0;
}
// Tile number j's sequence and place; false: the number is empty.
template <int R>
__device__ __forceinline__ bool find_seq_tile(SeqTile& t, const int* cu_q, int B, int Tq, int j) {
  if (B <= 0 || j < seq_tile_base<R>(cu_q, 0, Tq)) return false;
  int lo = 0, hi = B;  // F(lo) <= j < F(hi), F(B) past every tile
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (seq_tile_base<R>(cu_q, mid, Tq) <= j) lo = mid;
    else hi = mid;
  }
  const SeqRange q = seq_range(cu_q, lo, Tq);
  t.b = lo;
  t.tile = j - seq_tile_base<R>(cu_q, lo, Tq);
  t.q0 = q.start;
  t.q_len = q.len;
  return t.tile < (t.q_len + R - 1) / R;
}

// Prefill: blockIdx.x is a 64-row query tile number (find_seq_tile: causal, a sequence's last
// tile, which sees the most keys, comes first), blockIdx.y the query head. Fills p and the
// rows' query offsets (-1: no such row) and visible key counts; false when the number is empty
// (the grid is an upper bound). Offsets are clamped to [0, Tq] and [0, Tk], so a bad
// cu_seqlens never addresses outside q, k, v, out or lse. Ends with a barrier.
template <int D>
__device__ __forceinline__ bool prefill_rows(Problem& p, long long* row_q, int* row_vis, const unsigned short* q,
                                             const int* cu_q, const int* cu_k, long long B, long long Hq,
                                             long long Hkv, long long causal, long long Tq, long long Tk) {
  const int h = blockIdx.y, hk = (int)(h / (Hq / Hkv));
  SeqTile st;  // B, Tq and Tk fit in 32 bits (the launchers check)
  if (!find_seq_tile<kRows>(st, cu_q, (int)B, (int)Tq, (int)blockIdx.x)) return false;
  const int b = st.b, q_len = st.q_len;
  const SeqRange keys = seq_range(cu_k, b, (int)Tk);
  const int k_len = keys.len;
  const long long tile = causal ? (q_len + kRows - 1) / kRows - 1 - st.tile : st.tile;
  p.q = q;
  p.table = nullptr;
  p.kv_base = keys.start;
  p.kv_stride = Hkv * D;
  p.kv_head = (long long)hk * D;
  p.BS = p.NB = 0;
  if (threadIdx.x < kRows) {
    const int i = (int)(tile * kRows) + threadIdx.x;
    const bool ok = i < q_len;
    row_q[threadIdx.x] = ok ? ((st.q0 + (long long)i) * Hq + h) * D : -1;
    const int vis = causal ? i + k_len - q_len + 1 : k_len;
    row_vis[threadIdx.x] = ok ? (vis < 0 ? 0 : (vis > k_len ? k_len : vis)) : 0;
  }
  __syncthreads();
  int kmax = 0;
  for (int r = 0; r < kRows; ++r) kmax = max(kmax, row_vis[r]);
  p.kbeg = 0;
  p.kend = kmax;
  return true;
}

// Per-thread softmax state of its two rows (g and g + 8 of its warp's 16).
struct RowState {
  float m0, m1, l0, l1;  // running max (log2 domain) and thread-partial sums
};

// One key tile's step: masks s (keys k0 + 8n + 2t (+1); row g sees keys < vis0, row g + 8
// keys < vis1), scales it to the log2 domain, updates the running max, returns in a0/a1 the
// factors the output rows must be scaled by, adds the tile's sums and writes P as bf16 A
// fragments (pf[kk] = keys 16kk .. 16kk + 15). A row that has seen no key keeps m = -inf:
// its p are 0 and nothing is rescaled.
// Masks s (keys k0 + 8n + 2t (+1); row g sees keys < vis0, row g + 8 keys < vis1), scales it
// to the log2 domain and returns the two rows' maxima over the quad's values.
template <int NT>
__device__ __forceinline__ void mask_max(float (&s)[NT][4], int k0, int vis0, int vis1, float scale_log2, float* mx0,
                                         float* mx1) {
  const int t = threadIdx.x & 3;
  float m0 = neg_inf(), m1 = neg_inf();
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int j = k0 + n * 8 + 2 * t;
    s[n][0] = j < vis0 ? s[n][0] * scale_log2 : neg_inf();
    s[n][1] = j + 1 < vis0 ? s[n][1] * scale_log2 : neg_inf();
    s[n][2] = j < vis1 ? s[n][2] * scale_log2 : neg_inf();
    s[n][3] = j + 1 < vis1 ? s[n][3] * scale_log2 : neg_inf();
    m0 = fmaxf(m0, fmaxf(s[n][0], s[n][1]));
    m1 = fmaxf(m1, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int x = 1; x < 4; x <<= 1) {
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, x));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, x));
  }
  *mx0 = m0;
  *mx1 = m1;
}

// Takes the tile's row maxima into the running ones: base0/base1 = what exp2 subtracts (0 for a
// row that has seen no key yet), a0/a1 = the factors earlier sums and outputs are scaled by.
// SLACK: the reference max moves only when the tile's max passes it by more than kMaxSlack, and
// a row whose max stays gets a factor of exactly 1 (its output need not be touched: see
// any_moved); a row still at -inf moves to the first finite max (-inf + 8 is -inf).
// A row's next reference max after a tile whose max is t: the running max, or with SLACK one
// that moves only when t passes it by more than kMaxSlack.
template <bool SLACK>
__device__ __forceinline__ float next_max(float m, float t) {
  return SLACK ? (t > m + kMaxSlack ? t : m) : fmaxf(m, t);
}

template <bool SLACK = false>
__device__ __forceinline__ void advance_max(RowState& st, float mx0, float mx1, float* base0, float* base1, float* a0,
                                            float* a1) {
  const float mn0 = next_max<SLACK>(st.m0, mx0), mn1 = next_max<SLACK>(st.m1, mx1);
  *base0 = mn0 == neg_inf() ? 0.f : mn0;
  *base1 = mn1 == neg_inf() ? 0.f : mn1;
  *a0 = SLACK && mn0 == st.m0 ? 1.f : exp2f(st.m0 - *base0);
  *a1 = SLACK && mn1 == st.m1 ? 1.f : exp2f(st.m1 - *base1);
  st.m0 = mn0;
  st.m1 = mn1;
}

// Whether any row of the warp must be rescaled (a factor other than 1): warp-uniform, so that a
// warp whose rows all kept their max skips the multiplies over its output registers.
__device__ __forceinline__ bool any_moved(float a0, float a1) {
  return !__all_sync(0xffffffffu, a0 == 1.f && a1 == 1.f);
}

// P = 2^(s - base) a row as bf16 A fragments (pf[kk] = keys 16kk .. 16kk + 15), and the row
// sums: l = l a + the tile's.
template <int NT>
__device__ __forceinline__ void exp_to_p(const float (&s)[NT][4], uint32_t (&pf)[NT / 2][4], RowState& st,
                                         float base0, float base1, float a0, float a1) {
  float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const float p0 = exp2f(s[n][0] - base0), p1 = exp2f(s[n][1] - base0);
    const float p2 = exp2f(s[n][2] - base1), p3 = exp2f(s[n][3] - base1);
    sum0 += p0 + p1;
    sum1 += p2 + p3;
    pf[n >> 1][(n & 1) * 2] = pack_bf16x2(p0, p1);
    pf[n >> 1][(n & 1) * 2 + 1] = pack_bf16x2(p2, p3);
  }
  st.l0 = st.l0 * a0 + sum0;
  st.l1 = st.l1 * a1 + sum1;
}

// One key tile's step: masks s (mask_max), updates the running max, returns in a0/a1 the
// factors the output rows must be scaled by, adds the tile's sums and writes P as bf16 A
// fragments (pf[kk] = keys 16kk .. 16kk + 15). A row that has seen no key keeps m = -inf:
// its p are 0 and nothing is rescaled.
// SLACK: the maxima with slack (advance_max<true>): a0 and a1 are exactly 1 for the rows whose
// reference max stayed.
template <int NT, bool SLACK = false>
__device__ __forceinline__ void softmax_step(float (&s)[NT][4], uint32_t (&pf)[NT / 2][4], RowState& st, int k0,
                                             int vis0, int vis1, float scale_log2, float* a0, float* a1) {
  float mx0, mx1, base0, base1;
  mask_max<NT>(s, k0, vis0, vis1, scale_log2, &mx0, &mx1);
  advance_max<SLACK>(st, mx0, mx1, &base0, &base1, a0, a1);
  exp_to_p<NT>(s, pf, st, base0, base1, *a0, *a1);
}

template <int DT>
__device__ __forceinline__ void scale_rows(float (&o)[DT][4], float a0, float a1) {
#pragma unroll
  for (int i = 0; i < DT; ++i) {
    o[i][0] *= a0;
    o[i][1] *= a0;
    o[i][2] *= a1;
    o[i][3] *= a1;
  }
}

// Writes the thread's two rows r0 = 16 warp + g and r1 = r0 + 8 (those with row_o >= 0):
// out (bf16) and lse, or with part_o the normalised O and lse in f32 (split-KV partials).
// row_o[r] is the element offset of row r's output (row index * DO). DO < D: an output row is
// the DO dims of O from dim first(r) on (the paged decode's head pairs: each row keeps its own
// head's half).
struct AllDims {
  __device__ int operator()(int) const { return 0; }
};
template <int D, int DO = D, typename First = AllDims>
__device__ __forceinline__ void store_rows(const float (&o)[D / 8][4], RowState st, const long long* row_o,
                                           unsigned short* out, float* lse, float* part_o, float* part_lse,
                                           First first = {}) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t = lane & 3;
  const int r0 = warp * 16 + (lane >> 2);
#pragma unroll
  for (int x = 1; x < 4; x <<= 1) {
    st.l0 += __shfl_xor_sync(0xffffffffu, st.l0, x);
    st.l1 += __shfl_xor_sync(0xffffffffu, st.l1, x);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    if (row_o[r] < 0) continue;
    const float l = h ? st.l1 : st.l0, m = h ? st.m1 : st.m0;
    const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: zeros and lse = -inf
    const float row_lse = l > 0.f ? (m + log2f(l)) * kLn2 : neg_inf();
    const int f = first(r) / 8;  // the row's first fragment (indices stay static: no local memory)
    const long long ob = row_o[r] - f * 8;
    auto mine = [&](int i) { return DO == D || (i >= f && i < f + DO / 8); };
    if (part_o) {
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        if (mine(i))
          *reinterpret_cast<float2*>(part_o + ob + i * 8 + 2 * t) =
              make_float2(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
      if (t == 0) part_lse[row_o[r] / DO] = row_lse;
    } else {
#pragma unroll
      for (int i = 0; i < D / 8; ++i)
        if (mine(i))
          *reinterpret_cast<uint32_t*>(out + ob + i * 8 + 2 * t) =
              pack_bf16x2(o[i][2 * h] * inv, o[i][2 * h + 1] * inv);
      if (t == 0) lse[row_o[r] / DO] = row_lse;
    }
  }
}

// The CTA's barrier, and none: the Sync arguments of decode_rows and merge_warps.
struct CtaSync {
  __device__ void operator()() const { __syncthreads(); }
};
struct NoSync {
  __device__ void operator()() const {}
};

// Paged decode: blockIdx.x is the TILE-row tile of the Sq x G queries (G = Hq / Hkv) of KV
// head blockIdx.y % Hkv of sequence blockIdx.y / Hkv, blockIdx.z the split of the keys. Fills
// p and the rows' query offsets (-1: no such row) and visible key counts (kRows entries, by
// threads 0 to kRows - 1). Ends with Sync (a thread that is not among them may pass NoSync).
template <int TILE, int D, typename Sync = CtaSync>
__device__ __forceinline__ void decode_rows(Problem& p, long long* row_q, int* row_vis, const unsigned short* q,
                                            const int* table, const int* seq_lens, long long Hq, long long Hkv,
                                            long long Sq, long long NB, long long BS, long long MB,
                                            long long split_len) {
  const long long G = Hq / Hkv, b = blockIdx.y / Hkv, hk = blockIdx.y % Hkv;
  const int L = seq_lens[b];
  const int cap = (int)(MB * BS);
  const int len = L < 0 ? 0 : (L > cap ? cap : L);  // a bad seq_len never reads past the table
  p.q = q;
  p.table = table + b * MB;
  p.kv_base = 0;
  p.kv_stride = Hkv * D;
  p.kv_head = hk * D;
  p.BS = BS;
  p.NB = NB;
  if (threadIdx.x < kRows) {
    const long long r = (long long)blockIdx.x * TILE + threadIdx.x;
    const bool ok = threadIdx.x < TILE && r < Sq * G;
    const long long s = r / G, hq = hk * G + r % G;
    row_q[threadIdx.x] = ok ? ((b * Sq + s) * Hq + hq) * D : -1;
    const long long vis = len - Sq + s + 1;
    row_vis[threadIdx.x] = ok ? (int)(vis < 0 ? 0 : (vis > len ? len : vis)) : 0;
  }
  Sync{}();
  p.kbeg = (int)(blockIdx.z * split_len);
  const long long e = p.kbeg + split_len;
  p.kend = (int)(e < len ? e : len);
}

// Key-split decode (KSPLIT): the CTA's rows are at most 16 (the Sq x G queries of one KV head,
// when they fit), and its 4 warps share each 64-key tile instead of the rows: warp w takes keys
// [16w, 16w + 16) of every tile for all 16 rows, with its own online-softmax state. The states
// are merged at the end through shared memory (the K stages, free by then). Every warp
// computes, so a tile's serial work is a quarter of the row-split kernel's, which for decode
// leaves three warps idle.
// Sync: the barrier of the 128 threads that merge (__syncthreads where they are the CTA).
template <int D, typename Sync = CtaSync>
__device__ void merge_warps(float (&o)[D / 8][4], RowState& st, unsigned short* scratch, Sync sync = {}) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float* wm = reinterpret_cast<float*>(scratch);  // [4 warps][16 rows] maxima, then sums
  float* wl = wm + 64;
  float* wo = wl + 64;  // [4 warps][D / 8][32 lanes][4]: each thread's accumulators
#pragma unroll
  for (int x = 1; x < 4; x <<= 1) {
    st.l0 += __shfl_xor_sync(0xffffffffu, st.l0, x);
    st.l1 += __shfl_xor_sync(0xffffffffu, st.l1, x);
  }
  if (t == 0) wm[warp * 16 + g] = st.m0, wm[warp * 16 + g + 8] = st.m1;
  sync();
  float m0 = neg_inf(), m1 = neg_inf();
#pragma unroll
  for (int w = 0; w < 4; ++w) m0 = fmaxf(m0, wm[w * 16 + g]), m1 = fmaxf(m1, wm[w * 16 + g + 8]);
  // This warp's share: exp2(m_w - m); a warp (or row) that saw no key contributes nothing.
  const float f0 = st.m0 == neg_inf() ? 0.f : exp2f(st.m0 - m0), f1 = st.m1 == neg_inf() ? 0.f : exp2f(st.m1 - m1);
  scale_rows<D / 8>(o, f0, f1);
  if (t == 0) wl[warp * 16 + g] = st.l0 * f0, wl[warp * 16 + g + 8] = st.l1 * f1;
  if (warp > 0)
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
      *reinterpret_cast<float4*>(wo + (((warp - 1) * (D / 8) + i) * 32 + lane) * 4) =
          make_float4(o[i][0], o[i][1], o[i][2], o[i][3]);
  sync();
  if (warp > 0) return;
#pragma unroll
  for (int w = 0; w < 3; ++w)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const float4 x = *reinterpret_cast<const float4*>(wo + ((w * (D / 8) + i) * 32 + lane) * 4);
      o[i][0] += x.x, o[i][1] += x.y, o[i][2] += x.z, o[i][3] += x.w;
    }
  float l0 = 0.f, l1 = 0.f;
#pragma unroll
  for (int w = 0; w < 4; ++w) l0 += wl[w * 16 + g], l1 += wl[w * 16 + g + 8];
  // store_rows adds the quad's sums: one thread of the quad carries the row's.
  st = RowState{m0, m1, t == 0 ? l0 : 0.f, t == 0 ? l1 : 0.f};
}

// Keeps the compiler from moving reads or writes of N accumulators across wgmma boundaries.
template <int N>
__device__ __forceinline__ void keep(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- MLA decode (attention_sm80.cu, attention_mla_sm90*.cu) -----------------------------------
constexpr int kMlaQk = 576, kMlaV = 512, kMlaCpr = kMlaQk / 8;  // 16-byte chunks a cache row
// The Hopper kernels hold a [64][576] tile as 9 SW128 blocks of 64 rows x 128 bytes (64 dims).
constexpr uint32_t kMlaBlk = 64 * 128;

// Completes one arrival on `bar` when this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// True in every thread of a warpgroup when it is true in all of them (named barrier `id`, 128
// threads): a choice the warpgroup's wgmma sequence can depend on.
__device__ __forceinline__ bool wg_all(bool v, int id) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.eq.u32 q, %1, 0;\nbar.red.or.pred p, %2, 128, q;\nselp.u32 %0, 0, 1, p;\n}\n"
      : "=r"(r)
      : "r"((uint32_t)v), "r"(id)
      : "memory");
  return r != 0;
}
// Row `row` of a swizzled [64][576] tile from src (its 576 elements; null: zeros): this
// thread's chunk c8 of each of the 9 blocks. A warp takes 4 rows (lanes 8r .. 8r + 7 one row), so
// each copy instruction reads 4 whole 128-byte lines.
__device__ __forceinline__ void mla_copy_row(uint32_t dst, const unsigned short* src, int row, int c8,
                                             const unsigned short* any) {
  const uint32_t base = dst + row * 128 + ((c8 ^ (row & 7)) << 4);
#pragma unroll
  for (int b = 0; b < kMlaQk / 64; ++b) cp_async16(base + b * kMlaBlk, src ? src + b * 64 + c8 * 8 : any, src ? 16 : 0);
}

// The CTA's sequence (blockIdx.y), split (blockIdx.z) and ROWS rows (blockIdx.x-th block of the
// sequence's Sq x Hq): fills p and the rows' indices in [B, Sq, Hq] (-1: no such row) and
// visible key counts. Ends with a barrier.
template <int ROWS>
__device__ __forceinline__ void mla_rows(Problem& p, long long* row_q, int* row_vis, const unsigned short* q,
                                         const int* table, const int* seq_lens, long long Sq, long long Hq,
                                         long long NB, long long BS, long long MB, long long split_len) {
  const long long b = blockIdx.y;
  const int cap = (int)(MB * BS);
  const int L = seq_lens[b];
  const int len = L < 0 ? 0 : (L > cap ? cap : L);  // a bad seq_len never reads past the table
  p.q = q;
  p.kv_base = 0;
  p.kv_stride = kMlaQk;
  p.kv_head = 0;
  p.table = table + b * MB;
  p.BS = BS;
  p.NB = NB;
  p.kbeg = (int)(blockIdx.z * split_len);
  p.kend = (int)(p.kbeg + split_len < len ? p.kbeg + split_len : len);
  if (threadIdx.x < ROWS) {
    const long long r = (long long)blockIdx.x * ROWS + threadIdx.x;
    const bool ok = r < Sq * Hq;
    row_q[threadIdx.x] = ok ? (b * Sq * Hq + r) : -1;
    const long long vis = len - Sq + r / Hq + 1;
    row_vis[threadIdx.x] = ok ? (int)(vis < 0 ? 0 : (vis > len ? len : vis)) : 0;
  }
  __syncthreads();
}

// Writes the thread's share of one MLA output row (row index `row` of [B, Sq, Hq]): its NI
// pairs o[i][2h], o[i][2h + 1] at dims col0 + 8i + 2t, divided by the row sum l; the lse
// when `lse_writer`. Split partials (part_o given) in f32 at split blockIdx.z.
template <int NI>
__device__ __forceinline__ void mla_store_row(const float (&o)[NI][4], int h, float l, float m, long long row, int col0,
                                              bool lse_writer, unsigned short* out, float* lse, float* part_o,
                                              float* part_lse, long long rows) {
  const int t = threadIdx.x & 3;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: zeros and lse = -inf
  const float row_lse = l > 0.f ? (m + log2f(l)) * kLn2 : neg_inf();
  const long long ob = row * kMlaV + col0;
  float* po = part_o ? part_o + (long long)blockIdx.z * rows * kMlaV : nullptr;
#pragma unroll
  for (int i = 0; i < NI; ++i) {
    const float v0 = o[i][2 * h] * inv, v1 = o[i][2 * h + 1] * inv;
    if (po) *reinterpret_cast<float2*>(po + ob + i * 8 + 2 * t) = make_float2(v0, v1);
    else *reinterpret_cast<uint32_t*>(out + ob + i * 8 + 2 * t) = pack_bf16x2(v0, v1);
  }
  if (lse_writer) (part_o ? part_lse + (long long)blockIdx.z * rows : lse)[row] = row_lse;
}

// The end of a 64-row MLA kernel whose two warpgroups own output dims [256 wg, +256) of the
// same rows (r0 = 16 warp + g and r0 + 8, warp within the warpgroup) with the same maxima:
// adds the quads' and then the two warpgroups' row sums through red[2][64] (`sync`: a barrier
// over both warpgroups) and writes the rows that exist (row_q >= 0).
template <typename Sync>
__device__ __forceinline__ void mla_store_2wg(const float (&o)[32][4], RowState st, float (*red)[64],
                                              const long long* row_q, int wg, Sync sync, unsigned short* out,
                                              float* lse, float* part_o, float* part_lse, long long rows) {
  const int lane = threadIdx.x & 31, t = lane & 3, r0 = ((threadIdx.x >> 5) & 3) * 16 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
  for (int x = 1; x < 4; x <<= 1) {
    st.l0 += __shfl_xor_sync(0xffffffffu, st.l0, x);
    st.l1 += __shfl_xor_sync(0xffffffffu, st.l1, x);
  }
  if (t == 0) red[wg][r0] = st.l0, red[wg][r1] = st.l1;
  sync();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = h ? r1 : r0;
    if (row_q[r] >= 0)
      mla_store_row<32>(o, h, red[0][r] + red[1][r], h ? st.m1 : st.m0, row_q[r], wg * 256, wg == 0 && t == 0, out,
                        lse, part_o, part_lse, rows);
  }
}

}  // namespace
}  // namespace hc

// An MLA kernel's entry point (parameters 8 bytes each, ops/ptx/attention_ops.cpp's MlaArgs):
//   q kv out lse block_table seq_lens part_o part_lse B Sq Hq NB BS MB split_len scale_log2.
#define HC_ATTN_MLA_ENTRY(NAME, THREADS, FN)                                                                  \
  extern "C" __global__ void __launch_bounds__(THREADS, 1)                                                    \
      NAME(const unsigned short* q, const unsigned short* kv, unsigned short* out, float* lse,                \
           const int* block_table, const int* seq_lens, float* part_o, float* part_lse, long long B,          \
           long long Sq, long long Hq, long long NB, long long BS, long long MB, long long split_len,          \
           double scale_log2) {                                                                               \
    FN(q, kv, out, lse, block_table, seq_lens, part_o, part_lse, B, Sq, Hq, NB, BS, MB, split_len,            \
       (float)scale_log2);                                                                                    \
  }
// The same for a TMA build: the tensor map over the cache first (64 bytes, __grid_constant__),
// then the parameters above; FN takes its address first.
#define HC_ATTN_MLA_TMA_ENTRY(NAME, THREADS, FN)                                                              \
  extern "C" __global__ void __launch_bounds__(THREADS, 1)                                                    \
      NAME(const __grid_constant__ hc::TensorMap tkv, const unsigned short* q, const unsigned short* kv,      \
           unsigned short* out, float* lse, const int* block_table, const int* seq_lens, float* part_o,       \
           float* part_lse, long long B, long long Sq, long long Hq, long long NB, long long BS, long long MB, \
           long long split_len, double scale_log2) {                                                          \
    FN(&tkv, q, kv, out, lse, block_table, seq_lens, part_o, part_lse, B, Sq, Hq, NB, BS, MB, split_len,      \
       (float)scale_log2);                                                                                    \
  }
