// c[i] = a[i] + b[i] for i < n (f32). The loads go through the read-only path as inline PTX.
// No CUDA runtime calls: compiled with `nvcc -ptx` and loaded through the driver.
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x, y;
  asm("ld.global.nc.f32 %0, [%1];" : "=f"(x) : "l"(a + i));
  asm("ld.global.nc.f32 %0, [%1];" : "=f"(y) : "l"(b + i));
  c[i] = x + y;
}
