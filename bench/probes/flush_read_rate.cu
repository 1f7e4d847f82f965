// flush_read_rate: how much a full L2 of dirty lines slows a read-bound kernel, by the way it
// reads. A diagnostic for issue 15 (docs/PERFORMANCE.md): with clean caches halcyon's paged
// decode (TMA boxes into a ring of shared-memory stages) and cuDNN's (cp.async from every
// thread) run level at b64 Hkv 2, but after a 256 MB write (the benches' flush) halcyon's takes
// ~13 us longer and cuDNN's ~9 us. Is it the TMA?
//
// 537 MB are read (decode's K and V bytes at b64 Hkv 2 kv8192 d128) in six ways:
//   ldg      128 CTAs (the decode grid there, one an SM), a contiguous 4 MiB piece each, 256
//            threads, 16-byte __ldg loads, 8 in flight a thread
//   bulk     the same pieces by cp.async.bulk (1-D TMA) copies of 32 KiB or of 4 KiB into a ring
//            of 6 stages of 32 KiB (decode's deep build), 128 threads waiting for each stage
//   paged    the cache's own pattern: K and V caches of 8192 blocks of 64 rows x 512 bytes (both
//            heads), a sequence's 128 blocks in scrambled order; one head's 256-byte slice of
//            each row (128 CTAs, as the decode reads), whole rows by 64 CTAs (a CTA a sequence,
//            both heads), and whole rows by 128 CTAs (half a sequence's blocks each)
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

// The rings' barriers (full: `arrivals` producer arrivals + the bytes; empty: the 128
// consumers), made visible to the CTA.
__device__ __forceinline__ void ring_init(uint32_t full0, uint32_t empty0, int arrivals) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(full0 + 8 * s), "r"(arrivals));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;\n" ::"r"(empty0 + 8 * s));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
}
// A consumer thread (of 128): waits for each of `tiles` stages, touches it, releases it.
__device__ __forceinline__ void consume_ring(const unsigned char* ring, uint32_t full0, uint32_t empty0, int tiles,
                                             unsigned* sink) {
  unsigned acc = 0;
  for (int it = 0; it < tiles; ++it) {
    const int s = it % kStages;
    mbar_wait(full0 + 8 * s, (it / kStages) & 1);
    acc ^= reinterpret_cast<const unsigned*>(ring + s * kStage)[threadIdx.x];
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(empty0 + 8 * s) : "memory");
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // practically never: keeps the reads
}

// 128 consumer threads + one producer warp (lane 0 issues). COPY: bytes a bulk copy.
template <int COPY>
__global__ void __launch_bounds__(160) read_bulk(const unsigned char* __restrict__ p, unsigned* sink) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];
  const uint32_t full0 = smem_u32(bars), empty0 = full0 + 8 * kStages;
  ring_init(full0, empty0, 1);
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
  consume_ring(ring, full0, empty0, kTiles, sink);
}

// The paged cache's pattern (decode at b64 Hkv 2, block 64): K and V caches of 8192 blocks of 64
// rows x 512 bytes (both heads' 256-byte slices), each sequence's 128 blocks in scrambled order
// (`table`). A CTA reads `nblk` blocks of its list from `first` on, K's then V's part of each
// block into one stage each: ROW = 256 (one head's slice of each row, at `head` x 256: 64 copies
// of 256 bytes a stage, issued by the producer warp's 32 lanes) or 512 (whole rows: one 32 KiB copy).
template <int ROW>
__global__ void __launch_bounds__(160) read_paged(const unsigned char* __restrict__ k, long long cache_bytes,
                                                  const int* __restrict__ table, int per_cta, int nblk, int head,
                                                  unsigned* sink) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];
  const uint32_t full0 = smem_u32(bars), empty0 = full0 + 8 * kStages;
  ring_init(full0, empty0, 32);
  const int* list = table + (long long)blockIdx.x * per_cta;
  const int hd = ROW == 512 ? 0 : (head >= 0 ? head : (int)(blockIdx.x & 1));
  const int tiles = 2 * nblk;  // K, V of each block
  constexpr uint32_t kBytes = 64 * ROW;
  if (threadIdx.x >= 128) {
    const int lane = threadIdx.x - 128;
    for (int it = 0; it < tiles; ++it) {
      const int s = it % kStages;
      const uint32_t full = full0 + 8 * s;
      if (it >= kStages) mbar_wait(empty0 + 8 * s, ((it / kStages) - 1) & 1);
      const unsigned char* src = k + (it & 1) * cache_bytes + (long long)list[it >> 1] * (64 * 512) + hd * 256;
      if (lane == 0)
        asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(full), "r"(kBytes) : "memory");
      __syncwarp();
      if (ROW == 512) {
        if (lane == 0)
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                           smem_u32(ring + s * kStage)), "l"(src), "r"(kBytes), "r"(full)
                       : "memory");
      } else {
        for (int r = lane; r < 64; r += 32)
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                           smem_u32(ring + s * kStage + r * ROW)), "l"(src + r * 512), "r"(ROW), "r"(full)
                       : "memory");
      }
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(full) : "memory");
    }
    return;
  }
  consume_ring(ring, full0, empty0, tiles, sink);
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
  // The paged cache: buf holds K then V, each 8192 blocks of 32 KiB; sequence b's blocks are a
  // random permutation's entries [128 b, 128 b + 128).
  const long long cache_bytes = (long long)bytes / 2, nblocks = cache_bytes / (64 * 512);
  std::vector<int> perm(static_cast<size_t>(nblocks));
  for (long long i = 0; i < nblocks; ++i) perm[size_t(i)] = int(i);
  unsigned rng = 12345u;
  for (long long i = nblocks - 1; i > 0; --i) {
    rng = rng * 1664525u + 1013904223u;
    std::swap(perm[size_t(i)], perm[size_t(rng % unsigned(i + 1))]);
  }
  // Tables by CTA: half rows (128 CTAs: sequence c / 2, head c % 2, all 128 blocks), whole rows
  // (64 CTAs: one a sequence), whole rows split (128 CTAs: half a sequence's blocks each).
  std::vector<int> t_half(size_t(128 * 128)), t_whole = perm, t_split = perm;
  for (int c = 0; c < 128; ++c)
    for (int j = 0; j < 128; ++j) t_half[size_t(c * 128 + j)] = perm[size_t((c / 2) * 128 + j)];
  int *d_half = nullptr, *d_whole = nullptr;
  CK(cudaMalloc(&d_half, t_half.size() * 4));
  CK(cudaMalloc(&d_whole, t_whole.size() * 4));
  CK(cudaMemcpy(d_half, t_half.data(), t_half.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_whole, t_whole.data(), t_whole.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(read_paged<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kStage));
  CK(cudaFuncSetAttribute(read_paged<512>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStages * kStage));
  struct Reader {
    const char* name;
    void (*launch)(unsigned char*, unsigned*, long long, const int*, const int*);
  };
  const Reader readers[] = {
      {"ldg: 128 CTAs, contiguous 4 MiB each", [](unsigned char* b, unsigned* k, long long, const int*, const int*) {
         read_ldg<<<kCtas, 256>>>(reinterpret_cast<const uint4*>(b), k);
       }},
      {"bulk 32 KiB copies: 128 CTAs, contiguous", [](unsigned char* b, unsigned* k, long long, const int*, const int*) {
         read_bulk<32768><<<kCtas, 160, kStages * kStage>>>(b, k);
       }},
      {"bulk 4 KiB copies: 128 CTAs, contiguous", [](unsigned char* b, unsigned* k, long long, const int*, const int*) {
         read_bulk<4096><<<kCtas, 160, kStages * kStage>>>(b, k);
       }},
      {"paged, one head's 256 B a row: 128 CTAs (decode)", [](unsigned char* b, unsigned* k, long long cb, const int* th, const int*) {
         read_paged<256><<<128, 160, kStages * kStage>>>(b, cb, th, 128, 128, -1, k);
       }},
      {"paged, whole 512 B rows: 64 CTAs (both heads)", [](unsigned char* b, unsigned* k, long long cb, const int*, const int* tw) {
         read_paged<512><<<64, 160, kStages * kStage>>>(b, cb, tw, 128, 128, 0, k);
       }},
      {"paged, whole rows, half a sequence: 128 CTAs", [](unsigned char* b, unsigned* k, long long cb, const int*, const int* tw) {
         read_paged<512><<<128, 160, kStages * kStage>>>(b, cb, tw, 64, 64, 0, k);
       }},
  };
  const char* flushes[] = {"read", "write", "zero"};
  std::printf("  %-50s", "reader (537 MB each)");
  for (const char* f : flushes) std::printf("  after %-5s us (GB/s)", f);
  std::printf("\n");
  for (const Reader& r : readers) {
    std::printf("  %-50s", r.name);
    for (int f = 0; f < 3; ++f) {
      std::vector<float> ms;
      for (int it = 0; it < 17; ++it) {
        if (f == 0) read_flush<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16, sink);
        else CK(cudaMemsetAsync(flush, f == 1 ? 1 + it % 200 : 0, flush_bytes));
        CK(cudaEventRecord(t0));
        r.launch(buf, sink, cache_bytes, d_half, d_whole);
        CK(cudaEventRecord(t1));
        CK(cudaEventSynchronize(t1));
        CK(cudaGetLastError());
        float t = 0;
        CK(cudaEventElapsedTime(&t, t0, t1));
        if (it >= 2) ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const float m = ms[ms.size() / 2];
      std::printf("  %9.1f (%5.0f)       ", m * 1e3, bytes / (m * 1e-3) / 1e9);
    }
    std::printf("\n");
  }
  CK(cudaFree(d_half));
  CK(cudaFree(d_whole));
  CK(cudaFree(buf));
  CK(cudaFree(flush));
  return 0;
}
