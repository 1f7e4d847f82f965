// Host implementations of vector_add, row_softmax and gemm_bf16.
#include <halcyon/kernels/reference/basic.hpp>

#include "host_kernels.hpp"

namespace halcyon::host {
namespace {

constexpr int64_t kChunk = 16384;

struct VectorAddArgs {
  uint64_t a, b, c;
  int64_t n;
};
void vector_add_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<VectorAddArgs>(blob);
  int64_t begin = int64_t(ctx->block_id[0]) * kChunk, end = std::min(a.n, begin + kChunk);
  ref::vector_add(ptr<const float>(a.a), ptr<const float>(a.b), ptr<float>(a.c), begin, end);
}
HostKernel k_vector_add("vector_add", vector_add_kernel,
                        {HALCYON_ARG_PTR(VectorAddArgs, a), HALCYON_ARG_PTR(VectorAddArgs, b),
                         HALCYON_ARG_PTR(VectorAddArgs, c), HALCYON_ARG_VAL(VectorAddArgs, n)},
                        sizeof(VectorAddArgs));
Status vector_add(ops::OpContext& ctx) {
  int64_t n = ctx.dim("N");
  VectorAddArgs a{ctx.tensor("a").address(), ctx.tensor("b").address(), ctx.tensor("c").address(), n};
  return launch(ctx, "vector_add", uint64_t((n + kChunk - 1) / kChunk), a);
}

struct RowArgs {
  uint64_t x, y;
  int64_t rows, cols, rows_per_block;
};
void row_softmax_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<RowArgs>(blob);
  int64_t r0 = int64_t(ctx->block_id[0]) * a.rows_per_block, r1 = std::min(a.rows, r0 + a.rows_per_block);
  ref::row_softmax(ptr<const float>(a.x), ptr<float>(a.y), a.cols, r0, r1);
}
HostKernel k_row_softmax("row_softmax", row_softmax_kernel,
                         {HALCYON_ARG_PTR(RowArgs, x), HALCYON_ARG_PTR(RowArgs, y), HALCYON_ARG_VAL(RowArgs, rows),
                          HALCYON_ARG_VAL(RowArgs, cols), HALCYON_ARG_VAL(RowArgs, rows_per_block)},
                         sizeof(RowArgs));
Status row_softmax(ops::OpContext& ctx) {
  int64_t rows = ctx.dim("R"), cols = ctx.dim("C");
  int64_t per = rows_per_block(rows, cols);
  RowArgs a{ctx.tensor("x").address(), ctx.tensor("y").address(), rows, cols, per};
  return launch(ctx, "row_softmax", uint64_t((rows + per - 1) / per), a);
}

struct GemmArgs {
  uint64_t a, b, c;
  int64_t M, N, K, rows_per_block;
};
void gemm_bf16_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<GemmArgs>(blob);
  int64_t m0 = int64_t(ctx->block_id[0]) * g.rows_per_block, m1 = std::min(g.M, m0 + g.rows_per_block);
  ref::gemm_bf16(ptr<const uint16_t>(g.a), ptr<const uint16_t>(g.b), ptr<float>(g.c), g.N, g.K, m0, m1);
}
HostKernel k_gemm("gemm_bf16", gemm_bf16_kernel,
                  {HALCYON_ARG_PTR(GemmArgs, a), HALCYON_ARG_PTR(GemmArgs, b), HALCYON_ARG_PTR(GemmArgs, c),
                   HALCYON_ARG_VAL(GemmArgs, M), HALCYON_ARG_VAL(GemmArgs, N), HALCYON_ARG_VAL(GemmArgs, K),
                   HALCYON_ARG_VAL(GemmArgs, rows_per_block)},
                  sizeof(GemmArgs));
Status gemm_bf16(ops::OpContext& ctx) {
  int64_t M = ctx.dim("M"), N = ctx.dim("N"), K = ctx.dim("K");
  int64_t per = rows_per_block(M, N * K);
  GemmArgs g{ctx.tensor("a").address(), ctx.tensor("b").address(), ctx.tensor("c").address(), M, N, K, per};
  return launch(ctx, "gemm_bf16", uint64_t((M + per - 1) / per), g);
}

ops::RegisterOpImpl r1({"vector_add", HAL_MODULE_HOST, "host", "", 0, vector_add});
ops::RegisterOpImpl r2({"row_softmax", HAL_MODULE_HOST, "host", "", 0, row_softmax});
ops::RegisterOpImpl r3({"gemm_bf16", HAL_MODULE_HOST, "host", "", 0, gemm_bf16});

}  // namespace
}  // namespace halcyon::host
