// The FP8 MoE grouped GEMMs (kernels/moe/moe_grouped_gemm_fp8*.contract) on gfx942 and gfx90a:
// one kernel with a mode (kernels/gcn/src/moe_grouped_gemm_fp8.s, swap-AB). gfx942: the FP8 MFMA
// 32x32x16, the operators' e4m3fn re-encoded to the MFMA's e4m3fnuz on load; gfx90a (no FP8
// MFMA): e4m3fn decoded exactly to bf16 for the bf16 MFMA 32x32x8. The refusals (the quantizing
// SwiGLU GEMM; gfx90a.none, named only) are gcn_ops.cpp's.
#include <cstdint>
#include <string>
#include <utility>

#include "gcn_kernel.hpp"

namespace halcyon::gcnop {
namespace {

struct Fp8GroupedArgs {
  uint64_t a, a_scale, w, w_scale, offsets, out, row_to_slot;
  uint32_t R, K, N, EL, mode, topk, topk_magic, slots, a_bytes, w_bytes, groups, w_blocks, a_scale_bytes;
};
static_assert(sizeof(Fp8GroupedArgs) == 112);  // 108 bytes of arguments, padded
enum Fp8Mode : uint32_t { kDown = 0, kSwiglu = 1, kSwigluGather = 2 };

// The reduction's length for the call: I for the down GEMM, H for the SwiGLU forms.
int64_t depth(const ops::ApplyContext& c) {
  return c.dim(c.tensor("w") ? "I" : "H");
}
// The kernel loads 8-byte chunks of K that lie wholly inside or wholly past K.
bool fp8_applies(const ops::ApplyContext& c, std::string* why) {
  if (!c.has_call()) return true;
  const int64_t K = depth(c);
  if (K % 8 == 0) return true;
  if (why) *why = fmt::format("the GCN FP8 kernel reads K in 8-byte chunks: K = {} is not a multiple of 8", K);
  return false;
}

// One kernel for the three GEMMs: K = depth, N = outputs a row, Nw = weight rows (N or 2N).
Status fp8_grouped(ops::OpContext& ctx, Fp8Mode mode, const char* a_name, int64_t K, int64_t N, int64_t Nw,
                   int64_t a_rows, int64_t topk) {
  const int64_t R = ctx.dim("R"), EL = ctx.dim("EL");
  if (R == 0 || N == 0 || EL == 0) return {};
  const char* op = ctx.contract.op.c_str();
  if (K == 0) return Error(HAL_UNSUPPORTED, fmt::format("{} on GCN: an empty reduction (K = 0)", op));
  if (K % 8) return Error(HAL_UNSUPPORTED, fmt::format("{} on GCN: K = {} is not a multiple of 8", op, K));
  const int64_t groups = (K + 127) / 128, blocks = (Nw + 127) / 128;
  const int64_t a_bytes = a_rows * K, w_bytes = Nw * K, a_scale_bytes = a_rows * groups * 4;
  // Offsets of 0x80000000 mark out-of-range chunks: buffers must stay below 2 GiB.
  if (a_bytes >= (int64_t(1) << 31) || w_bytes >= (int64_t(1) << 31) || a_scale_bytes >= (int64_t(1) << 31) ||
      R * N * 2 > 0xffffffffll || EL * w_bytes >= (int64_t(1) << 48) || (R + 31) / 32 + EL > 0xffffffffll)
    return too_large(op, fmt::format("R = {}, K = {}, N = {}", R, K, N));
  auto k = kernel(ctx, "halcyon_moe_grouped_gemm_fp8");
  if (!k) return k.error();
  const bool gather = mode == kSwigluGather;
  const uint32_t magic = topk > 1 ? uint32_t(((uint64_t(1) << 32) + uint64_t(topk) - 1) / uint64_t(topk)) : 0;
  Fp8GroupedArgs g{ctx.tensor(a_name).address(),
                   ctx.tensor(gather ? "x_scale" : "a_scale").address(),
                   ctx.tensor(mode == kDown ? "w" : "w_gate_up").address(),
                   ctx.tensor("w_scale").address(),
                   ctx.tensor("expert_offsets").address(),
                   ctx.tensor("out").address(),
                   gather ? ctx.tensor("row_to_slot").address() : 0,
                   uint32_t(R), uint32_t(K), uint32_t(N), uint32_t(EL), mode, uint32_t(topk), magic,
                   uint32_t(a_rows * topk), uint32_t(a_bytes), uint32_t(w_bytes), uint32_t(groups), uint32_t(blocks),
                   uint32_t(a_scale_bytes)};
  return ctx.stream.launch(*k, {uint32_t((N + 31) / 32), uint32_t((R + 31) / 32 + EL)}, {64}, &g, 108);
}

Status moe_grouped_gemm_fp8(ops::OpContext& ctx) {
  const int64_t I = ctx.dim("I"), H = ctx.dim("H");
  return fp8_grouped(ctx, kDown, "a", I, H, H, ctx.dim("R"), 1);
}
Status moe_grouped_gemm_fp8_swiglu(ops::OpContext& ctx) {
  const int64_t I = ctx.dim("I"), H = ctx.dim("H");
  return fp8_grouped(ctx, kSwiglu, "a", H, I, 2 * I, ctx.dim("R"), 1);
}
Status moe_grouped_gemm_fp8_swiglu_gather(ops::OpContext& ctx) {
  const int64_t I = ctx.dim("I"), H = ctx.dim("H"), topk = ctx.params().i("topk");
  if (topk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("moe_grouped_gemm_fp8_swiglu_gather: topk = {}", topk));
  return fp8_grouped(ctx, kSwigluGather, "x", H, I, 2 * I, ctx.dim("T"), topk);
}

const bool kRegistered = [] {
  const std::pair<const char*, ops::OpImplFn> table[] = {
      {"moe_grouped_gemm_fp8", moe_grouped_gemm_fp8},
      {"moe_grouped_gemm_fp8_swiglu", moe_grouped_gemm_fp8_swiglu},
      {"moe_grouped_gemm_fp8_swiglu_gather", moe_grouped_gemm_fp8_swiglu_gather},
  };
  for (const auto& [op, fn] : table) {
    ops::register_op_impl({op, HAL_MODULE_HSACO, "gfx942", "", 10, fn, "gfx942", fp8_applies, nullptr, true, nullptr,
                           "swap-AB on the FP8 MFMA 32x32x16, e4m3fn re-encoded to fnuz; no LDS (correct first)"});
    ops::register_op_impl({op, HAL_MODULE_HSACO, "gfx90a", "", 10, fn, "gfx90a", fp8_applies, nullptr, true, nullptr,
                           "swap-AB on the bf16 MFMA 32x32x8, e4m3fn decoded to bf16; no LDS (correct first)"});
  }
  return true;
}();

}  // namespace
}  // namespace halcyon::gcnop
