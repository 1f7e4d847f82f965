// C[M][N] (f32) = A[M][K] x B[K][N], row-major, one wave (64 lanes) per MxM tile of C, through
// the MFMA builtins. Operand placement follows the ISA's register layout for the instruction:
// lane l holds A[l % T][4 * (l / T) + e] and B[4 * (l / T) + e][l % T] (e = 0..3) and result
// register r of lane l is C[4 * (64 / T) * (r / 4) + 4 * (l / T) + r % 4][l % T].
#include "hip_mini.h"

typedef short short4 __attribute__((ext_vector_type(4)));
typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef float float16 __attribute__((ext_vector_type(16)));
typedef float float4 __attribute__((ext_vector_type(4)));

template <int T, typename In, typename Elem, typename Vec, typename Acc, typename Op>
__device__ void gemm_tile(const In* A, const In* B, float* C, int N, int K, Op op) {
  constexpr int kRegs = T * T / 64, kGroups = 64 / T;
  int l = thread_x();
  int row0 = block_y() * T, col0 = block_x() * T;
  int i = l % T, kq = 4 * (l / T);
  Acc acc = {};
  for (int k0 = 0; k0 < K; k0 += 4 * kGroups) {
    Vec a, b;
    for (int e = 0; e < 4; ++e) {
      a[e] = __builtin_bit_cast(Elem, A[(row0 + i) * K + k0 + kq + e]);
      b[e] = __builtin_bit_cast(Elem, B[(k0 + kq + e) * N + col0 + i]);
    }
    acc = op(a, b, acc);
  }
  for (int r = 0; r < kRegs; ++r) {
    int row = 4 * kGroups * (r / 4) + kq + r % 4;
    C[(row0 + row) * N + col0 + i] = acc[r];
  }
}

extern "C" __global__ void gemm_bf16_32x32x8(const __bf16* A, const __bf16* B, float* C, int M, int N, int K) {
  gemm_tile<32, __bf16, short, short4, float16>(A, B, C, N, K, [](short4 a, short4 b, float16 c) {
    return __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a, b, c, 0, 0, 0);
  });
}
extern "C" __global__ void gemm_bf16_16x16x16(const __bf16* A, const __bf16* B, float* C, int M, int N, int K) {
  gemm_tile<16, __bf16, short, short4, float4>(A, B, C, N, K, [](short4 a, short4 b, float4 c) {
    return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
  });
}
extern "C" __global__ void gemm_f16_32x32x8(const _Float16* A, const _Float16* B, float* C, int M, int N, int K) {
  gemm_tile<32, _Float16, _Float16, half4, float16>(A, B, C, N, K, [](half4 a, half4 b, float16 c) {
    return __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, c, 0, 0, 0);
  });
}
extern "C" __global__ void gemm_f16_16x16x16(const _Float16* A, const _Float16* B, float* C, int M, int N, int K) {
  gemm_tile<16, _Float16, _Float16, half4, float4>(A, B, C, N, K, [](half4 a, half4 b, float4 c) {
    return __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, 0, 0, 0);
  });
}
