// Sum of each block's elements through an LDS tree with barriers between levels. The block is
// two-dimensional (32 x 8) so that packed work-item ids are exercised too.
#include "hip_mini.h"

extern "C" __global__ void block_sum(const float* x, float* partial, unsigned n) {
  __shared__ float s[256];
  unsigned t = thread_y() * block_dim_x() + thread_x();
  unsigned threads = block_dim_x() * block_dim_y();
  unsigned i = block_x() * threads + t;
  s[t] = i < n ? x[i] : 0.0f;
  sync_threads();
  for (unsigned stride = threads / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    sync_threads();
  }
  if (t == 0) partial[block_x()] = s[0];
}
