// SPIR-V implementations (kernels/spirv: basic.cl, moe.cl, attention.cl, comm.cl) of
// vector_add, row_softmax, gemm_bf16, the MoE family, the attention contracts and comm_dispatch,
// for devices that load SPIR-V (the Level Zero backend); the FP8 MoE operators are
// moe_fp8_ops.cpp's. Each launcher packs a struct whose fields mirror its kernel's parameter
// list, in order: the backend lays the blob out from the module's own parameter types
// (backends/level_zero, spirv_reader), so a mismatch in size is refused at launch (helpers:
// spirv_launch.hpp). Parameter errors are reported before anything is queued; data-dependent
// errors (ids or offsets out of range) make the kernels skip the element, as the contracts say.
#include <halcyon/kernels/reference/attention.hpp>
#include <halcyon/kernels/reference/moe.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "spirv_launch.hpp"

namespace halcyon::spirvop {
namespace {

constexpr int64_t kGateMaxExperts = 256;  // moe.cl: GATE_MAX_EXPERTS

// ---- basic ---------------------------------------------------------------------------------
struct VectorAddArgs {
  uint64_t a, b, c;
  int64_t n;
};
Status vector_add(ops::OpContext& ctx) {
  int64_t n = ctx.dim("N");
  VectorAddArgs a{address(ctx, "a"), address(ctx, "b"), address(ctx, "c"), n};
  return launch(ctx, "basic", "hc_vector_add", {uint32_t(ceil_div(n, 256))}, {256}, a);
}

struct SoftmaxArgs {
  uint64_t x, y;
  int64_t rows, cols;
};
Status row_softmax(ops::OpContext& ctx) {
  int64_t rows = ctx.dim("R"), cols = ctx.dim("C");
  if (cols == 0) return {};
  SoftmaxArgs a{address(ctx, "x"), address(ctx, "y"), rows, cols};
  return launch(ctx, "basic", "hc_row_softmax", {uint32_t(rows)}, {256}, a);
}

// ---- operators that need no check of their own: one table row each ---------------------------
// The kernel's parameters are the named tensors' addresses, then the named dimensions (int64),
// in its parameter-list order: all 8 bytes wide, so the blob has no padding. The grid is 2-D:
// `cols` outputs in groups of kColumns along dimension 0, `rows` along dimension 1.
struct PlainLaunch {
  const char* op;
  const char* set;
  const char* entry;
  const char* tensors[4];  // nullptr ends the list early
  const char* dims[4];
  const char* cols;
  const char* rows;
};
constexpr PlainLaunch kPlain[] = {
    {"gemm_bf16", "basic", "hc_gemm_bf16", {"a", "b", "c"}, {"M", "K", "N"}, "N", "M"},
    {"moe_grouped_gemm", "moe", "hc_moe_grouped_gemm", {"a", "w", "expert_offsets", "out"}, {"R", "I", "H", "EL"}, "H", "R"},
    {"moe_grouped_gemm_swiglu", "moe", "hc_moe_grouped_gemm_swiglu", {"a", "w_gate_up", "expert_offsets", "out"},
     {"R", "H", "I", "EL"}, "I", "R"},
    {"moe_combine", "moe", "hc_moe_combine", {"expert_out", "topk_weights", "slot_to_row", "out"},
     {"T", "K", "H", "R"}, "H", "T"},
};

Status launch_plain(ops::OpContext& ctx, const PlainLaunch& p) {
  int64_t words[8] = {};
  size_t n = 0;
  for (const char* t : p.tensors)
    if (t) words[n++] = int64_t(address(ctx, t));
  for (const char* d : p.dims)
    if (d) words[n++] = ctx.dim(d);
  return launch_rows_blob(ctx, p.set, p.entry, ctx.dim(p.cols), ctx.dim(p.rows), words, n * sizeof words[0]);
}
template <size_t I>
Status plain(ops::OpContext& ctx) {
  return launch_plain(ctx, kPlain[I]);
}
template <size_t... I>
constexpr std::array<ops::OpImplFn, sizeof...(I)> plain_fns(std::index_sequence<I...>) {
  return {plain<I>...};
}
constexpr auto kPlainFns = plain_fns(std::make_index_sequence<std::size(kPlain)>());

// ---- MoE -----------------------------------------------------------------------------------
struct GateArgs {
  uint64_t logits, bias, ids, weights;
  int64_t T, E, softmax, n_groups, topk_groups, topk, normalize;
  float routed_scale;
};
Status moe_gate(ops::OpContext& ctx) {
  const auto& p = ctx.params();
  ref::MoeGateParams rp;
  rp.score = p.s("score") == "softmax" ? ref::ScoreFunction::kSoftmax : ref::ScoreFunction::kSigmoid;
  rp.n_groups = p.i("n_groups");
  rp.topk_groups = p.i("topk_groups");
  rp.topk = p.i("topk");
  rp.normalize = p.b("normalize");
  rp.routed_scale = float(p.f("routed_scale"));
  const int64_t T = ctx.dim("T"), E = ctx.dim("E");
  HALCYON_TRY(ref::moe_gate_check(T, E, rp));  // parameter errors now, before anything is queued
  if (E > kGateMaxExperts)
    return Error(HAL_UNSUPPORTED, fmt::format("moe_gate: the SPIR-V kernel takes up to {} experts, not E = {}",
                                              kGateMaxExperts, E));
  GateArgs a{address(ctx, "logits"), address(ctx, "bias"), address(ctx, "topk_ids"), address(ctx, "topk_weights"),
             T, E, rp.score == ref::ScoreFunction::kSoftmax, rp.n_groups, rp.topk_groups, rp.topk, rp.normalize,
             rp.routed_scale};
  return launch(ctx, "moe", "hc_moe_gate", {uint32_t(ceil_div(T, kColumns))}, {kColumns}, a);
}
bool gate_applies(const ops::ApplyContext& c, std::string* why) {
  if (!c.has_call() || c.dim("E") <= kGateMaxExperts) return true;
  if (why) *why = fmt::format("E = {} > {} experts", c.dim("E"), kGateMaxExperts);
  return false;
}

struct PermuteIndexArgs {
  uint64_t ids, counts, offsets, row_to_slot, slot_to_row, num_rows;
  int64_t T, K, E, begin, end;
};

}  // namespace

// Shared with moe_fp8_ops.cpp (spirv_launch.hpp): moe_permute_fp8 runs the same plan, the FP8
// gather GEMM checks topk the same way. Messages name the calling operator.
Status launch_permute_plan(const ops::OpContext& ctx) {
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), E = ctx.dim("E"), EL = ctx.dim("EL");
  const int64_t begin = ctx.params().i("expert_begin");
  const char* op = ctx.contract.op.c_str();
  if (E < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: the expert count E is unknown or {}", op, E));
  if (begin < 0 || EL < 0 || begin + EL > E)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("{}: local experts [{}, {}) do not lie within [0, {})", op, begin, begin + EL, E));
  if (T * K > INT32_MAX)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: T * K = {} does not fit int32 rows", op, T * K));
  PermuteIndexArgs p{address(ctx, "topk_ids"), address(ctx, "expert_counts"), address(ctx, "expert_offsets"),
                     address(ctx, "row_to_slot"), address(ctx, "slot_to_row"), address(ctx, "num_rows"),
                     T, K, E, begin, begin + EL};
  return launch(ctx, "moe", "hc_moe_permute_index", {1}, {1}, p);
}

Result<int64_t> gather_topk(const ops::OpContext& ctx) {
  const int64_t topk = ctx.params().i("topk"), T = ctx.dim("T");
  if (topk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: topk = {} must be >= 1", ctx.contract.op, topk));
  if (T * topk > INT32_MAX)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("{}: T * topk = {} does not fit int32 slot indices", ctx.contract.op, T * topk));
  return topk;
}

namespace {

struct PermuteRowsArgs {
  uint64_t x, row_to_slot, num_rows, permuted;
  int64_t TK, K, H;
};
Status moe_permute(ops::OpContext& ctx) {
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  HALCYON_TRY(launch_permute_plan(ctx));
  if (!ctx.params().b("write_permuted")) return {};
  PermuteRowsArgs r{address(ctx, "x"), address(ctx, "row_to_slot"), address(ctx, "num_rows"),
                    address(ctx, "permuted"), T * K, K, H};
  return launch_rows(ctx, "moe", "hc_moe_permute_rows", H, T * K, r);
}

struct GatherArgs {
  uint64_t x, w, offsets, row_to_slot, out;
  int64_t R, T, H, I, EL, topk;
};
Status moe_grouped_gemm_swiglu_gather(ops::OpContext& ctx) {
  auto topk = gather_topk(ctx);  // parameter errors now, before anything is queued
  if (!topk) return topk.error();
  GatherArgs a{address(ctx, "x"), address(ctx, "w_gate_up"), address(ctx, "expert_offsets"),
               address(ctx, "row_to_slot"), address(ctx, "out"), ctx.dim("R"), ctx.dim("T"), ctx.dim("H"),
               ctx.dim("I"), ctx.dim("EL"), *topk};
  return launch_rows(ctx, "moe", "hc_moe_grouped_gemm_swiglu_gather", a.I, a.R, a);
}

// ---- attention -----------------------------------------------------------------------------
// One work-item per (query token, head), heads along dimension 0 in groups of kHeads.
constexpr uint32_t kHeads = 16;

struct PrefillArgs {
  uint64_t q, k, v, cu_q, cu_k, out, lse;
  int64_t B, Tq, Tk, Hq, Hkv, D, causal;
  float scale;
};
Status attention_prefill(ops::OpContext& ctx) {
  ref::AttentionPrefillShape sh{ctx.dim("B"), ctx.dim("Tq"), ctx.dim("Tk"), ctx.dim("Hq"), ctx.dim("Hkv"),
                                ctx.dim("D"), ctx.params().b("causal"), float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_prefill_check(sh));  // shape errors now, before anything is queued
  PrefillArgs a{address(ctx, "q"), address(ctx, "k"), address(ctx, "v"), address(ctx, "cu_seqlens_q"),
                address(ctx, "cu_seqlens_k"), address(ctx, "out"), address(ctx, "lse"), sh.B, sh.Tq, sh.Tk, sh.Hq,
                sh.Hkv, sh.D, sh.causal, ref::attention_scale(sh.scale, sh.D)};
  return launch_rows(ctx, "attention", "hc_attention_prefill", sh.Hq, sh.Tq, a, kHeads);
}

struct DecodeArgs {
  uint64_t q, k, v, table, lens, out, lse;
  int64_t B, Sq, Hq, Hkv, D, NB, BS, MB;
  float scale;
};
Status attention_decode(ops::OpContext& ctx) {
  ref::AttentionDecodeShape sh{ctx.dim("B"),  ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("Hkv"), ctx.dim("D"),
                               ctx.dim("NB"), ctx.dim("BS"), ctx.dim("MB"), float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_decode_check(sh));
  DecodeArgs a{address(ctx, "q"), address(ctx, "k_cache"), address(ctx, "v_cache"), address(ctx, "block_table"),
               address(ctx, "seq_lens"), address(ctx, "out"), address(ctx, "lse"), sh.B, sh.Sq, sh.Hq, sh.Hkv, sh.D,
               sh.NB, sh.BS, sh.MB, ref::attention_scale(sh.scale, sh.D)};
  return launch_rows(ctx, "attention", "hc_attention_decode", sh.Hq, sh.B * sh.Sq, a, kHeads);
}

struct MlaArgs {
  uint64_t q, kv, table, lens, out, lse;
  int64_t B, Sq, Hq, NB, BS, MB;
  float scale;
};
Status attention_mla_decode(ops::OpContext& ctx) {
  ref::AttentionMlaShape sh{ctx.dim("B"),  ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("NB"),
                            ctx.dim("BS"), ctx.dim("MB"), float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_mla_decode_check(sh));
  MlaArgs a{address(ctx, "q"), address(ctx, "kv_cache"), address(ctx, "block_table"), address(ctx, "seq_lens"),
            address(ctx, "out"), address(ctx, "lse"), sh.B, sh.Sq, sh.Hq, sh.NB, sh.BS, sh.MB,
            ref::attention_scale(sh.scale, ref::kMlaQkDim)};
  return launch_rows(ctx, "attention", "hc_attention_mla_decode", sh.Hq, sh.B * sh.Sq, a, kHeads);
}

// ---- comm_dispatch -------------------------------------------------------------------------
struct DispatchArgs {
  uint64_t x, src_row, out;
  int64_t T, R, H, chunk_rows;
};
// A persistent grid of at most one group per compute unit the stream may use: a partition's
// units (enforced sub-device or soft cap), else the device's.
Status comm_dispatch(ops::OpContext& ctx) {
  const int64_t chunk = ctx.params().i("chunk_rows");
  if (chunk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("comm_dispatch: chunk_rows = {} must be >= 1", chunk));
  DispatchArgs a{address(ctx, "x"), address(ctx, "src_row"), address(ctx, "out"), ctx.dim("T"), ctx.dim("R"),
                 ctx.dim("H"), chunk};
  auto stream = ctx.stream.info();
  if (!stream) return stream.error();
  const int64_t groups = std::min<int64_t>(ceil_div(a.R, chunk), std::max<uint32_t>(stream->units, 1));
  return launch(ctx, "comm", "hc_comm_dispatch", {uint32_t(groups)}, {kColumns}, a);
}

// One row per implementation with a launcher of its own (kPlain holds the others): op,
// launcher, predicate.
struct Row {
  const char* op;
  ops::OpImplFn fn;
  ops::OpPredicate applies;
};
constexpr Row kRows[] = {
    {"vector_add", vector_add, nullptr},
    {"row_softmax", row_softmax, nullptr},
    {"moe_gate", moe_gate, gate_applies},
    {"moe_permute", moe_permute, nullptr},
    {"moe_grouped_gemm_swiglu_gather", moe_grouped_gemm_swiglu_gather, nullptr},
    {"attention_prefill", attention_prefill, nullptr},
    {"attention_decode", attention_decode, nullptr},
    {"attention_mla_decode", attention_mla_decode, nullptr},
    {"comm_dispatch", comm_dispatch, nullptr},
};

const bool kRegistered = [] {
  for (const Row& r : kRows) register_spirv(r.op, r.fn, r.applies);
  for (size_t i = 0; i < std::size(kPlain); ++i) register_spirv(kPlain[i].op, kPlainFns[i], nullptr);
  return true;
}();

}  // namespace
}  // namespace halcyon::spirvop
