// flush_read_rate: how much a full L2 of dirty lines slows a read-bound kernel, by the way it
// reads. A diagnostic for issue 15 (docs/PERFORMANCE.md): with clean caches halcyon's paged
// decode (TMA boxes into a ring of shared-memory stages) and cuDNN's (cp.async from every
// thread) run level at b64 Hkv 2, but after a 256 MB write (the benches' flush) halcyon's takes
// ~13 us longer and cuDNN's ~9 us. Is it the TMA?
//
// 128 CTAs (the decode grid at b64 Hkv 2, one an SM) each stream a contiguous 4 MiB piece of a
// 512 MiB buffer (decode's K and V bytes there: 537 MB), in three ways:
//   ldg    256 threads, 16-byte __ldg loads, 8 in flight a thread
//   bulk32 one thread issues cp.async.bulk (1-D TMA) copies of 32 KiB into a ring of 6 stages
//          (192 KiB, decode's deep build), 128 threads wait for each stage and release it
//   bulk4  the same with copies of 4 KiB (8 a stage)
// each timed (CUDA events, median of 15) after each of three flushes of a 256 MiB buffer:
// `read` (a read: the L2 left holding clean lines), `write` (cudaMemset to a new value each run:
// dirty lines, as halcyon's bench), `zero` (cudaMemset 0, as triton's do_bench).
//
// Not part of the library: on the GPU machine,
//   nvcc -O3 -std=c++17 -arch=sm_90a bench/probes/flush_read_rate.cu -o flush_read_rate && ./flush_read_rate
#include <cuda_runtime.h>

#include "probe_check.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kCtas = 128, kStages = 6, kStage = 32 * 1024;
constexpr long long kPiece = 4ll << 20;  // bytes a CTA reads

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

__global__ void __launch_bounds__(256) read_ldg(const uint4* __restrict__ p, unsigned* sink) {
  constexpr int kDepth = 8;
  const uint4* base = p + blockIdx.x * (kPiece / 16);
  const long long n = kPiece / 16;
  unsigned acc = 0;
  for (long long i = threadIdx.x; i < n; i += 256ll * kDepth) {
    uint4 v[kDepth];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) v[d] = __ldg(base + i + d * 256);
#pragma unroll
    for (int d = 0; d < kDepth; ++d) acc ^= fold(v[d]);
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // practically never: keeps the loads
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// 128 consumer threads + one producer warp (lane 0 issues). COPY: bytes a bulk copy.
template <int COPY>
__global__ void __launch_bounds__(160) read_bulk(const unsigned char* __restrict__ p, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];
  const uint32_t full0 = smem_u32(bars), empty0 = full0 + 8 * kStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(full0 + 8 * s));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;\n" ::"r"(empty0 + 8 * s));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const unsigned char* base = p + blockIdx.x * kPiece;
  constexpr int kTiles = (int)(kPiece / kStage);
  if (threadIdx.x >= 128) {
    if (threadIdx.x != 128) return;
    for (int it = 0; it < kTiles; ++it) {
      const int s = it % kStages;
      const uint32_t full = full0 + 8 * s;
      if (it >= kStages) mbar_wait(empty0 + 8 * s, ((it / kStages) - 1) & 1);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full), "r"(kStage) : "memory");
      for (int c = 0; c < kStage / COPY; ++c)
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                smem_u32(ring + s * kStage + c * COPY)),
            "l"(base + (long long)it * kStage + c * COPY), "r"(COPY), "r"(full)
            : "memory");
    }
    return;
  }
  unsigned acc = 0;
  for (int it = 0; it < kTiles; ++it) {
    const int s = it % kStages;
    mbar_wait(full0 + 8 * s, (it / kStages) & 1);
    acc ^= reinterpret_cast<const unsigned*>(ring + s * kStage)[threadIdx.x];  // touch the stage
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(empty0 + 8 * s) : "memory");
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

__global__ void read_flush(const uint4* __restrict__ p, long long n, unsigned* sink) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += (long long)gridDim.x * 256) acc ^= fold(__ldg(p + i));
  if (acc == 0x9e3779b9u) sink[0] = acc;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const size_t bytes = size_t(kCtas) * kPiece, flush_bytes = 256u << 20;
  std::printf("%s, %d SMs, L2 %d MB; %d CTAs x %lld MiB = %.0f MB read; flush buffer 256 MiB\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, kCtas, kPiece >> 20, bytes / 1e6);
  unsigned char *buf = nullptr, *flush = nullptr;
  unsigned* sink = nullptr;
  CK(cudaMalloc(&buf, bytes));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(buf, 0x5a, bytes));
  CK(cudaFuncSetAttribute(read_bulk<32768>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kStage));
  CK(cudaFuncSetAttribute(read_bulk<4096>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kStage));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  const char* readers[] = {"ldg", "bulk32", "bulk4"};
  const char* flushes[] = {"read", "write", "zero"};
  std::printf("  %-8s", "reader");
  for (const char* f : flushes) std::printf("   after %-5s us (GB/s)", f);
  std::printf("\n");
  for (int r = 0; r < 3; ++r) {
    std::printf("  %-8s", readers[r]);
    for (int f = 0; f < 3; ++f) {
      std::vector<float> ms;
      for (int it = 0; it < 17; ++it) {
        if (f == 0) read_flush<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16, sink);
        else CK(cudaMemsetAsync(flush, f == 1 ? 1 + it % 200 : 0, flush_bytes));
        CK(cudaEventRecord(t0));
        if (r == 0) read_ldg<<<kCtas, 256>>>(reinterpret_cast<const uint4*>(buf), sink);
        else if (r == 1) read_bulk<32768><<<kCtas, 160, kStages * kStage>>>(buf, sink);
        else read_bulk<4096><<<kCtas, 160, kStages * kStage>>>(buf, sink);
        CK(cudaEventRecord(t1));
        CK(cudaEventSynchronize(t1));
        CK(cudaGetLastError());
        float t = 0;
        CK(cudaEventElapsedTime(&t, t0, t1));
        if (it >= 2) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const float m = ms[ms.size() / 2];
      std::printf("   %10.1f (%6.0f)        ", m * 1e3, bytes / (m * 1e-3) / 1e9);
    }
    std::printf("\n");
  }
  CK(cudaFree(buf));
  CK(cudaFree(flush));
  return 0;
}
