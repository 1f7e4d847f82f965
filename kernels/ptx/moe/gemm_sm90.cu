// Grouped GEMMs for Hopper (sm_90a), three kernels over the same persistent (expert, n-tile,
// m-tile) walk as gemm_sm80.cu, all with wgmma (bf16 in, fp32 accumulators in registers)
// reading both operands from 128-byte-swizzled shared memory:
//   - grouped_gemm (*_sm90): m64n256k16, fed by a multistage cp.async pipeline. Runs wherever
//     Hopper does (no tensor map needed) and serves gemm_bf16 (f32 out) and rows that the TMA
//     kernels cannot take.
//   - grouped_gemm_tma (*_sm90tma, below): tiles of up to 256 rows so that an expert's weights
//     stream once, loaded by the tensor memory accelerator with tensor maps from
//     hal_device_encode_tensor_map; the MoE GEMMs' default where the next one's cubin does not
//     load.
//   - grouped_gemm_swap (*_sm90swap, *_sm90swapw, further below): swap-AB, the weights as the
//     wgmma M operand and the tokens as N in steps of 16; its warp-specialized build is the
//     default for both MoE GEMMs, and its gather build serves moe_grouped_gemm_swiglu_gather.
//
// grouped_gemm. CTA: 256 threads = 2 warpgroups; each owns 64 rows x 256 columns of a 128 x 256 tile
// (SwiGLU: 128 gate + the matching 128 up columns -> 128 outputs). BK = 64, 4 stages of
// 48 KB; loads run 2 stages ahead of the tensor cores, and one wgmma group stays in flight.
//
// Shared memory layouts (byte offsets inside a 1024-byte-aligned stage):
//   A [128 rows][64 k]   K-major, SW128: row r at r*128, 16-byte chunk c at (c ^ (r & 7)) * 16
//   B [64 k][256 n]      MN-major, SW128: four 64-column blocks of 8 KB; in block nb, k row at
//                        k*128, chunk (n % 64) / 8 at ((n % 64) / 8 ^ (k & 7)) * 16
#include "gemm_common.cuh"
#include "sm90_common.cuh"

namespace hc {
namespace {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, THREADS = 256;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BK * BN * 2, STAGE_BYTES = A_BYTES + B_BYTES;

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

// Stores the accumulators of one m64nCOLS wgmma chain: d[4j + 2h + q] is tile row blk * 64 +
// (warp % 4) * 16 + lane / 4 + 8h, column 8j + (lane % 4) * 2 + q. With SwiGLU the first
// COLS/2 columns are gate columns and the rest the up columns that pair with them, so an
// n-tile makes COLS/2 outputs.
template <int EPI, int COLS>
__device__ __forceinline__ void epilogue(void* out, const Tile& t, long long N, const float* d, int blk) {
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
  constexpr int J = COLS / 8;  // 8-column groups
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = (long long)t.row0 + blk * 64 + w * 16 + (lane >> 2) + 8 * h;
    if (row >= t.row_end) continue;
    if (EPI == kSwigluBf16) {
#pragma unroll
      for (int j = 0; j < J / 2; ++j) {
        const long long col = (long long)t.n_tile * (COLS / 2) + 8 * j + (lane & 3) * 2;
        store_pair<EPI>(out, row, N, col, silu_mul(d[4 * j + 2 * h], d[4 * (j + J / 2) + 2 * h]),
                        silu_mul(d[4 * j + 2 * h + 1], d[4 * (j + J / 2) + 2 * h + 1]));
      }
    } else {
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const long long col = (long long)t.n_tile * COLS + 8 * j + (lane & 3) * 2;
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
  const int n_tiles = n_tiles_of<EPI, BN>(N);
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
      fence_n<128>(d);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // A: 16 k = 32 bytes further along each swizzled row; B: 16 k rows = 2048 bytes.
        wgmma_m64n256k16(d, make_desc(sa + kk * 32, 16, 1024), make_desc(sb + kk * 2048, 8192, 1024),
                         (kt > 0 || kk > 0) ? 1 : 0);
      }
      wgmma_commit();
      fence_n<128>(d);
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    fence_n<128>(d);
    cp_async_wait<0>();
    __syncthreads();  // every warpgroup is done with the stages before the next tile loads

    epilogue<EPI, BN>(out, t, N, d, wg);
  }
}


// ---- the tensor-memory-accelerator kernel (default on Hopper when the HAL makes tensor maps) --
// Why another kernel: at the DeepSeek-V3 shape (4096 tokens, 256 experts, ~128 rows each) the
// kernel above reads each expert's weights once per 128-row tile, i.e. twice for most experts
// (~1.5x the weight bytes; ncu: DRAM ~86% busy, L2 hit 15%), and spends issue slots on
// cp.async address arithmetic. Here a tile is up to 256 rows x 128 weight columns, so an
// expert of up to 256 rows streams its weights exactly once, and the loads are TMA copies
// issued by one thread, so the tensor cores and the memory system never wait for address math.
//
// CTA: 384 threads. Warpgroup 0 produces: one thread issues the A copies, another the B copies;
// warpgroups 1 and 2 multiply: consumer c owns the tile's 64-row blocks c and c + 2 (so a
// 128-row tile keeps both busy), each block an m64n128 wgmma chain with 64 fp32 accumulators
// per thread. Per k-step of 64, in two rings of slots (1024-byte aligned):
//   A (4 slots x 32 KB): up to four 64 x 64 boxes (rows x k, K-major, SW128), only as many as
//      the tile has rows
//   B (4 or 5 slots x 16 KB): two 64 x 64 boxes (k x 64 columns, MN-major, SW128): for SwiGLU the
//      gate columns [64j, 64j + 64) and the matching up columns [N + 64j, ...) -> 64 outputs
//      per tile; else columns [128j, 128j + 128)
// which are exactly the layouts the wgmma descriptors of the kernel above describe. Rows past
// the tensor (R), k past K and columns past the weights are zero-filled by the copy; rows of
// the next expert inside a partial 64-row block are multiplied but never stored.
// Why two rings, each with its own producer thread: the B copies (DRAM) need not wait behind
// the A copies (mostly L2) of the same k-step, and the B ring's depth can follow the batch.
// Two builds (docs/kernels/ptx.md has the measurements): 4 B slots (*_sm90tma), best with
// ~128 rows per expert (4096 tokens, where more B in flight made the down GEMM slower), and
// 5 B slots (*_sm90tma_b5), best with few rows per expert (128-512 tokens: weight-streaming
// only, where more bytes in flight is what counts).
// full[s]: one arrive (its producer's expect_tx) + the copies' bytes; empty[s]: one arrive
// per consumer warp once its wgmma has read the slot.
constexpr int T_BM = 256, T_BN = 128, T_THREADS = 384;
constexpr int BOX_BYTES = 64 * 64 * 2;
constexpr int A_SLOTS = 4;
constexpr int A_SLOT_BYTES = 4 * BOX_BYTES, B_SLOT_BYTES = 2 * BOX_BYTES;

__device__ __forceinline__ void wgmma_m64n128k16(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// One k-tile (4 x k16) of the 64-row block at `sa` into d.
__device__ __forceinline__ void mma_k_tile(float* d, uint32_t sa, uint32_t sb, bool first) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n128k16(d, make_desc(sa + kk * 32, 16, 1024), make_desc(sb + kk * 2048, 8192, 1024),
                     (!first || kk > 0) ? 1 : 0);
}

// ta: 2-D map of a [R, K] (box 64 k x 64 rows); ta16: the same with 16-row boxes, for the
// last rows of a tile (A is the operand every n-tile of an expert re-reads from L2: loading a
// 70-row tile as 64 + 16 rows instead of 2 x 64 saves that traffic; rows of a block that are
// not loaded hold stale data, which only ever reaches output rows that are not stored);
// tb: 3-D map of b [EL, K, ldb] (box 64 columns x 64 k x 1 expert); all bf16, 128-byte swizzle
// (the swizzle follows the shared-memory address, so a 16-row box at a 2 KB offset lands where
// the rows of a 64-row box would).
template <int EPI, int B_SLOTS>
__device__ __forceinline__ void grouped_gemm_tma(const TensorMap* ta, const TensorMap* ta16, const TensorMap* tb,
                                                 const int* offsets,
                                                 void* out, long long R, long long K, long long N, long long EL) {
  constexpr int RING_BYTES = A_SLOTS * A_SLOT_BYTES + B_SLOTS * B_SLOT_BYTES;
  constexpr int N_BARS = 2 * (A_SLOTS + B_SLOTS);
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t ring_a = base, ring_b = base + A_SLOTS * A_SLOT_BYTES;
  // fullA[A_SLOTS], emptyA[A_SLOTS], fullB[B_SLOTS], emptyB[B_SLOTS]
  const uint32_t full_a = base + RING_BYTES, empty_a = full_a + 8 * A_SLOTS, full_b = empty_a + 8 * A_SLOTS,
                 empty_b = full_b + 8 * B_SLOTS;
  int* ints = reinterpret_cast<int*>(smem_raw + (base - raw) + RING_BYTES + 8 * N_BARS);
  const int n_experts = (int)EL;
  const int n_tiles = n_tiles_of<EPI, T_BN>(N);
  if (threadIdx.x == 0) {
    for (int i = 0; i < A_SLOTS; ++i) mbar_init(full_a + 8 * i, 1), mbar_init(empty_a + 8 * i, 8);
    for (int i = 0; i < B_SLOTS; ++i) mbar_init(full_b + 8 * i, 1), mbar_init(empty_b + 8 * i, 8);
    // The copies complete on these barriers through the async proxy.
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  TileMap map = build_tile_map<T_THREADS, T_BM>(offsets, R, n_experts, n_tiles, ints + 16, ints);  // syncs
  const int total = map.first[n_experts];
  const int k_tiles = (int)((K + 63) / 64);
  const int wg = threadIdx.x >> 7;

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    // Thread 0 issues the A copies, thread 32 (another warp) the B copies: each waits only
    // for its own ring.
    const bool a_producer = threadIdx.x == 0, b_producer = threadIdx.x == 32;
    if (a_producer || b_producer) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(a_producer ? ta : tb) : "memory");
      if (a_producer) asm volatile("prefetch.tensormap [%0];\n" ::"l"(ta16) : "memory");
      // Weights stream through once: evict them first. Activations are re-read by every
      // n-tile of their expert: keep them.
      uint64_t policy;
      if (a_producer) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
      else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
      const uint32_t slots = a_producer ? A_SLOTS : B_SLOTS;
      const uint32_t fulls = a_producer ? full_a : full_b, empties = a_producer ? empty_a : empty_b;
      uint32_t it = 0;
      for (int ti = blockIdx.x; ti < total; ti += gridDim.x) {
        const Tile t = decode_tile<T_BM>(map, ti);
        const int rows = min(t.row_end - t.row0, T_BM);
        const int full_blocks = rows >> 6, tail16 = ((rows & 63) + 15) >> 4;  // 64-row boxes, 16-row boxes
        const int c0 = EPI == kSwigluBf16 ? t.n_tile * 64 : t.n_tile * 128;
        const int c1 = EPI == kSwigluBf16 ? (int)N + t.n_tile * 64 : c0 + 64;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const uint32_t st = it % slots;
          if (it >= slots) mbar_wait(empties + 8 * st, ((it / slots) - 1) & 1);
          const uint32_t full = fulls + 8 * st;
          if (a_producer) {
            const uint32_t s = ring_a + st * A_SLOT_BYTES;
            mbar_expect_tx(full, (uint32_t)full_blocks * BOX_BYTES + (uint32_t)tail16 * (BOX_BYTES / 4));
            for (int b = 0; b < full_blocks; ++b) tma_2d(s + b * BOX_BYTES, ta, kt * 64, t.row0 + 64 * b, full, policy);
            for (int j = 0; j < tail16; ++j)
              tma_2d(s + full_blocks * BOX_BYTES + j * (BOX_BYTES / 4), ta16, kt * 64,
                     t.row0 + 64 * full_blocks + 16 * j, full, policy);
          } else {
            const uint32_t s = ring_b + st * B_SLOT_BYTES;
            mbar_expect_tx(full, 2 * BOX_BYTES);
            tma_3d(s, tb, c0, kt * 64, t.expert, full, policy);
            tma_3d(s + BOX_BYTES, tb, c1, kt * 64, t.expert, full, policy);
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cg = wg - 1;
    const bool lead = (threadIdx.x & 31) == 0;
    auto release = [&](uint32_t it) {  // k-step it's slots: one arrival per warp
      if (lead) {
        mbar_arrive(empty_a + 8 * (it % A_SLOTS));
        mbar_arrive(empty_b + 8 * (it % B_SLOTS));
      }
    };
    float d0[64], d1[64];
    uint32_t it = 0;
    for (int ti = blockIdx.x; ti < total; ti += gridDim.x) {
      const Tile t = decode_tile<T_BM>(map, ti);
      const int blocks = (min(t.row_end - t.row0, T_BM) + 63) >> 6;
      const int nb = (blocks > cg) + (blocks > cg + 2);  // blocks cg and cg + 2
      const uint32_t first = it;
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const uint32_t sta = it % A_SLOTS, stb = it % B_SLOTS;
        mbar_wait(full_b + 8 * stb, (it / B_SLOTS) & 1);
        mbar_wait(full_a + 8 * sta, (it / A_SLOTS) & 1);
        const uint32_t sa = ring_a + sta * A_SLOT_BYTES + cg * BOX_BYTES, sb = ring_b + stb * B_SLOT_BYTES;
        // Two paths rather than a branch between wgmmas: ptxas keeps each chain asynchronous.
        if (nb == 2) {
          fence_n<64>(d0);
          fence_n<64>(d1);
          wgmma_fence();
          mma_k_tile(d0, sa, sb, kt == 0);
          mma_k_tile(d1, sa + 2 * BOX_BYTES, sb, kt == 0);
          wgmma_commit();
          fence_n<64>(d0);
          fence_n<64>(d1);
          wgmma_wait<1>();
        } else if (nb == 1) {
          fence_n<64>(d0);
          wgmma_fence();
          mma_k_tile(d0, sa, sb, kt == 0);
          wgmma_commit();
          fence_n<64>(d0);
          wgmma_wait<1>();
        }
        // The slots before these have been read (wait_group 1 leaves only this one pending).
        if (it > first) release(it - 1);
      }
      wgmma_wait<0>();
      fence_n<64>(d0);
      fence_n<64>(d1);
      if (it > first) release(it - 1);
      if (nb >= 1) epilogue<EPI, T_BN>(out, t, N, d0, cg);
      if (nb >= 2) epilogue<EPI, T_BN>(out, t, N, d1, cg + 2);
    }
  }
}

// ---- swap-AB: the weights as the wgmma M operand, the tokens as N (the down projection's default) ----
// Why: at ~128 rows per expert (4096 tokens) the kernel above spends its tensor-core time on
// 64-row blocks (an expert of 130 rows computes 192) and re-reads each expert's activation rows
// from L2 once per 64 outputs, while one k-step's compute is about as long as its weights take
// to arrive. Here D^T = W^T A^T: a wgmma's M is 64 weight columns and its N the expert's tokens
// in steps of 16 (130 rows compute as 144), so a tile can be 256 weight columns wide (the
// activation rows are read half as often, and a k-step carries 32 KB of weights, twice the
// bytes in flight per slot) with at most S_TN tokens of accumulators per thread.
//
// CTA: 256 threads, two warpgroups c = 0, 1, each owning two 64-column weight blocks and all the
// tile's tokens: for SwiGLU gate columns [128j + 64c, +64) and the up columns that pair with
// them (64 outputs), else columns [256j + 128c, +128). Thread 0 also issues the copies (see
// SwapProducer). Why no producer warp: up to 176 tokens need 176 accumulators per thread. A
// 384-thread CTA starts with 168 registers, and the driver's JIT (which compiles our PTX)
// spilled the accumulators to local memory under setmaxnreg (ncu on an H200: 370 M local
// requests, 12x slower) where the toolkit's ptxas did not; 288 threads at 224 registers do not
// fit (the driver allows 256: each of the 4 SM sub-partitions holds 16 K registers). 256 threads
// start with up to 255 registers, so no compiler needs to look past the entry limit. (Since
// then launchers can load the toolkit's cubin instead, ptx_launch.hpp: a producer-warpgroup
// build with setmaxnreg, loaded that way, is the next step, docs/kernels/ptx.md.)
// Tried and not kept, both slower (figures: docs/kernels/ptx.md, docs/PERFORMANCE.md): a weight
// ring and producer thread per warpgroup, so that a slot is refilled as soon as its own
// warpgroup is done, and a narrow build of 128 weight columns x 256 tokens.
// Per k-step of 64, S_A_SLOTS token slots and S_B_SLOTS weight slots (4 and 4; 3 and 5 with
// 144-token tiles was slower, docs/PERFORMANCE.md) of:
//   tokens  (22 KB): the tile's rows, rounded up to 16, K-major SW128 (64-row boxes, then 16-row
//           boxes): the wgmma B operand, not transposed
//   weights (32 KB): four 64 x 64 boxes (k x 64 columns, MN-major SW128), box 2c + h for consumer
//           c: the wgmma A operand, transposed by the instruction
// An expert of more than S_TN rows takes several tiles per n-tile (adjacent in the walk, so the
// second reads the weights from L2). The accumulators hold D^T (row = weight column, column =
// token); the epilogue swaps pairs between neighbouring lanes so that each store writes two
// adjacent output columns of one token.
constexpr int S_TN = 176, S_BN = 256, S_A_SLOTS = 4, S_B_SLOTS = 4, S_THREADS = 256, S_WS_THREADS = 384;
constexpr int S_MIN_SLOTS = S_A_SLOTS < S_B_SLOTS ? S_A_SLOTS : S_B_SLOTS;
constexpr int S_A_SLOT_BYTES = S_TN * 128, S_B_SLOT_BYTES = 4 * BOX_BYTES;

// wgmma m64nNTk16, A (weights) MN-major from shared memory, B (tokens) K-major: NT/2 accumulators.
template <int NT>
__device__ __forceinline__ void wgmma_swap(float* d, uint64_t desc_a, uint64_t desc_b, int scale_d);
// imm-scale-a 1, imm-scale-b 1, imm-trans-a 1 (the weights are [k][column]), imm-trans-b 0.
#define HC_WGMMA_SWAP(NT, K8, IA, IB, IS) HC_WGMMA_SS(wgmma_swap, NT, 16, "bf16.bf16", "1, 1, 1, 0", K8, IA, IB, IS)
HC_WGMMA_N16_TO_128(HC_WGMMA_SWAP)
HC_WGMMA_SWAP(144, 9, 72, 73, 74)
HC_WGMMA_SWAP(160, 10, 80, 81, 82)
HC_WGMMA_SWAP(176, 11, 88, 89, 90)
#undef HC_WGMMA_SWAP

// Stores one consumer's part of a swap-AB tile: d0/d1 = blocks 2c and 2c + 1 (SwiGLU: gate, up).
// d[4j + 2h + q] is weight column 16 (warp % 4) + lane / 4 + 8h of the block, token 8j + (lane %
// 4) * 2 + q. Lanes 4 apart hold neighbouring columns: the even one keeps token 8j + 2(lane % 4)
// of both columns, the odd one token + 1, so each store is two adjacent bf16 of one output row.
template <int EPI, int NT>
__device__ __forceinline__ void epilogue_swap(void* out, const Tile& t, int rows, long long N, const float* d0,
                                              const float* d1, int cg) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, g = lane >> 2, qq = lane & 3;
  const bool odd = g & 1;
  constexpr int BLOCKS = EPI == kSwigluBf16 ? 1 : 2;  // SwiGLU: gate and up make one block of outputs
  // This thread's first output column; tokens go j by j (outer loop), so that the blocks share
  // the row address and the accumulators of a finished j free their registers.
  const long long col0 = (EPI == kSwigluBf16 ? (long long)t.n_tile * 128 + 64 * cg : (long long)t.n_tile * 256 + 128 * cg) +
                         16 * warp + (g & ~1);
  const int tok0 = 2 * qq + (odd ? 1 : 0);
  unsigned short* row = (unsigned short*)out + ((long long)t.row0 + tok0) * N;
#pragma unroll
  for (int j = 0; j < NT / 8; ++j, row += 8 * N) {
    const bool tok_ok = 8 * j + tok0 < rows;
#pragma unroll
    for (int nb = 0; nb < BLOCKS; ++nb) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t v = swap_out_pair<EPI>(d0, d1, 4 * j + 2 * h, nb, odd);
        const long long col = col0 + 64 * nb + 8 * h;
        if (tok_ok && col < N) *reinterpret_cast<uint32_t*>(row + col) = v;
      }
    }
  }
}

struct SwapRings {
  uint32_t ring_a, ring_b, full_a, empty_a, full_b, empty_b;
};

// The gather build (moe_grouped_gemm_swiglu_gather): row r of the tokens is token row
// row_to_slot[r] / topk of x [T, K]. Hopper's TMA has no row gather, and a TMA copy per row
// (1-row boxes) was 3x slower than the kernel on permuted rows (docs/PERFORMANCE.md), so
// S_ROW_WARPS of the S_GATHER_WARPS producer warps (the first S_GATHER_WARPS / 4 warpgroups)
// copy them with cp.async: 16-byte chunks placed as the 128-byte swizzle places them, zeros for
// padding rows and for slots outside [0, T * topk), completed by an async arrive per lane on the
// slot's full barrier (32 * S_ROW_WARPS arrivals); lane 0 of the last producer warp issues the
// weights alone, waiting only for the weight ring (thread 0 issuing them between its own row
// copies, once the token slot was free, was slower: the weights waited for the tokens). Each
// gathering warp keeps its own table of the tile's token rows (rows_generic). The kernel's time
// fell with each gathering warp up to eight (then level with the kernel on permuted rows on an
// H100), so it has two producer warpgroups (512 threads; the consumers then take 216 registers,
// not 232). It still streams fewer weight bytes per SM than the kernel on permuted rows does
// where memory is fast, so the layer takes the gather path only where memory is slow per SM
// (MoeLayer, moe_gather_path). The figures, and where Nsight Compute saw the consumers wait:
// docs/kernels/ptx.md and docs/PERFORMANCE.md.
constexpr int S_GATHER_WARPS = 8, S_GATHER_THREADS = 256 + 32 * S_GATHER_WARPS;
// Of those, S_ROW_WARPS gather rows and the last one's lane 0 issues the weights alone, so that
// the weight stream waits only for its own ring.
constexpr int S_ROW_WARPS = S_GATHER_WARPS - 1;
struct SwapGather {
  const unsigned short* x;
  const int* row_to_slot;
  int topk, T;  // the launcher checks that T * topk fits an int
};
__device__ __forceinline__ void cp_async16_hint(uint32_t dst, const void* src, int src_bytes, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(policy)
               : "memory");
}

// The copies. A producer walks the CTA's (tile, k-step) sequence on its own cursor and keeps up
// to S_A_SLOTS / S_B_SLOTS k-steps loaded ahead of the consumers: a slot is refilled once all 8 consumer warps
// have released it. fill(): thread 0 of the 256-thread kernel, between its own k-steps; it
// waits only for the k-step its own warpgroup needs next (the other warpgroup can always
// release that slot: every earlier k-step is loaded), otherwise it looks (test_wait) and comes
// back at the next k-step. run(): a thread of the warp-specialized kernel's producer warpgroup,
// which does nothing else, for the weight ring or the token ring.
struct SwapProducer {
  const TensorMap *ta, *ta16, *tb;
  TileMap map;
  int total, k_tiles, ti, kt, n16;
  Tile t;
  uint32_t it;
  long long N;
  uint64_t keep, stream;  // L2 policies: activations are re-read by each n-tile, weights once
  SwapGather g;           // gather build: the token rows' source (used where `gather`)
  int K;
  int* rows_generic;      // gather build: shared int[S_TN], the token row of each tile row (this warp's copy)
  int gw;                 // gather build: this lane's warp
  bool gather;            // a lane of the gather build's producer warpgroup

  __device__ __forceinline__ void start(int first_tile) {
    ti = first_tile;
    kt = 0;
    it = 0;
    if (ti < total) next_tile();
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(keep));
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(stream));
  }
  __device__ __forceinline__ void next_tile() {
    t = decode_tile<S_TN>(map, ti);
    const int rows = min(t.row_end - t.row0, S_TN);
    n16 = (rows + 15) & ~15;
    if (gather) {
      __syncwarp();  // every lane has issued the previous tile's copies
      for (int j = threadIdx.x & 31; j < n16; j += 32) {
        int tok = -1;
        if (j < rows) {
          const int slot = g.row_to_slot[t.row0 + j];
          if (slot >= 0 && slot / g.topk < g.T) tok = slot / g.topk;
        }
        reinterpret_cast<int*>(rows_generic)[j] = tok;
      }
      __syncwarp();
    }
  }
  // The copies of k-step `it` into its slot (the weights, the tokens, or both), then the next.
  template <int EPI>
  __device__ __forceinline__ void issue(const SwapRings& r, bool weights, bool tokens) {
    const uint32_t st = it % S_A_SLOTS, stb = it % S_B_SLOTS;
    if (weights) {
      const uint32_t sb = r.ring_b + stb * S_B_SLOT_BYTES, fb = r.full_b + 8 * stb;
      mbar_expect_tx(fb, 4 * BOX_BYTES);
      // In address order: for SwiGLU the tile's 128 gate columns, then its 128 up columns (the
      // interleaved order measured the same).
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = EPI == kSwigluBf16 ? (h ? (int)N : 0) + t.n_tile * 128 + 64 * c
                                             : t.n_tile * 256 + 128 * c + 64 * h;
          tma_3d(sb + (2 * c + h) * BOX_BYTES, tb, col, kt * 64, t.expert, fb, stream);
        }
    }
    if (tokens && gather) {
      // Lanes 8q..8q+7 copy one 128-byte row piece (chunk = lane % 8), four rows an instruction.
      const uint32_t sa = r.ring_a + st * S_A_SLOT_BYTES;
      const int k0 = kt * 64 + 8 * (threadIdx.x & 7);
      const int* rows = reinterpret_cast<const int*>(rows_generic);
#pragma unroll 4
      for (int q = (32 * gw + (threadIdx.x & 31)) >> 3; q < n16; q += 4 * S_ROW_WARPS) {
        const int tok = rows[q];
        const bool ok = tok >= 0 && k0 < K;
        const unsigned short* src = ok ? g.x + (long long)tok * K + k0 : g.x;
        cp_async16_hint(sa + q * 128 + (((threadIdx.x & 7) ^ (q & 7)) << 4), src, ok ? 16 : 0, keep);
      }
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(r.full_a + 8 * st) : "memory");
    } else if (tokens) {
      const uint32_t sa = r.ring_a + st * S_A_SLOT_BYTES, fa = r.full_a + 8 * st;
      const int full_blocks = n16 >> 6, tail16 = (n16 & 63) >> 4;
      mbar_expect_tx(fa, (uint32_t)n16 * 128);
      for (int b = 0; b < full_blocks; ++b) tma_2d(sa + b * BOX_BYTES, ta, kt * 64, t.row0 + 64 * b, fa, keep);
      for (int j = 0; j < tail16; ++j)
        tma_2d(sa + full_blocks * BOX_BYTES + j * (BOX_BYTES / 4), ta16, kt * 64, t.row0 + 64 * full_blocks + 16 * j,
               fa, keep);
    }
    ++it;
    if (++kt == k_tiles) {
      kt = 0;
      ti += gridDim.x;
      if (ti < total) next_tile();
    }
  }
  template <int EPI>
  __device__ __forceinline__ void fill(uint32_t need, const SwapRings& r) {
    while (ti < total && it < need + S_MIN_SLOTS) {
      const bool wa = it >= S_A_SLOTS, wb = it >= S_B_SLOTS;
      const uint32_t sa = it % S_A_SLOTS, pa = ((it / S_A_SLOTS) - 1) & 1;
      const uint32_t sb = it % S_B_SLOTS, pb = ((it / S_B_SLOTS) - 1) & 1;
      if (it > need) {
        if ((wb && !mbar_test(r.empty_b + 8 * sb, pb)) || (wa && !mbar_test(r.empty_a + 8 * sa, pa))) return;
      } else {
        if (wb) mbar_wait(r.empty_b + 8 * sb, pb);
        if (wa) mbar_wait(r.empty_a + 8 * sa, pa);
      }
      issue<EPI>(r, true, true);
    }
  }
  template <int EPI>
  __device__ __forceinline__ void run(const SwapRings& r, bool weights) {
    // The weight thread, or a token (or row-gathering) lane: each waits only for its own ring.
    const uint32_t empty = weights ? r.empty_b : r.empty_a;
    const uint32_t slots = weights ? S_B_SLOTS : S_A_SLOTS;
    while (ti < total) {
      if (it >= slots) mbar_wait(empty + 8 * (it % slots), ((it / slots) - 1) & 1);
      issue<EPI>(r, weights, !weights);
    }
  }
};

// One tile for a consumer warpgroup, NT = the tile's rows rounded up to 16: the k loop, then
// the stores. `it` counts k-steps over the CTA's whole walk (ring slot and phase). WS: a
// producer warpgroup issues the copies; else thread 0 does, between its k-steps.
template <int EPI, int NT, bool WS, bool GATHER>
__device__ __forceinline__ void swap_tile(float* d0, float* d1, const Tile& t, int rows, int k_tiles, uint32_t& it,
                                          const SwapRings& r, SwapProducer& prod, int cg, void* out, long long N) {
  const bool lead = (threadIdx.x & 31) == 0;
  const uint32_t first = it;
  for (int kt = 0; kt < k_tiles; ++kt, ++it) {
    if (!WS && threadIdx.x == 0) prod.fill<EPI>(it, r);
    const uint32_t sta = it % S_A_SLOTS, stb = it % S_B_SLOTS;
    mbar_wait(r.full_b + 8 * stb, (it / S_B_SLOTS) & 1);
    mbar_wait(r.full_a + 8 * sta, (it / S_A_SLOTS) & 1);
    // cp.async wrote the gathered tokens through the generic proxy; wgmma reads them through
    // the async proxy.
    if (GATHER) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const uint32_t sa = r.ring_a + sta * S_A_SLOT_BYTES;
    const uint32_t sw = r.ring_b + stb * S_B_SLOT_BYTES + cg * 2 * BOX_BYTES;
    fence_n<NT / 2>(d0);
    fence_n<NT / 2>(d1);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      // weights: 16 k rows = 2048 bytes on; tokens: 16 k = 32 bytes along each swizzled row
      const uint64_t db = make_desc(sa + kk * 32, 16, 1024);
      const int scale = (kt > 0 || kk > 0) ? 1 : 0;
      wgmma_swap<NT>(d0, make_desc(sw + kk * 2048, 8192, 1024), db, scale);
      wgmma_swap<NT>(d1, make_desc(sw + BOX_BYTES + kk * 2048, 8192, 1024), db, scale);
    }
    wgmma_commit();
    fence_n<NT / 2>(d0);
    fence_n<NT / 2>(d1);
    wgmma_wait<1>();
    if (it > first && lead) {  // k-step it - 1 has been read
      mbar_arrive(r.empty_a + 8 * ((it - 1) % S_A_SLOTS));
      mbar_arrive(r.empty_b + 8 * ((it - 1) % S_B_SLOTS));
    }
  }
  wgmma_wait<0>();
  fence_n<NT / 2>(d0);
  fence_n<NT / 2>(d1);
  if (it > first && lead) {
    mbar_arrive(r.empty_a + 8 * ((it - 1) % S_A_SLOTS));
    mbar_arrive(r.empty_b + 8 * ((it - 1) % S_B_SLOTS));
  }
  epilogue_swap<EPI, NT>(out, t, rows, N, d0, d1, cg);
}

// ta: 2-D map of a [R, K] (box 64 k x 64 rows); ta16: the same with 16-row boxes; tb: 3-D map of
// b [EL, K, ldb] (box 64 columns x 64 k x 1 expert); all bf16, 128-byte swizzle.
// WS (the warp-specialized build, *_sm90swapw, S_WS_THREADS): warpgroup 0 produces, thread 0
// the tokens and thread 32 the weights (SwapProducer::run), with setmaxnreg 40; warpgroups 1
// and 2 multiply with setmaxnreg 232, enough for 2 x 88 accumulators. Its ring is as deep as
// its slots (the 256-thread build keeps about two of four slots loading). It needs the
// toolkit's cubin: the driver's JIT spilled such accumulators (the comment above); the launcher
// loads it so (ptx_launch.hpp, CodeFrom). The default grouped GEMM on sm_90a wherever that
// cubin loads (why: docs/kernels/ptx.md, docs/PERFORMANCE.md). GATHER: the token warps gather
// rows of x (SwapGather).
template <int EPI, bool WS, bool GATHER = false>
__device__ __forceinline__ void grouped_gemm_swap(const TensorMap* ta, const TensorMap* ta16, const TensorMap* tb,
                                                  const int* offsets, void* out, long long R, long long K, long long N,
                                                  long long EL, const SwapGather& gather = {}) {
  static_assert(!GATHER || WS, "the gather build has a producer warpgroup");
  constexpr int NTHREADS = GATHER ? S_GATHER_THREADS : WS ? S_WS_THREADS : S_THREADS;
  constexpr int PRODUCER_WGS = GATHER ? S_GATHER_WARPS / 4 : WS ? 1 : 0;
  constexpr int RING_BYTES = S_A_SLOTS * S_A_SLOT_BYTES + S_B_SLOTS * S_B_SLOT_BYTES;
  constexpr int N_BARS = 2 * (S_A_SLOTS + S_B_SLOTS);
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  SwapRings r;
  r.ring_a = base;
  r.ring_b = base + S_A_SLOTS * S_A_SLOT_BYTES;
  r.full_a = base + RING_BYTES;
  r.empty_a = r.full_a + 8 * S_A_SLOTS;
  r.full_b = r.empty_a + 8 * S_A_SLOTS;
  r.empty_b = r.full_b + 8 * S_B_SLOTS;
  int* ints = reinterpret_cast<int*>(smem_raw + (base - raw) + RING_BYTES + 8 * N_BARS);
  const int n_experts = (int)EL;
  const int n_tiles = n_tiles_of<EPI, S_BN>(N);
  if (threadIdx.x == 0) {
    for (int i = 0; i < S_A_SLOTS; ++i) mbar_init(r.full_a + 8 * i, GATHER ? 32 * S_ROW_WARPS : 1), mbar_init(r.empty_a + 8 * i, 8);
    for (int i = 0; i < S_B_SLOTS; ++i) mbar_init(r.full_b + 8 * i, 1), mbar_init(r.empty_b + 8 * i, 8);
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  // The tile map follows the scan's scratch: NTHREADS / 32 + 1 ints (16 or 32 of them).
  constexpr int SCRATCH = NTHREADS / 32 + 1 <= 16 ? 16 : 32;
  TileMap map = build_tile_map<NTHREADS, S_TN>(offsets, R, n_experts, n_tiles, ints + SCRATCH,
                                                                     ints);  // syncs
  // The gather build's row tables follow the tile map's 2 (EL + 1) ints.
  int* rows_s = ints + SCRATCH + 2 * (n_experts + 1);
  const int total = map.first[n_experts];
  const int k_tiles = (int)((K + 63) / 64);
  const int wg = threadIdx.x >> 7;
  const int cg = wg - PRODUCER_WGS;
  SwapProducer prod;
  const int gw = GATHER && threadIdx.x < 32 * S_ROW_WARPS ? (int)(threadIdx.x >> 5) : -1;
  const int weight_thread = GATHER ? 32 * S_ROW_WARPS : 32;
  const bool producer = WS ? (threadIdx.x == 0 || threadIdx.x == weight_thread || gw >= 0) : threadIdx.x == 0;
  if (producer) {
    if (!GATHER) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(ta) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(ta16) : "memory");
    }
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(tb) : "memory");
    prod.g = gather;
    prod.K = (int)K;
    prod.rows_generic = rows_s + S_TN * (gw > 0 ? gw : 0);
    prod.gw = gw;
    prod.gather = gw >= 0;
    prod.ta = ta;
    prod.ta16 = ta16;
    prod.tb = tb;
    prod.map = map;
    prod.total = total;
    prod.k_tiles = k_tiles;
    prod.N = N;
    prod.start(blockIdx.x);
  }
  if (WS && wg < PRODUCER_WGS) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (producer) prod.run<EPI>(r, threadIdx.x == weight_thread);  // weight_thread: weights, the others tokens
  } else {
    // 2 x 128 x 232 + 128 x 40 registers with one producer warpgroup, 2 x 128 x 216 + 256 x 40
    // with two: at most 64 K.
    if (WS && !GATHER) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    if (GATHER) asm volatile("setmaxnreg.inc.sync.aligned.u32 216;\n");
    float d0[S_TN / 2], d1[S_TN / 2];
    uint32_t it = 0;
    for (int ti = blockIdx.x; ti < total; ti += gridDim.x) {
      const Tile t = decode_tile<S_TN>(map, ti);
      const int rows = min(t.row_end - t.row0, S_TN);
      switch ((rows + 15) >> 4) {
#define HC_SWAP_CASE(K16) \
  case K16:                \
    if constexpr (16 * K16 <= S_TN) swap_tile<EPI, 16 * K16, WS, GATHER>(d0, d1, t, rows, k_tiles, it, r, prod, cg, out, N); \
    break;
        HC_SWAP_CASE(1) HC_SWAP_CASE(2) HC_SWAP_CASE(3) HC_SWAP_CASE(4) HC_SWAP_CASE(5) HC_SWAP_CASE(6)
        HC_SWAP_CASE(7) HC_SWAP_CASE(8) HC_SWAP_CASE(9) HC_SWAP_CASE(10) HC_SWAP_CASE(11)
#undef HC_SWAP_CASE
        default: break;
      }
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

#define HC_GEMM_TMA_ENTRY(NAME, EPI, B_SLOTS)                                                                \
  extern "C" __global__ void __launch_bounds__(hc::T_THREADS, 1)                                            \
      NAME(const __grid_constant__ hc::TensorMap ta, const __grid_constant__ hc::TensorMap ta16,             \
           const __grid_constant__ hc::TensorMap tb, const int* offsets, void* out, long long R, long long K, \
           long long N, long long EL) {                                                                      \
    hc::grouped_gemm_tma<EPI, B_SLOTS>(&ta, &ta16, &tb, offsets, out, R, K, N, EL);                          \
  }

HC_GEMM_TMA_ENTRY(hc_moe_gemm_swiglu_sm90tma, hc::kSwigluBf16, 4)
HC_GEMM_TMA_ENTRY(hc_moe_gemm_sm90tma, hc::kStoreBf16, 4)
HC_GEMM_TMA_ENTRY(hc_moe_gemm_swiglu_sm90tma_b5, hc::kSwigluBf16, 5)
HC_GEMM_TMA_ENTRY(hc_moe_gemm_sm90tma_b5, hc::kStoreBf16, 5)

#define HC_GEMM_SWAP_ENTRY(NAME, EPI, WS, THREADS)                                                           \
  extern "C" __global__ void __launch_bounds__(THREADS, 1)                                                  \
      NAME(const __grid_constant__ hc::TensorMap ta, const __grid_constant__ hc::TensorMap ta16,             \
           const __grid_constant__ hc::TensorMap tb, const int* offsets, void* out, long long R, long long K, \
           long long N, long long EL, int* sm_trace, long long sm_trace_n) {                                 \
    hc::record_sm(sm_trace, sm_trace_n);                                                                     \
    hc::grouped_gemm_swap<EPI, WS>(&ta, &ta16, &tb, offsets, out, R, K, N, EL);                              \
  }

HC_GEMM_SWAP_ENTRY(hc_moe_gemm_swiglu_sm90swap, hc::kSwigluBf16, false, hc::S_THREADS)
HC_GEMM_SWAP_ENTRY(hc_moe_gemm_sm90swap, hc::kStoreBf16, false, hc::S_THREADS)
HC_GEMM_SWAP_ENTRY(hc_moe_gemm_swiglu_sm90swapw, hc::kSwigluBf16, true, hc::S_WS_THREADS)
HC_GEMM_SWAP_ENTRY(hc_moe_gemm_sm90swapw, hc::kStoreBf16, true, hc::S_WS_THREADS)

// moe_grouped_gemm_swiglu_gather on sm_90a: the warp-specialized swap-AB kernel whose two
// producer warpgroups gather the token rows of x through row_to_slot (SwapGather); tb as above.
extern "C" __global__ void __launch_bounds__(hc::S_GATHER_THREADS, 1)
    hc_moe_gemm_swiglu_gather_sm90swapw(const __grid_constant__ hc::TensorMap tb, const unsigned short* x,
                                        const int* row_to_slot, const int* offsets, void* out, long long R,
                                        long long K, long long N, long long EL, long long topk, long long T,
                                        int* sm_trace, long long sm_trace_n) {
  hc::record_sm(sm_trace, sm_trace_n);
  hc::grouped_gemm_swap<hc::kSwigluBf16, true, true>(nullptr, nullptr, &tb, offsets, out, R, K, N, EL,
                                                     {x, row_to_slot, (int)topk, (int)T});
}
