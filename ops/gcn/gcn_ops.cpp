// The hand-written GCN kernels as implementations of the operator contracts
// (kernels/elementwise/vector_add, kernels/softmax/row_softmax, kernels/gemm/gemm_bf16) for
// gfx942 and gfx90a. Argument blobs follow each kernel's metadata (checked at build time by
// gcn_check against contracts/<kernel>.kernel).
#include <halcyon/gcn/kernels.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <cstring>

namespace halcyon::gcnop {
namespace {

// The device's embedded kernel `name`, from a module loaded once per device.
Result<Kernel> kernel(const ops::OpContext& ctx, const char* name) {
  auto info = ctx.device.info();
  if (!info) return info.error();
  const gcn::KernelImage* img = gcn::find(name, info->arch);
  if (!img) return Error(HAL_UNSUPPORTED, fmt::format("{} is not built for {} ({})", name, info->uri, info->arch));
  auto m = ctx.module(HAL_MODULE_HSACO, img->target.c_str(), img->data, img->size, name);
  if (!m) return m.error();
  return m->kernel(name);
}

Error too_large(const char* op, const std::string& what) {
  return Error(HAL_UNSUPPORTED, fmt::format("{} on GCN: {} exceeds the kernel's 32-bit indexing", op, what));
}

struct VectorAddArgs {
  uint64_t a, b, c;
  uint32_t count;
  uint32_t pad;
};
Status vector_add(ops::OpContext& ctx) {
  int64_t n = ctx.dim("N");
  if (n == 0) return {};
  if (n >= (int64_t(1) << 30)) return too_large("vector_add", fmt::format("N = {}", n));
  auto k = kernel(ctx, "halcyon_vector_add_f32");
  if (!k) return k.error();
  VectorAddArgs a{ctx.tensor("a").address(), ctx.tensor("b").address(), ctx.tensor("c").address(), uint32_t(n), 0};
  return ctx.stream.launch(*k, {uint32_t((n + 255) / 256)}, {256}, &a, 28);
}

struct SoftmaxArgs {
  uint64_t input, output;
  uint32_t rows, cols;
};
Status row_softmax(ops::OpContext& ctx) {
  int64_t rows = ctx.dim("R"), cols = ctx.dim("C");
  if (rows == 0 || cols == 0) return {};
  if (rows > 0xffffffffll || cols >= (int64_t(1) << 30)) return too_large("row_softmax", fmt::format("R = {}, C = {}", rows, cols));
  auto k = kernel(ctx, "halcyon_softmax_rows_f32");
  if (!k) return k.error();
  SoftmaxArgs a{ctx.tensor("x").address(), ctx.tensor("y").address(), uint32_t(rows), uint32_t(cols)};
  return ctx.stream.launch(*k, {uint32_t(rows)}, {256}, &a, sizeof a);
}

struct GemmArgs {
  uint64_t a, b, c;
  uint32_t m, n, k;
  uint32_t pad;
};
Status gemm_bf16(ops::OpContext& ctx) {
  int64_t M = ctx.dim("M"), N = ctx.dim("N"), K = ctx.dim("K");
  if (M == 0 || N == 0) return {};
  const ops::Tensor& c = ctx.tensor("c");
  if (K == 0) return ctx.stream.fill<uint32_t>(c.buffer, c.offset, uint64_t(M * N) * 4, 0u);
  // Byte offsets inside each matrix are 32-bit in the kernel.
  if (M * K * 2 > 0xffffffffll || K * N * 2 > 0xffffffffll || M * N * 4 > 0xffffffffll)
    return too_large("gemm_bf16", fmt::format("M = {}, N = {}, K = {}", M, N, K));
  auto k = kernel(ctx, "halcyon_gemm_bf16_tile");
  if (!k) return k.error();
  GemmArgs g{ctx.tensor("a").address(), ctx.tensor("b").address(), c.address(), uint32_t(M), uint32_t(N), uint32_t(K), 0};
  return ctx.stream.launch(*k, {uint32_t((N + 31) / 32), uint32_t((M + 31) / 32)}, {64}, &g, 36);
}

ops::RegisterOpImpl r1({"vector_add", HAL_MODULE_HSACO, "gfx942", "", 10, vector_add});
ops::RegisterOpImpl r2({"vector_add", HAL_MODULE_HSACO, "gfx90a", "", 10, vector_add});
ops::RegisterOpImpl r3({"row_softmax", HAL_MODULE_HSACO, "gfx942", "", 10, row_softmax});
ops::RegisterOpImpl r4({"row_softmax", HAL_MODULE_HSACO, "gfx90a", "", 10, row_softmax});
ops::RegisterOpImpl r5({"gemm_bf16", HAL_MODULE_HSACO, "gfx942", "", 10, gemm_bf16});
ops::RegisterOpImpl r6({"gemm_bf16", HAL_MODULE_HSACO, "gfx90a", "", 10, gemm_bf16});

}  // namespace
}  // namespace halcyon::gcnop
