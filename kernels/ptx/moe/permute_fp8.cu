// moe_permute_fp8 for Hopper (sm_90a, with the FP8 family; the e4m3 conversion needs sm_89+):
// moe_permute's fused kernel (moe_routing.cu) with the rows quantized on the way. Each block
// runs the plan for its slots (whole tokens), then each warp takes a token: it reads the bf16
// row once, quantizes it once (moe_quantize_fp8's arithmetic, quantize_fp8.cuh) and writes the
// e4m3 row and its scales to each of the token's permuted rows. The FP8 layer did this as
// quantize (T rows) + two permutes of one plan (e4m3 rows, then scales); here x is read once and
// the plan computed once. Device code only (compiled with `nvcc -ptx`).
#include "gemm_common.cuh"
#include "permute_plan.cuh"
#include "quantize_fp8.cuh"

namespace {

// The destination rows of a token kept in registers (DeepSeek-V3 routes a token to 8 experts);
// a larger K reads the rest from slot_to_row per use. `rows` points into slot_to_row, which
// this launch wrote: never __restrict__ (see copy_token_row in moe_routing.cu).
constexpr int kRowsInRegs = 8;

// Vector form (H % 16 == 0, x 16-byte and permuted 16-byte aligned): 8 lanes a group, lane m
// of the eight holding elements 16m .. 16m + 15 (two 16-byte loads, one 16-byte store a row),
// so a warp covers 4 groups (512 contiguous bytes of each destination row) a quad; it takes U
// quads a step, their loads issued first.
template <int U>
__device__ __forceinline__ void quantize_row_x16(const unsigned short* __restrict__ src, const int* rows,
                                                 long long K, unsigned char* __restrict__ permuted,
                                                 float* __restrict__ permuted_scale, long long H) {
  const long long HG = H / 128 + (H % 128 != 0);
  const int m = threadIdx.x & 7, q = (threadIdx.x >> 3) & 3;
  int rr[kRowsInRegs];  // the token's first rows (slot_to_row, -1 = not local), read once
#pragma unroll
  for (int j = 0; j < kRowsInRegs; ++j) rr[j] = j < K ? rows[j] : -1;
  for (long long g0 = 0; g0 < HG; g0 += 4 * U) {
    uint4 raw[U][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long k = (g0 + 4 * u + q) * 128 + 16 * m;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        raw[u][h] = k < H ? __ldg(reinterpret_cast<const uint4*>(src + k) + h) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long g = g0 + 4 * u + q, k = g * 128 + 16 * m;
      const hc::LaneQuant<16> lq = hc::quantize_lane<16>(raw[u]);  // every lane: the shuffles
      if (k >= H) continue;
      const uint4 bytes = make_uint4(lq.bytes[0], lq.bytes[1], lq.bytes[2], lq.bytes[3]);
      auto put = [&](int r) {
        *reinterpret_cast<uint4*>(permuted + (long long)r * H + k) = bytes;
        if (m == 0) permuted_scale[(long long)r * HG + g] = lq.s;
      };
#pragma unroll
      for (int j = 0; j < kRowsInRegs; ++j)
        if (rr[j] >= 0) put(rr[j]);
      for (long long j = kRowsInRegs; j < K; ++j)
        if (rows[j] >= 0) put(rows[j]);
    }
  }
}

// Scalar form (any H): a warp a group, lane l holding elements l + 32 i.
__device__ __forceinline__ void quantize_row_x1(const unsigned short* __restrict__ src, const int* rows,
                                                long long K, unsigned char* __restrict__ permuted,
                                                float* __restrict__ permuted_scale, long long H) {
  const long long HG = (H + 127) / 128;
  const int lane = threadIdx.x & 31;
  for (long long g = 0; g < HG; ++g) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const long long k = g * 128 + lane + 32 * i;
      v[i] = k < H ? __uint_as_float((unsigned)src[k] << 16) : 0.f;
    }
    const float s = hc::group_scale<32>(hc::lane_amax(v));
    unsigned char q[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = hc::quantize1(v[i], s);
    for (long long j = 0; j < K; ++j) {
      const int r = rows[j];
      if (r < 0) continue;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const long long k = g * 128 + lane + 32 * i;
        if (k < H) permuted[(long long)r * H + k] = q[i];
      }
      if (lane == 0) permuted_scale[(long long)r * HG + g] = s;
    }
  }
}

}  // namespace

// The plan (permute_plan_block, per_block a multiple of K so that a block owns whole tokens),
// then warp w of the block quantizes tokens w, w + W, ... of its slots into their rows.
// U: quads of groups a warp loads before quantizing them.
template <int U>
__device__ __forceinline__ void permute_fp8(const int* __restrict__ topk_ids, int* __restrict__ expert_counts,
                                            int* __restrict__ expert_offsets, int* __restrict__ row_to_slot,
                                            int* __restrict__ slot_to_row, int* __restrict__ num_rows, long long slots,
                                            long long E, long long expert_begin, long long EL, long long per_block,
                                            const unsigned short* __restrict__ x, unsigned char* __restrict__ permuted,
                                            float* __restrict__ permuted_scale, long long K, long long H) {
  permute_plan_block(topk_ids, expert_counts, expert_offsets, row_to_slot, slot_to_row, num_rows, slots, E,
                     expert_begin, EL, per_block);
  __syncthreads();  // this block's slot_to_row entries are written (and visible to the block)
  const long long bs0 = blockIdx.x * per_block;
  const long long bs1 = bs0 + per_block < slots ? bs0 + per_block : slots;
  const int W = blockDim.x >> 5;
  const bool vec = (H & 15) == 0 && (((unsigned long long)x | (unsigned long long)permuted) & 15) == 0;
  for (long long t = bs0 / K + (threadIdx.x >> 5); t < bs1 / K; t += W) {
    if (vec) quantize_row_x16<U>(x + t * H, slot_to_row + t * K, K, permuted, permuted_scale, H);
    else quantize_row_x1(x + t * H, slot_to_row + t * K, K, permuted, permuted_scale, H);
  }
}

// Two quads (8 groups, 64 bytes a lane) in flight a step, 16 warps a block (the launcher's plan
// layout). On the H200 four quads were level and 32 warps a block (registers capped at 64) 5%
// slower (docs/PERFORMANCE.md, 2026-11-30 fourth session).
extern "C" __global__ void __launch_bounds__(512, 1)
    hc_moe_permute_fp8(const int* __restrict__ topk_ids, int* __restrict__ expert_counts,
                       int* __restrict__ expert_offsets, int* __restrict__ row_to_slot, int* __restrict__ slot_to_row,
                       int* __restrict__ num_rows, long long slots, long long E, long long expert_begin, long long EL,
                       long long per_block, const unsigned short* __restrict__ x, unsigned char* __restrict__ permuted,
                       float* __restrict__ permuted_scale, long long K, long long H) {
  permute_fp8<2>(topk_ids, expert_counts, expert_offsets, row_to_slot, slot_to_row, num_rows, slots, E, expert_begin, EL,
                 per_block, x, permuted, permuted_scale, K, H);
}
