// wgmma_fp8_rate: what bounds a "k-step" (128 of K) of the FP8 tall GEMM (sm90.tall,
// kernels/ptx/moe/gemm_sm90_fp8.cu), in SM cycles, in two settings:
//   1. the tensor work alone: every operand already in shared memory, no producer; each consumer
//      warpgroup runs the k-step's m64nNk32 e4m3 wgmmas (4 a 64-row weight box), waits, and with
//      promotion adds each accumulator into an fp32 total with one FMA, as sm90.tall does;
//   2. fed through a ring as sm90.tall is fed: a producer thread waits for a slot's "empty"
//      barrier (one arrival a consumer thread), copies the k-step's 16 KB of weights (the next
//      16 KB of a 4 GiB stream: HBM) and its token rows (an L2-resident buffer) with
//      cp.async.bulk onto the slot's "full" barrier; the consumers wait, multiply, promote with
//      token scales read from shared memory and release the slot. Contiguous 4 KB pieces: a
//      kinder access pattern than the real weight boxes' 128-byte rows at K-byte strides, and
//      no epilogue, no scale loads from global memory, no tile changes.
//   3. the ring alone (the consumers wait and release, no wgmma), with the weights from HBM or
//      from L2: what the bytes crossing from L2 into the SM cost a k-step.
// A diagnostic for issue 19: on an H200 the 4096-token FP8 experts run at 55-57% of the copy
// rate, the consumers rarely wait for data (ncu), and changes to their instruction stream,
// their issue order, the ring's depth and the split of work between the consumers were all
// level or slower (docs/PERFORMANCE.md, "2026-11-28 night"). What it showed on 2026-11-29: with
// the operands resident, a k-step takes (shared-memory bytes the wgmmas read) / 128 cycles
// (N = 16..64 tokens), and fed, the 128-row k-step takes as long without any math as with it:
// the L2-to-SM traffic (weights + token rows, ~32 B a cycle an SM) bounds it here. (The real
// kernel's TMA ring did better: 94% of the copy rate with its promotion and stores skipped.)
//
// Modes: none (all of the above), `maps` (the rings fed through tensor maps in the kernel's
// layout), `sustain` (k-step arrangements fed for ~1.5 s each: their rates under the power cap,
// where the H200 runs these kernels at 1.3-1.5 GHz, 2026-11-30).
//
// Not part of the library: a standalone CUDA runtime program, built on the GPU machine with
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a bench/probes/wgmma_fp8_rate.cu -o wgmma_fp8_rate
// 132 CTAs (one an SM: the shared memory asks for it), 4000 k-steps each, clock64 around the
// loop; the median over 5 launches of the slowest CTA's cycles a k-step. "tensor work" counts
// 4096 e4m3 multiply-adds a cycle an SM (m64nNk32 = N / 2 cycles). The ring prints the weight
// stream's rate (events) beside the copy rate (cudaMemcpy, read + write) of the same run.
#include <cuda.h>
#include <cuda_runtime.h>

#include "../../kernels/ptx/moe/sm90_common.cuh"
#include "probe_check.cuh"

#include <algorithm>
#include <cstdio>
#include <type_traits>
#include <string>
#include <vector>

namespace {

using hc::fence_n;

// How a consumer runs a k-step: box by box through one set of temporaries (sm90.tall above 80
// tokens), both boxes' wgmmas then one wait (sm90.tall up to 80), or one box of its own with all
// the tile's tokens (sm90.tallb, measured on 2026-11-28), or not swapped (kTokensM): the tokens
// are the wgmma's M operand, 64 rows at a time, and both weight boxes its N = 128 operand, as
// DeepGEMM does; the promotion's scale is then a_scale[row] x w_scale[box], four products a
// thread a k-step, instead of one shared-memory scale a token pair.
enum Mode { kBoxByBox, kBoth, kOwnBox, kTokensM };

// One box's four k32 wgmmas: weight box b (64 rows x 128 bytes at w + 8 KB b), NT token rows at tok.
template <int NT>
__device__ __forceinline__ void box_mma(float* t, uint32_t w, uint32_t tok, int b) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    hc::wgmma_fp8<NT>(t, hc::make_desc(w + b * 8192 + kk * 32, 16, 1024), hc::make_desc(tok + kk * 32, 16, 1024), kk);
}

// d += t * scale (promotion; sc: this box's token scales in shared memory, read as sm90.tall's
// promotion reads them (BoxScales), or none: 1.0001), or without promotion one add that keeps the
// wgmmas' results alive.
template <int NT, bool PROMO>
__device__ __forceinline__ void fold(float* d, const float* t, uint32_t sc) {
  if constexpr (!PROMO) {
    d[0] += t[0];
  } else {
    const int qq = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < NT / 8; ++j) {
      float2 a = make_float2(1.0001f, 1.0001f);
      if (sc) asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(a.x), "=f"(a.y) : "r"(sc + 4 * (8 * j + 2 * qq)));
      d[4 * j] = fmaf(t[4 * j], a.x, d[4 * j]);
      d[4 * j + 1] = fmaf(t[4 * j + 1], a.y, d[4 * j + 1]);
      d[4 * j + 2] = fmaf(t[4 * j + 2], a.x, d[4 * j + 2]);
      d[4 * j + 3] = fmaf(t[4 * j + 3], a.y, d[4 * j + 3]);
    }
  }
}

// Consumer c's k-step on the weight boxes at w and its tokens at tok; box b's scales at
// sc + 4 * b * sc_stride (sc 0: none).
template <int NT, Mode M, bool PROMO>
__device__ __forceinline__ void kstep(float (&d)[2][NT / 2], uint32_t w, uint32_t tok, int c, uint32_t sc,
                                      int sc_stride) {
  constexpr int NA = NT / 2;
  auto scales = [&](int b) { return sc ? sc + 4 * b * sc_stride : 0u; };
  if constexpr (M == kTokensM) {
    // NT tokens a consumer = NT / 64 M-tiles of 64 x 128 (weight rows) accumulators, 64 a thread.
    float* dd = &d[0][0];
    const int row = 16 * ((threadIdx.x >> 5) & 3) + ((threadIdx.x & 31) >> 2);
#pragma unroll
    for (int m = 0; m < NT / 64; ++m) {
      float t[64];
      fence_n<64>(t);
      hc::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        hc::wgmma_fp8<128>(t, hc::make_desc(tok + m * 8192 + kk * 32, 16, 1024), hc::make_desc(w + kk * 32, 16, 1024), kk);
      hc::wgmma_commit();
      hc::wgmma_wait<0>();
      fence_n<64>(t);
      if constexpr (!PROMO) {
        dd[64 * m] += t[0];
      } else {
        float a[2] = {1.0001f, 1.0002f}, ws[2] = {1.0003f, 1.0004f};
        if (sc) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            asm volatile("ld.shared.f32 %0, [%1];" : "=f"(a[h]) : "r"(sc + 4 * (64 * m + row + 8 * h)));
            asm volatile("ld.shared.f32 %0, [%1];" : "=f"(ws[h]) : "r"(sc + 4 * (NT + h)));
          }
        }
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int q = 0; q < 2; ++q)
              dd[64 * m + 4 * j + 2 * h + q] = fmaf(t[4 * j + 2 * h + q], a[h] * ws[j >= 8], dd[64 * m + 4 * j + 2 * h + q]);
      }
    }
  } else if constexpr (M == kBoxByBox) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      float t[NA];
      fence_n<NA>(t);
      hc::wgmma_fence();
      box_mma<NT>(t, w, tok, b);
      hc::wgmma_commit();
      hc::wgmma_wait<0>();
      fence_n<NA>(t);
      fold<NT, PROMO>(d[b], t, scales(b));
    }
  } else {
    constexpr int NB = M == kBoth ? 2 : 1;
    float t[NB][NA];
#pragma unroll
    for (int b = 0; b < NB; ++b) fence_n<NA>(t[b]);
    hc::wgmma_fence();
#pragma unroll
    for (int b = 0; b < NB; ++b) box_mma<NT>(t[b], w, tok, M == kBoth ? b : c);
    hc::wgmma_commit();
    hc::wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      fence_n<NA>(t[b]);
      fold<NT, PROMO>(d[b], t[b], scales(M == kBoth ? b : c));
    }
  }
}

template <int NT>
__device__ __forceinline__ float total(const float (&d)[2][NT / 2]) {
  float s = 0.f;
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int i = 0; i < NT / 2; ++i) s += d[b][i];
  return s;
}

__device__ __forceinline__ uint32_t smem_base(unsigned char* sm) {
  return (static_cast<uint32_t>(__cvta_generic_to_shared(sm)) + 1023) & ~1023u;
}

// Setting 1: WGS consumer warpgroups, operands resident (16 KB of weights, then NT token rows
// a consumer: e4m3 bytes around 1.0, never NaN).
template <int NT, Mode M, int WGS, bool PROMO>
__global__ void __launch_bounds__(128 * WGS, 1) resident(long long* cycles, float* sink, int iters) {
  extern __shared__ __align__(1024) unsigned char sm[];
  const uint32_t base = smem_base(sm);
  for (int i = threadIdx.x; i < 64 * 1024 / 4; i += blockDim.x)
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(base + 4 * i), "r"(0x38383838u ^ (uint32_t(i) & 0x07070707u)));
  __syncthreads();
  const int c = threadIdx.x / 128;
  float d[2][NT / 2] = {};
  const uint32_t tok = base + 16384 + (M == kOwnBox ? 0 : c) * NT * 128;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) kstep<NT, M, PROMO>(d, base, tok, c, 0u, 0);
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - t0;
  if (total<NT>(d) == 1234.5f) sink[threadIdx.x] = 1.f;  // never true; keeps the totals
}

// Setting 2: the same fed through a ring of SLOTS slots (16 KB of weights, then the tokens).
// How the ring gets a k-step's token rows: copied from L2 by each CTA (as sm90.tall), not at
// all (they stay in shared memory: what the token traffic costs), or multicast in a cluster of
// two CTAs (each copies half and cp.async.bulk's .multicast::cluster writes it into both: the
// two CTAs of an expert's adjacent weight tiles share one token read). The multicast form here
// is the plain one: every consumer thread also arrives on the peer's "empty" barrier (256 remote
// arrivals a k-step), and on the H200 it ran 2.4x slower than the copies, so its figure is the
// cost of that hand-off, not a bound on what multicast allows. (2026-11-30,
// cluster_multicast_rate.cu: what costs is the remote arrivals' `.release.cluster` below; with
// the default semantics a multicast ring ran faster than the copies.)
// kTokWarp: copied as kTokCopy, but each consumer warp releases the slot with one arrival of
// count 32 from lane 0 after __syncwarp, instead of one arrival a thread (what sm90.tall does).
// kTokCastW: multicast as kTokCast, but each consumer warp releases the slot with one arrival of
// count 32 on each CTA's barrier (lane 0, after __syncwarp): 16 remote arrivals a k-step.
// kTokMap: weights and token rows by TMA tensor maps laid out as sm90.tall reads them (2026-11-30):
// weights [64 experts, 4096 rows, K = 7168] e4m3 in boxes of 64 rows x 128 bytes, token rows
// [64 x 256, 7168] in boxes of 16 rows; the CTA walks tiles (expert, 128-row n-tile) of 56
// k-steps each as the real kernel does (tile = blockIdx.x + gridDim.x i), the weights
// evict_first and the token rows evict_last. kTokMapS: also three scaler warps as sm90.tall's
// (warps 1-3 of the producer warpgroup, k-steps in turn: a k-step's 256 strided activation
// scales from global memory [64 x 256, 56] f32 times two weight scales, written into the scale
// area, then one arrival a lane on the slot's full barrier).
enum Tokens { kTokCopy, kTokNone, kTokCast, kTokWarp, kTokCastW, kTokMap, kTokMapS };
__host__ __device__ constexpr bool mapped(Tokens t) { return t == kTokMap || t == kTokMapS; }
__device__ const float* d_ascale;  // kTokMapS's activation scales (main sets them)
__host__ __device__ constexpr bool cast(Tokens t) { return t == kTokCast || t == kTokCastW; }
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// A consumer thread's release of the slot whose "empty" barrier is `bar`: one arrival a thread,
// or (kTokWarp, kTokCastW) one of count 32 a warp from lane 0 after __syncwarp; multicast slots
// (kTokCast, kTokCastW) are released on the peer CTA's barrier too, whose copies write them.
template <Tokens TOK>
__device__ __forceinline__ void release_slot(uint32_t bar, uint32_t rank) {
  constexpr bool kPerWarp = TOK == kTokWarp || TOK == kTokCastW;
  constexpr uint32_t kCount = kPerWarp ? 32 : 1;
  if constexpr (kPerWarp) {
    __syncwarp();
    if ((threadIdx.x & 31) != 0) return;
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "n"(kCount) : "memory");
  } else {
    hc::mbar_arrive(bar);
  }
  if constexpr (cast(TOK)) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank ^ 1));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0], %1;" ::"r"(remote), "n"(kCount) : "memory");
  }
}
// MATH false: the consumers only wait for each slot and release it (what the ring alone moves).
// WL2: the weights come from the same 16 KB of the CTA's part every k-step (L2 hits), so every
// byte of the slot crosses from L2 and none from HBM.
constexpr int kMapK = 7168, kMapRows = 4096, kMapExperts = 64, kMapKSteps = kMapK / 128;
template <int NT, Mode M, int WGS, int SLOTS, Tokens TOK = kTokCopy, bool MATH = true, bool WL2 = false>
__global__ void __launch_bounds__(128 * (WGS + 1), 1)
    ringfed(long long* cycles, float* sink, const unsigned char* weights, unsigned long long wbytes,
            const unsigned char* tokens, int iters, const __grid_constant__ CUtensorMap wmap,
            const __grid_constant__ CUtensorMap tmap) {
  extern __shared__ __align__(1024) unsigned char sm[];
  constexpr int kTok = (M == kOwnBox ? 1 : WGS) * NT * 128, kSlot = 16384 + kTok, kScales = 2 * WGS * NT;
  const uint32_t base = smem_base(sm), bars = base + SLOTS * kSlot, scales = bars + 16 * SLOTS;
  if (threadIdx.x == 0) {
    // A multicast slot is released by the consumers of both CTAs (the peer's copies write it too).
    for (int i = 0; i < SLOTS; ++i)
      hc::mbar_init(bars + 8 * i, TOK == kTokMapS ? 1 + 32 : 1),
          hc::mbar_init(bars + 8 * (SLOTS + i), 128 * WGS * (cast(TOK) ? 2 : 1));
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  for (int i = threadIdx.x; i < kScales; i += blockDim.x)
    asm volatile("st.shared.f32 [%0], %1;" ::"r"(scales + 4 * i), "f"(1.0f + 1e-4f * (i & 7)));
  if constexpr (TOK == kTokNone)  // the token rows, once
    for (int i = threadIdx.x; i < SLOTS * kTok / 4; i += blockDim.x)
      asm volatile("st.shared.u32 [%0], %1;" ::"r"(base + (i / (kTok / 4)) * kSlot + 16384 + 4 * (i % (kTok / 4))),
                   "r"(0x38383838u));
  __syncthreads();
  uint32_t rank = 0;
  if constexpr (cast(TOK)) {
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    cluster_sync();  // the peer's barriers are initialised before anything reaches them
  }
  const int wg = threadIdx.x / 128;
  const long long t0 = clock64();
  if (wg == 0) {  // the producer warpgroup gives registers to the consumers, as sm90.tall's does
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      const unsigned long long per = wbytes / gridDim.x / 16384 * 16384;  // this CTA's part of the stream
      for (int it = 0; it < iters; ++it) {
        const int s = it % SLOTS;
        const uint32_t full = bars + 8 * s, slot = base + s * kSlot;
        if (it >= SLOTS) hc::mbar_wait(bars + 8 * (SLOTS + s), ((it / SLOTS) - 1) & 1);
        hc::mbar_expect_tx(full, TOK == kTokNone ? 16384 : kSlot);
        const unsigned char* w = weights + blockIdx.x * per + (WL2 ? 0ull : (unsigned long long)it * 16384 % per);
        if constexpr (mapped(TOK)) {
          const int tile = blockIdx.x + gridDim.x * (it / kMapKSteps), kt = it % kMapKSteps;
          const int e = tile / (kMapRows / 128) % kMapExperts, j = tile % (kMapRows / 128);
          uint64_t first, last;
          asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(first));
          asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(last));
          const auto* wm = reinterpret_cast<const hc::TensorMap*>(&wmap);
          const auto* tm = reinterpret_cast<const hc::TensorMap*>(&tmap);
          for (int b = 0; b < 2; ++b) hc::tma_3d(slot + b * 8192, wm, kt * 128, 128 * j + 64 * b, e, full, first);
          for (int q = 0; q < kTok / 2048; ++q) hc::tma_2d(slot + 16384 + q * 2048, tm, kt * 128, e * 256 + 16 * q, full, last);
        } else {
          for (int c = 0; c < 16384; c += 4096) bulk(slot + c, w + c, 4096, full);
        }
        if constexpr (TOK == kTokCopy || TOK == kTokWarp)
          for (int c = 0; c < kTok; c += 4096) bulk(slot + 16384 + c, tokens + c, min(4096, kTok - c), full);
        if constexpr (cast(TOK))  // this CTA's half of the rows, into both CTAs
          for (int c = rank * kTok / 2; c < (int)(rank + 1) * kTok / 2; c += 4096)
            bulk_cast(slot + 16384 + c, tokens + c, min(4096, (int)(rank + 1) * kTok / 2 - c), full);
      }
    }
    if (TOK == kTokMapS && M != kOwnBox && threadIdx.x >= 32 && threadIdx.x < 128) {  // the scaler warps
      const int wsc = threadIdx.x / 32 - 1, lane = threadIdx.x & 31;
      for (int it = wsc; it < iters; it += 3) {
        const int s = it % SLOTS;
        if (it >= SLOTS) hc::mbar_wait(bars + 8 * (SLOTS + s), ((it / SLOTS) - 1) & 1);
        const int tile = blockIdx.x + gridDim.x * (it / kMapKSteps), kt = it % kMapKSteps;
        const int e = tile / (kMapRows / 128) % kMapExperts;
        long long stride = 32 * kMapKSteps;  // opaque, as sm90.tall's (hoisted, the addresses spill)
        asm volatile("mov.b64 %0, %0;" : "+l"(stride));
        const float* p = d_ascale + ((long long)e * 256 + lane) * kMapKSteps + kt;
        const float sw0 = __ldg(d_ascale + kt), sw1 = __ldg(d_ascale + kMapKSteps + kt);
        constexpr int kRows = WGS * NT;  // the tile's token rows: one scale each a box
        float a[kRows / 32];
#pragma unroll
        for (int i = 0; i < kRows / 32; ++i) a[i] = __ldg(p + i * stride);
#pragma unroll
        for (int i = 0; i < kRows / 32; ++i) {
          asm volatile("st.shared.f32 [%0], %1;" ::"r"(scales + 4 * (lane + 32 * i)), "f"(a[i] * sw0));
          asm volatile("st.shared.f32 [%0], %1;" ::"r"(scales + 4 * (kRows + lane + 32 * i)), "f"(a[i] * sw1));
        }
        hc::mbar_arrive(bars + 8 * s);
      }
    }
  } else {
    if constexpr (WGS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    else asm volatile("setmaxnreg.inc.sync.aligned.u32 152;\n");
    const int c = wg - 1;
    float d[2][NT / 2] = {};
    for (int it = 0; it < iters; ++it) {
      const int s = it % SLOTS;
      const uint32_t slot = base + s * kSlot, tok = slot + 16384 + (M == kOwnBox ? 0 : c) * NT * 128;
      hc::mbar_wait(bars + 8 * s, (it / SLOTS) & 1);
      if constexpr (MATH) kstep<NT, M, true>(d, slot, tok, c, scales + 4 * c * NT, WGS * NT);
      release_slot<TOK>(bars + 8 * (SLOTS + s), rank);
    }
    if (total<NT>(d) == 1234.5f) sink[threadIdx.x] = 1.f;
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - t0;
  if constexpr (cast(TOK)) cluster_sync();  // no CTA leaves while its peer may still reach it
}

// kTokMap's tensor maps (main makes them; zeros for the other forms, which ignore them).
CUtensorMap g_wmap{}, g_tmap{};
// Shared memory a ring launch asks for beyond what it uses (0: none): sm90.tall's 203 KB leave
// the L1 data cache less room than the probe's smaller rings do.
int g_shared_floor = 0;
// Launches a measurement makes (the first a warm-up); `sustain` mode makes 700 (~1.5 s), so that
// the medians are those of the clock the power cap settles at.
int g_runs = 6;

// Launches k 6 times (the first a warm-up): the median over the others of the slowest CTA's
// cycles a k-step, and of the launch's time in ms (events).
template <typename K>
void measure(K k, int sms, int threads, int smem, long long* cycles, float* sink, double* cyc, double* ms,
             const unsigned char* w = nullptr, unsigned long long wbytes = 0, const unsigned char* tok = nullptr,
             int cluster = 1) {
  constexpr int kIters = 4000;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const LaunchTimes t = time_launches(
      [&](int r) {
        if constexpr (std::is_same_v<K, void (*)(long long*, float*, int)>) k<<<sms, threads, smem>>>(cycles, sink, kIters);
        else if (cluster == 1) k<<<sms, threads, smem>>>(cycles, sink, w, wbytes, tok, kIters, g_wmap, g_tmap);
        else {
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = dim3(sms);
          cfg.blockDim = dim3(threads);
          cfg.dynamicSmemBytes = smem;
          cudaLaunchAttribute at[1];
          at[0].id = cudaLaunchAttributeClusterDimension;
          at[0].val.clusterDim.x = cluster;
          at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
          cfg.attrs = at;
          cfg.numAttrs = 1;
          if (r == 0) {
            int active = 0;
            CK(cudaOccupancyMaxActiveClusters(&active, k, &cfg));
            std::printf("    (clusters of %d: %d can be resident at once, %d launched)\n", cluster, active, sms / cluster);
          }
          CK(cudaLaunchKernelEx(&cfg, k, cycles, sink, w, wbytes, tok, kIters, g_wmap, g_tmap));
        }
      },
      cycles, sms, kIters, g_runs);
  *cyc = t.cycles_per_iter;
  *ms = t.ms;
}

constexpr double tensor_cycles(int nt, Mode m, int wgs) { return double(wgs) * (m == kOwnBox ? 1 : 2) * 4 * nt / 2; }

template <int NT, Mode M, int WGS, bool PROMO>
void run_resident(const char* what, int sms, long long* cycles, float* sink) {
  double cyc = 0, ms = 0;
  measure(resident<NT, M, WGS, PROMO>, sms, 128 * WGS, 120 * 1024, cycles, sink, &cyc, &ms);  // 120 KB: one CTA an SM
  const double ideal = tensor_cycles(NT, M, WGS);
  std::printf("  %-62s %6.0f cycles a k-step, tensor work %5.0f (%3.0f%%)\n", what, cyc, ideal, 100.0 * ideal / cyc);
}

template <int NT, Mode M, int WGS, int SLOTS = 4, Tokens TOK = kTokCopy, bool MATH = true, bool WL2 = false>
void run_ringfed(const char* what, int sms, long long* cycles, float* sink, const unsigned char* w,
                 unsigned long long wbytes, const unsigned char* tok) {
  constexpr int kTok = (M == kOwnBox ? 1 : WGS) * NT * 128, kSmem = 1024 + SLOTS * (16384 + kTok) + 16 * SLOTS + 8 * NT * WGS;
  static_assert(kSmem <= 227 * 1024, "shared memory");
  double cyc = 0, ms = 0;
  measure(ringfed<NT, M, WGS, SLOTS, TOK, MATH, WL2>, sms, 128 * (WGS + 1), std::max(kSmem, g_shared_floor), cycles,
          sink, &cyc, &ms, w, wbytes, tok, cast(TOK) ? 2 : 1);
  const double gbs = double(sms) * 4000 * 16384 / (ms * 1e-3) / 1e9;
  std::printf("  %-62s %d slots %6.0f cycles a k-step, tensor work %5.0f; weights at %5.0f GB/s\n", what, SLOTS, cyc,
              tensor_cycles(NT, M, WGS), gbs);
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  std::printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
  const int n = p.multiProcessorCount;
  long long* cycles;
  float* sink;
  CK(cudaMalloc(&cycles, n * sizeof(long long)));
  CK(cudaMalloc(&sink, 512 * sizeof(float)));
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool maps_only = mode == "maps";  // the kTokMap rows only
  if (!maps_only && mode != "sustain") {
  std::printf("operands resident in shared memory (a k-step: 2 weight boxes of 64 rows x 128 of K):\n");
  // Narrow token tiles: the tensor work halves with N, the weight operand's shared-memory reads
  // do not (2 KB a wgmma): if these stay near 512 cycles, shared memory, not the tensor cores,
  // bounds the swap-AB k-step.
  run_resident<16, kBoth, 2, false>("2 consumers, 16 tokens, both boxes at once, no promotion", n, cycles, sink);
  run_resident<32, kBoth, 2, false>("2 consumers, 32 tokens, both boxes at once, no promotion", n, cycles, sink);
  run_resident<48, kBoth, 2, false>("2 consumers, 48 tokens, both boxes at once, no promotion", n, cycles, sink);
  run_resident<32, kBoth, 1, false>("1 consumer, 32 tokens, both boxes at once, no promotion", n, cycles, sink);
  run_resident<64, kBoth, 1, false>("1 consumer, 64 tokens, both boxes at once, no promotion", n, cycles, sink);
  run_resident<64, kBoth, 1, true>("1 consumer, 64 tokens, both boxes at once, promotion", n, cycles, sink);
  run_resident<64, kBoth, 2, false>("2 consumers, 64 tokens, both boxes at once, no promotion", n, cycles, sink);
  run_resident<64, kBoth, 2, true>("2 consumers, 64 tokens, both boxes at once, promotion (tall)", n, cycles, sink);
  run_resident<64, kBoxByBox, 2, true>("2 consumers, 64 tokens, box by box, promotion", n, cycles, sink);
  run_resident<64, kBoth, 3, true>("3 consumers, 64 tokens, both boxes at once, promotion", n, cycles, sink);
  run_resident<64, kTokensM, 2, false>("tokens as M: 2 consumers x 64 tokens, N = 128, no promotion", n, cycles, sink);
  run_resident<64, kTokensM, 2, true>("tokens as M: 2 consumers x 64 tokens, N = 128, promotion", n, cycles, sink);
  run_resident<128, kTokensM, 2, false>("tokens as M: 2 consumers x 128 tokens, N = 128, no promotion", n, cycles, sink);
  run_resident<128, kTokensM, 2, true>("tokens as M: 2 consumers x 128 tokens, N = 128, promotion", n, cycles, sink);
  run_resident<64, kTokensM, 3, true>("tokens as M: 3 consumers x 64 tokens, N = 128, promotion", n, cycles, sink);
  run_resident<128, kOwnBox, 2, false>("2 consumers, 128 tokens, a box each, no promotion", n, cycles, sink);
  run_resident<128, kOwnBox, 2, true>("2 consumers, 128 tokens, a box each, promotion (tallb)", n, cycles, sink);
  run_resident<128, kBoxByBox, 2, false>("2 consumers, 128 tokens, box by box, no promotion", n, cycles, sink);
  run_resident<128, kBoxByBox, 2, true>("2 consumers, 128 tokens, box by box, promotion (tall)", n, cycles, sink);

  }
  const RingBuffers buf(4ull << 30, 1 << 20);
  const unsigned char *w = buf.w, *tok = buf.tok;
  const unsigned long long wbytes = buf.wbytes;
  std::printf("fed through a ring (weights streamed from HBM); copy rate %.0f GB/s (read + write):\n",
              copy_rate_gbs(buf.w2, w, wbytes));
  // The real kernel's layout through tensor maps (kTokMap), beside the bulk copies of the same bytes.
  unsigned char* mtok = nullptr;
  CK(cudaMalloc(&mtok, size_t(kMapExperts) * 256 * kMapK));
  CK(cudaMemset(mtok, 0x38, size_t(kMapExperts) * 256 * kMapK));
  g_wmap = e4m3_map(buf.w, {kMapK, kMapRows, kMapExperts}, 64);
  g_tmap = e4m3_map(mtok, {kMapK, cuuint64_t(kMapExperts) * 256}, 16);
  float* ascale = nullptr;
  {
    std::vector<float> h(size_t(kMapExperts) * 256 * kMapKSteps);
    for (size_t i = 0; i < h.size(); ++i) h[i] = 0.001f * float(1 + i % 7);
    CK(cudaMalloc(&ascale, h.size() * sizeof(float)));
    CK(cudaMemcpy(ascale, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpyToSymbol(d_ascale, &ascale, sizeof ascale));
  }
  if (mode == "sustain") {
    // The k-step arrangements at 128 rows an expert, each 700 launches back to back, alternated
    // twice: their rates once the power cap has set the clock (sample nvidia-smi beside it).
    g_runs = 700;
    for (int round = 0; round < 2; ++round) {
      run_ringfed<64, kBoth, 2, 4, kTokMapS>("sustained: swap-AB, both boxes, scalers (sm90.tall)", n, cycles, sink, w,
                                            wbytes, tok);
      run_ringfed<64, kTokensM, 2, 4, kTokMapS>("sustained: tokens as M, N = 128, scalers", n, cycles, sink, w, wbytes,
                                               tok);
      run_ringfed<128, kOwnBox, 2, 4, kTokMap>("sustained: a box each, 128 tokens (tallb)", n, cycles, sink, w, wbytes,
                                              tok);
      run_ringfed<64, kBoth, 2, 4, kTokMap, false>("sustained: no math", n, cycles, sink, w, wbytes, tok);
      // The weights' layout: the kernel's 64-row boxes (128 bytes of each row a k-step, rows
      // K bytes apart) against a contiguous stream (each k-step's 16 KB in one piece, as a
      // pre-tiled weight layout would give), both without the scaler warps, with and without math.
      run_ringfed<64, kBoth, 2, 4, kTokMap>("sustained: boxes of [E, N, K] rows, no scalers", n, cycles, sink, w, wbytes,
                                           tok);
      run_ringfed<64, kBoth, 2, 4, kTokCopy>("sustained: contiguous 16 KB a k-step, no scalers", n, cycles, sink, w,
                                            wbytes, tok);
      run_ringfed<64, kBoth, 2, 4, kTokCopy, false>("sustained: contiguous, no math", n, cycles, sink, w, wbytes, tok);
    }
    return 0;
  }
  std::printf("tensor maps in sm90.tall's layout (weights [64, 4096, 7168], token rows [64 x 256, 7168]):\n");
  run_ringfed<64, kBoth, 2, 4, kTokMap, false>("maps, no math: 128 rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoxByBox, 2, 4, kTokMap, false>("maps, no math: 256 rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokMap>("maps: 2 consumers, 64 tokens, both boxes (tall, 128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoxByBox, 2, 4, kTokMap>("maps: 2 consumers, 128 tokens, box by box (tall, 256 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokMapS>("maps + scalers: 2 consumers, 64 tokens (128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoxByBox, 2, 4, kTokMapS>("maps + scalers: 2 consumers, 128 tokens (256 rows)", n, cycles, sink, w, wbytes, tok);
  g_shared_floor = 208 * 1024;  // sm90.tall's footprint (4 slots of 48 KB, scale rings, tile map)
  run_ringfed<64, kBoth, 2, 4, kTokMapS>("maps + scalers, 208 KB of shared memory (128 rows)", n, cycles, sink, w, wbytes, tok);
  g_shared_floor = 0;
  run_ringfed<64, kBoth, 2, 4, kTokCopy>("bulk: 2 consumers, 64 tokens, both boxes (tall, 128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoxByBox, 2, 4, kTokCopy>("bulk: 2 consumers, 128 tokens, box by box (tall, 256 rows)", n, cycles, sink, w, wbytes, tok);
  CK(cudaFree(mtok));
  CK(cudaFree(ascale));
  if (maps_only) return 0;
  // What the ring alone moves (no wgmma): 16 KB of weights from HBM + rows x 128 bytes of tokens
  // from L2 a k-step; then all of it from L2. If these match the k-steps with the math, the bytes
  // that cross from L2 into the SM, not the consumers, bound the k-step.
  run_ringfed<32, kBoth, 2, 4, kTokCopy, false>("no math: 64 token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokCopy, false>("no math: 128 token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<96, kBoth, 2, 4, kTokCopy, false>("no math: 192 token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoth, 2, 4, kTokCopy, false>("no math: 256 token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokNone, false>("no math: no token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<32, kBoth, 2, 4, kTokCopy, false, true>("no math, weights from L2: 64 token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokCopy, false, true>("no math, weights from L2: 128 token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoth, 2, 4, kTokCopy, false, true>("no math, weights from L2: 256 token rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokCastW, false>("no math, multicast (a release a warp): 128 rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoth, 2, 4, kTokCastW, false>("no math, multicast (a release a warp): 256 rows", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokCastW>("multicast (a release a warp): 2 consumers, 64 tokens (128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<96, kBoxByBox, 2, 4, kTokCastW>("multicast (a release a warp): 2 x 96 (192 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoxByBox, 2, 4, kTokCastW>("multicast (a release a warp): 2 x 128 (256 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kTokensM, 2>("tokens as M: 2 consumers x 64 tokens (128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kTokensM, 2>("tokens as M: 2 consumers x 128 tokens (256 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kTokensM, 3>("tokens as M: 3 consumers x 64 tokens (192 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<32, kBoth, 2>("2 consumers, 32 tokens, both boxes at once (64 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kOwnBox, 2>("2 consumers, a box each, 64 tokens (64 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2>("2 consumers, 64 tokens, both boxes at once (tall, 128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 5>("2 consumers, 64 tokens, both boxes at once (tall, 128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 6>("2 consumers, 64 tokens, both boxes at once (tall, 128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kOwnBox, 2>("2 consumers, a box each, 128 tokens (128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<48, kBoth, 3>("3 consumers, 48 tokens, both boxes at once (144 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<96, kBoxByBox, 2>("2 consumers, 96 tokens, box by box (tall, 192 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 3>("3 consumers, 64 tokens, both boxes at once (192 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoxByBox, 2>("2 consumers, 128 tokens, box by box (tall, 256 rows)", n, cycles, sink, w, wbytes, tok);
  std::printf("the token rows not copied (they stay in shared memory), or multicast in clusters of two CTAs:\n");
  run_ringfed<64, kBoth, 2, 4, kTokNone>("not copied: 2 consumers, 64 tokens (128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<96, kBoxByBox, 2, 4, kTokNone>("not copied: 2 consumers, 96 tokens (192 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokWarp>("one release a warp: 2 consumers, 64 tokens (128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<96, kBoxByBox, 2, 4, kTokWarp>("one release a warp: 2 consumers, 96 tokens (192 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<64, kBoth, 2, 4, kTokCast>("multicast: 2 consumers, 64 tokens (128 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<96, kBoxByBox, 2, 4, kTokCast>("multicast: 2 consumers, 96 tokens (192 rows)", n, cycles, sink, w, wbytes, tok);
  run_ringfed<128, kBoxByBox, 2, 4, kTokCast>("multicast: 2 consumers, 128 tokens (256 rows)", n, cycles, sink, w, wbytes, tok);
  CK(cudaFree(cycles));
  CK(cudaFree(sink));
  return 0;
}
