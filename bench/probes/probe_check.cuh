// What the standalone probes in bench/probes share: CK(call) stops the probe with the call, its
// place and the CUDA runtime's message when a runtime call fails; RingBuffers; copy_rate_gbs;
// time_launches; bulk / bulk_cast, the rings' 1-D bulk copies.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

// The copy rate (read + write, GB/s) of cudaMemcpy from `src` to `dst` (`bytes` each): the
// median of 5 timed copies after a warm-up, with events.
inline double copy_rate_gbs(void* dst, const void* src, unsigned long long bytes) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float ms[5];
  for (int r = 0; r < 6; ++r) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t = 0.f;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r > 0) ms[r - 1] = t;
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  for (int i = 0; i < 5; ++i)  // the median of five: sort them
    for (int j = i + 1; j < 5; ++j)
      if (ms[j] < ms[i]) {
        const float t = ms[i];
        ms[i] = ms[j];
        ms[j] = t;
      }
  return 2.0 * bytes / (ms[2] * 1e-3) / 1e9;
}

// Runs launch() 6 times (the first a warm-up). Each launch's kernel writes its CTAs' clock64
// spans to cycles[0, ctas); the medians over the 5 timed launches of the slowest CTA's cycles
// divided by `iters`, and of the launch's time in ms (events).
struct LaunchTimes {
  double cycles_per_iter, ms;
};
template <typename Launch>
LaunchTimes time_launches(Launch launch, const long long* cycles, int ctas, int iters) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> per, ms;
  std::vector<long long> host(ctas);
  for (int r = 0; r < 6; ++r) {
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

// The FP8 ring probes' buffers: a weight stream of `wbytes` (and a copy target of the same size
// for the copy rate) and `tok_bytes` of token rows, every byte e4m3 1.0 (0x38).
struct RingBuffers {
  unsigned char *w = nullptr, *w2 = nullptr, *tok = nullptr;
  unsigned long long wbytes;
  RingBuffers(unsigned long long wbytes_, unsigned long long tok_bytes) : wbytes(wbytes_) {
    CK(cudaMalloc(&w, wbytes));
    CK(cudaMalloc(&w2, wbytes));
    CK(cudaMalloc(&tok, tok_bytes));
    CK(cudaMemset(w, 0x38, wbytes));
    CK(cudaMemset(tok, 0x38, tok_bytes));
  }
  ~RingBuffers() {
    cudaFree(w);
    cudaFree(w2);
    cudaFree(tok);
  }
  RingBuffers(const RingBuffers&) = delete;
  RingBuffers& operator=(const RingBuffers&) = delete;
};
