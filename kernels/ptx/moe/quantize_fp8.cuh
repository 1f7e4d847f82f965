// moe_quantize_fp8's arithmetic for one 1x128 group, shared by the kernels that quantize bf16
// rows (gemm_sm90_fp8.cu: moe_quantize_fp8; permute_fp8.cu: moe_permute_fp8), so that both
// give the reference's bits: amax over the group, s = amax / 448 and q = e4m3(x / s), each an
// IEEE fp32 division (nvcc's default -prec-div=true), nearest even, saturating to +-448
// (`cvt.rn.satfinite`, sm_89+); s == 0 gives q = +0. Special values as the reference: fmaxf skips
// NaNs in amax, and every NaN quotient (a NaN x, inf / inf) is written as the one code 0x7f, also
// in a group of scale 0. Device code only.
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

// What the cvt converts for value v of a group of scale s: v / s, or +0 when s == 0 (a group of
// zeros); a positive NaN wherever that is NaN or v is (NaN v, inf / inf), so the cvt writes 0x7f
// whatever sign the NaN had.
__device__ __forceinline__ float scaled(float v, float s) {
  const float q = s > 0.f ? v / s : 0.f;
  return (q != q || v != v) ? __uint_as_float(0x7fffffffu) : q;
}

// e4m3(v[i] / s) of eight values, packed in memory order into 8 bytes (zeros when s == 0).
__device__ __forceinline__ uint2 quantize8(const float (&v)[8], float s) {
  unsigned int packed[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    unsigned short lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(scaled(v[4 * h + 1], s)), "f"(scaled(v[4 * h], s)));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(scaled(v[4 * h + 3], s)), "f"(scaled(v[4 * h + 2], s)));
    packed[h] = (unsigned int)lo | ((unsigned int)hi << 16);
  }
  return make_uint2(packed[0], packed[1]);
}

// One lane's share of a group that LANES = 128 / V lanes hold V consecutive values each of (V = 8
// or 16): from its V / 8 16-byte loads `raw` (zeros past the group), the group's scale `s` and the
// lane's V e4m3 bytes in memory order. Every lane of the warp must call it (the shuffles).
template <int V>
struct LaneQuant {
  uint32_t bytes[V / 4];
  float s;
};
template <int V>
__device__ __forceinline__ LaneQuant<V> quantize_lane(const uint4 (&raw)[V / 8]) {
  float v[V / 8][8];
  float amax = 0.f;
#pragma unroll
  for (int h = 0; h < V / 8; ++h) {
    bf16x8_to_float(raw[h], v[h]);
    amax = fmaxf(amax, lane_amax(v[h]));
  }
  LaneQuant<V> out;
  out.s = group_scale<128 / V>(amax);
#pragma unroll
  for (int h = 0; h < V / 8; ++h) {
    const uint2 p = quantize8(v[h], out.s);
    out.bytes[2 * h] = p.x;
    out.bytes[2 * h + 1] = p.y;
  }
  return out;
}

// e4m3(v / s), or +0 when s == 0 (the scalar form).
__device__ __forceinline__ unsigned char quantize1(float v, float s) { return to_e4m3(scaled(v, s)); }

}  // namespace hc
