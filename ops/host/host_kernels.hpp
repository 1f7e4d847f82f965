// Host implementations of operators: what the CPU backend runs. Each operator's host kernel
// is a function run once per block (hal.h's HAL_MODULE_HOST) that calls the reference code
// on its slice of rows; all of them live in one host module image that run_op loads once
// per device. Launching goes through the HAL like any other backend's kernel.
#pragma once

#include <halcyon/kernels/reference/moe.hpp>  // RowRange
#include <halcyon/ops/op.hpp>

#include <algorithm>

#include <cstring>
#include <initializer_list>
#include <vector>

namespace halcyon::host {

// Adds a kernel to the image (static initialisation, before the image is first used).
void add_host_kernel(const hal_host_kernel_entry& entry);
struct HostKernel {
  HostKernel(const char* name, hal_host_kernel_fn fn, std::initializer_list<hal_kernel_arg> args, uint32_t size);
  std::vector<hal_kernel_arg> args;
};

// Launches host kernel `name` with `blocks` blocks and the packed argument struct `args`.
Status launch(const ops::OpContext& ctx, const char* name, uint64_t blocks, const void* args, size_t args_size);

template <typename Args>
Status launch(const ops::OpContext& ctx, const char* name, uint64_t blocks, const Args& args) {
  return launch(ctx, name, blocks, &args, sizeof(Args));
}

// Reads a host kernel's argument struct from the blob.
template <typename Args>
Args args_of(const void* blob) {
  Args a;
  std::memcpy(&a, blob, sizeof a);
  return a;
}

template <typename T>
T* ptr(uint64_t address) {
  return reinterpret_cast<T*>(address);
}

// A host kernel cannot return an error: a reference's refusal goes to the log.
void report(const char* op, const Status& s);

// The rows of block ctx->block_id[0] when each block owns `per` of `rows`.
inline ref::RowRange block_rows(const hal_host_launch_ctx* ctx, int64_t rows, int64_t per) {
  int64_t b = int64_t(ctx->block_id[0]) * per;
  return {b, std::min(rows, b + per)};
}

// Rows per block so that a launch has a few blocks per thread but no tiny ones.
inline int64_t rows_per_block(int64_t rows, int64_t cost_per_row) {
  int64_t target = (int64_t(1) << 16) / (cost_per_row > 0 ? cost_per_row : 1);
  return target < 1 ? 1 : (target > rows ? (rows > 0 ? rows : 1) : target);
}

// moe_permute's plan (one sequential block: counts, offsets, both maps, num_rows) for a call
// of moe_permute or moe_permute_fp8, after checking its expert range (moe_ops.cpp).
Status launch_permute_plan(const ops::OpContext& ctx);

}  // namespace halcyon::host

#define HALCYON_ARG_PTR(S, f) hal_kernel_arg{uint32_t(offsetof(S, f)), 8, HAL_ARG_POINTER}
#define HALCYON_ARG_VAL(S, f) hal_kernel_arg{uint32_t(offsetof(S, f)), uint32_t(sizeof(S::f)), HAL_ARG_VALUE}
