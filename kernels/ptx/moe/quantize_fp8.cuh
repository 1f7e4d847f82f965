// moe_quantize_fp8's arithmetic for one 1x128 group, shared by the kernels that quantize bf16
// rows (gemm_sm90_fp8.cu: moe_quantize_fp8; permute_fp8.cu: moe_permute_fp8), so that both
// give the reference's bits: amax over the group, s = amax / 448 (an IEEE fp32 division) and
// q = e4m3(x / s), nearest even, saturating to +-448 (`cvt.rn.satfinite`, sm_89+), where the
// quotient x / s is the IEEE division's or a product that provably rounds to the same e4m3
// value (quotient()); s == 0 gives q = +0. Device code only.
#pragma once

namespace hc {

// cvt.rn.satfinite: nearest even, saturating to +-448 (NaN stays NaN); the low byte is v's.
__device__ __forceinline__ unsigned char to_e4m3(float v) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.f), "f"(v));
  return (unsigned char)(r & 0xff);
}

// The eight bf16 of a 16-byte load as floats, in memory order.
__device__ __forceinline__ void bf16x8_to_float(uint4 raw, float (&v)[8]) {
  const unsigned int words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// The scale of a group that LANES consecutive lanes hold values of (16 lanes x 8: the 16-byte
// form, half a warp a group; 8 x 16: two 16-byte loads a lane; 32 x 4: the scalar form, lane l
// holding elements l + 32 i, 0 past the group's end), from each lane's amax: the group's amax
// by shuffles within those lanes. Every lane of the warp must call it (full-mask shuffles).
template <int N>
__device__ __forceinline__ float lane_amax(const float (&v)[N]) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) amax = fmaxf(amax, fabsf(v[i]));
  return amax;
}
template <int LANES>
__device__ __forceinline__ float group_scale(float amax) {
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  return amax / 448.f;
}

// The fp32 value whose e4m3 rounding is e4m3(v / s) (s > 0, r = 1 / s rounded once, as
// quotient_inv returns it), without the IEEE division where that is safe: q = v * r is within
// 2.5 ulp of the correctly rounded quotient RN(v / s) (r and the product each round once), so
// both round to the same e4m3 value unless RN(v / s) may lie across an e4m3 rounding midpoint
// from q. In e4m3's normal range (|q| >= 2^-6) the midpoints are the fp32 values whose mantissa
// bits 19..0 are 0x80000 (bits 22..20 are e4m3's three), so q is kept when those bits are more
// than 3 ulp from it; a crossing of a representable e4m3 value or of a binade edge changes
// nothing (both round to that value; 448 and beyond saturate). Else (e4m3 subnormals, zeros,
// NaN, an r that overflowed) the division itself: the result is bit for bit e4m3(v / s).
__device__ __forceinline__ float quotient(float v, float s, float r) {
  const float q = v * r;
  const int mid = (int)(__float_as_uint(q) & 0xfffffu) - 0x80000;
  if (fabsf(q) >= 0x1p-6f && r <= 3.402823466e38f && (mid > 3 || mid < -3)) return q;
  return v / s;
}
// 1 / s rounded once (s > 0), for quotient().
__device__ __forceinline__ float quotient_inv(float s) { return 1.f / s; }

// e4m3(v[i] / s) of eight values, packed in memory order into 8 bytes (zeros when s == 0).
__device__ __forceinline__ uint2 quantize8(const float (&v)[8], float s) {
  const float r = s > 0.f ? quotient_inv(s) : 0.f;
  float y[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) y[i] = s > 0.f ? quotient(v[i], s, r) : 0.f;
  unsigned int packed[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(y[4 * h + 1]), "f"(y[4 * h]));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(y[4 * h + 3]), "f"(y[4 * h + 2]));
    packed[h] = (unsigned int)lo | ((unsigned int)hi << 16);
  }
  return make_uint2(packed[0], packed[1]);
}

// e4m3(v / s), or +0 when s == 0 (the scalar form).
__device__ __forceinline__ unsigned char quantize1(float v, float s) {
  return s > 0.f ? to_e4m3(quotient(v, s, quotient_inv(s))) : (unsigned char)0;
}

}  // namespace hc
