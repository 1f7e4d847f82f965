// nvlink_sm_rate: how fast a given set of SMs moves bytes to (push) or from (pull) a peer GPU
// over NVLink, and whether the SMs' placement across GPCs matters. A diagnostic for issue 20
// (docs/expert_parallel.md): ep_dispatch (remote stores) gained 4% from 24 to 32 comm SMs while
// ep_combine (remote loads) gained 22%, so something other than the SM count caps the stores.
//
// Not part of the library: a standalone CUDA runtime program, built on the GPU machine with
//   nvcc -O3 -std=c++17 -arch=sm_90a bench/probes/nvlink_sm_rate.cu -o nvlink_sm_rate
// and run on a machine with two peer-connected GPUs (nvidia-h200-x2): ./nvlink_sm_rate [MiB]
//
// 1. GPC map: clusters always run inside one GPC, so SMs that ever share a cluster share a GPC.
//    Launches of clusters of 16, 8, 4 and 2 one-block-per-SM blocks, unioned, give the groups.
// 2. Copies of `bytes` by one 512-thread block per SM (dynamic shared memory forces one a SM;
//    grid = every SM); a block whose %smid is not in the chosen set returns at once, the others
//    take 256 KiB chunks from a counter. Each GPU copies to / from the other at the same time
//    (both directions, as an all-to-all does), timed with events, median of 7.
// 3. Sets: the 24 SMs a default 20-SM green context was granted on an H100 (0-5, 16-21, 32-37,
//    48-53; docs/backends/cuda.md), k SMs packed into as few GPCs as possible, and k SMs spread
//    a TPC (2 SMs) at a time over every GPC; and the copy engines (cudaMemcpyPeerAsync).
#include <cuda_runtime.h>

#include "probe_check.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr int kThreads = 512;
constexpr int kDepth = 8;                                // 16-byte loads in flight a thread
constexpr size_t kChunk16 = 256 * 1024 / 16;             // a chunk, in 16-byte units
constexpr size_t kOneBlockSmem = 120 * 1024;             // > half an SM's shared memory

__device__ unsigned smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}

// Records the SM and the cluster of every block; spins so that a launch's clusters are resident
// together rather than one after another on the same SMs.
__global__ void record_clusters(int* sm_of_block) {
  extern __shared__ char pad[];
  if (threadIdx.x == 0) {
    sm_of_block[blockIdx.x] = static_cast<int>(smid());
    const long long t0 = clock64();
    while (clock64() - t0 < 200000) {
    }
    pad[0] = 0;
  }
}

__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n16,
                            const unsigned char* __restrict__ allowed, unsigned* counter) {
  extern __shared__ char pad[];
  __shared__ unsigned chunk;
  if (!allowed[smid()]) return;
  if (threadIdx.x == 0) pad[0] = 0;
  for (;;) {
    if (threadIdx.x == 0) chunk = atomicAdd(counter, 1u);
    __syncthreads();
    const size_t begin = static_cast<size_t>(chunk) * kChunk16;
    __syncthreads();
    if (begin >= n16) return;
    const size_t end = begin + kChunk16 < n16 ? begin + kChunk16 : n16;
    for (size_t i = begin + threadIdx.x; i < end; i += kThreads * kDepth) {
      int4 v[kDepth];
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        const size_t j = i + static_cast<size_t>(d) * kThreads;
        if (j < end) v[d] = src[j];
      }
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        const size_t j = i + static_cast<size_t>(d) * kThreads;
        if (j < end) dst[j] = v[d];
      }
    }
  }
}

struct Gpu {
  int dev = 0;
  int sms = 0;
  int4* src = nullptr;   // bytes to send (random)
  int4* recv = nullptr;  // where the peer's bytes land
  unsigned char* allowed = nullptr;
  unsigned* counter = nullptr;
  cudaStream_t stream{};
  cudaEvent_t t0{}, t1{};
};

// Union-find over SM ids.
int root(std::vector<int>& p, int a) {
  while (p[a] != a) a = p[a] = p[p[a]];
  return a;
}

std::vector<std::vector<int>> gpc_groups(Gpu& g) {
  CK(cudaSetDevice(g.dev));
  std::vector<int> parent(g.sms);
  std::iota(parent.begin(), parent.end(), 0);
  int* d_sm = nullptr;
  CK(cudaMalloc(&d_sm, sizeof(int) * 4096));
  CK(cudaFuncSetAttribute(record_clusters, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneBlockSmem));
  CK(cudaFuncSetAttribute(record_clusters, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int c : {16, 8, 4, 2}) {
    for (int clusters : {g.sms / c, g.sms / c / 2 + 1, 3}) {
      const int blocks = clusters * c;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(blocks);
      cfg.blockDim = dim3(32);
      cfg.dynamicSmemBytes = kOneBlockSmem;
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = c;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      if (cudaLaunchKernelEx(&cfg, record_clusters, d_sm) != cudaSuccess) {
        (void)cudaGetLastError();
        std::printf("cluster size %d: launch refused\n", c);
        break;
      }
      CK(cudaDeviceSynchronize());
      std::vector<int> sm(blocks);
      CK(cudaMemcpy(sm.data(), d_sm, sizeof(int) * blocks, cudaMemcpyDeviceToHost));
      for (int b = 0; b < blocks; ++b) parent[root(parent, sm[b])] = root(parent, sm[b - b % c]);
    }
  }
  CK(cudaFree(d_sm));
  std::map<int, std::vector<int>> by_root;
  for (int s = 0; s < g.sms; ++s) by_root[root(parent, s)].push_back(s);
  std::vector<std::vector<int>> out;
  for (auto& [r, v] : by_root) out.push_back(v);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.size() > b.size(); });
  return out;
}

std::vector<int> packed(const std::vector<std::vector<int>>& gpcs, int k) {
  std::vector<int> out;
  for (auto& g : gpcs)
    for (int s : g)
      if (static_cast<int>(out.size()) < k) out.push_back(s);
  return out;
}

// A TPC (two consecutive SM ids of a GPC) at a time from each GPC in turn.
std::vector<int> spread(const std::vector<std::vector<int>>& gpcs, int k) {
  std::vector<int> out;
  for (size_t round = 0; static_cast<int>(out.size()) < k; ++round) {
    bool any = false;
    for (auto& g : gpcs)
      for (size_t i = 2 * round; i < std::min(g.size(), 2 * round + 2); ++i)
        if (static_cast<int>(out.size()) < k) out.push_back(g[i]), any = true;
    if (!any) break;
  }
  return out;
}

std::string describe(const std::vector<int>& set, const std::vector<std::vector<int>>& gpcs) {
  std::string s;
  for (size_t i = 0; i < gpcs.size(); ++i) {
    int n = 0;
    for (int x : set) n += std::count(gpcs[i].begin(), gpcs[i].end(), x) > 0;
    if (n) s += (s.empty() ? "" : " ") + std::string("g") + std::to_string(i) + ":" + std::to_string(n);
  }
  return s;
}

// Both GPUs copy at once: push (local src -> peer's recv) or pull (peer's src -> local recv).
// Returns each GPU's median GB/s.
std::vector<double> run_copy(std::vector<Gpu>& gs, const std::vector<int>& set, bool push, size_t bytes,
                             bool both = true) {
  const size_t n16 = bytes / 16;
  std::vector<std::vector<float>> ms(gs.size());
  for (auto& g : gs) {
    CK(cudaSetDevice(g.dev));
    std::vector<unsigned char> a(g.sms, 0);
    for (int s : set) a[s] = 1;
    CK(cudaMemcpy(g.allowed, a.data(), g.sms, cudaMemcpyHostToDevice));
  }
  for (int it = 0; it < 8; ++it) {
    for (size_t r = 0; r < gs.size(); ++r) {
      Gpu& g = gs[r];
      Gpu& peer = gs[(r + 1) % gs.size()];
      CK(cudaSetDevice(g.dev));
      CK(cudaMemsetAsync(g.counter, 0, sizeof(unsigned), g.stream));
      if (!both && r) continue;
      CK(cudaEventRecord(g.t0, g.stream));
      if (set.empty())
        CK(cudaMemcpyPeerAsync(peer.recv, peer.dev, g.src, g.dev, bytes, g.stream));
      else
        copy_kernel<<<g.sms, kThreads, kOneBlockSmem, g.stream>>>(push ? g.src : peer.src, push ? peer.recv : g.recv, n16,
                                                                  g.allowed, g.counter);
      CK(cudaGetLastError());
      CK(cudaEventRecord(g.t1, g.stream));
    }
    for (size_t r = 0; r < gs.size(); ++r) {
      if (!both && r) continue;
      CK(cudaSetDevice(gs[r].dev));
      CK(cudaStreamSynchronize(gs[r].stream));
      float t = 0;
      CK(cudaEventElapsedTime(&t, gs[r].t0, gs[r].t1));
      if (it) ms[r].push_back(t);  // the first is a warm-up
    }
  }
  std::vector<double> out;
  for (auto& m : ms) {
    if (m.empty()) continue;
    std::sort(m.begin(), m.end());
    out.push_back(bytes / (m[m.size() / 2] * 1e-3) / 1e9);
  }
  return out;
}

void report(const char* what, const std::vector<int>& set, const std::vector<std::vector<int>>& gpcs,
            const std::vector<double>& gbs) {
  std::printf("%-28s %3zu SMs  [%s]", what, set.size(), set.empty() ? "copy engines" : describe(set, gpcs).c_str());
  for (double x : gbs) std::printf("  %7.1f", x);
  if (!set.empty() && !gbs.empty()) std::printf("   per SM %5.2f", gbs[0] / set.size());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 512;
  const size_t bytes = mib << 20;
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    std::printf("needs two GPUs; this machine has %d\n", n);
    return 2;
  }
  std::vector<Gpu> gs(2);
  for (int r = 0; r < 2; ++r) {
    Gpu& g = gs[r];
    g.dev = r;
    CK(cudaSetDevice(r));
    cudaDeviceProp p{};
    CK(cudaGetDeviceProperties(&p, r));
    g.sms = p.multiProcessorCount;
    std::printf("GPU %d: %s, %d SMs\n", r, p.name, g.sms);
    int ok = 0;
    CK(cudaDeviceCanAccessPeer(&ok, r, 1 - r));
    if (!ok) {
      std::printf("GPU %d cannot access GPU %d\n", r, 1 - r);
      return 2;
    }
    CK(cudaDeviceEnablePeerAccess(1 - r, 0));
    CK(cudaMalloc(&g.src, bytes));
    CK(cudaMalloc(&g.recv, bytes));
    CK(cudaMalloc(&g.allowed, 4096));
    CK(cudaMalloc(&g.counter, sizeof(unsigned)));
    std::vector<unsigned> h(bytes / 4);
    unsigned x = 12345u + r;
    for (auto& v : h) v = x = x * 1664525u + 1013904223u;
    CK(cudaMemcpy(g.src, h.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g.t0));
    CK(cudaEventCreate(&g.t1));
    CK(cudaFuncSetAttribute(copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kOneBlockSmem));
  }
  auto gpcs = gpc_groups(gs[0]);
  std::printf("GPC groups of GPU 0 (SMs that shared a cluster): %zu\n", gpcs.size());
  for (size_t i = 0; i < gpcs.size(); ++i) {
    std::printf("  g%zu (%zu):", i, gpcs[i].size());
    for (int s : gpcs[i]) std::printf(" %d", s);
    std::printf("\n");
  }
  std::printf("\n%zu MiB each way, both GPUs at once; GB/s of GPU 0, GPU 1\n", mib);
  report("copy engines, both", {}, gpcs, run_copy(gs, {}, true, bytes));
  report("copy engines, one way", {}, gpcs, run_copy(gs, {}, true, bytes, false));
  std::vector<int> all(gs[0].sms);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<int> green24 = {0, 1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21, 32, 33, 34, 35, 36, 37, 48, 49, 50, 51, 52, 53};
  for (bool push : {true, false}) {
    const char* m = push ? "push" : "pull";
    report((std::string(m) + " all").c_str(), all, gpcs, run_copy(gs, all, push, bytes));
    report((std::string(m) + " green-context 24").c_str(), green24, gpcs, run_copy(gs, green24, push, bytes));
    for (int k : {8, 16, 24, 32, 48}) {
      auto p = packed(gpcs, k), s = spread(gpcs, k);
      report((std::string(m) + " packed " + std::to_string(k)).c_str(), p, gpcs, run_copy(gs, p, push, bytes));
      report((std::string(m) + " spread " + std::to_string(k)).c_str(), s, gpcs, run_copy(gs, s, push, bytes));
    }
    auto s24 = spread(gpcs, 24);
    report((std::string(m) + " spread 24, one way").c_str(), s24, gpcs, run_copy(gs, s24, push, bytes, false));
  }
  return 0;
}
