// Launch helpers shared by the SPIR-V operator implementations (ops/spirv: spirv_ops.cpp,
// moe_fp8_ops.cpp): load an embedded kernel set once per device, look its kernels up once, and
// launch with a packed argument struct whose fields mirror the kernel's parameter list, in order
// (the backend lays the blob out from the module's own parameter types, so a mismatch in size is
// refused at launch).
#pragma once

#include <halcyon/ops/op.hpp>
#include <halcyon/spirv_kernels.hpp>

#include <fmt/format.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>

namespace halcyon::spirvop {

inline constexpr const char* kTarget = "spirv64";
inline constexpr uint32_t kColumns = 64;  // work-items per group along a row of outputs

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Kernel `entry` of embedded set `set`, loaded once per device (OpContext::module caches the
// module, this the kernel).
inline Result<Kernel> kernel(const ops::OpContext& ctx, const char* set, const char* entry) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, Kernel>;  // lives as long as the loaded modules
  auto uri = ctx.device.info();
  if (!uri) return uri.error();
  std::string key = fmt::format("{}\n{}\n{}", uri->uri, set, entry);
  {
    std::lock_guard lock(mu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  const spirv_kernels::Image* img = spirv_kernels::find(set);
  if (!img) return Error(HAL_INTERNAL, fmt::format("no embedded SPIR-V kernel set '{}'", set));
  auto m = ctx.module(HAL_MODULE_SPIRV, img->target, img->data, img->size, fmt::format("{}.spv", set).c_str());
  if (!m) return m.error();
  auto k = m->kernel(entry);
  if (!k) return k.error();
  std::lock_guard lock(mu);
  cache->emplace(key, *k);
  return k;
}

inline Status launch_blob(const ops::OpContext& ctx, const char* set, const char* entry, Dim3 grid, Dim3 block,
                          const void* args, size_t size) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return {};
  auto k = kernel(ctx, set, entry);
  if (!k) return k.error();
  return ctx.stream.launch(*k, grid, block, args, size);
}

template <typename Args>
Status launch(const ops::OpContext& ctx, const char* set, const char* entry, Dim3 grid, Dim3 block, const Args& a) {
  return launch_blob(ctx, set, entry, grid, block, &a, sizeof a);
}

// A 2-D grid: dimension 0 over `cols` outputs in groups of `per`, dimension 1 over `rows`.
inline Status launch_rows_blob(const ops::OpContext& ctx, const char* set, const char* entry, int64_t cols,
                               int64_t rows, const void* args, size_t size, uint32_t per = kColumns) {
  if (rows > INT32_MAX || ceil_div(cols, per) > INT32_MAX)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} rows x {} columns is too large a grid", ctx.contract.op, rows, cols));
  return launch_blob(ctx, set, entry, {uint32_t(ceil_div(cols, per)), uint32_t(rows)}, {per, 1}, args, size);
}
inline Status launch_rows(const ops::OpContext& ctx, const char* set, const char* entry, int64_t cols, int64_t rows,
                          const auto& args, uint32_t per = kColumns) {
  return launch_rows_blob(ctx, set, entry, cols, rows, &args, sizeof args, per);
}

// The tensor's device address; 0 for an optional tensor not given.
inline uint64_t address(const ops::OpContext& ctx, const char* name) {
  const ops::Tensor* t = ctx.optional_tensor(name);
  return t ? t->address() : 0;
}

inline void register_spirv(const char* op, ops::OpImplFn fn, ops::OpPredicate applies) {
  ops::register_op_impl({op, HAL_MODULE_SPIRV, kTarget, "", 10, fn, "spirv", applies, nullptr, true, nullptr,
                         "OpenCL C compiled to SPIR-V (kernels/spirv), any Level Zero device"});
}

// moe_permute's plan (moe.cl's hc_moe_permute_index: counts, offsets, both maps, num_rows) for
// the calling operator (moe_permute or moe_permute_fp8: the same tensor and parameter names),
// after checking its expert range and sizes: spirv_ops.cpp.
Status launch_permute_plan(const ops::OpContext& ctx);

// The gather GEMMs' topk, checked (>= 1, T * topk fits the int32 slots): spirv_ops.cpp.
Result<int64_t> gather_topk(const ops::OpContext& ctx);

}  // namespace halcyon::spirvop
