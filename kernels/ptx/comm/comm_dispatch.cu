// comm_dispatch for NVIDIA sm_80 and later: the communication kernel of the SM-partitioning
// policy (docs/partitions.md). It runs on few SMs beside the GEMMs, so it is written to
// disturb them as little as it can: token rows are read with ld.global.nc.L1::no_allocate
// (no L1 line kept) and written with st.global.L1::no_allocate and an L2 evict_first policy
// (the written rows are the first lines L2 gives up), and chunks of chunk_rows destination
// rows are handed out in order so that a chunk in flight bounds the L2 it occupies.
// Device code only (compiled with `nvcc -ptx`).
#include <cstdint>

namespace {

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void store_stream(uint4* p, uint4 v, uint64_t policy) {
  asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
               :
               : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
               : "memory");
}

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// One row of n 16-byte chunks by one warp, kUnroll chunks in flight per lane.
template <int kUnroll>
__device__ __forceinline__ void copy_row_vec(const uint4* src, uint4* dst, long long n, int lane, uint64_t policy) {
  long long c = lane;
  for (; c + 32 * (kUnroll - 1) < n; c += 32 * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_stream(src + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) store_stream(dst + c + 32 * u, v[u], policy);
  }
  for (; c < n; c += 32) store_stream(dst + c, load_stream(src + c), policy);
}

}  // namespace

// Persistent: block b moves chunks b, b + gridDim.x, ...; within a chunk each warp moves
// whole rows. Rows whose src_row lies outside [0, T) are skipped (a caller error).
extern "C" __global__ void hc_comm_dispatch(const unsigned short* __restrict__ x, const int* __restrict__ src_row,
                                            unsigned short* __restrict__ out, long long T, long long R, long long H,
                                            long long chunk_rows) {
  const uint64_t policy = evict_first_policy();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const bool vec = (H & 7) == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
  const long long chunks = (R + chunk_rows - 1) / chunk_rows;
  for (long long chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const long long r0 = chunk * chunk_rows;
    const long long r1 = r0 + chunk_rows < R ? r0 + chunk_rows : R;
    for (long long r = r0 + warp; r < r1; r += warps) {
      const int s = src_row[r];
      if (s < 0 || s >= T) continue;
      const unsigned short* src = x + (long long)s * H;
      unsigned short* dst = out + r * H;
      if (vec) {
        copy_row_vec<4>(reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), H >> 3, lane, policy);
      } else {
        for (long long c = lane; c < H; c += 32) dst[c] = src[c];
      }
    }
  }
}
