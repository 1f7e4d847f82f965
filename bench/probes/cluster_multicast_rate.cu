// cluster_multicast_rate: why did every multicast form in this project run slower than plain
// copies? (issue 19). The 2-CTA multicast builds of the FP8 tall GEMM (sm90.tallmc, tallmc64),
// the bf16 A-multicast build and wgmma_fp8_rate.cu's multicast ring all ran 1.5-2.4x slower
// than their copy forms on the H200, while CUTLASS and DeepGEMM use TMA multicast to go faster.
// This probe takes the FP8 tall k-step's ring without any math (16 KB of weights streamed from
// HBM + 128 token rows of 128 bytes from L2 a slot, two consumer warpgroups that wait and
// release; one release a warp) and adds the cluster's parts one at a time:
//   copy        no cluster (the baseline: wgmma_fp8_rate.cu measured ~1057 cycles a k-step)
//   clu         launched in clusters of 2, nothing else changed
//   clu+remote  also each slot released on both CTAs' "empty" barriers (the lockstep alone)
//   cast        the token rows multicast: each CTA copies half into both (clu+remote's hand-off)
//   castw       the weights multicast instead (both CTAs of a cluster take the same stream)
// each with the token rows at one address for every CTA (as wgmma_fp8_rate.cu: every SM reads
// the same 16 KB) or spread (each cluster its own 16 KB of a 4 MB buffer), and at 132 and 66
// CTAs (if cycles a k-step stay the same at half the CTAs, something besides bandwidth bounds).
//
// Not part of the library: a standalone CUDA runtime program, built on the GPU machine with
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a bench/probes/cluster_multicast_rate.cu -o cmr
// Prints the median over 5 launches (after a warm-up) of the slowest CTA's cycles a k-step and
// the weight stream's rate (events), beside the copy rate (cudaMemcpy, read + write).
#include <cuda_runtime.h>

#include "../../kernels/ptx/moe/sm90_common.cuh"
#include "probe_check.cuh"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

enum Variant { kCopy, kClu, kCluRemote, kCast, kCastW };
__host__ __device__ constexpr bool clustered(Variant v) { return v != kCopy; }
__host__ __device__ constexpr bool remote_release(Variant v) { return v == kCluRemote || v == kCast || v == kCastW; }

constexpr int kW = 16384, kTok = 16384, kSlot = kW + kTok, kIters = 4000, kConsumerWarps = 8;

// How a thread waits for a barrier's phase: 0 try_wait (hc::mbar_wait, no time hint), 1 test_wait
// in a spin loop, 2 try_wait with a 10 ms suspend-time hint (CUTLASS's ClusterBarrier::wait).
template <int WAIT>
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
  if constexpr (WAIT == 0) {
    hc::mbar_wait(bar, parity);
  } else if constexpr (WAIT == 1) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT_%=:\n"
        "mbarrier.test_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
  } else {
    asm volatile(
        "{\n.reg .pred p;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n"
        "@!p bra WAIT_%=;\n}\n" ::"r"(bar),
        "r"(parity), "r"(0x989680)
        : "memory");
  }
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Producer: thread 0. Consumers: warpgroups 1 and 2, one release a warp (lane 0 after __syncwarp)
// on this CTA's "empty" barrier and, with remote_release, on the peer's.
// WAIT: as wait<> above. ARRIVE: the remote release as mbarrier.arrive.release.cluster (0), or
// with the default semantics (.release at CTA scope, 1: CUTLASS's ClusterBarrier::arrive(cta)).
template <Variant V, int SLOTS, bool SPREAD, int WAIT = 0, int ARRIVE = 0>
__global__ void __launch_bounds__(384, 1)
    ring(long long* cycles, int* smid, const unsigned char* weights, unsigned long long wbytes,
         const unsigned char* tokens) {
  extern __shared__ __align__(1024) unsigned char sm[];
  const uint32_t base = (static_cast<uint32_t>(__cvta_generic_to_shared(sm)) + 1023) & ~1023u;
  const uint32_t bars = base + SLOTS * kSlot;
  constexpr int kEmpty = kConsumerWarps * (remote_release(V) ? 2 : 1);
  if (threadIdx.x == 0) {
    for (int i = 0; i < SLOTS; ++i) hc::mbar_init(bars + 8 * i, 1), hc::mbar_init(bars + 8 * (SLOTS + i), kEmpty);
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();
  uint32_t rank = 0, cluster_id = blockIdx.x;
  if constexpr (clustered(V)) {
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    cluster_id = blockIdx.x / 2;
    cluster_sync();  // the peer's barriers are initialised before anything reaches them
  }
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    smid[blockIdx.x] = (int)s;
  }
  const unsigned char* tok = tokens + (SPREAD ? (unsigned long long)cluster_id % 256 * kTok : 0ull);
  const long long t0 = clock64();
  if (threadIdx.x == 0) {
    // This CTA's part of the weight stream; castw: the cluster's part, each CTA copying half.
    const unsigned long long parts = V == kCastW ? gridDim.x / 2 : gridDim.x;
    const unsigned long long part = V == kCastW ? cluster_id : blockIdx.x;
    const unsigned long long per = wbytes / parts / kW * kW;
    for (int it = 0; it < kIters; ++it) {
      const int s = it % SLOTS;
      const uint32_t full = bars + 8 * s, slot = base + s * kSlot;
      if (it >= SLOTS) wait<WAIT>(bars + 8 * (SLOTS + s), ((it / SLOTS) - 1) & 1);
      hc::mbar_expect_tx(full, kSlot);
      const unsigned char* w = weights + part * per + (unsigned long long)it * kW % per;
      if constexpr (V == kCastW)
        for (int c = rank * kW / 2; c < (int)(rank + 1) * kW / 2; c += 4096) bulk_cast(slot + c, w + c, 4096, full);
      else
        for (int c = 0; c < kW; c += 4096) bulk(slot + c, w + c, 4096, full);
      if constexpr (V == kCast)
        for (int c = rank * kTok / 2; c < (int)(rank + 1) * kTok / 2; c += 4096)
          bulk_cast(slot + kW + c, tok + c, 4096, full);
      else
        for (int c = 0; c < kTok; c += 4096) bulk(slot + kW + c, tok + c, 4096, full);
    }
  } else if (threadIdx.x >= 128) {
    for (int it = 0; it < kIters; ++it) {
      const int s = it % SLOTS;
      const uint32_t empty = bars + 8 * (SLOTS + s);
      wait<WAIT>(bars + 8 * s, (it / SLOTS) & 1);
      __syncwarp();
      if ((threadIdx.x & 31) == 0) {
        hc::mbar_arrive(empty);
        if constexpr (remote_release(V)) {
          uint32_t remote;
          asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(empty), "r"(rank ^ 1));
          if constexpr (ARRIVE == 0)
            asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
          else
            asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - t0;
  if constexpr (clustered(V)) cluster_sync();  // no CTA leaves while its peer may still reach it
}

const char* name(Variant v) {
  switch (v) {
    case kCopy: return "copy";
    case kClu: return "clu";
    case kCluRemote: return "clu+remote";
    case kCast: return "cast (tokens)";
    case kCastW: return "castw (weights)";
  }
  return "?";
}

template <Variant V, int SLOTS, bool SPREAD, int WAIT = 0, int ARRIVE = 0>
void run(int ctas, long long* cycles, int* smid, const unsigned char* w, unsigned long long wbytes,
         const unsigned char* tok, bool show_placement) {
  auto k = ring<V, SLOTS, SPREAD, WAIT, ARRIVE>;
  const int smem = 1024 + SLOTS * kSlot + 16 * SLOTS;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if constexpr (clustered(V)) CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 0));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(384);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = clustered(V) ? 2 : 1;
  at[0].val.clusterDim.y = at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = 1;
  int active = 0;
  CK(cudaOccupancyMaxActiveClusters(&active, k, &cfg));
  const LaunchTimes t = time_launches([&](int) { CK(cudaLaunchKernelEx(&cfg, k, cycles, smid, w, wbytes, tok)); },
                                      cycles, ctas, kIters);
  const double m = t.ms;
  const double weight_bytes = double(V == kCastW ? ctas / 2 : ctas) * kIters * kW;
  std::printf("  %-16s wait %d arrive %d %-7s %d slots %3d CTAs (%2d clusters resident max): %6.0f cycles a k-step, %.3f ms, "
              "weights %5.0f GB/s\n",
              name(V), WAIT, ARRIVE, SPREAD ? "spread" : "same", SLOTS, ctas, active, t.cycles_per_iter, m,
              weight_bytes / (m * 1e-3) / 1e9);
  if (show_placement) {
    std::vector<int> sms(ctas);
    CK(cudaMemcpy(sms.data(), smid, ctas * sizeof(int), cudaMemcpyDeviceToHost));
    std::printf("    SMs of the first 8 clusters' CTAs:");
    for (int i = 0; i < 16 && i < ctas; ++i) std::printf("%s%d", i % 2 ? "," : " ", sms[i]);
    std::printf("\n");
  }
}

template <Variant V>
void both(int n, long long* cycles, int* smid, const unsigned char* w, unsigned long long wbytes,
          const unsigned char* tok) {
  run<V, 4, false>(n, cycles, smid, w, wbytes, tok, V == kClu);
  run<V, 4, true>(n, cycles, smid, w, wbytes, tok, false);
  run<V, 4, true>(n / 2, cycles, smid, w, wbytes, tok, false);
  run<V, 6, true>(n, cycles, smid, w, wbytes, tok, false);
}

}  // namespace

int main(int argc, char**) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  cudaDeviceProp p{};
  CK(cudaGetDeviceProperties(&p, 0));
  const int n = p.multiProcessorCount & ~1;
  std::printf("%s, %d SMs; %d CTAs, 4000 k-steps of 16 KB weights + 16 KB token rows\n", p.name,
              p.multiProcessorCount, n);
  long long* cycles;
  int* smid;
  CK(cudaMalloc(&cycles, n * sizeof(long long)));
  CK(cudaMalloc(&smid, n * sizeof(int)));
  const RingBuffers buf(4ull << 30, 4 << 20);
  const unsigned char *w = buf.w, *tok = buf.tok;
  const unsigned long long wbytes = buf.wbytes;
  std::printf("copy rate %.0f GB/s (read + write)\n", copy_rate_gbs(buf.w2, w, wbytes));
  if (argc > 1) {  // all forms, as first run
    both<kCopy>(n, cycles, smid, w, wbytes, tok);
    both<kClu>(n, cycles, smid, w, wbytes, tok);
    both<kCluRemote>(n, cycles, smid, w, wbytes, tok);
    both<kCast>(n, cycles, smid, w, wbytes, tok);
    both<kCastW>(n, cycles, smid, w, wbytes, tok);
  }
  // The lockstep's cost, by how the waits sleep and how the remote release is ordered.
  run<kCopy, 4, true>(n, cycles, smid, w, wbytes, tok, false);
  run<kCluRemote, 4, true, 0, 0>(n, cycles, smid, w, wbytes, tok, false);
  run<kCluRemote, 4, true, 1, 0>(n, cycles, smid, w, wbytes, tok, false);
  run<kCluRemote, 4, true, 2, 0>(n, cycles, smid, w, wbytes, tok, false);
  run<kCluRemote, 4, true, 0, 1>(n, cycles, smid, w, wbytes, tok, false);
  run<kCluRemote, 4, true, 1, 1>(n, cycles, smid, w, wbytes, tok, false);
  run<kCast, 4, true, 1, 0>(n, cycles, smid, w, wbytes, tok, false);
  run<kCast, 4, true, 1, 1>(n, cycles, smid, w, wbytes, tok, false);
  run<kCast, 4, true, 2, 1>(n, cycles, smid, w, wbytes, tok, false);
  run<kCastW, 4, true, 1, 1>(n, cycles, smid, w, wbytes, tok, false);
  CK(cudaFree(cycles));
  CK(cudaFree(smid));
  return 0;
}
