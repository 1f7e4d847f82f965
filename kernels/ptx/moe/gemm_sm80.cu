// Grouped GEMM for NVIDIA sm_80 and later (portable PTX): mma.sync m16n8k16 bf16 with fp32
// accumulators, ldmatrix from XOR-swizzled shared memory, a 4-stage cp.async pipeline, and a
// persistent grid that walks (expert, n-tile, m-tile) from the expert offsets in device
// memory (no host sync). One kernel template, three epilogues:
//   hc_moe_gemm_swiglu_sm80  moe_grouped_gemm_swiglu: out = silu(a @ w_gate) * (a @ w_up)
//   hc_moe_gemm_sm80         moe_grouped_gemm (down projection): out = a @ w
//   hc_gemm_bf16_sm80        gemm_bf16: one dense segment, f32 out
// The "_u" variants take rows that are not 16-byte aligned (K or N not a multiple of 8): the
// same pipeline with element loads instead of cp.async.
//   hc_moe_gemm_swiglu_gather_sm80[_u]  moe_grouped_gemm_swiglu_gather: row r of A is token row
//   x[row_to_slot[r] / topk] (moe_permute's map), read in place of a permuted copy
#include "gemm_common.cuh"

namespace hc {
namespace {

constexpr int BM = 128, BN = 128, BK = 32, STAGES = 4, THREADS = 256;
constexpr int A_ELEMS = BM * BK, B_ELEMS = BK * BN, STAGE_ELEMS = A_ELEMS + B_ELEMS;

// Where A's rows come from: row r itself, or (GATHER) token row row_to_slot[r] / topk of x,
// of T rows; a slot outside [0, T * topk) reads zeros (its output row is then unspecified, as
// the contract says, and nothing outside x is read).
struct RowSource {
  const int* row_to_slot;
  long long topk, T;
};
template <bool GATHER>
__device__ __forceinline__ long long a_row(const RowSource& src, long long r) {
  if (!GATHER) return r;
  const int slot = src.row_to_slot[r];
  return slot >= 0 && slot < src.T * src.topk ? slot / src.topk : -1;
}

// Shared-memory layouts (elements of 2 bytes), 16-byte chunks XOR-swizzled so that ldmatrix
// reads 8 rows of one logical chunk from 8 different bank groups:
//   A [BM][BK]: 4 chunks a row, chunk ^ ((row >> 1) & 3)
//   B [BK][BN]: 16 chunks a row, chunk ^ (row & 7)
__device__ __forceinline__ int a_off(int row, int chunk) { return row * BK + ((chunk ^ ((row >> 1) & 3)) << 3); }
__device__ __forceinline__ int b_off(int row, int chunk) { return row * BN + ((chunk ^ (row & 7)) << 3); }

template <int EPI, bool kVec, bool GATHER>
__device__ __forceinline__ void load_stage(unsigned short* s, const unsigned short* a, const unsigned short* b,
                                           const Tile& t, long long K, long long N, long long ldb, int k0,
                                           const RowSource& src) {
  // A: BM rows x BK/8 chunks = 512 chunks, two per thread.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * THREADS;
    const int row = c >> 2, chunk = c & 3;
    const long long grow = (long long)t.row0 + row;
    const long long k = k0 + chunk * 8;
    const long long arow = grow < t.row_end ? a_row<GATHER>(src, grow) : -1;
    int valid = (arow >= 0 && k < K) ? (int)(K - k < 8 ? K - k : 8) : 0;
    load_chunk<kVec>(s + a_off(row, chunk), valid ? a + arow * K + k : a, valid, a);
  }
  // B: BK rows x BN/8 chunks = 512 chunks, two per thread.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = threadIdx.x + i * THREADS;
    const int row = c >> 4, chunk = c & 15;
    const long long k = k0 + row;
    long long cols;
    const long long col = b_column<EPI, BN>(t.n_tile, chunk, N, &cols);
    const int valid = k < K ? (int)cols : 0;
    const unsigned short* src = b + (long long)t.expert * K * ldb + k * ldb + col;
    load_chunk<kVec>(s + A_ELEMS + b_off(row, chunk), src, valid, b);
  }
}

// The warp grid is 2 (m) x 4 (n); a warp owns 64 rows x 32 columns: 4 m16 x 4 n8 blocks.
// With SwiGLU its n8 blocks 0,1 are gate columns and 2,3 the up columns of the same outputs.
template <int EPI>
__device__ __forceinline__ void compute_stage(const unsigned short* s, float (&acc)[4][4][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const unsigned short* sa = s;
  const unsigned short* sb = s + A_ELEMS;
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    uint32_t af[4][4], bf[4][2];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      const int row = wm * 64 + mi * 16 + (lane & 15);
      ldmatrix_x4(af[mi], smem_addr(sa + a_off(row, kk * 2 + (lane >> 4))));
    }
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int base = EPI == kSwigluBf16 ? p * (BN / 2) + wn * 16 : wn * 32 + p * 16;
      const int krow = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const int col = base + (lane >> 4) * 8;
      uint32_t r[4];
      ldmatrix_x4_trans(r, smem_addr(sb + b_off(krow, col >> 3)));
      bf[2 * p][0] = r[0];
      bf[2 * p][1] = r[1];
      bf[2 * p + 1][0] = r[2];
      bf[2 * p + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma_bf16(acc[mi][ni], af[mi], bf[ni]);
  }
}

template <int EPI>
__device__ __forceinline__ void epilogue(void* out, const Tile& t, long long N, const float (&acc)[4][4][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int g = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long row = (long long)t.row0 + wm * 64 + mi * 16 + g + h * 8;
      if (row >= t.row_end) continue;
      if (EPI == kSwigluBf16) {
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
          const long long col = (long long)t.n_tile * (BN / 2) + wn * 16 + ni * 8 + tig * 2;
          store_pair<EPI>(out, row, N, col, silu_mul(acc[mi][ni][2 * h], acc[mi][ni + 2][2 * h]),
                          silu_mul(acc[mi][ni][2 * h + 1], acc[mi][ni + 2][2 * h + 1]));
        }
      } else {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const long long col = (long long)t.n_tile * BN + wn * 32 + ni * 8 + tig * 2;
          store_pair<EPI>(out, row, N, col, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
        }
      }
    }
}

template <int EPI, bool kVec, bool GATHER = false>
__device__ __forceinline__ void grouped_gemm(const unsigned short* a, const unsigned short* b, const int* offsets,
                                             void* out, long long R, long long K, long long N, long long EL,
                                             const RowSource& src = {}) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned short* stages = reinterpret_cast<unsigned short*>(smem_raw);
  int* ints = reinterpret_cast<int*>(smem_raw + STAGES * STAGE_ELEMS * 2);
  const int n_experts = offsets ? (int)EL : 1;
  const long long ldb = EPI == kSwigluBf16 ? 2 * N : N;
  const int n_tiles = n_tiles_of<EPI, BN>(N);
  TileMap map = build_tile_map<THREADS, BM>(offsets, R, n_experts, n_tiles, ints + 16, ints);
  const int total = map.first[n_experts];
  const int k_tiles = (int)((K + BK - 1) / BK);

  for (int ti = blockIdx.x; ti < total; ti += gridDim.x) {
    const Tile t = decode_tile<BM>(map, ti);
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < k_tiles) load_stage<EPI, kVec, GATHER>(stages + s * STAGE_ELEMS, a, b, t, K, N, ldb, s * BK, src);
      cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      const int nk = kt + STAGES - 1;
      if (nk < k_tiles) load_stage<EPI, kVec, GATHER>(stages + (nk % STAGES) * STAGE_ELEMS, a, b, t, K, N, ldb, nk * BK, src);
      cp_async_commit();
      compute_stage<EPI>(stages + (kt % STAGES) * STAGE_ELEMS, acc);
    }
    cp_async_wait<0>();
    __syncthreads();
    epilogue<EPI>(out, t, N, acc);
  }
}

}  // namespace
}  // namespace hc

#define HC_GEMM_ENTRY(NAME, EPI, VEC)                                                                      \
  extern "C" __global__ void __launch_bounds__(hc::THREADS) NAME(                                         \
      const unsigned short* a, const unsigned short* b, const int* offsets, void* out, long long R,        \
      long long K, long long N, long long EL) {                                                            \
    hc::grouped_gemm<EPI, VEC>(a, b, offsets, out, R, K, N, EL);                                           \
  }

HC_GEMM_ENTRY(hc_moe_gemm_swiglu_sm80, hc::kSwigluBf16, true)
HC_GEMM_ENTRY(hc_moe_gemm_swiglu_sm80_u, hc::kSwigluBf16, false)
HC_GEMM_ENTRY(hc_moe_gemm_sm80, hc::kStoreBf16, true)
HC_GEMM_ENTRY(hc_moe_gemm_sm80_u, hc::kStoreBf16, false)
HC_GEMM_ENTRY(hc_gemm_bf16_sm80, hc::kStoreF32, true)
HC_GEMM_ENTRY(hc_gemm_bf16_sm80_u, hc::kStoreF32, false)

// moe_grouped_gemm_swiglu_gather: the argument block of the others, then the row source.
#define HC_GEMM_GATHER_ENTRY(NAME, VEC)                                                                     \
  extern "C" __global__ void __launch_bounds__(hc::THREADS) NAME(                                         \
      const unsigned short* x, const unsigned short* b, const int* offsets, void* out, long long R,        \
      long long K, long long N, long long EL, const int* row_to_slot, long long topk, long long T) {       \
    hc::grouped_gemm<hc::kSwigluBf16, VEC, true>(x, b, offsets, out, R, K, N, EL, {row_to_slot, topk, T}); \
  }

HC_GEMM_GATHER_ENTRY(hc_moe_gemm_swiglu_gather_sm80, true)
HC_GEMM_GATHER_ENTRY(hc_moe_gemm_swiglu_gather_sm80_u, false)
