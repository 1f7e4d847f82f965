// Shared device code of the GEMM kernels (gemm_sm80.cu, gemm_sm90.cu): the argument block,
// the persistent tile scheduler over per-expert row segments, bf16 conversions and stores.
// Device code only (compiled with `nvcc -ptx`); no CUDA runtime calls.
#pragma once

#include <stdint.h>

namespace hc {

// What every GEMM entry point takes (one 8-byte .param each; launchers mirror this order).
//   a        [R, K] bf16, row-major
//   b        [EL, K, ldb] bf16, row-major per expert (K rows of ldb columns)
//   offsets  [EL + 1] i32 on the device: rows [offsets[e], offsets[e+1]) use expert e;
//            0 = one dense segment [0, R) (gemm_bf16)
//   out      [R, N] bf16 or f32
//   N        output columns; for SwiGLU N = I and ldb = 2I (gate columns [0, I), up [I, 2I))
enum Epilogue { kStoreBf16 = 0, kSwigluBf16 = 1, kStoreF32 = 2 };

// The persistent grid walks tiles numbered expert by expert; within an expert, n-tile by
// n-tile; within an n-tile, m-tile by m-tile, so that CTAs running at one time can share weight
// tiles through L2. (A walk that keeps sharing CTAs in lockstep, with 256-row tiles for larger
// experts, was measured slower at every size: docs/kernels/ptx.md, "Tried".)
struct TileMap {
  int* seg;    // [EL + 1] row offsets, clamped to [0, R] and made non-decreasing
  int* first;  // [EL + 1] first tile of each expert; first[EL] = total tiles
  int EL;
};

// Exclusive scan of per-thread sums over a block of THREADS threads. Returns the prefix of
// this thread; *total gets the sum of all. scratch: THREADS/32 + 1 ints of shared memory.
template <int THREADS>
__device__ __forceinline__ int block_exclusive_scan(int v, int* scratch, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < THREADS / 32; ++w) {
      int c = scratch[w];
      scratch[w] = run;
      run += c;
    }
    scratch[THREADS / 32] = run;
  }
  __syncthreads();
  *total = scratch[THREADS / 32];
  return scratch[warp] + incl - v;
}

// Reads the offsets (or makes the one dense segment) and numbers the tiles.
template <int THREADS, int BM>
__device__ __forceinline__ TileMap build_tile_map(const int* offsets, long long R, int EL, int n_tiles, int* smem,
                                                  int* scratch) {
  TileMap m;
  m.seg = smem;
  m.first = smem + EL + 1;
  m.EL = EL;
  if (offsets == nullptr) {
    if (threadIdx.x == 0) {
      m.seg[0] = 0;
      m.seg[1] = (int)R;
    }
  } else {
    for (int i = threadIdx.x; i <= EL; i += THREADS) {
      long long o = offsets[i];
      m.seg[i] = (int)(o < 0 ? 0 : (o > R ? R : o));
    }
  }
  __syncthreads();
  // Each thread owns a run of consecutive experts.
  const int per = (EL + THREADS - 1) / THREADS;
  const int e0 = threadIdx.x * per;
  int sum = 0;
  for (int e = e0; e < e0 + per && e < EL; ++e) {
    int rows = m.seg[e + 1] - m.seg[e];
    sum += rows > 0 ? (rows + BM - 1) / BM * n_tiles : 0;
  }
  int total = 0;
  int run = block_exclusive_scan<THREADS>(sum, scratch, &total);
  for (int e = e0; e < e0 + per && e < EL; ++e) {
    m.first[e] = run;
    int rows = m.seg[e + 1] - m.seg[e];
    run += rows > 0 ? (rows + BM - 1) / BM * n_tiles : 0;
  }
  if (threadIdx.x == 0) m.first[EL] = total;
  __syncthreads();
  return m;
}

// Diagnostics (ops::RunOptions::sm_trace, partition tests): block b < n writes the SM it runs
// on to trace[b]. Null trace: nothing (the normal run; one uniform branch).
__device__ __forceinline__ void record_sm(int* trace, long long n) {
  if (trace != nullptr && threadIdx.x == 0 && (long long)blockIdx.x < n) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    trace[blockIdx.x] = (int)sm;
  }
}

struct Tile {
  int expert, n_tile, row0, row_end;
};

// The rows of each of an expert's m-tiles: BM (the last tile the rest), or (EVEN) the rows split
// evenly in multiples of 16, so that an expert a little over BM rows makes two tiles of about
// half its rows rather than a full one and a sliver (never more tiles: the span is at most BM).
template <int BM, bool EVEN>
__device__ __forceinline__ int m_tile_span(int rows) {
  const int m = (rows + BM - 1) / BM;
  return EVEN && m > 1 ? ((rows + m - 1) / m + 15) & ~15 : BM;
}

// Places t on m-tile q of its expert: row0, and row_end (EVEN: the tile's own last row + 1, the
// tiles by m_tile_span; else the expert's).
template <int BM, bool EVEN>
__device__ __forceinline__ void place_m_tile(const TileMap& m, Tile& t, int q) {
  const int first = m.seg[t.expert], end = m.seg[t.expert + 1];
  const int span = m_tile_span<BM, EVEN>(end - first);
  t.row0 = first + q * span;
  t.row_end = EVEN ? min(t.row0 + span, end) : end;
}

template <int BM, bool EVEN = false>
__device__ __forceinline__ Tile decode_tile(const TileMap& m, int t) {
  int lo = 0, hi = m.EL - 1;  // the last expert whose first tile is <= t
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (m.first[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int rows = m.seg[lo + 1] - m.seg[lo];
  const int m_tiles = (rows + BM - 1) / BM;
  const int local = t - m.first[lo];
  Tile tile;
  tile.expert = lo;
  tile.n_tile = local / m_tiles;
  place_m_tile<BM, EVEN>(m, tile, local % m_tiles);
  return tile;
}

// n-tiles of BN weight columns over N output columns: with SwiGLU a tile's BN columns are BN/2
// gate + BN/2 up columns, so it makes BN/2 outputs. (Launchers: ptxop::gemm_n_tiles.)
template <int EPI, int BN>
__device__ __forceinline__ int n_tiles_of(long long N) {
  return EPI == kSwigluBf16 ? (int)((N + BN / 2 - 1) / (BN / 2)) : (int)((N + BN - 1) / BN);
}

// The global column of 8-column chunk `chunk` of n-tile `n_tile` (tile width BN) of the
// weights, and in *valid how many of its 8 columns exist. With SwiGLU the tile's first BN/2
// columns are gate columns [j, j + BN/2) and the rest the up columns [N + j, ...) that pair
// with them (the weights have 2N columns).
template <int EPI, int BN>
__device__ __forceinline__ long long b_column(int n_tile, int chunk, long long N, long long* valid) {
  constexpr int kHalf = BN / 16;  // chunks per half tile
  long long col, left;
  if (EPI == kSwigluBf16) {
    const long long j = (long long)n_tile * (BN / 2) + (chunk % kHalf) * 8;
    col = chunk < kHalf ? j : N + j;
    left = N - j;
  } else {
    col = (long long)n_tile * BN + chunk * 8;
    left = N - col;
  }
  *valid = left <= 0 ? 0 : (left < 8 ? left : 8);
  return col;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

__device__ __forceinline__ unsigned short to_bf16(float v) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return r;
}

// silu(g) * u = g / (1 + e^-g) * u with the special-function unit's approximations alone:
// e^-g = ex2.approx.ftz(-g log2 e) and rcp.approx.ftz of 1 + e^-g (each within ~2 fp32 ulp, far
// inside the bf16 rounding that follows). History: an IEEE expf and division until 2026-11-29,
// then __expf and a correctly rounded reciprocal (__frcp_rn: bf16 SwiGLU GEMM 4.4% faster); its
// range checks and slow path (a call for every reciprocal of an infinite or huge denominator)
// and __expf's denormal fix-up cost the FP8 tall SwiGLU GEMM 5% of its time on the H200
// (bench/probes/fp8_kernel_rate.cu, 2026-11-30), of an epilogue that was ~9% of it.
// Large negative g: e^-g = inf, its reciprocal 0, the result a signed zero (no NaN from finite
// input); e^-g below 2^-126 flushes to 0, leaving 1 + 0 = 1 as before.
__device__ __forceinline__ float silu_mul(float g, float u) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(-g * 1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.f + e));
  return g * r * u;
}

// Swap-AB epilogues (gemm_sm90.cu, gemm_sm90_fp8.cu): the two adjacent output columns of one
// token that this lane stores, packed bf16, from accumulators i and i + 1 of block nb (SwiGLU: silu(gate) * up of d0 and d1): lanes 4 apart swap one value, so
// the even lane holds token 2(lane % 4) of both columns and the odd lane token + 1.
template <int EPI>
__device__ __forceinline__ uint32_t swap_out_pair(const float* d0, const float* d1, int i, int nb, bool odd) {
  float v0, v1;
  if (EPI == kSwigluBf16) {
    v0 = silu_mul(d0[i], d1[i]);
    v1 = silu_mul(d0[i + 1], d1[i + 1]);
  } else {
    v0 = nb ? d1[i] : d0[i];
    v1 = nb ? d1[i + 1] : d0[i + 1];
  }
  const float recv = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
  return odd ? pack_bf16x2(recv, v1) : pack_bf16x2(v0, recv);
}

// Stores the values of output row `row`, columns col and col+1 (col+1 may be past N).
template <int EPI>
__device__ __forceinline__ void store_pair(void* out, long long row, long long N, long long col, float v0, float v1) {
  if (col >= N) return;
  if (EPI == kStoreF32) {
    float* o = (float*)out + row * N + col;
    if (col + 1 < N && (N & 1) == 0) {
      *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
    } else {
      o[0] = v0;
      if (col + 1 < N) o[1] = v1;
    }
  } else {
    unsigned short* o = (unsigned short*)out + row * N + col;
    if (col + 1 < N && (N & 1) == 0) {
      *reinterpret_cast<uint32_t*>(o) = pack_bf16x2(v0, v1);
    } else {
      o[0] = to_bf16(v0);
      if (col + 1 < N) o[1] = to_bf16(v1);
    }
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// One 16-byte chunk (8 bf16) of a row from global memory into shared memory: cp.async when
// the row is 16-byte aligned (kVec), else element by element with the bounds checked.
// `valid` = elements of the chunk that exist (0..8).
template <bool kVec>
__device__ __forceinline__ void load_chunk(unsigned short* dst, const unsigned short* src, int valid,
                                           const void* any_address) {
  if (kVec) {
    cp_async16(smem_addr(dst), valid > 0 ? (const void*)src : any_address, valid > 0 ? 16 : 0);
  } else {
    unsigned short v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = j < valid ? src[j] : (unsigned short)0;
    uint4 q;
    q.x = v[0] | (uint32_t(v[1]) << 16);
    q.y = v[2] | (uint32_t(v[3]) << 16);
    q.z = v[4] | (uint32_t(v[5]) << 16);
    q.w = v[6] | (uint32_t(v[7]) << 16);
    *reinterpret_cast<uint4*>(dst) = q;
  }
}

// mma.sync m16n8k16 bf16 (fp32 accumulators) and its ldmatrix loads: sm_80 and later.
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace hc
