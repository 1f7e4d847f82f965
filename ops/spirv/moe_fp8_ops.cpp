// SPIR-V implementations (kernels/spirv/src/moe_fp8.cl) of the FP8 MoE operators:
// moe_quantize_fp8, moe_permute_fp8 (moe.cl's permute plan, then the quantized rows) and the
// block-scaled grouped GEMMs (SwiGLU, its gather and quantizing forms, down), for any Level
// Zero device. Parameter errors are reported before anything is queued; data-dependent errors
// (offsets, slots out of range) make the kernels skip the row, as the contracts say.
#include <initializer_list>
#include <vector>

#include "spirv_launch.hpp"

namespace halcyon::spirvop {
namespace {

constexpr const char* kSet = "moe_fp8";
constexpr uint32_t kGroup = 128;  // moe_fp8.cl: FP8_GROUP, the quantizing kernels' work-group

// Launches `entry` on the 2-D grid of launch_rows with its parameters as 8-byte words: the
// named tensors' addresses, then `values`, in the kernel's parameter order (no padding).
Status launch_words(const ops::OpContext& ctx, const char* entry, std::initializer_list<const char*> tensors,
                    std::initializer_list<int64_t> values, int64_t cols, int64_t rows, uint32_t per = kColumns) {
  std::vector<int64_t> words;
  for (const char* t : tensors) words.push_back(int64_t(address(ctx, t)));
  words.insert(words.end(), values);
  return launch_rows_blob(ctx, kSet, entry, cols, rows, words.data(), words.size() * sizeof(int64_t), per);
}

Status moe_quantize_fp8(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), K = ctx.dim("K");
  return launch_words(ctx, "hc_moe_quantize_fp8", {"x", "q", "scale"}, {K}, K, R, kGroup);
}

// moe_permute's plan (checks first, then moe.cl's index kernel), then each token row quantized
// once into its slots' rows: the composition the contract names, bit for bit.
Status moe_permute_fp8(ops::OpContext& ctx) {
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  HALCYON_TRY(launch_permute_plan(ctx));
  return launch_words(ctx, "hc_moe_permute_fp8_rows", {"x", "slot_to_row", "num_rows", "permuted", "permuted_scale"},
                      {K, H}, H, T, kGroup);
}

Status moe_grouped_gemm_fp8(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), I = ctx.dim("I"), H = ctx.dim("H");
  return launch_words(ctx, "hc_moe_grouped_gemm_fp8", {"a", "a_scale", "w", "w_scale", "expert_offsets", "out"},
                      {R, I, H, ctx.dim("EL")}, H, R);
}

Status moe_grouped_gemm_fp8_swiglu(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), H = ctx.dim("H"), I = ctx.dim("I");
  return launch_words(ctx, "hc_moe_grouped_gemm_fp8_swiglu",
                      {"a", "a_scale", "w_gate_up", "w_scale", "expert_offsets", "out"}, {R, H, I, ctx.dim("EL")}, I, R);
}

// A work-group per (row, group of 128 outputs): the group's max is a local-memory reduction.
Status moe_grouped_gemm_fp8_swiglu_quant(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), H = ctx.dim("H"), I = ctx.dim("I");
  return launch_words(ctx, "hc_moe_grouped_gemm_fp8_swiglu_quant",
                      {"a", "a_scale", "w_gate_up", "w_scale", "expert_offsets", "q", "q_scale"},
                      {H, I, ctx.dim("EL")}, I, R, kGroup);
}

Status moe_grouped_gemm_fp8_swiglu_gather(ops::OpContext& ctx) {
  auto topk = gather_topk(ctx);  // parameter errors now, before anything is queued
  if (!topk) return topk.error();
  const int64_t R = ctx.dim("R"), H = ctx.dim("H"), I = ctx.dim("I");
  return launch_words(ctx, "hc_moe_grouped_gemm_fp8_swiglu_gather",
                      {"x", "x_scale", "w_gate_up", "w_scale", "expert_offsets", "row_to_slot", "out"},
                      {R, ctx.dim("T"), H, I, ctx.dim("EL"), *topk}, I, R);
}

const bool kRegistered = [] {
  register_spirv("moe_quantize_fp8", moe_quantize_fp8, nullptr);
  register_spirv("moe_permute_fp8", moe_permute_fp8, nullptr);
  register_spirv("moe_grouped_gemm_fp8", moe_grouped_gemm_fp8, nullptr);
  register_spirv("moe_grouped_gemm_fp8_swiglu", moe_grouped_gemm_fp8_swiglu, nullptr);
  register_spirv("moe_grouped_gemm_fp8_swiglu_quant", moe_grouped_gemm_fp8_swiglu_quant, nullptr);
  register_spirv("moe_grouped_gemm_fp8_swiglu_gather", moe_grouped_gemm_fp8_swiglu_gather, nullptr);
  return true;
}();

}  // namespace
}  // namespace halcyon::spirvop
