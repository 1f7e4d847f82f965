// paged_read_rate: how fast one GPU reads a paged KV cache [blocks, 64 rows, Hkv, D] when each
// CTA reads one head's slice of every row (256 bytes of a 4 KiB row at Hkv 16, D 128: what a
// decode kernel with one CTA per (sequence, KV head) does), against CTAs that read whole rows
// (every head of a row, the cache's own contiguous order) and against a plain contiguous stream.
// A diagnostic for issue 15: halcyon's paged decode reads K and V at 4.10 TB/s on an H200 where
// cuDNN reads a dense [B, H, S, D] cache at 4.59 (docs/PERFORMANCE.md); is the head-interleaved
// layout what costs? `paged_read_rate B Hkv` reads other shapes (b256 Hkv 2: Hkv 2's steady state).
//
// Not part of the library: a standalone CUDA runtime program, built on the GPU machine with
//   nvcc -O3 -std=c++17 -arch=sm_90a bench/probes/paged_read_rate.cu -o paged_read_rate
// Every pattern reads the same bytes (B x L keys x Hkv x D x 2 bytes, K and V), 16-byte loads
// with 8 in flight a thread, sums them so nothing is optimised away; medians of 9, events.
#include <cuda_runtime.h>

#include "probe_check.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kThreads = 256, kDepth = 8;

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// Reads pieces [0, n) of 16 bytes, piece i at p + (i >> row_shift) * row_stride + (i & mask):
// rows of 2^row_shift pieces, row_stride pieces apart, starting at p + blockIdx.y * unit_stride.
// The grid.x CTAs split the n pieces into equal ranges of whole rows.
__global__ void read_rows(const uint4* __restrict__ p, long long unit_stride, long long n, int row_shift,
                          long long row_stride, unsigned* sink) {
  const long long per_cta = (n + gridDim.x - 1) / gridDim.x;
  const long long i0 = blockIdx.x * per_cta, i1 = min(n, i0 + per_cta);
  const uint4* base = p + blockIdx.y * unit_stride;
  const long long mask = (1ll << row_shift) - 1;
  unsigned acc = 0;
  for (long long i = i0 + threadIdx.x; i < i1; i += (long long)kThreads * kDepth) {
    uint4 v[kDepth];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const long long j = i + (long long)d * kThreads;
      v[d] = j < i1 ? __ldg(base + (j >> row_shift) * row_stride + (j & mask)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) acc ^= fold(v[d]);
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // practically never: keeps the loads
}

}  // namespace

// Usage: paged_read_rate [B [Hkv]]   (defaults 64 and 16; Hkv a power of two from 2 to 16)
int main(int argc, char** argv) {
  const long long B = argc > 1 ? std::atoll(argv[1]) : 64, Hkv = argc > 2 ? std::atoll(argv[2]) : 16;
  const long long L = 8192, D = 128, BS = 64;
  if (B < 1 || Hkv < 2 || Hkv > 16 || (Hkv & (Hkv - 1))) {
    std::fprintf(stderr, "usage: paged_read_rate [B >= 1 [Hkv in 2, 4, 8, 16]]\n");
    return 2;
  }
  const long long rows = B * L;                      // key rows of the cache (blocks x BS)
  const long long row16 = Hkv * D * 2 / 16;          // a row of every head, in 16-byte pieces
  const long long head16 = D * 2 / 16;               // one head's slice of a row
  const long long cache16 = rows * row16;            // one cache (K or V)
  const double bytes = 2.0 * cache16 * 16;           // K and V
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; cache [%lld blocks, %lld rows, Hkv %lld, D %lld] bf16, K and V: %.0f MB\n", prop.name,
              prop.multiProcessorCount, rows / BS, BS, Hkv, D, bytes / 1e6);
  uint4* kv = nullptr;
  unsigned* sink = nullptr;
  CK(cudaMalloc(&kv, size_t(2 * cache16) * 16));
  CK(cudaMalloc(&sink, 4));
  CK(cudaMemset(kv, 0x5a, size_t(2 * cache16) * 16));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  auto time = [&](const char* what, dim3 grid, long long unit_stride, long long n, int row_shift, long long row_stride) {
    std::vector<float> ms;
    for (int it = 0; it < 10; ++it) {
      CK(cudaEventRecord(t0));
      read_rows<<<grid, kThreads>>>(kv, unit_stride, n, row_shift, row_stride, sink);
      CK(cudaEventRecord(t1));
      CK(cudaEventSynchronize(t1));
      float t = 0;
      CK(cudaEventElapsedTime(&t, t0, t1));
      if (it) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const float m = ms[ms.size() / 2];
    std::printf("  %-60s %8.1f us  %6.0f GB/s\n", what, m * 1e3, bytes / (m * 1e-3) / 1e9);
  };
  // K then V, contiguous: row r of either lies at r * row16 pieces (r < 2 * rows).
  int row_shift = 4;  // head16 = 16 pieces, row16 = Hkv x 16 pieces
  while ((1ll << row_shift) < row16) ++row_shift;
  const int head_shift = 4;
  if ((1ll << head_shift) != head16 || (1ll << row_shift) != row16) return 3;
  for (int splits : {1, 2, 4}) {
    std::printf("%d split(s) of each sequence, %lld CTAs:\n", splits, 2 * B * splits * Hkv);
    // Decode's pattern: a CTA per (cache, sequence, split) x head (grid.y): its head's 256 bytes
    // of each of its rows, rows Hkv x 256 bytes apart.
    time("one head's slice of each row a CTA (a decode CTA's pattern)", dim3(unsigned(2 * B * splits), unsigned(Hkv)),
         head16, 2 * rows * head16, head_shift, row16);
    // Half of that slice (128 bytes, 64 dims: one TMA box's row in the sm90.tma decode), a CTA
    // per half: twice the CTAs, each row's 256 bytes fetched by two of them.
    time("128 bytes of each row a CTA (a decode TMA box's row)", dim3(unsigned(2 * B * splits), unsigned(2 * Hkv)),
         head16 / 2, 2 * rows * head16 / 2, head_shift - 1, row16);
    // The same CTA count reading whole rows (every head), contiguous.
    time("whole rows a CTA (contiguous, the cache's own order)", dim3(unsigned(2 * B * splits * Hkv), 1u), 0,
         2 * cache16, row_shift, row16);
    // Two heads' slices of each row a CTA (512 bytes): a decode CTA serving two KV heads.
    time("two heads' slices of each row a CTA (512 bytes)", dim3(unsigned(2 * B * splits), unsigned(Hkv / 2)),
         2 * head16, 2 * rows * 2 * head16, head_shift + 1, row16);
  }
  time("plain stream, 8 CTAs an SM", dim3(unsigned(prop.multiProcessorCount * 8), 1u), 0, 2 * cache16, 0, 1);
  CK(cudaFree(kv));
  return 0;
}
