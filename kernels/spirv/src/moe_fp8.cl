// The FP8 MoE operators (kernels/moe/moe_*fp8*.contract; docs/kernels/fp8.md) in OpenCL C,
// compiled to SPIR-V at build time: e4m3 activations and weights with f32 block scales,
// DeepSeek-V3's scheme. Correct first, as moe.cl: one work-item per output of the GEMMs, one
// work-group of 128 per (row, scale group) where a group is quantized; no shared-memory tiling,
// no vendor extensions. The GEMMs' arithmetic is fp32 (e4m3 -> float is exact, e4m3 products
// are exact in fp32); the quantization's is integer (below). Launchers: ops/spirv/moe_fp8_ops.cpp (moe_permute_fp8 runs moe.cl's
// hc_moe_permute_index first).
#include "common.h"

#define FP8_GROUP 128          // elements of K a scale covers; the quantizing work-group size
#define F32_SIGN 0x80000000u
#define F32_INF 0x7f800000u
#define F32_QNAN 0x7fc00000u
#define F32_448 0x43e00000u    // 448.0f, e4m3's largest finite value

static inline long fp8_groups(long k) { return (k + FP8_GROUP - 1) / FP8_GROUP; }

// ---- exact quantization arithmetic, on the fp32 bits -----------------------------------------
// moe_quantize_fp8 and moe_permute_fp8 are `exact`: scale = amax / 448 and q = e4m3(x / scale)
// must be the correctly rounded fp32 quotients. OpenCL C's float `/` need only be within 2.5 ulp
// (OpenCL 1.2, 7.4; correctly rounded division is an optional build flag, and the Level Zero
// backend builds with none), and a device may flush denormals in float arithmetic and compares.
// So the quantization does no float arithmetic at all: the division is a long division of the
// significands on integers, whose remainder decides the rounding, and the max and the e4m3
// rounding work on the bits. That is IEEE division on every device, hence the reference's bits.
// (No fp64: it is optional on Level Zero devices.)

// v >> shift (1 <= shift <= 31) rounded to nearest, ties to even; `sticky`: whether the exact
// value has nonzero bits below v's last one (then a rest of exactly half is past the tie).
static inline uint rne_shift(uint v, uint shift, uint sticky) {
  uint kept = v >> shift, rest = v & ((1u << shift) - 1u), tie = 1u << (shift - 1u);
  return kept + (rest > tie || (rest == tie && (sticky || (kept & 1u))));
}

// The significand of a finite nonzero magnitude, with its implicit bit: in [2^23, 2^24), a
// subnormal normalised; *e gets its unbiased exponent (the value is sig * 2^(e - 23)).
static inline uint f32_significand(uint mag, int* e) {
  uint m = mag & 0x7fffffu;
  if (mag >> 23) {
    *e = (int)(mag >> 23) - 127;
    return m | 0x800000u;
  }
  int s = (int)clz(m) - 8;  // m < 2^23: its leading one moved to bit 23
  *e = -126 - s;
  return m << s;
}

// a / b of finite nonzero magnitudes, rounded to nearest even, as fp32 bits (overflow -> inf,
// gradual underflow to subnormals and 0).
static inline uint f32_div_magnitudes(uint a, uint b) {
  int ea, eb;
  uint ma = f32_significand(a, &ea), mb = f32_significand(b, &eb);
  int e = ea - eb;
  if (ma < mb) {  // make ma / mb lie in [1, 2): the quotient is then (ma / mb) * 2^e
    ma <<= 1;
    e -= 1;
  }
  // Restoring division: q = floor(ma / mb * 2^26) in [2^26, 2^27) (24 significant bits and 3
  // below them), r < 2 mb < 2^25 what is left: r != 0 iff the quotient has more bits (sticky).
  uint q = 0, r = ma;
  for (int i = 0; i < 27; ++i) {
    q <<= 1;
    if (r >= mb) {
      r -= mb;
      q |= 1u;
    }
    r <<= 1;
  }
  int biased = e + 127;
  if (biased >= 255) return F32_INF;
  // A normal result keeps q's top 24 bits; a subnormal one (biased <= 0) 1 - biased fewer (past
  // 28 shifts every bit of q lies below half an ulp: 28 gives 0 already).
  uint shift = biased >= 1 ? 3u : (uint)min(4 - biased, 28);
  uint sig = rne_shift(q, shift, r != 0u);
  // The significand's implicit bit adds 1 to the exponent field, and a carry out of rounding
  // moves into it (up to inf, as round-to-nearest overflows).
  return biased >= 1 ? ((uint)(biased - 1) << 23) + sig : sig;
}

// IEEE fp32 a / b, correctly rounded (nearest even), on the bits. A NaN operand is returned
// quieted (a's first, as x86 does); inf / inf and 0 / 0 give the default NaN.
static inline uint f32_div(uint a, uint b) {
  uint sign = (a ^ b) & F32_SIGN, ma = a & ~F32_SIGN, mb = b & ~F32_SIGN;
  if (ma > F32_INF) return a | 0x400000u;
  if (mb > F32_INF) return b | 0x400000u;
  if (ma == F32_INF) return mb == F32_INF ? F32_QNAN : sign | F32_INF;
  if (mb == F32_INF || ma == 0u) return mb == 0u ? F32_QNAN : sign;
  if (mb == 0u) return sign | F32_INF;
  return sign | f32_div_magnitudes(ma, mb);
}

// fp32 bits -> e4m3 (OCP "FN"): nearest even, finite values past +-448 and infinities saturate
// to +-448, every NaN -> 0x7f (one code, whatever its sign), denormals kept, the sign of zero
// kept. kernels/reference e4m3.hpp's float_to_e4m3, step for step, on integers.
static inline uchar f32_to_e4m3(uint u) {
  uint sign = (u >> 24) & 0x80u, mag = u & 0x7fffffffu;
  if (mag > F32_INF) return (uchar)0x7fu;
  if (mag >= F32_448) return (uchar)(sign | 0x7eu);
  uint q;
  if (mag < 0x3c800000u) {
    // Below 2^-6: an e4m3 denormal, units of 2^-9. The fp32 value is sig * 2^(field - 150)
    // (an fp32 subnormal: field 1 without the implicit bit), so q = sig >> (141 - field); from
    // 25 on, sig < 2^24 is below half a unit. q == 8 (the carry) is the smallest normal: right.
    uint field = max(mag >> 23, 1u), sig = (mag & 0x7fffffu) | (mag >> 23 ? 0x800000u : 0u);
    q = rne_shift(sig, min(141u - field, 25u), 0u);
  } else {
    // Normal: keep 3 of 23 mantissa bits; the exponent rebias is 127 - 7 = 120 (in units of
    // 2^3 after the shift), and a carry moves into the exponent (447.99 -> 448 = 0x7e).
    q = min(rne_shift(mag, 20u, 0u) - (120u << 3), 0x7eu);
  }
  return (uchar)(sign | q);
}

// The key of |x| in the group max: non-negative floats order as their bits, so no float compare
// (which may flush denormals) is needed; a NaN counts as 0, as the reference's
// std::max(amax, |x|) never takes one.
static inline uint amax_key(uint x) {
  uint mag = x & ~F32_SIGN;
  return mag > F32_INF ? 0u : mag;
}

// The max of v over the work-group of FP8_GROUP; every work-item gets it. Always inlined: pocl
// cannot run a barrier inside a called function that is left a call (-O0).
static inline __attribute__((always_inline)) uint group_max(__local uint* red, uint v) {
  int l = get_local_id(0);
  red[l] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = FP8_GROUP / 2; s > 0; s >>= 1) {
    if (l < s) red[l] = max(red[l], red[l + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return red[0];  // nothing writes red after the last barrier
}

// This work-item's share of moe_quantize_fp8 of one group: x (fp32 bits; 0 for an item past the
// row's end) -> its e4m3 code; *scale gets the group's scale amax / 448 (the same in every item),
// and a group of zeros has scale 0 and q = +0, but a NaN x still gives 0x7f (no NaN is lost).
static inline __attribute__((always_inline)) uchar quantize_in_group(__local uint* red, uint x, uint* scale) {
  *scale = f32_div(group_max(red, amax_key(x)), F32_448);
  return *scale || (x & ~F32_SIGN) > F32_INF ? f32_to_e4m3(f32_div(x, *scale)) : (uchar)0;
}

// Writes work-item `col`'s code (col: the kernel's global id 0) into row q (n columns) and, from
// a group's first item, the group's scale into the row's scales (fp32 bits).
static inline void store_quantized(__global uchar* q, __global uint* scale, long col, long n, uchar v, uint s) {
  if (col < n) q[col] = v;
  if (col % FP8_GROUP == 0) scale[col / FP8_GROUP] = s;
}

static inline uint bf16_bits(ushort v) { return ((uint)v) << 16; }

// The quantizing kernels below (work-groups of FP8_GROUP) never return before their barriers,
// not even uniformly over a group: pocl 3.1 miscompiled hc_moe_permute_fp8_rows with such a
// return (its loop after the barriers then wrote past the row's end). Their grids have exactly
// one work-group row per row, so no row check is needed.

// moe_quantize_fp8: a work-group per (row, group); dimension 0 over K (a group's work-items are
// its columns), dimension 1 over the R rows. Scales are written as bits (no float move to flush
// them).
__kernel __attribute__((reqd_work_group_size(FP8_GROUP, 1, 1))) void hc_moe_quantize_fp8(
    __global const ushort* x, __global uchar* q, __global uint* scale, long K) {
  __local uint red[FP8_GROUP];
  long k = get_global_id(0), r = get_global_id(1);
  uint s;
  uchar v = quantize_in_group(red, k < K ? bf16_bits(x[r * K + k]) : 0u, &s);
  store_quantized(q + r * K, scale + r * fp8_groups(K), k, K, v, s);
}

// moe_permute_fp8, the rows (after hc_moe_permute_index has made the plan): token t's row is
// quantized once and written to each of its slots' rows slot_to_row[t, k] (-1: not a local
// expert's); dimension 0 over H (a work-group per scale group), dimension 1 over the T tokens.
__kernel __attribute__((reqd_work_group_size(FP8_GROUP, 1, 1))) void hc_moe_permute_fp8_rows(
    __global const ushort* x, __global const int* slot_to_row, __global const int* num_rows, __global uchar* permuted,
    __global uint* permuted_scale, long K, long H) {
  __local uint red[FP8_GROUP];
  long h = get_global_id(0), t = get_global_id(1), R = *num_rows;
  uint s;
  uchar v = quantize_in_group(red, h < H ? bf16_bits(x[t * H + h]) : 0u, &s);
  for (long k = 0; k < K; ++k) {
    long row = slot_to_row[t * K + k];
    if (row >= 0 && row < R) store_quantized(permuted + row * H, permuted_scale + row * fp8_groups(H), h, H, v, s);
  }
}

// ---- the block-scaled grouped GEMMs ----------------------------------------------------------
// e4m3 -> float, exact (every finite code is a normal fp32), without branches (the GEMMs decode
// two codes a product): the magnitude bits moved into fp32's places and rebiased (7 -> 127); a
// denormal man * 2^-9 is the code read with exponent field 1, (1 + man / 8) * 2^-6, less 2^-6
// (exact). 0x7f is NaN.
static inline float e4m3_to_float(uchar v) {
  uint mag = v & 0x7fu, sign = ((uint)(v & 0x80u)) << 24;
  float normal = as_float((mag << 20) + (120u << 23));
  float denormal = as_float((mag << 20) + (121u << 23)) - 0x1p-6f;
  float f = mag == 0x7fu ? as_float(F32_QNAN) : mag < 8u ? denormal : normal;
  return as_float(sign | as_uint(f));
}

// Output n of one row of a block-scaled GEMM: sum over groups g of (a_scale[g] * w_scale[e, n /
// 128, g]) * (sum over the group of a[k] * w[e, n, k]), each group's sum accumulated in fp32
// on its own and then promoted into the fp32 total ("promotion every 128 of K"). a, a_scale:
// the row [K] and its scales [KG]; w [EL, N, K], w_scale [EL, ceil(N / 128), KG].
static inline float block_scaled_out(__global const uchar* a, __global const float* a_scale,
                                     __global const uchar* w, __global const float* w_scale, long e, long N, long K,
                                     long n) {
  long KG = fp8_groups(K);
  __global const uchar* wn = w + (e * N + n) * K;
  __global const float* sn = w_scale + (e * fp8_groups(N) + n / FP8_GROUP) * KG;
  float total = 0.0f;
  for (long g = 0; g < KG; ++g) {
    float part = 0.0f;
    for (long k = g * FP8_GROUP; k < min(K, (g + 1) * FP8_GROUP); ++k)
      part += e4m3_to_float(a[k]) * e4m3_to_float(wn[k]);
    total += a_scale[g] * sn[g] * part;
  }
  return total;
}

// SwiGLU output j of a row (a [H], a_scale [HG]) with expert e's w_gate_up [2I, H]: gate row j,
// up row I + j; silu_mul (common.h), as the bf16 kernels.
static inline float fp8_swiglu_at(__global const uchar* a, __global const float* a_scale, __global const uchar* w,
                                  __global const float* w_scale, long e, long H, long I, long j) {
  float g = block_scaled_out(a, a_scale, w, w_scale, e, 2 * I, H, j);
  float u = block_scaled_out(a, a_scale, w, w_scale, e, 2 * I, H, I + j);
  return silu_mul(g, u);
}

// moe_grouped_gemm_fp8 (down): out [R, H] bf16 from a [R, I], w [EL, H, I]; dimension 0 over
// H, dimension 1 over rows; rows past expert_offsets[EL] are not written.
__kernel void hc_moe_grouped_gemm_fp8(__global const uchar* a, __global const float* a_scale,
                                      __global const uchar* w, __global const float* w_scale,
                                      __global const int* offsets, __global ushort* out, long R, long I, long H,
                                      long EL) {
  long n = get_global_id(0), r = get_global_id(1);
  if (n >= H || r >= R || r >= offsets[EL]) return;
  long e = expert_of_row(offsets, EL, r);
  out[r * H + n] = float_to_bf16(block_scaled_out(a + r * I, a_scale + r * fp8_groups(I), w, w_scale, e, H, I, n));
}

// moe_grouped_gemm_fp8_swiglu: out [R, I] bf16; dimension 0 over I, dimension 1 over rows.
__kernel void hc_moe_grouped_gemm_fp8_swiglu(__global const uchar* a, __global const float* a_scale,
                                             __global const uchar* w, __global const float* w_scale,
                                             __global const int* offsets, __global ushort* out, long R, long H, long I,
                                             long EL) {
  long j = get_global_id(0), r = get_global_id(1);
  if (j >= I || r >= R || r >= offsets[EL]) return;
  long e = expert_of_row(offsets, EL, r);
  out[r * I + j] = float_to_bf16(fp8_swiglu_at(a + r * H, a_scale + r * fp8_groups(H), w, w_scale, e, H, I, j));
}

// moe_grouped_gemm_fp8_swiglu_gather: row r's input is token row_to_slot[r] / topk of x [T, H]
// and its scales; a slot outside [0, T * topk) leaves the row unwritten (a caller error).
__kernel void hc_moe_grouped_gemm_fp8_swiglu_gather(__global const uchar* x, __global const float* x_scale,
                                                    __global const uchar* w, __global const float* w_scale,
                                                    __global const int* offsets, __global const int* row_to_slot,
                                                    __global ushort* out, long R, long T, long H, long I, long EL,
                                                    long topk) {
  long j = get_global_id(0), r = get_global_id(1);
  if (j >= I || r >= R || r >= offsets[EL]) return;
  long slot = row_to_slot[r];
  if (slot < 0 || slot >= T * topk) return;
  long t = slot / topk, e = expert_of_row(offsets, EL, r);
  out[r * I + j] = float_to_bf16(fp8_swiglu_at(x + t * H, x_scale + t * fp8_groups(H), w, w_scale, e, H, I, j));
}

// moe_grouped_gemm_fp8_swiglu_quant: h = the SwiGLU GEMM's bf16 output, then quantized as
// moe_quantize_fp8 (the reference's composition): a work-group per (row, group of 128 outputs),
// each work-item one output; dimension 0 over I, dimension 1 over the R rows, of which those past
// expert_offsets[EL] are neither read nor written (but still meet the barriers).
__kernel __attribute__((reqd_work_group_size(FP8_GROUP, 1, 1))) void hc_moe_grouped_gemm_fp8_swiglu_quant(
    __global const uchar* a, __global const float* a_scale, __global const uchar* w, __global const float* w_scale,
    __global const int* offsets, __global uchar* q, __global uint* q_scale, long H, long I, long EL) {
  __local uint red[FP8_GROUP];
  long j = get_global_id(0), r = get_global_id(1);
  bool live = r < offsets[EL];
  uint h = 0u;
  if (live && j < I)
    h = bf16_bits(float_to_bf16(
        fp8_swiglu_at(a + r * H, a_scale + r * fp8_groups(H), w, w_scale, expert_of_row(offsets, EL, r), H, I, j)));
  uint s;
  uchar v = quantize_in_group(red, h, &s);
  if (live) store_quantized(q + r * I, q_scale + r * fp8_groups(I), j, I, v, s);
}
