// PTX implementations of vector_add, row_softmax (basic_ops.cu) and gemm_bf16 (the dense case
// of the grouped GEMM in kernels/ptx/moe/gemm_sm80.cu and gemm_sm90.cu; on sm_90a with few
// output tiles the split-K kernel of kernels/ptx/moe/gemm_sm90_splitk.cu).
#include "ptx_launch.hpp"

namespace halcyon::ptxop {
namespace {

struct VectorAddArgs {
  uint64_t a, b, c;
  int64_t n;
};
Status vector_add(ops::OpContext& ctx) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  int64_t n = ctx.dim("N");
  if (n == 0) return {};
  auto k = kernel(ctx, *dev, "ops_basic", "hc_vector_add");
  if (!k) return k.error();
  VectorAddArgs a{ctx.tensor("a").address(), ctx.tensor("b").address(), ctx.tensor("c").address(), n};
  return launch(ctx, *k, {uint32_t(ceil_div(n, 256))}, {256}, a);
}

struct SoftmaxArgs {
  uint64_t x, y;
  int64_t rows, cols;
};
Status row_softmax(ops::OpContext& ctx) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  int64_t rows = ctx.dim("R"), cols = ctx.dim("C");
  if (rows == 0 || cols == 0) return {};
  auto k = kernel(ctx, *dev, "ops_basic", "hc_row_softmax");
  if (!k) return k.error();
  SoftmaxArgs a{ctx.tensor("x").address(), ctx.tensor("y").address(), rows, cols};
  return launch(ctx, *k, {uint32_t(rows)}, {256}, a);
}


Status gemm_bf16_any(ops::OpContext& ctx, bool hopper) {
  int64_t M = ctx.dim("M"), N = ctx.dim("N"), K = ctx.dim("K");
  if (M == 0 || N == 0) return {};
  if (K == 0) return ctx.stream.fill<uint32_t>(ctx.tensor("c").buffer, ctx.tensor("c").offset, uint64_t(M * N) * 4, 0u);
  GemmArgs g{ctx.tensor("a").address(), ctx.tensor("b").address(), 0, ctx.tensor("c").address(), M, K, N, 1};
  if (hopper) {  // few output tiles (the MoE router GEMM): split-K over clusters
    bool ran = false;
    HALCYON_TRY(launch_gemm_splitk(ctx, g, ctx.tensor("a"), ctx.tensor("b"), &ran));
    if (ran) return {};
  }
  return launch_gemm(ctx, kGemmF32, g, hopper);
}
Status gemm_bf16_sm80(ops::OpContext& ctx) { return gemm_bf16_any(ctx, false); }
Status gemm_bf16_sm90(ops::OpContext& ctx) { return gemm_bf16_any(ctx, true); }

ops::RegisterOpImpl r1({"vector_add", HAL_MODULE_PTX, "sm_80", "", 10, vector_add});
ops::RegisterOpImpl r2({"row_softmax", HAL_MODULE_PTX, "sm_80", "", 10, row_softmax});
ops::RegisterOpImpl r3({"gemm_bf16", HAL_MODULE_PTX, "sm_80", "", 10, gemm_bf16_sm80});
ops::RegisterOpImpl r4({"gemm_bf16", HAL_MODULE_PTX, "sm_90a", "", 20, gemm_bf16_sm90});

}  // namespace
}  // namespace halcyon::ptxop
