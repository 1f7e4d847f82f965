// Reference code for the basic operators (vector_add, row_softmax, gemm_bf16): plain,
// obviously right, fp64 accumulation where it costs nothing. Row-range arguments let the
// CPU backend split the work across its threads.
#pragma once

#include <halcyon/kernels/reference/bf16.hpp>

#include <cmath>
#include <cstdint>

namespace halcyon::ref {

inline void vector_add(const float* a, const float* b, float* c, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
}

// Rows [r0, r1) of a [rows, cols] matrix.
inline void row_softmax(const float* x, float* y, int64_t cols, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(xr[c]) - double(m));
    for (int64_t c = 0; c < cols; ++c) yr[c] = float(std::exp(double(xr[c]) - double(m)) / sum);
  }
}

// c[m, n] = sum_k a[m, k] * b[k, n] for rows [m0, m1); a, b are bf16 bit patterns.
inline void gemm_bf16(const uint16_t* a, const uint16_t* b, float* c, int64_t N, int64_t K, int64_t m0,
                      int64_t m1) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(bf16_to_float(bf16{a[m * K + k]})) * bf16_to_float(bf16{b[k * N + n]});
      c[m * N + n] = float(acc);
    }
}

}  // namespace halcyon::ref
