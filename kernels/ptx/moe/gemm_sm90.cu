// Grouped GEMM for Hopper (sm_90a): wgmma (m64n256k16, bf16 in, fp32 accumulators in
// registers) reading both operands from 128-byte-swizzled shared memory, fed by a multistage
// cp.async pipeline, over the same persistent (expert, n-tile, m-tile) walk as gemm_sm80.cu.
//
// Why cp.async and not the tensor memory accelerator: a TMA descriptor (CUtensorMap) is made
// by the driver (cuTensorMapEncodeTiled) and the HAL has no entry point for it yet; cp.async
// with the swizzle computed by hand gives wgmma the layout it wants without one.
//
// CTA: 256 threads = 2 warpgroups; each owns 64 rows x 256 columns of a 128 x 256 tile
// (SwiGLU: 128 gate + the matching 128 up columns -> 128 outputs). BK = 64, 4 stages of
// 48 KB; loads run 2 stages ahead of the tensor cores, and one wgmma group stays in flight.
//
// Shared memory layouts (byte offsets inside a 1024-byte-aligned stage):
//   A [128 rows][64 k]   K-major, SW128: row r at r*128, 16-byte chunk c at (c ^ (r & 7)) * 16
//   B [64 k][256 n]      MN-major, SW128: four 64-column blocks of 8 KB; in block nb, k row at
//                        k*128, chunk (n % 64) / 8 at ((n % 64) / 8 ^ (k & 7)) * 16
#include "gemm_common.cuh"

namespace hc {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, THREADS = 256;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BK * BN * 2, STAGE_BYTES = A_BYTES + B_BYTES;

// wgmma shared-memory matrix descriptor: start address, leading and stride byte offsets
// (all >> 4), 128-byte swizzle (layout type 1 in bits 62-63).
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = 0;
  d |= uint64_t((saddr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo >> 4) & 0x3FFF) << 16;
  d |= uint64_t((sbo >> 4) & 0x3FFF) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_m64n256k16(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across wgmma boundaries.
__device__ __forceinline__ void fence_acc(float* d) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Loads one stage with NT threads; `tid` in [0, NT).
template <int EPI, int NT = THREADS>
__device__ __forceinline__ void load_stage(uint32_t s, const unsigned short* a, const unsigned short* b, const Tile& t,
                                           long long K, long long N, long long ldb, int k0, int tid = threadIdx.x) {
  // A: 128 rows x 8 chunks = 1024 chunks.
#pragma unroll
  for (int i = 0; i < 1024 / NT; ++i) {
    const int c = tid + i * NT;
    const int row = c >> 3, chunk = c & 7;
    const long long grow = (long long)t.row0 + row;
    const long long k = k0 + chunk * 8;
    const bool ok = grow < t.row_end && k < K;
    cp_async16(s + row * 128 + ((chunk ^ (row & 7)) << 4), ok ? (const void*)(a + grow * K + k) : (const void*)a,
               ok ? 16 : 0);
  }
  // B: 64 k rows x 32 chunks = 2048 chunks.
  const unsigned short* be = b + (long long)t.expert * K * ldb;
#pragma unroll
  for (int i = 0; i < 2048 / NT; ++i) {
    const int c = tid + i * NT;
    const int row = c >> 5, chunk = c & 31;
    const long long k = k0 + row;
    long long cols;
    const long long col = b_column<EPI, BN>(t.n_tile, chunk, N, &cols);
    const bool ok = k < K && cols > 0;
    const uint32_t dst = s + A_BYTES + (chunk >> 3) * 8192 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
    cp_async16(dst, ok ? (const void*)(be + k * ldb + col) : (const void*)b, ok ? 16 : 0);
  }
}

// Accumulator d[4j + 2h + q] of warpgroup `wg` is tile row wg * 64 + (warp % 4) * 16 + lane / 4
// + 8h, column 8j + (lane % 4) * 2 + q.
template <int EPI>
__device__ __forceinline__ void epilogue(void* out, const Tile& t, long long N, const float* d, int wg) {
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = (long long)t.row0 + wg * 64 + w * 16 + (lane >> 2) + 8 * h;
    if (row >= t.row_end) continue;
    if (EPI == kSwigluBf16) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const long long col = (long long)t.n_tile * (BN / 2) + 8 * j + (lane & 3) * 2;
        store_pair<EPI>(out, row, N, col, silu_mul(d[4 * j + 2 * h], d[4 * (j + 16) + 2 * h]),
                        silu_mul(d[4 * j + 2 * h + 1], d[4 * (j + 16) + 2 * h + 1]));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const long long col = (long long)t.n_tile * BN + 8 * j + (lane & 3) * 2;
        store_pair<EPI>(out, row, N, col, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
    }
  }
}

template <int EPI>
__device__ __forceinline__ void grouped_gemm(const unsigned short* a, const unsigned short* b, const int* offsets,
                                             void* out, long long R, long long K, long long N, long long EL) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  int* ints = reinterpret_cast<int*>(smem_raw + (base - raw) + STAGES * STAGE_BYTES);
  const int n_experts = offsets ? (int)EL : 1;
  const long long ldb = EPI == kSwigluBf16 ? 2 * N : N;
  const int n_tiles = EPI == kSwigluBf16 ? (int)((N + BN / 2 - 1) / (BN / 2)) : (int)((N + BN - 1) / BN);
  TileMap map = build_tile_map<THREADS, BM>(offsets, R, n_experts, n_tiles, ints + 16, ints);
  const int total = map.first[n_experts];
  const int k_tiles = (int)((K + BK - 1) / BK);
  const int wg = threadIdx.x >> 7;

  float d[128];
  for (int ti = blockIdx.x; ti < total; ti += gridDim.x) {
    const Tile t = decode_tile<BM>(map, ti);
    // A tile of 64 rows or fewer (an expert's last rows): the second warpgroup has nothing to
    // multiply and leaves the tensor cores to the first (it still loads and synchronises).
    const bool active = wg == 0 || t.row_end - t.row0 > 64;
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) {
      if (s < k_tiles) load_stage<EPI>(base + s * STAGE_BYTES, a, b, t, K, N, ldb, s * BK);
      cp_async_commit();
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<STAGES - 3>();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      // The slot of k-tile kt + STAGES - 2 was read by the wgmma of kt - 2, which every
      // thread has waited for (wait_group 1 at the end of kt - 1) before the barrier above.
      const int nk = kt + STAGES - 2;
      if (nk < k_tiles) load_stage<EPI>(base + (nk % STAGES) * STAGE_BYTES, a, b, t, K, N, ldb, nk * BK);
      cp_async_commit();

      if (!active) continue;
      const uint32_t sa = base + (kt % STAGES) * STAGE_BYTES + wg * 64 * 128;
      const uint32_t sb = base + (kt % STAGES) * STAGE_BYTES + A_BYTES;
      fence_acc(d);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // A: 16 k = 32 bytes further along each swizzled row; B: 16 k rows = 2048 bytes.
        wgmma_m64n256k16(d, make_desc(sa + kk * 32, 16, 1024), make_desc(sb + kk * 2048, 8192, 1024),
                         (kt > 0 || kk > 0) ? 1 : 0);
      }
      wgmma_commit();
      fence_acc(d);
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    fence_acc(d);
    cp_async_wait<0>();
    __syncthreads();  // every warpgroup is done with the stages before the next tile loads

    epilogue<EPI>(out, t, N, d, wg);
  }
}


// ---- warp-specialized variant ---------------------------------------------------------------
// 384 threads: warpgroup 0 loads (cp.async, 56 registers), warpgroups 1 and 2 multiply (224
// registers). Stages are handed over with mbarriers instead of block barriers, so the tensor
// cores never wait for address arithmetic and the loads of the next tile overlap the
// epilogue of this one. full[s]: the 128 loader threads arrive once the stage's bytes are in
// shared memory (each after its own cp.async.wait_group and a proxy fence, so wgmma sees the
// data); empty[s]: the 256 multiplying threads arrive once their wgmma has read the stage.
constexpr int WS_THREADS = 384;

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

template <int EPI>
__device__ __forceinline__ void grouped_gemm_ws(const unsigned short* a, const unsigned short* b, const int* offsets,
                                                void* out, long long R, long long K, long long N, long long EL) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t bars = base + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES]
  int* ints = reinterpret_cast<int*>(smem_raw + (base - raw) + STAGES * STAGE_BYTES + 16 * STAGES);
  const int n_experts = offsets ? (int)EL : 1;
  const long long ldb = EPI == kSwigluBf16 ? 2 * N : N;
  const int n_tiles = EPI == kSwigluBf16 ? (int)((N + BN / 2 - 1) / (BN / 2)) : (int)((N + BN - 1) / BN);
  if (threadIdx.x == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(bars + 8 * i, 128);
      mbar_init(bars + 8 * (STAGES + i), 256);
    }
  }
  TileMap map = build_tile_map<WS_THREADS, BM>(offsets, R, n_experts, n_tiles, ints + 16, ints);  // syncs
  const int total = map.first[n_experts];
  const int k_tiles = (int)((K + BK - 1) / BK);
  const int wg = threadIdx.x >> 7;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    const int tid = threadIdx.x;
    uint32_t it = 0;
    for (int ti = blockIdx.x; ti < total; ti += gridDim.x) {
      const Tile t = decode_tile<BM>(map, ti);
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const uint32_t st = it % STAGES;
        if (it >= STAGES) mbar_wait(bars + 8 * (STAGES + st), ((it / STAGES) - 1) & 1);
        load_stage<EPI, 128>(base + st * STAGE_BYTES, a, b, t, K, N, ldb, kt * BK, tid);
        cp_async_commit();
        if (it > 0) {  // the previous stage has landed: publish it
          cp_async_wait<1>();
          asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
          mbar_arrive(bars + 8 * ((it - 1) % STAGES));
        }
      }
    }
    if (it > 0) {
      cp_async_wait<0>();
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      mbar_arrive(bars + 8 * ((it - 1) % STAGES));
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
    const int cg = wg - 1;  // consumer warpgroup: rows cg * 64 ... + 63 of the tile
    float d[128];
    uint32_t it = 0;
    for (int ti = blockIdx.x; ti < total; ti += gridDim.x) {
      const Tile t = decode_tile<BM>(map, ti);
      const bool active = cg == 0 || t.row_end - t.row0 > 64;
      const uint32_t first = it;
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const uint32_t st = it % STAGES;
        mbar_wait(bars + 8 * st, (it / STAGES) & 1);
        if (active) {
          const uint32_t sa = base + st * STAGE_BYTES + cg * 64 * 128;
          const uint32_t sb = base + st * STAGE_BYTES + A_BYTES;
          fence_acc(d);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk)
            wgmma_m64n256k16(d, make_desc(sa + kk * 32, 16, 1024), make_desc(sb + kk * 2048, 8192, 1024),
                             (kt > 0 || kk > 0) ? 1 : 0);
          wgmma_commit();
          fence_acc(d);
          wgmma_wait<1>();
        }
        if (it > first) mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));  // its wgmma is done
      }
      wgmma_wait<0>();
      fence_acc(d);
      if (it > first) mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
      if (active) epilogue<EPI>(out, t, N, d, cg);
    }
  }
}
}  // namespace
}  // namespace hc

#define HC_GEMM_ENTRY(NAME, EPI)                                                                             \
  extern "C" __global__ void __launch_bounds__(hc::THREADS, 1)                                              \
      NAME(const unsigned short* a, const unsigned short* b, const int* offsets, void* out, long long R,     \
           long long K, long long N, long long EL) {                                                         \
    hc::grouped_gemm<EPI>(a, b, offsets, out, R, K, N, EL);                                                  \
  }

HC_GEMM_ENTRY(hc_moe_gemm_swiglu_sm90, hc::kSwigluBf16)
HC_GEMM_ENTRY(hc_moe_gemm_sm90, hc::kStoreBf16)
HC_GEMM_ENTRY(hc_gemm_bf16_sm90, hc::kStoreF32)

#define HC_GEMM_WS_ENTRY(NAME, EPI)                                                                          \
  extern "C" __global__ void __launch_bounds__(hc::WS_THREADS, 1)                                           \
      NAME(const unsigned short* a, const unsigned short* b, const int* offsets, void* out, long long R,     \
           long long K, long long N, long long EL) {                                                         \
    hc::grouped_gemm_ws<EPI>(a, b, offsets, out, R, K, N, EL);                                               \
  }

HC_GEMM_WS_ENTRY(hc_moe_gemm_swiglu_sm90ws, hc::kSwigluBf16)
HC_GEMM_WS_ENTRY(hc_moe_gemm_sm90ws, hc::kStoreBf16)
HC_GEMM_WS_ENTRY(hc_gemm_bf16_sm90ws, hc::kStoreF32)
