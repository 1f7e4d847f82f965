// Host implementations of the FP8 MoE operators (moe_quantize_fp8, moe_permute_fp8,
// moe_grouped_gemm_fp8*): the references of kernels/reference (moe_fp8.hpp) run on slices of
// rows, one slice per block, through the CPU backend. Data-dependent errors (bad offsets,
// row_to_slot) are refused by the reference before it writes anything, and the message goes to
// the log (moe_ops.cpp).
#include <halcyon/kernels/reference/moe_fp8.hpp>

#include <fmt/format.h>

#include <cstdint>

#include "host_kernels.hpp"

namespace halcyon::host {
namespace {

using ref::bf16;
using ref::e4m3;

// ---- moe_quantize_fp8 ---------------------------------------------------------------------
struct QuantArgs {
  uint64_t x, q, scale;
  int64_t R, K, rows_per_block;
};
void quantize_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<QuantArgs>(blob);
  report("moe_quantize_fp8", ref::moe_quantize_fp8(ptr<const bf16>(a.x), a.R, a.K, ptr<e4m3>(a.q), ptr<float>(a.scale),
                                                   block_rows(ctx, a.R, a.rows_per_block)));
}
HostKernel k_quantize("moe_quantize_fp8", quantize_kernel,
                      {HALCYON_ARG_PTR(QuantArgs, x), HALCYON_ARG_PTR(QuantArgs, q), HALCYON_ARG_PTR(QuantArgs, scale),
                       HALCYON_ARG_VAL(QuantArgs, R), HALCYON_ARG_VAL(QuantArgs, K),
                       HALCYON_ARG_VAL(QuantArgs, rows_per_block)},
                      sizeof(QuantArgs));
Status moe_quantize_fp8(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), K = ctx.dim("K");
  const int64_t per = rows_per_block(R, 2 * K);
  QuantArgs a{ctx.tensor("x").address(), ctx.tensor("q").address(), ctx.tensor("scale").address(), R, K, per};
  return launch(ctx, "moe_quantize_fp8", uint64_t((R + per - 1) / per), a);
}

// ---- moe_permute_fp8 -----------------------------------------------------------------------
// moe_permute's plan, then blocks of tokens: each token row quantized once and copied to its
// slots' rows (ref::moe_permute_fp8_scatter).
struct PermuteFp8Args {
  uint64_t x, slot_to_row, num_rows, permuted, permuted_scale;
  int64_t T, H, K, tokens_per_block;
};
void permute_fp8_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<PermuteFp8Args>(blob);
  const int64_t R = *ptr<const int32_t>(a.num_rows);  // written by the plan launch before this one
  report("moe_permute_fp8",
         ref::moe_permute_fp8_scatter(ptr<const bf16>(a.x), a.T, a.H, a.K, ptr<const int32_t>(a.slot_to_row), R,
                                      ptr<e4m3>(a.permuted), ptr<float>(a.permuted_scale),
                                      block_rows(ctx, a.T, a.tokens_per_block)));
}
HostKernel k_permute_fp8("moe_permute_fp8_scatter", permute_fp8_kernel,
                         {HALCYON_ARG_PTR(PermuteFp8Args, x), HALCYON_ARG_PTR(PermuteFp8Args, slot_to_row),
                          HALCYON_ARG_PTR(PermuteFp8Args, num_rows), HALCYON_ARG_PTR(PermuteFp8Args, permuted),
                          HALCYON_ARG_PTR(PermuteFp8Args, permuted_scale), HALCYON_ARG_VAL(PermuteFp8Args, T),
                          HALCYON_ARG_VAL(PermuteFp8Args, H), HALCYON_ARG_VAL(PermuteFp8Args, K),
                          HALCYON_ARG_VAL(PermuteFp8Args, tokens_per_block)},
                         sizeof(PermuteFp8Args));
Status moe_permute_fp8(ops::OpContext& ctx) {
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  HALCYON_TRY(launch_permute_plan(ctx));
  if (T == 0 || K == 0) return {};
  const int64_t per = rows_per_block(T, H * (2 + K));
  PermuteFp8Args a{ctx.tensor("x").address(),        ctx.tensor("slot_to_row").address(),
                   ctx.tensor("num_rows").address(), ctx.tensor("permuted").address(),
                   ctx.tensor("permuted_scale").address(), T, H, K, per};
  return launch(ctx, "moe_permute_fp8_scatter", uint64_t((T + per - 1) / per), a);
}

// ---- the block-scaled grouped GEMMs -------------------------------------------------------
// One argument block for all three: the gather form also uses x's rows T, topk and row_to_slot.
struct Fp8GemmArgs {
  uint64_t a, a_scale, w, w_scale, offsets, row_to_slot, out, out_scale;  // out_scale: the quantizing form
  int64_t EL, R, in_dim, out_dim, T, topk, rows_per_block;
};
#define FP8_GEMM_ARGS                                                                                         \
  {HALCYON_ARG_PTR(Fp8GemmArgs, a), HALCYON_ARG_PTR(Fp8GemmArgs, a_scale), HALCYON_ARG_PTR(Fp8GemmArgs, w),     \
   HALCYON_ARG_PTR(Fp8GemmArgs, w_scale), HALCYON_ARG_PTR(Fp8GemmArgs, offsets),                              \
   HALCYON_ARG_PTR(Fp8GemmArgs, row_to_slot), HALCYON_ARG_PTR(Fp8GemmArgs, out),                              \
   HALCYON_ARG_PTR(Fp8GemmArgs, out_scale), HALCYON_ARG_VAL(Fp8GemmArgs, EL),                                  \
   HALCYON_ARG_VAL(Fp8GemmArgs, R), HALCYON_ARG_VAL(Fp8GemmArgs, in_dim), HALCYON_ARG_VAL(Fp8GemmArgs, out_dim),   \
   HALCYON_ARG_VAL(Fp8GemmArgs, T), HALCYON_ARG_VAL(Fp8GemmArgs, topk), HALCYON_ARG_VAL(Fp8GemmArgs, rows_per_block)}

void fp8_swiglu_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<Fp8GemmArgs>(blob);
  report("moe_grouped_gemm_fp8_swiglu",
         ref::moe_grouped_gemm_fp8_swiglu(ptr<const e4m3>(g.a), ptr<const float>(g.a_scale), ptr<const e4m3>(g.w),
                                          ptr<const float>(g.w_scale), ptr<const int32_t>(g.offsets), g.EL + 1, g.EL,
                                          g.R, g.in_dim, g.out_dim, ptr<bf16>(g.out),
                                          block_rows(ctx, g.R, g.rows_per_block)));
}
void fp8_swiglu_quant_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<Fp8GemmArgs>(blob);
  report("moe_grouped_gemm_fp8_swiglu_quant",
         ref::moe_grouped_gemm_fp8_swiglu_quant(ptr<const e4m3>(g.a), ptr<const float>(g.a_scale), ptr<const e4m3>(g.w),
                                                ptr<const float>(g.w_scale), ptr<const int32_t>(g.offsets), g.EL + 1,
                                                g.EL, g.R, g.in_dim, g.out_dim, ptr<e4m3>(g.out), ptr<float>(g.out_scale),
                                                block_rows(ctx, g.R, g.rows_per_block)));
}
void fp8_swiglu_gather_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<Fp8GemmArgs>(blob);
  report("moe_grouped_gemm_fp8_swiglu_gather",
         ref::moe_grouped_gemm_fp8_swiglu_gather(
             ptr<const e4m3>(g.a), ptr<const float>(g.a_scale), g.T, g.topk, ptr<const int32_t>(g.row_to_slot),
             ptr<const e4m3>(g.w), ptr<const float>(g.w_scale), ptr<const int32_t>(g.offsets), g.EL + 1, g.EL, g.R,
             g.in_dim, g.out_dim, ptr<bf16>(g.out), block_rows(ctx, g.R, g.rows_per_block)));
}
void fp8_down_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<Fp8GemmArgs>(blob);
  report("moe_grouped_gemm_fp8",
         ref::moe_grouped_gemm_fp8(ptr<const e4m3>(g.a), ptr<const float>(g.a_scale), ptr<const e4m3>(g.w),
                                   ptr<const float>(g.w_scale), ptr<const int32_t>(g.offsets), g.EL + 1, g.EL, g.R,
                                   g.in_dim, g.out_dim, ptr<bf16>(g.out), block_rows(ctx, g.R, g.rows_per_block)));
}
HostKernel k_fp8_swiglu("moe_grouped_gemm_fp8_swiglu", fp8_swiglu_kernel, FP8_GEMM_ARGS, sizeof(Fp8GemmArgs));
HostKernel k_fp8_swiglu_quant("moe_grouped_gemm_fp8_swiglu_quant", fp8_swiglu_quant_kernel, FP8_GEMM_ARGS,
                              sizeof(Fp8GemmArgs));
HostKernel k_fp8_swiglu_gather("moe_grouped_gemm_fp8_swiglu_gather", fp8_swiglu_gather_kernel, FP8_GEMM_ARGS,
                               sizeof(Fp8GemmArgs));
HostKernel k_fp8_down("moe_grouped_gemm_fp8", fp8_down_kernel, FP8_GEMM_ARGS, sizeof(Fp8GemmArgs));

// kernel: the host kernel's name (= the op); a/a_scale/w/w_scale: the contract's names.
Status fp8_gemm(ops::OpContext& ctx, const char* kernel, const char* a, const char* a_scale, const char* w,
                int64_t in_dim, int64_t out_dim, int64_t cost, bool gather, bool quant = false) {
  const int64_t R = ctx.dim("R"), EL = ctx.dim("EL");
  int64_t T = 0, topk = 1;
  uint64_t row_to_slot = 0;
  if (gather) {
    T = ctx.dim("T");
    topk = ctx.params().i("topk");
    // Parameter errors are reported now, before anything is queued.
    if (topk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: topk = {} must be >= 1", kernel, topk));
    if (T * topk > INT32_MAX)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: T * topk = {} does not fit int32 slot indices", kernel, T * topk));
    row_to_slot = ctx.tensor("row_to_slot").address();
  }
  const int64_t per = rows_per_block(R, cost);
  Fp8GemmArgs g{ctx.tensor(a).address(), ctx.tensor(a_scale).address(), ctx.tensor(w).address(),
                ctx.tensor("w_scale").address(), ctx.tensor("expert_offsets").address(), row_to_slot,
                ctx.tensor(quant ? "q" : "out").address(), quant ? ctx.tensor("q_scale").address() : 0, EL, R, in_dim,
                out_dim, T, topk, per};
  return launch(ctx, kernel, uint64_t((R + per - 1) / per), g);
}
Status moe_grouped_gemm_fp8_swiglu(ops::OpContext& ctx) {
  const int64_t H = ctx.dim("H"), I = ctx.dim("I");
  return fp8_gemm(ctx, "moe_grouped_gemm_fp8_swiglu", "a", "a_scale", "w_gate_up", H, I, 2 * H * I, false);
}
Status moe_grouped_gemm_fp8_swiglu_quant(ops::OpContext& ctx) {
  const int64_t H = ctx.dim("H"), I = ctx.dim("I");
  return fp8_gemm(ctx, "moe_grouped_gemm_fp8_swiglu_quant", "a", "a_scale", "w_gate_up", H, I, 2 * H * I, false, true);
}
Status moe_grouped_gemm_fp8_swiglu_gather(ops::OpContext& ctx) {
  const int64_t H = ctx.dim("H"), I = ctx.dim("I");
  return fp8_gemm(ctx, "moe_grouped_gemm_fp8_swiglu_gather", "x", "x_scale", "w_gate_up", H, I, 2 * H * I, true);
}
Status moe_grouped_gemm_fp8(ops::OpContext& ctx) {
  const int64_t I = ctx.dim("I"), H = ctx.dim("H");
  return fp8_gemm(ctx, "moe_grouped_gemm_fp8", "a", "a_scale", "w", I, H, I * H, false);
}

// On the CPU the gather saves the permuted copy outright (as for the bf16 gather). The
// quantizing SwiGLU GEMM (the reference's row loop) measured level with the GEMM + quantize pair
// (halcyon bench moe --device cpu --dtype fp8 --tokens 64: 10.35 against 9.77 + 0.53 ms), so it
// has no fused_pays: the layer runs it only where named.
bool gather_pays(const ops::ApplyContext&, std::string*) { return true; }

ops::RegisterOpImpl r_quantize({"moe_quantize_fp8", HAL_MODULE_HOST, "host", "", 0, moe_quantize_fp8});
ops::RegisterOpImpl r_permute_fp8({"moe_permute_fp8", HAL_MODULE_HOST, "host", "", 0, moe_permute_fp8});
ops::RegisterOpImpl r_fp8_swiglu({"moe_grouped_gemm_fp8_swiglu", HAL_MODULE_HOST, "host", "", 0,
                                  moe_grouped_gemm_fp8_swiglu});
ops::RegisterOpImpl r_fp8_swiglu_gather({"moe_grouped_gemm_fp8_swiglu_gather", HAL_MODULE_HOST, "host", "", 0,
                                         moe_grouped_gemm_fp8_swiglu_gather, "host", nullptr, nullptr, true,
                                         gather_pays});
ops::RegisterOpImpl r_fp8_swiglu_quant({"moe_grouped_gemm_fp8_swiglu_quant", HAL_MODULE_HOST, "host", "", 0,
                                        moe_grouped_gemm_fp8_swiglu_quant});
ops::RegisterOpImpl r_fp8_down({"moe_grouped_gemm_fp8", HAL_MODULE_HOST, "host", "", 0, moe_grouped_gemm_fp8});

}  // namespace
}  // namespace halcyon::host
