// The hand-written GCN kernels as implementations of the operator contracts
// (kernels/elementwise/vector_add, kernels/softmax/row_softmax, kernels/gemm/gemm_bf16, the MoE
// operators, kernels/comm/comm_dispatch, the three of kernels/attention) for gfx942 and gfx90a.
// Argument blobs follow each kernel's metadata (checked at build time by gcn_check against
// contracts/<kernel>.kernel).
#include <halcyon/kernels/reference/attention.hpp>

#include "gcn_kernel.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace halcyon::gcnop {
namespace {

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

// ---- MoE ----------------------------------------------------------------------------------

struct CombineArgs {
  uint64_t expert_out, weights, slot_to_row, out;
  uint32_t T, K, H, R;
};
Status moe_combine(ops::OpContext& ctx) {
  int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H"), R = ctx.dim("R");
  if (T == 0 || H == 0) return {};
  if (R * H * 2 > 0xffffffffll || T * H * 2 > 0xffffffffll || T * K * 4 > 0xffffffffll)
    return too_large("moe_combine", fmt::format("T = {}, K = {}, H = {}, R = {}", T, K, H, R));
  auto k = kernel(ctx, "halcyon_moe_combine_bf16");
  if (!k) return k.error();
  CombineArgs a{ctx.tensor("expert_out").address(), ctx.tensor("topk_weights").address(),
                ctx.tensor("slot_to_row").address(), ctx.tensor("out").address(),
                uint32_t(T), uint32_t(K), uint32_t(H), uint32_t(R)};
  return ctx.stream.launch(*k, {uint32_t(T), uint32_t((H + 255) / 256)}, {256}, &a, sizeof a);
}

struct PermutePlanArgs {
  uint64_t ids, counts, offsets, row_to_slot, slot_to_row, num_rows;
  uint32_t TK, EL, begin;
};
struct PermuteRowsArgs {
  uint64_t x, slot_to_row, permuted;
  uint32_t T, K, H;
};
// moe_permute's plan (both moe_permute and moe_permute_fp8): the checks, then
// halcyon_moe_permute_plan. `row_bytes`: the bytes of a permuted row (H bf16 or e4m3 values).
Status launch_permute_plan(ops::OpContext& ctx, const char* op, int64_t row_bytes) {
  int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H"), E = ctx.dim("E"), EL = ctx.dim("EL");
  int64_t begin = ctx.params().i("expert_begin");
  if (E < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: the expert count E is unknown or {}", op, E));
  if (begin < 0 || EL < 0 || begin + EL > E)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("{}: local experts [{}, {}) do not lie within [0, {})", op, begin, begin + EL, E));
  if (EL > 1024)
    return Error(HAL_UNSUPPORTED, fmt::format("{} on GCN: {} local experts; the kernel keeps at most 1024 in LDS", op, EL));
  if (T * K * 4 > 0xffffffffll || T * K * row_bytes > 0xffffffffll || T * H * 2 > 0xffffffffll || E > 0x7fffffffll)
    return too_large(op, fmt::format("T = {}, K = {}, H = {}", T, K, H));
  auto plan = kernel(ctx, "halcyon_moe_permute_plan");
  if (!plan) return plan.error();
  PermutePlanArgs p{ctx.tensor("topk_ids").address(),    ctx.tensor("expert_counts").address(),
                    ctx.tensor("expert_offsets").address(), ctx.tensor("row_to_slot").address(),
                    ctx.tensor("slot_to_row").address(), ctx.tensor("num_rows").address(),
                    uint32_t(T * K), uint32_t(EL), uint32_t(begin)};
  return ctx.stream.launch(*plan, {1}, {512}, &p, 60);
}
Status moe_permute(ops::OpContext& ctx) {
  int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  HALCYON_TRY(launch_permute_plan(ctx, "moe_permute", 2 * H));
  if (!ctx.params().b("write_permuted") || T == 0 || K == 0 || H == 0) return {};
  auto rows = kernel(ctx, "halcyon_moe_permute_rows");
  if (!rows) return rows.error();
  PermuteRowsArgs r{ctx.tensor("x").address(), ctx.tensor("slot_to_row").address(), ctx.tensor("permuted").address(),
                    uint32_t(T), uint32_t(K), uint32_t(H)};
  return ctx.stream.launch(*rows, {uint32_t(T), uint32_t(K)}, {256}, &r, 36);
}

// moe_quantize_fp8 (mode 0) and moe_permute_fp8's rows (mode 1): halcyon_moe_quantize_fp8, a
// wave a (row, 128-group) of `rows` rows of `width` values; bit for bit the reference.
struct QuantizeFp8Args {
  uint64_t x, q, scale, slot_to_row, num_rows;
  uint32_t width, topk, mode;
};
Status launch_quantize_fp8(ops::OpContext& ctx, const QuantizeFp8Args& a, int64_t rows) {
  if (rows == 0 || a.width == 0) return {};
  auto k = kernel(ctx, "halcyon_moe_quantize_fp8");
  if (!k) return k.error();
  return ctx.stream.launch(*k, {(a.width + 127) / 128, uint32_t(rows)}, {64}, &a, 52);
}
// The 32-bit byte offsets of `rows` rows of `width` values: bf16 in, e4m3 out, a scale a group.
bool fits_quantize(int64_t rows, int64_t width) {
  return rows * width * 2 <= 0xffffffffll && rows * ((width + 127) / 128) * 4 <= 0xffffffffll;
}
Status moe_quantize_fp8(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), K = ctx.dim("K");
  if (!fits_quantize(R, K)) return too_large("moe_quantize_fp8", fmt::format("R = {}, K = {}", R, K));
  return launch_quantize_fp8(ctx, {ctx.tensor("x").address(), ctx.tensor("q").address(), ctx.tensor("scale").address(),
                                   0, 0, uint32_t(K), 0, 0}, R);
}
// The plan, then each token's row quantized once and written to its slots' rows.
Status moe_permute_fp8(ops::OpContext& ctx) {
  int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  if (!fits_quantize(T * K, H)) return too_large("moe_permute_fp8", fmt::format("T = {}, K = {}, H = {}", T, K, H));
  HALCYON_TRY(launch_permute_plan(ctx, "moe_permute_fp8", H));
  if (K == 0) return {};
  return launch_quantize_fp8(ctx, {ctx.tensor("x").address(), ctx.tensor("permuted").address(),
                                   ctx.tensor("permuted_scale").address(), ctx.tensor("slot_to_row").address(),
                                   ctx.tensor("num_rows").address(), uint32_t(H), uint32_t(K), 1}, T);
}

struct GateArgs {
  uint64_t logits, bias, ids, weights;
  uint32_t T, E, n_groups, topk_groups, topk, group_size, magic, flags;
  float routed_scale;
};
Status moe_gate(ops::OpContext& ctx) {
  const auto& p = ctx.params();
  int64_t T = ctx.dim("T"), E = ctx.dim("E"), groups = p.i("n_groups"), kept = p.i("topk_groups"), topk = p.i("topk");
  if (E < 1 || groups < 1 || E % groups || kept < 1 || kept > groups || topk < 1 || topk > kept * (E / groups))
    return Error(HAL_INVALID_ARGUMENT, fmt::format("moe_gate: E = {}, n_groups = {}, topk_groups = {}, topk = {} "
                                                   "is not a valid grouping", E, groups, kept, topk));
  if (E > 256 || groups > 64 || topk > 64)
    return Error(HAL_UNSUPPORTED, fmt::format("moe_gate on GCN: E = {}, n_groups = {}, topk = {}; the kernel takes "
                                              "E <= 256, n_groups <= 64, topk <= 64", E, groups, topk));
  if (T == 0) return {};
  if (T * E * 4 > 0xffffffffll) return too_large("moe_gate", fmt::format("T = {}, E = {}", T, E));
  auto k = kernel(ctx, "halcyon_moe_gate_f32");
  if (!k) return k.error();
  const ops::Tensor* bias = ctx.optional_tensor("bias");
  const uint32_t gs = uint32_t(E / groups);
  const uint32_t magic = gs > 1 ? uint32_t(((uint64_t(1) << 32) + gs - 1) / gs) : 0;  // ceil(2^32 / gs)
  const uint32_t flags = (p.s("score") == "softmax" ? 1u : 0u) | (p.b("normalize") ? 2u : 0u) | (bias ? 4u : 0u);
  GateArgs a{ctx.tensor("logits").address(), bias ? bias->address() : 0, ctx.tensor("topk_ids").address(),
             ctx.tensor("topk_weights").address(), uint32_t(T), uint32_t(E), uint32_t(groups), uint32_t(kept),
             uint32_t(topk), gs, magic, flags, float(p.f("routed_scale"))};
  return ctx.stream.launch(*k, {uint32_t(T)}, {64}, &a, 68);
}

struct GroupedArgs {
  uint64_t a, w, offsets, out, row_to_slot;
  uint32_t R, K, N, EL, mode, topk, topk_magic, slots, a_bytes, b_bytes, ldb;
};
enum GroupedMode : uint32_t { kDown = 0, kSwiglu = 1, kSwigluGather = 2 };
// One kernel for the three grouped GEMMs: K = depth, N = output columns, ldb = weight row length.
Status grouped_gemm(ops::OpContext& ctx, GroupedMode mode, const char* a_name, const char* w_name, int64_t K,
                    int64_t N, int64_t ldb, int64_t a_rows, int64_t topk) {
  int64_t R = ctx.dim("R"), EL = ctx.dim("EL");
  if (R == 0 || N == 0 || EL == 0) return {};
  const char* op = ctx.contract.op.c_str();
  if (K == 0) return Error(HAL_UNSUPPORTED, fmt::format("{} on GCN: an empty reduction (K = 0)", op));
  const int64_t a_bytes = a_rows * K * 2, b_bytes = K * ldb * 2;
  // Offsets of 0x80000000 mark out-of-range rows and columns: buffers must stay below 2 GiB.
  if (a_bytes >= (int64_t(1) << 31) || b_bytes >= (int64_t(1) << 31) || R * N * 2 > 0xffffffffll ||
      EL * b_bytes >= (int64_t(1) << 48) || (R + 63) / 64 + EL > 0xffffffffll)
    return too_large(op, fmt::format("R = {}, K = {}, N = {}", R, K, N));
  auto k = kernel(ctx, "halcyon_moe_grouped_gemm_bf16");
  if (!k) return k.error();
  const ops::Tensor* slots = ctx.optional_tensor("row_to_slot");
  const uint32_t magic = topk > 1 ? uint32_t(((uint64_t(1) << 32) + uint64_t(topk) - 1) / uint64_t(topk)) : 0;
  GroupedArgs g{ctx.tensor(a_name).address(), ctx.tensor(w_name).address(), ctx.tensor("expert_offsets").address(),
                ctx.tensor("out").address(), slots ? slots->address() : 0, uint32_t(R), uint32_t(K), uint32_t(N),
                uint32_t(EL), mode, uint32_t(topk), magic, uint32_t(a_rows * topk), uint32_t(a_bytes),
                uint32_t(b_bytes), uint32_t(ldb)};
  // Column tiles padded to a multiple of MI300X's 8 XCDs: see moe_grouped_gemm_bf16.s.
  const uint32_t col_tiles = uint32_t(((N + 63) / 64 + 7) / 8 * 8);
  return ctx.stream.launch(*k, {col_tiles, uint32_t((R + 63) / 64 + EL)}, {256}, &g, 84);
}
Status moe_grouped_gemm(ops::OpContext& ctx) {
  int64_t I = ctx.dim("I"), H = ctx.dim("H");
  return grouped_gemm(ctx, kDown, "a", "w", I, H, H, ctx.dim("R"), 1);
}
Status moe_grouped_gemm_swiglu(ops::OpContext& ctx) {
  int64_t I = ctx.dim("I"), H = ctx.dim("H");
  return grouped_gemm(ctx, kSwiglu, "a", "w_gate_up", H, I, 2 * I, ctx.dim("R"), 1);
}
Status moe_grouped_gemm_swiglu_gather(ops::OpContext& ctx) {
  int64_t I = ctx.dim("I"), H = ctx.dim("H"), topk = ctx.params().i("topk");
  if (topk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("moe_grouped_gemm_swiglu_gather: topk = {}", topk));
  return grouped_gemm(ctx, kSwigluGather, "x", "w_gate_up", H, I, 2 * I, ctx.dim("T"), topk);
}

// ---- comm_dispatch ------------------------------------------------------------------------

struct DispatchArgs {
  uint64_t x, src_row, out;
  uint32_t T, R, H, chunk_rows, step_rows, dwords;
};
// Workgroups per compute unit of the stream (its partition's units on a CU-masked stream): as
// many as the PTX build keeps per SM (ops/ptx/comm_ops.cpp); not measured on AMD hardware.
constexpr int64_t kDispatchGroupsPerUnit = 4;
Status comm_dispatch(ops::OpContext& ctx) {
  const int64_t T = ctx.dim("T"), R = ctx.dim("R"), H = ctx.dim("H"), chunk = ctx.params().i("chunk_rows");
  if (chunk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("comm_dispatch: chunk_rows = {} must be >= 1", chunk));
  if (R == 0 || H == 0) return {};
  if (T * H * 2 > 0xffffffffll || R * H * 2 > 0xffffffffll || R >= (int64_t(1) << 30))
    return too_large("comm_dispatch", fmt::format("T = {}, R = {}, H = {}", T, R, H));
  auto info = ctx.stream.info();
  if (!info) return info.error();
  auto k = kernel(ctx, "halcyon_comm_dispatch_bf16");
  if (!k) return k.error();
  const int64_t rows = std::min(chunk, R), chunks = (R + rows - 1) / rows;
  const int64_t groups = std::min<int64_t>(chunks, std::max<int64_t>(1, int64_t(info->units)) * kDispatchGroupsPerUnit);
  const uint64_t x = ctx.tensor("x").address(), out = ctx.tensor("out").address();
  const bool dwords = H % 2 == 0 && x % 4 == 0 && out % 4 == 0;
  DispatchArgs a{x, ctx.tensor("src_row").address(), out, uint32_t(T), uint32_t(R), uint32_t(H), uint32_t(rows),
                 uint32_t(groups * rows), dwords ? 1u : 0u};
  return ctx.stream.launch(*k, {uint32_t(groups)}, {256}, &a, sizeof a);
}

// ---- attention_prefill ----------------------------------------------------------------------

struct PrefillArgs {
  uint64_t q, k, v, cu_q, cu_k, out, lse;
  uint32_t B, Tk, Hq, Hkv, D, causal, group_magic;
  float q_scale;  // scale * log2 e
};
static_assert(sizeof(PrefillArgs) == 88);
// ceil(2^32 / group) for the kernels' h / group (0: group 1).
uint32_t group_magic(int64_t Hq, int64_t Hkv) {
  const uint64_t group = uint64_t(Hq / Hkv);
  return group > 1 ? uint32_t(((uint64_t(1) << 32) + group - 1) / group) : 0;
}
constexpr float kLog2e = 1.4426950408889634f;
Status attention_prefill(ops::OpContext& ctx) {
  ref::AttentionPrefillShape sh{ctx.dim("B"), ctx.dim("Tq"), ctx.dim("Tk"), ctx.dim("Hq"), ctx.dim("Hkv"),
                                ctx.dim("D"), ctx.params().b("causal"), float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_prefill_check(sh));  // D 64 or 128, Hq % Hkv: refused before any launch
  if (sh.Tq == 0 || sh.Hq == 0 || sh.B == 0) return {};
  if (sh.Tq * sh.Hq * sh.D * 2 > 0xffffffffll || sh.Tk * sh.Hkv * sh.D * 2 > 0xffffffffll || sh.Hq > 65535 ||
      sh.B >= (int64_t(1) << 30))
    return too_large("attention_prefill", fmt::format("Tq = {}, Tk = {}, Hq = {}, Hkv = {}", sh.Tq, sh.Tk, sh.Hq, sh.Hkv));
  auto k = kernel(ctx, "halcyon_attention_prefill_bf16");
  if (!k) return k.error();
  PrefillArgs a{ctx.tensor("q").address(), ctx.tensor("k").address(), ctx.tensor("v").address(),
                ctx.tensor("cu_seqlens_q").address(), ctx.tensor("cu_seqlens_k").address(), ctx.tensor("out").address(),
                ctx.tensor("lse").address(), uint32_t(sh.B), uint32_t(sh.Tk), uint32_t(sh.Hq), uint32_t(sh.Hkv),
                uint32_t(sh.D), sh.causal ? 1u : 0u, group_magic(sh.Hq, sh.Hkv),
                ref::attention_scale(sh.scale, sh.D) * kLog2e};
  return ctx.stream.launch(*k, {uint32_t(sh.Tq), uint32_t(sh.Hq)}, {64}, &a, sizeof a);  // tokens in x
}

// ---- attention_decode -----------------------------------------------------------------------

struct DecodeArgs {
  uint64_t q, k, v, table, lens, out, lse;
  uint32_t Sq, Hq, Hkv, D, BS, MB, group_magic;
  float q_scale;  // scale * log2 e: the kernel's softmax is in base 2
  uint32_t NB;
};
static_assert(sizeof(DecodeArgs) == 96);  // 92 bytes of arguments, padded
Status attention_decode(ops::OpContext& ctx) {
  ref::AttentionDecodeShape sh{ctx.dim("B"),  ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("Hkv"), ctx.dim("D"),
                               ctx.dim("NB"), ctx.dim("BS"), ctx.dim("MB"), float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_decode_check(sh));  // D 64 or 128, Hq % Hkv, BS: refused before any launch
  if (sh.B == 0 || sh.Sq == 0 || sh.Hq == 0) return {};
  if (sh.NB * sh.BS * sh.Hkv * sh.D * 2 > 0xffffffffll || sh.B * sh.Sq * sh.Hq * sh.D * 2 > 0xffffffffll ||
      sh.B * sh.MB > 0x3fffffffll || sh.B > 65535 || sh.Sq > 65535)
    return too_large("attention_decode", fmt::format("B = {}, Sq = {}, Hq = {}, NB = {}, BS = {}, Hkv = {}", sh.B,
                                                     sh.Sq, sh.Hq, sh.NB, sh.BS, sh.Hkv));
  auto k = kernel(ctx, "halcyon_attention_decode_bf16");
  if (!k) return k.error();
  DecodeArgs a{ctx.tensor("q").address(), ctx.tensor("k_cache").address(), ctx.tensor("v_cache").address(),
               ctx.tensor("block_table").address(), ctx.tensor("seq_lens").address(), ctx.tensor("out").address(),
               ctx.tensor("lse").address(), uint32_t(sh.Sq), uint32_t(sh.Hq), uint32_t(sh.Hkv), uint32_t(sh.D),
               uint32_t(sh.BS), uint32_t(sh.MB), group_magic(sh.Hq, sh.Hkv), ref::attention_scale(sh.scale, sh.D) * kLog2e,
               uint32_t(sh.NB)};
  return ctx.stream.launch(*k, {uint32_t(sh.Hq), uint32_t(sh.Sq), uint32_t(sh.B)}, {64}, &a, 92);
}

// ---- attention_mla_decode -------------------------------------------------------------------

struct MlaArgs {
  uint64_t q, kv, table, lens, out, lse;
  uint32_t Sq, Hq, BS, MB, NB;
  float q_scale;  // scale * log2 e
};
static_assert(sizeof(MlaArgs) == 72);
Status attention_mla_decode(ops::OpContext& ctx) {
  ref::AttentionMlaShape sh{ctx.dim("B"),  ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("NB"),
                            ctx.dim("BS"), ctx.dim("MB"), float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_mla_decode_check(sh));  // Hq, BS: refused before any launch
  if (sh.B == 0 || sh.Sq == 0) return {};
  if (sh.NB * sh.BS * ref::kMlaQkDim * 2 > 0xffffffffll || sh.B * sh.Sq * sh.Hq * ref::kMlaQkDim * 2 > 0xffffffffll ||
      sh.B * sh.MB > 0x3fffffffll || sh.B > 65535 || sh.Sq > 65535)
    return too_large("attention_mla_decode", fmt::format("B = {}, Sq = {}, Hq = {}, NB = {}, BS = {}", sh.B, sh.Sq,
                                                         sh.Hq, sh.NB, sh.BS));
  auto k = kernel(ctx, "halcyon_attention_mla_decode_bf16");
  if (!k) return k.error();
  MlaArgs a{ctx.tensor("q").address(), ctx.tensor("kv_cache").address(), ctx.tensor("block_table").address(),
            ctx.tensor("seq_lens").address(), ctx.tensor("out").address(), ctx.tensor("lse").address(),
            uint32_t(sh.Sq), uint32_t(sh.Hq), uint32_t(sh.BS), uint32_t(sh.MB), uint32_t(sh.NB),
            ref::attention_scale(sh.scale, ref::kMlaQkDim) * kLog2e};
  return ctx.stream.launch(*k, {uint32_t(sh.Hq), uint32_t(sh.Sq), uint32_t(sh.B)}, {64}, &a, sizeof a);
}

// The FP8 MoE operator without a GCN kernel, the quantizing SwiGLU GEMM, on both targets (the
// layer runs moe_grouped_gemm_fp8_swiglu, then moe_quantize_fp8, instead; the other GEMMs are
// moe_fp8_ops.cpp's), and "gfx90a.none" for the three other GEMMs: never the registry's choice,
// only named (the tests of the layer's dequantize fallback name it to stand for a device without
// FP8 GEMM kernels, which no simulated device is any more). These implementations never apply
// and say why, so that listings, the conformance suite and run_op give the reason rather than
// only "no implementation runs here" (issue 19: backends without FP8 kernels report unsupported
// with the reason).
constexpr const char* kFp8Gemms[] = {"moe_grouped_gemm_fp8_swiglu", "moe_grouped_gemm_fp8_swiglu_gather",
                                     "moe_grouped_gemm_fp8"};
constexpr const char* kQuantGemm = "moe_grouped_gemm_fp8_swiglu_quant";
std::string arch_of(const ops::ApplyContext& c) {
  return c.facts.arch.empty() ? c.facts.uri : c.facts.arch.substr(0, c.facts.arch.find(':'));
}
bool no_quant_gemm(const ops::ApplyContext& c, std::string* why) {
  if (why)
    *why = fmt::format("no GCN kernel for the quantizing FP8 SwiGLU GEMM on {} (moe_grouped_gemm_fp8_swiglu, then "
                       "moe_quantize_fp8, compute the same)", arch_of(c));
  return false;
}
bool no_fp8_gemm(const ops::ApplyContext& c, std::string* why) {
  if (why)
    *why = fmt::format("no FP8 GEMM kernel in {0}.none, named only, to stand for a device without them (the registry "
                       "chooses {0}: e4m3 decoded to bf16 for the bf16 MFMA)", arch_of(c));
  return false;
}
Status no_fp8_run(ops::OpContext& ctx) {
  return Error(HAL_UNSUPPORTED, fmt::format("{}: no GCN FP8 kernel", ctx.contract.op));
}
ops::OpImpl no_fp8_impl(const char* op, const char* target, ops::OpPredicate why, bool automatic) {
  return {op, HAL_MODULE_HSACO, target, "", 1, no_fp8_run, fmt::format("{}.none", target), why,
          nullptr, automatic, nullptr, "none: no GCN FP8 kernel (see why)"};
}

// These kernels are assembled for both targets (kernels/gcn), so every operator registers one
// implementation a target, named by it ("gfx942", "gfx90a").
const bool kRegistered = [] {
  const std::pair<const char*, ops::OpImplFn> table[] = {
      {"vector_add", vector_add},
      {"row_softmax", row_softmax},
      {"gemm_bf16", gemm_bf16},
      {"moe_combine", moe_combine},
      {"moe_permute", moe_permute},
      {"moe_quantize_fp8", moe_quantize_fp8},
      {"moe_permute_fp8", moe_permute_fp8},
      {"moe_gate", moe_gate},
      {"moe_grouped_gemm", moe_grouped_gemm},
      {"moe_grouped_gemm_swiglu", moe_grouped_gemm_swiglu},
      {"moe_grouped_gemm_swiglu_gather", moe_grouped_gemm_swiglu_gather},
      {"comm_dispatch", comm_dispatch},
      {"attention_decode", attention_decode},
      {"attention_prefill", attention_prefill},
      {"attention_mla_decode", attention_mla_decode},
  };
  for (const auto& [op, fn] : table)
    for (const char* target : {"gfx942", "gfx90a"}) ops::register_op_impl({op, HAL_MODULE_HSACO, target, "", 10, fn});
  for (const char* op : kFp8Gemms) ops::register_op_impl(no_fp8_impl(op, "gfx90a", no_fp8_gemm, false));
  for (const char* target : {"gfx942", "gfx90a"})
    ops::register_op_impl(no_fp8_impl(kQuantGemm, target, no_quant_gemm, true));
  return true;
}();

}  // namespace
}  // namespace halcyon::gcnop
