// Element-wise kernels: f32 add, and conversions through f16 and bf16 plus integer ops.
#include "hip_mini.h"

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, unsigned n) {
  unsigned i = block_x() * block_dim_x() + thread_x();
  if (i < n) c[i] = a[i] + b[i];
}

// h[i] = f16(a[i]) * f16(b[i]) + 1 in f16; bf[i] = bf16(a[i] * b[i]); q[i] = int(a[i] * 8) >> 1
extern "C" __global__ void convert_mix(const float* a, const float* b, _Float16* h, __bf16* bf, int* q,
                                       unsigned n) {
  unsigned i = block_x() * block_dim_x() + thread_x();
  if (i >= n) return;
  _Float16 x = (_Float16)a[i], y = (_Float16)b[i];
  h[i] = x * y + (_Float16)1.0f;
  bf[i] = (__bf16)(a[i] * b[i]);
  q[i] = ((int)(a[i] * 8.0f)) >> 1;
}
