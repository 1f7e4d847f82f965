// Helpers shared by the OpenCL C kernels of kernels/spirv (OpenCL C 1.2: no fp64, no generic
// address space, so they run on every Level Zero GPU and on pocl).
#ifndef HALCYON_SPIRV_COMMON_H
#define HALCYON_SPIRV_COMMON_H

// bf16 is the upper half of an fp32.
static inline float bf16_to_float(ushort v) { return as_float(((uint)v) << 16); }

// Round to nearest even; a NaN stays a (quiet) NaN.
static inline ushort float_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (ushort)(u >> 16);
}

// SwiGLU of a gate and an up value: silu(g) * u in fp32 (the bf16 and FP8 grouped GEMMs).
static inline float silu_mul(float g, float u) { return g / (1.0f + exp(-g)) * u; }

// The segment of row r: the e with offsets[e] <= r < offsets[e + 1] (r < offsets[EL]): the
// local expert of a row (MoE), the sequence of a query token (attention).
static inline long expert_of_row(__global const int* offsets, long EL, long r) {
  long lo = 0, hi = EL;
  while (hi - lo > 1) {
    long mid = (lo + hi) / 2;
    if (offsets[mid] <= r) lo = mid;
    else hi = mid;
  }
  return lo;
}

#endif
