// PTX implementations of vector_add, row_softmax (basic_ops.cu) and gemm_bf16 (the dense case
// of the grouped GEMM in kernels/ptx/moe/gemm_sm80.cu and gemm_sm90.cu; on sm_90a with few
// output tiles the split-K kernel of kernels/ptx/moe/gemm_sm90_splitk.cu).
#include "ptx_launch.hpp"

#include <algorithm>

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


// gemm_bf16's implementations: "sm90.splitk" (the split-K cluster kernel, where the output tiles
// are too few to fill the GPU; split 8, 4, 3 or 2 by shape and SM count), "sm90.splitk2/3/4/8"
// (that split, only when named), "sm90.basic" (the cp.async wgmma kernel), "sm80" (mma.sync).
template <typename Ctx>
GemmArgs gemm_args(const Ctx& c) {
  return GemmArgs{address_of(c, "a"), address_of(c, "b"), 0, address_of(c, "c"), c.dim("M"), c.dim("K"), c.dim("N"), 1};
}
// split: -1 = not split-K (kernel `which`), 0 = the launcher's split, else that many CTAs.
Status gemm_bf16(ops::OpContext& ctx, GemmKernel which, int split) {
  const GemmArgs g = gemm_args(ctx);
  const int64_t M = g.R, N = g.N, K = g.K;
  if (M == 0 || N == 0) return {};
  if (K == 0) return ctx.stream.fill<uint32_t>(ctx.tensor("c").buffer, ctx.tensor("c").offset, uint64_t(M * N) * 4, 0u);
  if (split >= 0) return launch_gemm_splitk(ctx, g, ctx.tensor("a"), ctx.tensor("b"), split);
  return launch_gemm(ctx, kGemmF32, g, which);
}
template <GemmKernel Which, int Split>
Status gemm_with(ops::OpContext& ctx) {
  return gemm_bf16(ctx, Which, Split);
}

template <int Split>
bool splitk_applies(const ops::ApplyContext& c, std::string* why) {
  // Without a call, a small aligned GEMM stands in: what remains is the device's part.
  const GemmArgs g = c.has_call() ? gemm_args(c) : GemmArgs{0, 0, 0, 0, 1, 8, 8, 1};
  const int s = Split ? Split : std::max(splitk_choice(c.facts, g, false), splitk_choice(c.facts, g, true));
  std::string misfit = splitk_misfit(c.facts, g, s);
  if (misfit.empty()) return true;
  if (why) *why = misfit;
  return false;
}
// The split-K kernel where the grouped kernel's tiles would leave SMs idle (gemm_splitk.cpp).
bool splitk_preferred(const ops::ApplyContext& c, std::string* why) {
  if (!c.has_call() || splitk_choice(c.facts, gemm_args(c), false)) return true;
  if (why) *why = fmt::format("{} x {} output tiles fill the GPU or K = {} is short", c.dim("M"), c.dim("N"), c.dim("K"));
  return false;
}
bool sm90_basic_applies(const ops::ApplyContext& c, std::string* why) {
  if (!ptx::find("moe_gemm_sm90", "sm_90a")) {
    if (why) *why = "its PTX image was not built";
    return false;
  }
  if (!c.has_call() || (c.dim("K") % 8 == 0 && c.dim("N") % 8 == 0)) return true;
  if (why) *why = fmt::format("K = {} or N = {} is not a multiple of 8 (the sm80 kernel's unaligned build runs it)",
                              c.dim("K"), c.dim("N"));
  return false;
}

ops::RegisterOpImpl r1({"vector_add", HAL_MODULE_PTX, "sm_80", "", 10, vector_add});
ops::RegisterOpImpl r2({"row_softmax", HAL_MODULE_PTX, "sm_80", "", 10, row_softmax});
ops::RegisterOpImpl r3({"gemm_bf16", HAL_MODULE_PTX, "sm_80", "", 10, gemm_with<GemmKernel::kSm80, -1>, "sm80", nullptr,
                        nullptr, true, nullptr, "mma.sync, cp.async (any NVIDIA GPU from sm_80)"});
ops::RegisterOpImpl r4({"gemm_bf16", HAL_MODULE_PTX, "sm_90a", "", 20, gemm_with<GemmKernel::kSm90Basic, -1>, "sm90.basic",
                        sm90_basic_applies, nullptr, true, nullptr, "wgmma, cp.async"});
ops::RegisterOpImpl r5({"gemm_bf16", HAL_MODULE_PTX, "sm_90a", "", 30, gemm_with<GemmKernel::kSm90Basic, 0>, "sm90.splitk",
                        splitk_applies<0>, splitk_preferred, true, nullptr,
                        "split-K over a cluster of 8, 4, 3 or 2 CTAs (TMA, wgmma; its cubin)"});
ops::RegisterOpImpl r6({"gemm_bf16", HAL_MODULE_PTX, "sm_90a", "", 29, gemm_with<GemmKernel::kSm90Basic, 2>, "sm90.splitk2",
                        splitk_applies<2>, nullptr, false, nullptr, "split-K, clusters of 2 (only when named)"});
ops::RegisterOpImpl r7({"gemm_bf16", HAL_MODULE_PTX, "sm_90a", "", 29, gemm_with<GemmKernel::kSm90Basic, 3>, "sm90.splitk3",
                        splitk_applies<3>, nullptr, false, nullptr, "split-K, clusters of 3 (only when named)"});
ops::RegisterOpImpl r8({"gemm_bf16", HAL_MODULE_PTX, "sm_90a", "", 29, gemm_with<GemmKernel::kSm90Basic, 4>, "sm90.splitk4",
                        splitk_applies<4>, nullptr, false, nullptr, "split-K, clusters of 4 (only when named)"});
ops::RegisterOpImpl r9({"gemm_bf16", HAL_MODULE_PTX, "sm_90a", "", 29, gemm_with<GemmKernel::kSm90Basic, 8>, "sm90.splitk8",
                        splitk_applies<8>, nullptr, false, nullptr, "split-K, clusters of 8 (only when named)"});

}  // namespace
}  // namespace halcyon::ptxop
