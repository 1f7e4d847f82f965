// gemm_bf16 (C[M, N] f32 = A[M, K] bf16 x B[K, N] bf16, row-major) on Hopper (sm_90a) when it
// has few output tiles: deterministic split-K across a thread-block cluster.
//
// Why: the grouped kernel (gemm_sm90.cu) gives each 128 x 256 output tile to one CTA. The
// DeepSeek-V3 router GEMM (M = 4096 tokens, K = 7168, N = 256 experts) has 32 such tiles, so
// 32 of 132 SMs worked (123 us; cuBLAS 39-45 us). Here a cluster of S CTAs computes one tile:
// CTA r of the cluster multiplies k-tiles [r * kt / S, (r + 1) * kt / S), keeps its fp32
// partial tile in its own shared memory, and after a cluster barrier each CTA sums 1/S of the
// tile's elements over the S partials, read through distributed shared memory (mapa +
// ld.shared::cluster) in the fixed order r = 0, 1, ..., S-1. No atomics and no workspace: the
// result is bit-identical run to run for a given S (the launcher picks S from the shape and
// the SM count, so another device may round differently, within the contract tolerance).
// Entry points hc_gemm_bf16_sm90_splitk{2,3,4,8}: S = 2, 3, 4, 8 (compile-time cluster
// dimensions, `.reqnctapercluster`, which a plain launch honours; grid = tiles x S, one tile
// per cluster, not persistent).
//
// CTA: 384 threads. Warpgroup 0 produces: one thread issues TMA copies (tensor maps from
// hal_device_encode_tensor_map) into a ring of 4 stages; warpgroups 1 and 2 multiply, consumer
// c owning rows [64c, 64c + 64) of the tile with wgmma m64n256k16 (128 fp32 accumulators per
// thread). Why TMA rather than the cp.async pipeline of gemm_sm90.cu: that kernel keeps only
// two stages of loads ahead, and its 123 us over 112 k-steps at 32 CTAs is ~1.1 us per 64-deep
// k-step, about half the tensor rate (latency-bound, it seems); a producer thread keeps every
// free slot loading, and the tensor cores never wait for address arithmetic.
// A stage (1024-byte aligned, 48 KB), the layouts the wgmma descriptors of gemm_sm90.cu use:
//   A: two 64 x 64 boxes (rows x k, K-major, SW128), rows row0 .. row0 + 127
//   B: four 64 x 64 boxes (k x 64 columns, MN-major, SW128), columns col0 .. col0 + 255
// Boxes wholly outside the tensors are not loaded (their slot keeps stale data, which only
// reaches accumulator rows or columns that are never stored); parts of boxes outside the
// tensors (rows >= M, k >= K, columns >= N) are zero-filled by the copy.
// full[s]: the producer's arrive.expect_tx + the copies' bytes; empty[s]: one arrival per
// consumer warp once its wgmma has read the slot.
//
// After the k loop the ring holds the partial tile: 128 rows x 264 floats (256 + 8 of padding,
// so that a warp's float2 stores of one accumulator column group fill the 32 banks twice
// instead of hitting 8 banks eight times), 132 KB of the 192 KB ring.
#include "gemm_common.cuh"
#include "sm90_common.cuh"

namespace hc {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, THREADS = 384;
constexpr int BOX_BYTES = 64 * 64 * 2;  // one 64 x 64 bf16 box
constexpr int A_BYTES = 2 * BOX_BYTES, STAGE_BYTES = A_BYTES + 4 * BOX_BYTES;
constexpr int LDP = BN + 8;              // partial tile row stride, floats
constexpr int TILE_F4 = BM * BN / 4;     // float4 groups of a tile
static_assert(BM * LDP * 4 <= STAGES * STAGE_BYTES, "the partial tile must fit in the ring");

// ---- cluster ---------------------------------------------------------------------------------
// (cluster_rank, cluster_sync and cluster_map: sm90_common.cuh)
__device__ __forceinline__ uint32_t cluster_index() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ float4 ld_cluster(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

// ta: 2-D map of a [M, K] (box 64 k x 64 rows); tb: 2-D map of b [K, N] (box 64 columns x
// 64 k); both bf16, 128-byte swizzle.
template <int S>
__device__ __forceinline__ void gemm_splitk(const TensorMap* ta, const TensorMap* tb, float* out, long long M,
                                            long long K, long long N) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t full = base + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;

  // Tile t = cluster index: m-tile t % m_tiles, n-tile t / m_tiles (clusters running together
  // share the weight columns). This CTA's k-tiles: [kb, kb + nk); nk may be 0 when K is short.
  const int rank = (int)cluster_rank();
  const int tile = (int)cluster_index();
  const int m_tiles = (int)((M + BM - 1) / BM);
  const int row0 = (tile % m_tiles) * BM, col0 = (tile / m_tiles) * BN;
  const int k_tiles = (int)((K + BK - 1) / BK);
  const int kb = k_tiles * rank / S, nk = k_tiles * (rank + 1) / S - kb;
  const int a_boxes = M - row0 > 64 ? 2 : 1;                     // 64-row boxes inside the tensor
  const int b_boxes = (int)min((N - col0 + 63) / 64, 4LL);        // 64-column boxes
  const int wg = threadIdx.x >> 7;

  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) mbar_init(full + 8 * i, 1), mbar_init(empty + 8 * i, 8);
    // The copies complete on these barriers through the async proxy.
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0 && nk > 0) {
      asm volatile("prefetch.tensormap [%0];\nprefetch.tensormap [%1];\n" ::"l"(ta), "l"(tb) : "memory");
      // Activations stream through once: evict them first. The weights are re-read by every
      // m-tile: keep them.
      uint64_t pa, pb;
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pa));
      asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(pb));
      const uint32_t bytes = (uint32_t)(a_boxes + b_boxes) * BOX_BYTES;
      for (int it = 0; it < nk; ++it) {
        const int st = it % STAGES;
        if (it >= STAGES) mbar_wait(empty + 8 * st, ((it / STAGES) - 1) & 1);
        const uint32_t s = base + st * STAGE_BYTES, bar = full + 8 * st;
        const int k = (kb + it) * BK;
        mbar_expect_tx(bar, bytes);
        for (int b = 0; b < a_boxes; ++b) tma_2d(s + b * BOX_BYTES, ta, k, row0 + 64 * b, bar, pa);
        for (int b = 0; b < b_boxes; ++b) tma_2d(s + A_BYTES + b * BOX_BYTES, tb, col0 + 64 * b, k, bar, pb);
      }
    }
    __syncwarp();
    cluster_sync();  // 1: the partial tiles are in shared memory
    cluster_sync();  // 2: every CTA has read them
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cg = wg - 1;
    // A tile of <= 64 rows: the second consumer's rows are not loaded; it only synchronises.
    const bool active = cg < a_boxes;
    const bool lead = (threadIdx.x & 31) == 0;
    float d[128];
    for (int it = 0; it < nk; ++it) {
      const int st = it % STAGES;
      mbar_wait(full + 8 * st, (it / STAGES) & 1);
      if (active) {
        const uint32_t sa = base + st * STAGE_BYTES + cg * BOX_BYTES, sb = base + st * STAGE_BYTES + A_BYTES;
        fence_n<128>(d);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          // A: 16 k = 32 bytes further along each swizzled row; B: 16 k rows = 2048 bytes.
          wgmma_m64n256k16(d, make_desc(sa + kk * 32, 16, 1024), make_desc(sb + kk * 2048, 8192, 1024),
                           (it > 0 || kk > 0) ? 1 : 0);
        wgmma_commit();
        fence_n<128>(d);
        wgmma_wait<1>();
      }
      // wait_group 1 leaves only this k-step's wgmma pending: the previous slot has been read.
      if (it > 0 && lead) mbar_arrive(empty + 8 * ((it - 1) % STAGES));
    }
    wgmma_wait<0>();
    fence_n<128>(d);
    if (nk == 0 || !active) {  // no k-tile here (K shorter than S k-tiles), or rows not loaded
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.f;
    }
    // Both consumers are done with the ring (their wgmma reads included) before it holds the
    // partial tile; every copy has landed (each full barrier was waited for).
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");

    // d[4j + 2h + q] is tile row cg * 64 + (warp % 4) * 16 + lane / 4 + 8h, column
    // 8j + (lane % 4) * 2 + q.
    const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t row = base + (uint32_t)((cg * 64 + w * 16 + (lane >> 2) + 8 * h) * LDP + (lane & 3) * 2) * 4;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j)
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(row + j * 32), "f"(d[4 * j + 2 * h]),
                     "f"(d[4 * j + 2 * h + 1])
                     : "memory");
    }
    cluster_sync();  // 1

    // This CTA's share of the tile: float4 groups [f0, f1) (row f / 64, columns 4 (f % 64) ..
    // + 3), summed over the partials of ranks 0 .. S-1 in that order (the order fixes the
    // rounding, so any CTA would produce the same bits). Two groups per thread per step keep
    // 2S remote loads in flight.
    uint32_t peer[S];
#pragma unroll
    for (int r = 0; r < S; ++r) peer[r] = cluster_map(base, (uint32_t)r);
    constexpr int PER = (TILE_F4 + S - 1) / S;
    const int f0 = rank * PER, f1 = min(f0 + PER, TILE_F4);
    for (int f = f0 + (int)threadIdx.x - 128; f < f1; f += 512) {
      float4 p[2][S];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int g = min(f + 256 * u, f1 - 1);  // a clamped duplicate is loaded, not stored
        const uint32_t off = (uint32_t)((g >> 6) * LDP + (g & 63) * 4) * 4;
#pragma unroll
        for (int r = 0; r < S; ++r) p[u][r] = ld_cluster(peer[r] + off);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int g = f + 256 * u;
        float4 s = p[u][0];
#pragma unroll
        for (int r = 1; r < S; ++r) {
          s.x += p[u][r].x;
          s.y += p[u][r].y;
          s.z += p[u][r].z;
          s.w += p[u][r].w;
        }
        const long long grow = row0 + (g >> 6), gcol = col0 + (g & 63) * 4;
        // N % 4 == 0 (the launcher requires N % 8): a group is wholly inside or outside.
        if (g < f1 && grow < M && gcol < N) *reinterpret_cast<float4*>(out + grow * N + gcol) = s;
      }
    }
    cluster_sync();  // 2: no CTA leaves (freeing its shared memory) while a peer still reads it
  }
}

}  // namespace
}  // namespace hc

#define HC_SPLITK_ENTRY(S)                                                                                  \
  extern "C" __global__ void __cluster_dims__(S, 1, 1) __launch_bounds__(hc::THREADS, 1)                    \
      hc_gemm_bf16_sm90_splitk##S(const __grid_constant__ hc::TensorMap ta,                                 \
                                  const __grid_constant__ hc::TensorMap tb, float* out, long long M,        \
                                  long long K, long long N) {                                               \
    hc::gemm_splitk<S>(&ta, &tb, out, M, K, N);                                                             \
  }

HC_SPLITK_ENTRY(2)
HC_SPLITK_ENTRY(3)
HC_SPLITK_ENTRY(4)
HC_SPLITK_ENTRY(8)
