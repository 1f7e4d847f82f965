// vector_add, row_softmax and gemm_bf16 (kernels/elementwise, softmax, gemm contracts) in
// OpenCL C, compiled to SPIR-V at build time. Launchers: ops/spirv/spirv_ops.cpp.
#include "common.h"

// One work-item per element; groups of 256.
__kernel void hc_vector_add(__global const float* a, __global const float* b, __global float* c, long n) {
  long i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}

#define SOFTMAX_THREADS 256

// Tree reduction over the group; op 0 = max, 1 = sum. Every work-item gets the result. Always
// inlined: pocl cannot run a barrier inside a called function that is left a call (-O0).
static inline __attribute__((always_inline)) float group_reduce(__local float* red, float v, int op) {
  int l = get_local_id(0);
  red[l] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = SOFTMAX_THREADS / 2; s > 0; s >>= 1) {
    if (l < s) red[l] = op == 0 ? fmax(red[l], red[l + s]) : red[l] + red[l + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = red[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// One group of 256 per row: the row's max, the sum of exp(x - max), then y.
__kernel __attribute__((reqd_work_group_size(SOFTMAX_THREADS, 1, 1))) void hc_row_softmax(
    __global const float* x, __global float* y, long rows, long cols) {
  __local float red[SOFTMAX_THREADS];
  long r = get_group_id(0);
  int l = get_local_id(0);
  __global const float* xr = x + r * cols;
  float m = -INFINITY;
  for (long c = l; c < cols; c += SOFTMAX_THREADS) m = fmax(m, xr[c]);
  m = group_reduce(red, m, 0);
  float s = 0.0f;
  for (long c = l; c < cols; c += SOFTMAX_THREADS) s += exp(xr[c] - m);
  s = group_reduce(red, s, 1);
  for (long c = l; c < cols; c += SOFTMAX_THREADS) y[r * cols + c] = exp(xr[c] - m) / s;
}

// c[M, N] = a[M, K] @ b[K, N], bf16 operands, fp32 sums: one work-item per output, dimension 0
// over columns (adjacent work-items read adjacent b elements), dimension 1 over rows.
__kernel void hc_gemm_bf16(__global const ushort* a, __global const ushort* b, __global float* c, long M, long K,
                           long N) {
  long n = get_global_id(0), m = get_global_id(1);
  if (m >= M || n >= N) return;
  float acc = 0.0f;
  for (long k = 0; k < K; ++k) acc += bf16_to_float(a[m * K + k]) * bf16_to_float(b[k * N + n]);
  c[m * N + n] = acc;
}
