// vector_add and row_softmax for NVIDIA GPUs (portable PTX, sm_80 and later).
// Compiled with `nvcc -ptx`; no CUDA runtime calls. The launchers are in basic_ops.cpp; the
// gemm_bf16 kernel is the dense case of the grouped GEMM (kernels/ptx/moe/gemm_sm80.cu).

// c = a + b over n f32 elements; one thread per element, blocks of 256 (the contract's rule).
extern "C" __global__ void __launch_bounds__(256) hc_vector_add(const float* __restrict__ a,
                                                                const float* __restrict__ b,
                                                                float* __restrict__ c, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

namespace {

constexpr int kSoftmaxThreads = 256;

// Reduces v over the block (max or sum). `scratch` holds one value per warp.
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();  // scratch may still be read by an earlier reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kSoftmaxThreads / 32 ? scratch[lane] : (kMax ? -INFINITY : 0.f);
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, w) : v + w;
  }
  return v;
}

}  // namespace

// y[r, :] = softmax(x[r, :]); one block per row (the contract's rule), three passes over the
// row: max, sum of exp(x - max), write. The row is re-read from L1/L2, not kept in registers,
// so any number of columns works.
extern "C" __global__ void __launch_bounds__(kSoftmaxThreads) hc_row_softmax(const float* __restrict__ x,
                                                                             float* __restrict__ y,
                                                                             long long rows, long long cols) {
  __shared__ float scratch[kSoftmaxThreads / 32];
  const long long r = blockIdx.x;
  if (r >= rows) return;
  const float* xr = x + r * cols;
  float* yr = y + r * cols;
  float m = -INFINITY;
  for (long long c = threadIdx.x; c < cols; c += kSoftmaxThreads) m = fmaxf(m, xr[c]);
  m = block_reduce<true>(m, scratch);
  float s = 0.f;
  for (long long c = threadIdx.x; c < cols; c += kSoftmaxThreads) s += expf(xr[c] - m);
  s = block_reduce<false>(s, scratch);
  const float inv = 1.f / s;
  for (long long c = threadIdx.x; c < cols; c += kSoftmaxThreads) yr[c] = expf(xr[c] - m) * inv;
}
