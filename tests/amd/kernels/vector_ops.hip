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

// Buffer (MUBUF) loads and stores through buffer resources of n elements: lanes at or past n
// read 0 and their stores are dropped, as the hardware's range check does.
extern "C" __global__ void buffer_scale(unsigned* in, unsigned* out, unsigned n) {
  unsigned i = block_x() * block_dim_x() + thread_x();
  __amdgpu_buffer_rsrc_t rin = __builtin_amdgcn_make_buffer_rsrc(in, 0, n * 4, 0x00020000);
  __amdgpu_buffer_rsrc_t rout = __builtin_amdgcn_make_buffer_rsrc(out, 0, n * 4, 0x00020000);
  unsigned v = __builtin_amdgcn_raw_buffer_load_b32(rin, i * 4, 0, 0);
  __builtin_amdgcn_raw_buffer_store_b32(v * 3 + 1 + (v == 0 ? 1000 : 0), rout, i * 4, 0, 0);
}
