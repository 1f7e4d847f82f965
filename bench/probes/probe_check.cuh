// What the standalone probes in bench/probes share: CK(call) stops the probe with the call, its
// place and the CUDA runtime's message when a runtime call fails (CKD: a driver API call, by its
// CUresult); RingBuffers; median_ms; copy_rate_gbs;
// time_launches; bulk / bulk_cast, the rings' 1-D bulk copies; e4m3_map, bf16_out_map (link with -lcuda).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <stdint.h>
#include <vector>

// A 1-D bulk copy of `bytes` from global memory into this CTA's shared memory at `dst`, completing
// on the mbarrier at `bar`; bulk_cast: into the same offset of both CTAs of a 2-CTA cluster,
// each signalling its own barrier at `bar`'s offset.
__device__ __forceinline__ void bulk(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void bulk_cast(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"((unsigned short)3)
      : "memory");
}

#define CK(x)                                                                               \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
#define CKD(x)                                                                          \
  do {                                                                                  \
    const CUresult r_ = (x);                                                            \
    if (r_ != CUDA_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #x, int(r_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

// The median time in ms (events) of `runs` calls of work() after one warm-up call.
template <typename Work>
double median_ms(Work work, int runs) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r <= runs; ++r) {
    CK(cudaEventRecord(e0));
    work();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float t = 0.f;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r > 0) ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The copy rate (read + write, GB/s) of cudaMemcpy from `src` to `dst` (`bytes` each): the
// median of 5 timed copies after a warm-up.
inline double copy_rate_gbs(void* dst, const void* src, unsigned long long bytes) {
  const double ms = median_ms([&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 5);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

// Runs launch() `runs` times (the first a warm-up). Each launch's kernel writes its CTAs' clock64
// spans to cycles[0, ctas); the medians over the timed launches of the slowest CTA's cycles
// divided by `iters`, and of the launch's time in ms (events).
struct LaunchTimes {
  double cycles_per_iter, ms;
};
template <typename Launch>
LaunchTimes time_launches(Launch launch, const long long* cycles, int ctas, int iters, int runs = 6) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> per, ms;
  std::vector<long long> host(ctas);
  for (int r = 0; r < runs; ++r) {
    CK(cudaEventRecord(e0));
    launch(r);
    CK(cudaEventRecord(e1));
    CK(cudaGetLastError());
    CK(cudaMemcpy(host.data(), cycles, ctas * sizeof(long long), cudaMemcpyDeviceToHost));
    float f = 0.f;
    CK(cudaEventElapsedTime(&f, e0, e1));
    if (r > 0) per.push_back(double(*std::max_element(host.begin(), host.end())) / iters), ms.push_back(f);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(per.begin(), per.end());
  std::sort(ms.begin(), ms.end());
  return {per[per.size() / 2], ms[ms.size() / 2]};
}

// Random e4m3 bytes, never NaN (bit 3 cleared: 0x7f and 0xff cannot occur): the bench's data is
// random, and the energy a GEMM spends depends on it.
__global__ void fill_random(unsigned char* p, unsigned long long n, unsigned seed) {
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ unsigned(i >> 32) * 40503u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = (unsigned char)(h & 0xf7u);
  }
}

// The FP8 ring probes' buffers: a weight stream of `wbytes` (and a copy target of the same size
// for the copy rate) and `tok_bytes` of token rows, random e4m3 bytes (fill_random; until
// 2026-11-30 every byte was 1.0, 0x38).
struct RingBuffers {
  unsigned char *w = nullptr, *w2 = nullptr, *tok = nullptr;
  unsigned long long wbytes;
  RingBuffers(unsigned long long wbytes_, unsigned long long tok_bytes) : wbytes(wbytes_) {
    CK(cudaMalloc(&w, wbytes));
    CK(cudaMalloc(&w2, wbytes));
    CK(cudaMalloc(&tok, tok_bytes));
    fill_random<<<1024, 256>>>(w, wbytes, 1);
    fill_random<<<1024, 256>>>(tok, tok_bytes, 2);
    CK(cudaDeviceSynchronize());
  }
  ~RingBuffers() {
    cudaFree(w);
    cudaFree(w2);
    cudaFree(tok);
  }
  RingBuffers(const RingBuffers&) = delete;
  RingBuffers& operator=(const RingBuffers&) = delete;
};

// A bf16 [rows, n] map in boxes of 64 x 16, 128B swizzle: the staged FP8 GEMMs' tensor stores.
inline CUtensorMap bf16_out_map(void* base, cuuint64_t n, cuuint64_t rows) {
  CUtensorMap m{};
  cuuint64_t d[2] = {n, rows}, strides[1] = {n * 2};
  cuuint32_t box[2] = {64, 16}, estr[2] = {1, 1};
  CKD(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, d, strides, box, estr,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return m;
}
// A tensor map over e4m3 bytes (dims innermost first, dense), boxes of 128 bytes x `rows` (x 1),
// 128-byte swizzle and 256-byte L2 promotion: the maps sm90.tall's launcher makes.
inline CUtensorMap e4m3_map(void* base, std::initializer_list<cuuint64_t> dims, cuuint32_t rows) {
  CUtensorMap m{};
  cuuint64_t d[3], strides[2];
  cuuint32_t box[3] = {128, rows, 1}, estr[3] = {1, 1, 1};
  cuuint64_t stride = 1;
  int r = 0;
  for (cuuint64_t n : dims) {
    d[r] = n;
    if (r > 0) strides[r - 1] = stride;
    stride *= n;
    ++r;
  }
  CKD(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, r, base, d, strides, box, estr,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return m;
}
