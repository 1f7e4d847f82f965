// Attention prefill for Hopper (sm_90a): the sm_80 kernel's structure (attention_sm80.cu: a CTA
// of 4 warps owns 64 query rows of one head, key tiles of 64, online softmax in registers,
// K/V double-buffered with cp.async) with the tensor-core work on wgmma: S = Q K^T as
// m64n64k16 with both operands in shared memory (Q and K K-major), O += P V as m64n{D}k16
// with P straight from the softmax registers (the m16n8 accumulator layout is wgmma's A
// register layout, warp by warp) and V MN-major in shared memory (transposed operand).
// Tiles are stored in the 128-byte swizzle wgmma reads (SW128): D / 64 blocks of
// [64 rows][128 bytes], 16-byte chunk c of row r at block c / 8, byte r * 128 +
// ((c % 8) ^ (r % 8)) * 16 — the same arrangement serves Q and K (K-major) and V (MN-major,
// blocks of 64 output columns, LBO = 8 KiB between them).
//
// Not warp-specialised, no TMA, no setmaxnreg yet: the first step past mma.sync.
//
// NOT YET RUN ON A GPU (written without one): tests/cuda/test_ptx_attention.cpp checks it
// against the CPU reference by name (run_op_with), next to the sm_80 kernel.
#include "attention_common.cuh"
#include "../moe/sm90_common.cuh"

namespace hc {
namespace {

__device__ __forceinline__ void wgmma_m64n64k16_rs(float* d, const uint32_t* a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
__device__ __forceinline__ void wgmma_m64n128k16_rs(float* d, const uint32_t* a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a [64 rows][D] SW128 tile.
__device__ __forceinline__ uint32_t sw128(int row, int chunk) {
  return (chunk >> 3) * (kRows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

struct Sw128Off {
  __device__ uint32_t operator()(int row, int chunk) const { return sw128(row, chunk); }
};

template <int D>
__device__ void prefill_sm90(const unsigned short* q, const unsigned short* k, const unsigned short* v,
                             unsigned short* out, float* lse, const int* cu_q, const int* cu_k, long long B,
                             long long Tq, long long Tk, long long Hq, long long Hkv, long long causal,
                             float scale_log2) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ long long row_q[kRows];
  __shared__ int row_vis[kRows];
  constexpr uint32_t T = kRows * D * 2;  // bytes of a Q, K or V tile
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t sq = (raw + 1023) & ~1023u;  // SW128 atoms need 1024-byte alignment
  const uint32_t sk = sq + T, sv = sq + 3 * T;  // K and V: 2 stages each
  Problem p;
  if (!prefill_rows<D>(p, row_q, row_vis, q, cu_q, cu_k, B, Hq, Hkv, causal, Tq, Tk)) return;
  load_q_tile<D>(sq, p, row_q, Sw128Off{});
  const int n_tiles = p.kend > 0 ? (p.kend + kKeys - 1) / kKeys : 0;
  if (n_tiles > 0) load_kv_tile<D>(sk, sv, k, v, p, 0, Sw128Off{});
  cp_async_commit();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = warp * 16 + (lane >> 2);
  const int vis0 = min(row_vis[r0], p.kend), vis1 = min(row_vis[r0 + 8], p.kend);
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  RowState st{neg_inf(), neg_inf(), 0.f, 0.f};

  for (int it = 0; it < n_tiles; ++it) {
    const int k0 = it * kKeys;
    if (it + 1 < n_tiles) {
      load_kv_tile<D>(sk + ((it + 1) & 1) * T, sv + ((it + 1) & 1) * T, k, v, p, k0 + kKeys, Sw128Off{});
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
    __syncthreads();
    const uint32_t ck = sk + (it & 1) * T, cv = sv + (it & 1) * T;

    // S = Q K^T (64 x 64): A = Q, B = K, both K-major; 16 d per step = 32 bytes along a row.
    float s[kKeys / 8][4];
#pragma unroll
    for (int i = 0; i < kKeys / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    fence_n<kKeys / 2>(&s[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk >> 2) * (kRows * 128) + (kk & 3) * 32;
      wgmma_m64n64k16_ss(&s[0][0], make_desc(sq + off, 16, 1024), make_desc(ck + off, 16, 1024), kk > 0 ? 1 : 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_n<kKeys / 2>(&s[0][0]);

    uint32_t pf[kKeys / 16][4];
    float a0, a1;
    softmax_step<kKeys / 8>(s, pf, st, k0, vis0, vis1, scale_log2, &a0, &a1);
    scale_rows<D / 8>(o, a0, a1);

    // O += P V: A = P from registers, B = V MN-major: 16 keys per step = 16 rows of 128 bytes.
    fence_n<D / 2>(&o[0][0]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const uint64_t desc_v = make_desc(cv + kk * 2048, kKeys * 128, 1024);
      if (D == 128) wgmma_m64n128k16_rs(&o[0][0], pf[kk], desc_v);
      else wgmma_m64n64k16_rs(&o[0][0], pf[kk], desc_v);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_n<D / 2>(&o[0][0]);
    __syncthreads();  // the next iteration's load overwrites this stage
  }
  store_rows<D>(o, st, row_q, out, lse, nullptr, nullptr);
}

}  // namespace
}  // namespace hc

// Parameters (8 bytes each): q k v out lse cu_seqlens_q cu_seqlens_k B Tq Tk Hq Hkv causal scale_log2.
// Grid: (ceil(Tq / 64) + B, Hq); 128 threads; dynamic shared memory 5 x 64 x D x 2 + 1024 bytes.
#define HC_ATTN_PREFILL_SM90(NAME, D)                                                                            \
  extern "C" __global__ void __launch_bounds__(hc::kThreads) NAME(                                               \
      const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* out,             \
      float* lse, const int* cu_q, const int* cu_k, long long B, long long Tq, long long Tk, long long Hq,          \
      long long Hkv, long long causal, double scale_log2) {                                                       \
    hc::prefill_sm90<D>(q, k, v, out, lse, cu_q, cu_k, B, Tq, Tk, Hq, Hkv, causal, (float)scale_log2);           \
  }
HC_ATTN_PREFILL_SM90(hc_attn_prefill_d64_sm90, 64)
HC_ATTN_PREFILL_SM90(hc_attn_prefill_d128_sm90, 128)
