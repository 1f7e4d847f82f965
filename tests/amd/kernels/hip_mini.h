// The few HIP spellings the simulator's test kernels need, for clang -x hip -nogpuinc (no HIP
// headers at build time): thread ids through __builtin_amdgcn_* intrinsics.
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))

__device__ inline unsigned thread_x() { return __builtin_amdgcn_workitem_id_x(); }
__device__ inline unsigned thread_y() { return __builtin_amdgcn_workitem_id_y(); }
__device__ inline unsigned block_x() { return __builtin_amdgcn_workgroup_id_x(); }
__device__ inline unsigned block_y() { return __builtin_amdgcn_workgroup_id_y(); }
__device__ inline unsigned block_dim_x() { return __builtin_amdgcn_workgroup_size_x(); }
__device__ inline unsigned block_dim_y() { return __builtin_amdgcn_workgroup_size_y(); }

// __syncthreads(): LDS writes before the barrier are visible to every wave after it.
__device__ inline void sync_threads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
