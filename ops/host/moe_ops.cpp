// Host implementations of the MoE operators: the reference code (kernels/reference) run on
// slices of rows, one slice per block, through the CPU backend.
//
// Data-dependent input errors (an expert id outside [0, E), bad offsets) cannot be returned
// from inside a queued kernel; the reference refuses them before writing anything, so the
// outputs keep whatever they held (the conformance suite's poison shows this), and the
// message goes to the log. `halcyon run` checks integer inputs on the host before launching.
#include <halcyon/kernels/reference/moe.hpp>

#include <fmt/format.h>

#include <cstdint>

#include "host_kernels.hpp"

namespace halcyon::host {
namespace {

using ref::bf16;

// ---- moe_gate -----------------------------------------------------------------------------
struct GateArgs {
  uint64_t logits, bias, ids, weights;
  int64_t T, E, n_groups, topk_groups, topk, rows_per_block;
  int32_t softmax, normalize;
  float routed_scale;
};
ref::MoeGateParams gate_params(const GateArgs& a) {
  ref::MoeGateParams p;
  p.score = a.softmax ? ref::ScoreFunction::kSoftmax : ref::ScoreFunction::kSigmoid;
  p.n_groups = a.n_groups;
  p.topk_groups = a.topk_groups;
  p.topk = a.topk;
  p.normalize = a.normalize != 0;
  p.routed_scale = a.routed_scale;
  return p;
}
void gate_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<GateArgs>(blob);
  report("moe_gate", ref::moe_gate(ptr<const float>(a.logits), a.bias ? ptr<const float>(a.bias) : nullptr, a.T, a.E,
                                   gate_params(a), ptr<int32_t>(a.ids), ptr<float>(a.weights),
                                   block_rows(ctx, a.T, a.rows_per_block)));
}
HostKernel k_gate("moe_gate", gate_kernel,
                  {HALCYON_ARG_PTR(GateArgs, logits), HALCYON_ARG_PTR(GateArgs, bias), HALCYON_ARG_PTR(GateArgs, ids),
                   HALCYON_ARG_PTR(GateArgs, weights), HALCYON_ARG_VAL(GateArgs, T), HALCYON_ARG_VAL(GateArgs, E),
                   HALCYON_ARG_VAL(GateArgs, n_groups), HALCYON_ARG_VAL(GateArgs, topk_groups),
                   HALCYON_ARG_VAL(GateArgs, topk), HALCYON_ARG_VAL(GateArgs, rows_per_block),
                   HALCYON_ARG_VAL(GateArgs, softmax), HALCYON_ARG_VAL(GateArgs, normalize),
                   HALCYON_ARG_VAL(GateArgs, routed_scale)},
                  sizeof(GateArgs));
Status moe_gate(ops::OpContext& ctx) {
  const auto& p = ctx.params();
  const ops::Tensor* bias = ctx.optional_tensor("bias");
  GateArgs a{ctx.tensor("logits").address(), bias ? bias->address() : 0, ctx.tensor("topk_ids").address(),
             ctx.tensor("topk_weights").address(), ctx.dim("T"), ctx.dim("E"), p.i("n_groups"), p.i("topk_groups"),
             p.i("topk"), 0, p.s("score") == "softmax", p.b("normalize"), float(p.f("routed_scale"))};
  // Parameter errors are reported now, before anything is queued.
  HALCYON_TRY(ref::moe_gate_check(a.T, a.E, gate_params(a)));
  a.rows_per_block = rows_per_block(a.T, a.E * 8);
  return launch(ctx, "moe_gate", uint64_t((a.T + a.rows_per_block - 1) / a.rows_per_block), a);
}

// ---- moe_permute --------------------------------------------------------------------------
// One sequential pass for the bookkeeping (block 0 of a 1-block launch), then the row gather
// spread over blocks in a second launch on the same stream.
struct PermutePlanArgs {
  uint64_t ids, counts, offsets, row_to_slot, slot_to_row, num_rows;
  int64_t T, K, E, expert_begin, expert_end;
};
void permute_plan_kernel(const hal_host_launch_ctx*, const void* blob) {
  auto a = args_of<PermutePlanArgs>(blob);
  report("moe_permute", ref::moe_permute_plan(ptr<const int32_t>(a.ids), a.T, a.K, a.E, a.expert_begin, a.expert_end,
                                              ptr<int32_t>(a.counts), ptr<int32_t>(a.offsets),
                                              ptr<int32_t>(a.row_to_slot), ptr<int32_t>(a.slot_to_row),
                                              ptr<int32_t>(a.num_rows)));
}
HostKernel k_permute_plan(
    "moe_permute_plan", permute_plan_kernel,
    {HALCYON_ARG_PTR(PermutePlanArgs, ids), HALCYON_ARG_PTR(PermutePlanArgs, counts),
     HALCYON_ARG_PTR(PermutePlanArgs, offsets), HALCYON_ARG_PTR(PermutePlanArgs, row_to_slot),
     HALCYON_ARG_PTR(PermutePlanArgs, slot_to_row), HALCYON_ARG_PTR(PermutePlanArgs, num_rows),
     HALCYON_ARG_VAL(PermutePlanArgs, T), HALCYON_ARG_VAL(PermutePlanArgs, K), HALCYON_ARG_VAL(PermutePlanArgs, E),
     HALCYON_ARG_VAL(PermutePlanArgs, expert_begin), HALCYON_ARG_VAL(PermutePlanArgs, expert_end)},
    sizeof(PermutePlanArgs));

struct GatherArgs {
  uint64_t x, row_to_slot, num_rows, permuted;
  int64_t T, H, K, rows_per_block;
};
void permute_gather_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<GatherArgs>(blob);
  int64_t R = *ptr<const int32_t>(a.num_rows);  // written by the plan launch before this one
  auto rows = block_rows(ctx, a.T * a.K, a.rows_per_block);
  rows.end = std::min(rows.end, R);
  if (rows.begin >= rows.end) return;
  report("moe_permute", ref::moe_permute_gather(ptr<const bf16>(a.x), a.T, a.H, a.K, ptr<const int32_t>(a.row_to_slot),
                                                R, ptr<bf16>(a.permuted), rows));
}
HostKernel k_permute_gather("moe_permute_gather", permute_gather_kernel,
                            {HALCYON_ARG_PTR(GatherArgs, x), HALCYON_ARG_PTR(GatherArgs, row_to_slot),
                             HALCYON_ARG_PTR(GatherArgs, num_rows), HALCYON_ARG_PTR(GatherArgs, permuted),
                             HALCYON_ARG_VAL(GatherArgs, T), HALCYON_ARG_VAL(GatherArgs, H),
                             HALCYON_ARG_VAL(GatherArgs, K), HALCYON_ARG_VAL(GatherArgs, rows_per_block)},
                            sizeof(GatherArgs));

}  // namespace

Status launch_permute_plan(const ops::OpContext& ctx) {
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), E = ctx.dim("E"), EL = ctx.dim("EL");
  const int64_t begin = ctx.params().i("expert_begin");  // EL = expert_end - expert_begin
  const char* op = ctx.contract.op.c_str();
  if (E < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: the expert count E is unknown or {}", op, E));
  if (begin < 0 || EL < 0 || begin + EL > E)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("{}: local experts [{}, {}) do not lie within [0, {})", op, begin, begin + EL, E));
  PermutePlanArgs p{ctx.tensor("topk_ids").address(),    ctx.tensor("expert_counts").address(),
                    ctx.tensor("expert_offsets").address(), ctx.tensor("row_to_slot").address(),
                    ctx.tensor("slot_to_row").address(), ctx.tensor("num_rows").address(),
                    T, K, E, begin, begin + EL};
  return launch(ctx, "moe_permute_plan", 1, p);
}

namespace {

Status moe_permute(ops::OpContext& ctx) {
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  HALCYON_TRY(launch_permute_plan(ctx));
  if (!ctx.params().b("write_permuted")) return {};
  int64_t per = rows_per_block(T * K, H);
  GatherArgs g{ctx.tensor("x").address(), ctx.tensor("row_to_slot").address(), ctx.tensor("num_rows").address(),
               ctx.tensor("permuted").address(), T, H, K, per};
  return launch(ctx, "moe_permute_gather", uint64_t((T * K + per - 1) / per), g);
}

// ---- grouped GEMMs ------------------------------------------------------------------------
struct GroupedArgs {
  uint64_t a, w, offsets, out;
  int64_t EL, R, in_dim, out_dim, rows_per_block;
};
void swiglu_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<GroupedArgs>(blob);
  report("moe_grouped_gemm_swiglu",
         ref::moe_grouped_gemm_swiglu(ptr<const bf16>(g.a), ptr<const bf16>(g.w), ptr<const int32_t>(g.offsets), g.EL + 1,
                                      g.EL, g.R, g.in_dim, g.out_dim, ptr<bf16>(g.out),
                                      block_rows(ctx, g.R, g.rows_per_block)));
}
void down_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<GroupedArgs>(blob);
  report("moe_grouped_gemm",
         ref::moe_grouped_gemm(ptr<const bf16>(g.a), ptr<const bf16>(g.w), ptr<const int32_t>(g.offsets), g.EL + 1, g.EL,
                               g.R, g.in_dim, g.out_dim, ptr<bf16>(g.out), block_rows(ctx, g.R, g.rows_per_block)));
}
#define GROUPED_ARGS                                                                                        \
  {HALCYON_ARG_PTR(GroupedArgs, a), HALCYON_ARG_PTR(GroupedArgs, w), HALCYON_ARG_PTR(GroupedArgs, offsets), \
   HALCYON_ARG_PTR(GroupedArgs, out), HALCYON_ARG_VAL(GroupedArgs, EL), HALCYON_ARG_VAL(GroupedArgs, R),    \
   HALCYON_ARG_VAL(GroupedArgs, in_dim), HALCYON_ARG_VAL(GroupedArgs, out_dim),                             \
   HALCYON_ARG_VAL(GroupedArgs, rows_per_block)}
HostKernel k_swiglu("moe_grouped_gemm_swiglu", swiglu_kernel, GROUPED_ARGS, sizeof(GroupedArgs));
HostKernel k_down("moe_grouped_gemm", down_kernel, GROUPED_ARGS, sizeof(GroupedArgs));

Status grouped(ops::OpContext& ctx, const char* kernel, const char* w, int64_t in_dim, int64_t out_dim, int64_t cost) {
  int64_t R = ctx.dim("R"), EL = ctx.dim("EL");
  int64_t per = rows_per_block(R, cost);
  GroupedArgs g{ctx.tensor("a").address(), ctx.tensor(w).address(), ctx.tensor("expert_offsets").address(),
                ctx.tensor("out").address(), EL, R, in_dim, out_dim, per};
  return launch(ctx, kernel, uint64_t((R + per - 1) / per), g);
}
Status moe_grouped_gemm_swiglu(ops::OpContext& ctx) {
  int64_t H = ctx.dim("H"), I = ctx.dim("I");
  return grouped(ctx, "moe_grouped_gemm_swiglu", "w_gate_up", H, I, 2 * H * I);
}
Status moe_grouped_gemm(ops::OpContext& ctx) {
  int64_t I = ctx.dim("I"), H = ctx.dim("H");
  return grouped(ctx, "moe_grouped_gemm", "w", I, H, I * H);
}

// The SwiGLU GEMM reading its rows from x through row_to_slot (no permuted copy).
struct GatherSwigluArgs {
  uint64_t x, row_to_slot, w, offsets, out;
  int64_t T, topk, EL, R, H, I, rows_per_block;
};
void swiglu_gather_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto g = args_of<GatherSwigluArgs>(blob);
  report("moe_grouped_gemm_swiglu_gather",
         ref::moe_grouped_gemm_swiglu_gather(ptr<const bf16>(g.x), g.T, g.topk, ptr<const int32_t>(g.row_to_slot),
                                             ptr<const bf16>(g.w), ptr<const int32_t>(g.offsets), g.EL + 1, g.EL, g.R,
                                             g.H, g.I, ptr<bf16>(g.out), block_rows(ctx, g.R, g.rows_per_block)));
}
HostKernel k_swiglu_gather(
    "moe_grouped_gemm_swiglu_gather", swiglu_gather_kernel,
    {HALCYON_ARG_PTR(GatherSwigluArgs, x), HALCYON_ARG_PTR(GatherSwigluArgs, row_to_slot),
     HALCYON_ARG_PTR(GatherSwigluArgs, w), HALCYON_ARG_PTR(GatherSwigluArgs, offsets),
     HALCYON_ARG_PTR(GatherSwigluArgs, out), HALCYON_ARG_VAL(GatherSwigluArgs, T),
     HALCYON_ARG_VAL(GatherSwigluArgs, topk), HALCYON_ARG_VAL(GatherSwigluArgs, EL), HALCYON_ARG_VAL(GatherSwigluArgs, R),
     HALCYON_ARG_VAL(GatherSwigluArgs, H), HALCYON_ARG_VAL(GatherSwigluArgs, I),
     HALCYON_ARG_VAL(GatherSwigluArgs, rows_per_block)},
    sizeof(GatherSwigluArgs));
Status moe_grouped_gemm_swiglu_gather(ops::OpContext& ctx) {
  int64_t R = ctx.dim("R"), EL = ctx.dim("EL"), H = ctx.dim("H"), I = ctx.dim("I"), T = ctx.dim("T");
  int64_t topk = ctx.params().i("topk");
  // Parameter errors are reported now, before anything is queued.
  if (topk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("moe_grouped_gemm_swiglu_gather: topk = {} must be >= 1", topk));
  if (T * topk > INT32_MAX)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("moe_grouped_gemm_swiglu_gather: T * topk = {} does not fit int32 slot indices", T * topk));
  int64_t per = rows_per_block(R, 2 * H * I);
  GatherSwigluArgs g{ctx.tensor("x").address(), ctx.tensor("row_to_slot").address(), ctx.tensor("w_gate_up").address(),
                     ctx.tensor("expert_offsets").address(), ctx.tensor("out").address(), T, topk, EL, R, H, I, per};
  return launch(ctx, "moe_grouped_gemm_swiglu_gather", uint64_t((R + per - 1) / per), g);
}

// ---- moe_combine --------------------------------------------------------------------------
struct CombineArgs {
  uint64_t expert_out, weights, slot_to_row, out;
  int64_t R, T, K, H, rows_per_block;
};
void combine_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<CombineArgs>(blob);
  report("moe_combine", ref::moe_combine(ptr<const bf16>(a.expert_out), a.R, ptr<const float>(a.weights),
                                         ptr<const int32_t>(a.slot_to_row), a.T, a.K, a.H, ptr<bf16>(a.out),
                                         block_rows(ctx, a.T, a.rows_per_block)));
}
HostKernel k_combine("moe_combine", combine_kernel,
                     {HALCYON_ARG_PTR(CombineArgs, expert_out), HALCYON_ARG_PTR(CombineArgs, weights),
                      HALCYON_ARG_PTR(CombineArgs, slot_to_row), HALCYON_ARG_PTR(CombineArgs, out),
                      HALCYON_ARG_VAL(CombineArgs, R), HALCYON_ARG_VAL(CombineArgs, T), HALCYON_ARG_VAL(CombineArgs, K),
                      HALCYON_ARG_VAL(CombineArgs, H), HALCYON_ARG_VAL(CombineArgs, rows_per_block)},
                     sizeof(CombineArgs));
Status moe_combine(ops::OpContext& ctx) {
  int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  int64_t per = rows_per_block(T, K * H);
  CombineArgs a{ctx.tensor("expert_out").address(), ctx.tensor("topk_weights").address(),
                ctx.tensor("slot_to_row").address(), ctx.tensor("out").address(), ctx.dim("R"), T, K, H, per};
  return launch(ctx, "moe_combine", uint64_t((T + per - 1) / per), a);
}

ops::RegisterOpImpl r_gate({"moe_gate", HAL_MODULE_HOST, "host", "", 0, moe_gate});
ops::RegisterOpImpl r_permute({"moe_permute", HAL_MODULE_HOST, "host", "", 0, moe_permute});
ops::RegisterOpImpl r_swiglu({"moe_grouped_gemm_swiglu", HAL_MODULE_HOST, "host", "", 0, moe_grouped_gemm_swiglu});
// On the CPU the gather saves the permuted copy outright: the MoE layer's gather path pays.
bool gather_pays(const ops::ApplyContext&, std::string*) { return true; }
ops::RegisterOpImpl r_swiglu_gather({"moe_grouped_gemm_swiglu_gather", HAL_MODULE_HOST, "host", "", 0,
                                     moe_grouped_gemm_swiglu_gather, "host", nullptr, nullptr, true, gather_pays});
ops::RegisterOpImpl r_down({"moe_grouped_gemm", HAL_MODULE_HOST, "host", "", 0, moe_grouped_gemm});
ops::RegisterOpImpl r_combine({"moe_combine", HAL_MODULE_HOST, "host", "", 0, moe_combine});

}  // namespace
}  // namespace halcyon::host
