// PTX implementations of the MoE operators: launchers for moe_routing.cu (gate, permute,
// combine) and the grouped GEMMs (gemm_sm80.cu: mma.sync, any NVIDIA GPU from sm_80;
// gemm_sm90.cu: wgmma, Hopper sm_90a). Data-dependent sizes stay on the device: the GEMMs read
// expert_offsets there and walk their tiles with a persistent grid; nothing here syncs.
#include "ptx_launch.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <string>
#include <string_view>

namespace halcyon::ptxop {

namespace {

struct GemmConfig {
  const char* image;
  const char* entries[3];  // by epilogue: bf16, SwiGLU bf16, f32
  int bm, bn;              // tile; with SwiGLU bn/2 outputs per n-tile
  int threads;
  uint32_t stage_bytes;    // shared memory besides the tile map
  int ctas_per_sm;
};

constexpr GemmConfig kSm80{"moe_gemm_sm80",
                           {"hc_moe_gemm_sm80", "hc_moe_gemm_swiglu_sm80", "hc_gemm_bf16_sm80"},
                           128, 128, 256, 4 * (128 * 32 + 32 * 128) * 2, 2};
constexpr GemmConfig kSm80Unaligned{"moe_gemm_sm80",
                                    {"hc_moe_gemm_sm80_u", "hc_moe_gemm_swiglu_sm80_u", "hc_gemm_bf16_sm80_u"},
                                    128, 128, 256, 4 * (128 * 32 + 32 * 128) * 2, 2};
constexpr GemmConfig kSm90{"moe_gemm_sm90",
                           {"hc_moe_gemm_sm90", "hc_moe_gemm_swiglu_sm90", "hc_gemm_bf16_sm90"},
                           128, 256, 256, 4 * (128 * 64 + 64 * 256) * 2 + 1024, 1};

// The Hopper kernels of the grouped GEMMs are implementations of their own ("sm90.swapw",
// "sm90.swap", "sm90.tma", "sm90.basic"; registered at the end of this file), chosen by their
// predicates or by name (RunOptions::impl). By default: the warp-specialized swap-AB kernel for
// both GEMMs wherever its cubin loads (a device of exactly sm_90a): faster than the row tiles
// on the H100 and the H200 at 4096 tokens and level or faster at 128 and 512 (figures in
// docs/PERFORMANCE.md, "warp-specialized swap-AB kernel"). The driver's JIT spills its 232-register consumers, so
// without the cubin the earlier choice stands: the 256-thread swap-AB kernel for the down
// projection above kTmaDeepRingRows rows per expert, the row-tile kernel otherwise.

// The TMA kernel (gemm_sm90.cu, grouped_gemm_tma): 256 x 128 tiles; rings of 4 x 32 KB (A)
// and 4 or 5 x 16 KB (B) with two mbarriers per slot.
constexpr uint32_t tma_ring_bytes(int b_slots) { return (4 * 4 + b_slots * 2) * 64 * 64 * 2 + 2 * (4 + b_slots) * 8; }
// The 5-slot B ring where experts average <= 64 rows (measured: docs/kernels/ptx.md).
constexpr int64_t kTmaDeepRingRows = 64;
constexpr int kTmaBm = 256, kTmaBn = 128, kTmaThreads = 384;
// The swap-AB kernel (grouped_gemm_swap): 256 threads, tiles of up to 176 tokens x 256 weight
// columns; 4 slots of 22 KB (tokens) + 32 KB (weights), two mbarriers per slot and ring.
constexpr int kSwapTn = 176, kSwapBn = 256, kSwapThreads = 256, kSwapWsThreads = 384;
// Its gather build (gemm_sm90.cu, S_GATHER_WARPS): two producer warpgroups of gathering warps.
constexpr int kSwapGatherWarps = 8, kSwapGatherThreads = 256 + 32 * kSwapGatherWarps;
constexpr uint32_t kSwapASlots = 4, kSwapBSlots = 4;  // gemm_sm90.cu: S_A_SLOTS, S_B_SLOTS
constexpr uint32_t kSwapRingBytes =
    kSwapASlots * kSwapTn * 128 + kSwapBSlots * 4 * 64 * 64 * 2 + 2 * (kSwapASlots + kSwapBSlots) * 8;
// A bf16 tensor map of a dense row-major tensor: dims innermost first, boxes of 64 x `rows`
// (x 1), 128-byte swizzle (the layout the wgmma descriptors expect).
Result<TensorMap> bf16_map(const ops::OpContext& ctx, const ops::Tensor& t, std::initializer_list<uint64_t> dims,
                           uint32_t rows = 64) {
  return dense_map(ctx, t, HAL_TENSOR_MAP_BF16, 2, dims, 64, rows);
}

// Shared memory of the TMA kernel `which` for this GEMM.
uint64_t tma_shared(int epilogue, const GemmArgs& g, GemmKernel which) {
  (void)epilogue;
  const bool swap = which == GemmKernel::kSwap || which == GemmKernel::kSwapWs;
  const bool deep = g.R <= kTmaDeepRingRows * g.EL;
  return 1024 + (swap ? kSwapRingBytes : tma_ring_bytes(deep ? 5 : 4)) + uint64_t(16 + 2 * (g.EL + 1)) * 4;
}

// Launches the TMA kernel `which` (kTma, kSwap or kSwapWs).
// The swap-AB kernels' last two arguments: RunOptions::sm_trace (null, 0 when not asked).
void trace_args(const ops::OpContext& ctx, ArgPack& a) {
  const ops::Tensor* t = ctx.sm_trace;
  a.value(uint64_t(t ? t->address() : 0)).value(int64_t(t ? t->shape[0] : 0));
}

Status launch_gemm_tma(ops::OpContext& ctx, const DeviceFacts& dev, int epilogue, const GemmArgs& g,
                       const ops::Tensor& a, const ops::Tensor& b, GemmKernel which) {
  if (std::string why = tma_misfit(dev, epilogue, g, which); !why.empty())
    return Error(HAL_UNSUPPORTED, fmt::format("{}: the TMA kernel cannot run: {}", ctx.contract.op, why));
  const int64_t ldb = epilogue == kGemmSwiglu ? 2 * g.N : g.N;
  const bool deep = g.R <= kTmaDeepRingRows * g.EL;
  // The same tiles and rings as swap-AB, with a producer warpgroup.
  const bool swap_ws = which == GemmKernel::kSwapWs;
  const bool swap = swap_ws || which == GemmKernel::kSwap;
  const uint64_t shared = tma_shared(epilogue, g, which);
  auto ta = bf16_map(ctx, a, {uint64_t(g.K), uint64_t(g.R)});
  if (!ta) return ta.error();
  auto ta16 = bf16_map(ctx, a, {uint64_t(g.K), uint64_t(g.R)}, 16);
  if (!ta16) return ta16.error();
  auto tb = bf16_map(ctx, b, {uint64_t(ldb), uint64_t(g.K), uint64_t(g.EL)});
  if (!tb) return tb.error();
  const int64_t n_tiles = gemm_n_tiles(epilogue, g.N, swap ? kSwapBn : kTmaBn);
  const int64_t max_tiles = (ceil_div(g.R, swap ? kSwapTn : kTmaBm) + g.EL) * n_tiles;
  if (max_tiles > INT_MAX)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} rows x {} columns is too large a problem for int tile numbers",
                                               ctx.contract.op, g.R, g.N));
  const bool swiglu = epilogue == kGemmSwiglu;
  const char* entry = swap_ws ? (swiglu ? "hc_moe_gemm_swiglu_sm90swapw" : "hc_moe_gemm_sm90swapw")
                      : swap  ? (swiglu ? "hc_moe_gemm_swiglu_sm90swap" : "hc_moe_gemm_sm90swap")
                      : deep ? (swiglu ? "hc_moe_gemm_swiglu_sm90tma_b5" : "hc_moe_gemm_sm90tma_b5")
                             : (swiglu ? "hc_moe_gemm_swiglu_sm90tma" : "hc_moe_gemm_sm90tma");
  // The row-tile and warp-specialized swap-AB kernels' consumers take their registers with
  // setmaxnreg: their cubins (ptx_launch.hpp).
  auto k = kernel(ctx, dev, "moe_gemm_sm90", entry, swap && !swap_ws ? CodeFrom::kPtx : CodeFrom::kCubinIfExact);
  if (!k) return k.error();
  const int64_t grid = std::min<int64_t>(max_tiles, dev.compute_units);
  const int threads = swap_ws ? kSwapWsThreads : swap ? kSwapThreads : kTmaThreads;
  return launch_packed(ctx, *k, {uint32_t(grid)}, {uint32_t(threads)}, uint32_t(shared),
                       [&](ArgPack& a) {
                         a.value(*ta).value(*ta16).value(*tb).value(g.offsets).value(g.out).value(g.R).value(g.K);
                         a.value(g.N).value(g.EL);
                         if (swap) trace_args(ctx, a);
                       });
}

// Launches kernel `entry` of a cp.async configuration (sm_80, or sm_90a's wgmma one) on a
// persistent grid over R rows and N outputs of `experts` segments (grouped) or one dense
// block; `args` is its argument block (GemmArgs, or the gather entries' GatherGemmArgs).
template <typename Args>
Status launch_tiled(ops::OpContext& ctx, const DeviceFacts& dev, const GemmConfig& c, const char* entry,
                    int epilogue, int64_t R, int64_t N, int64_t experts, bool grouped, const Args& args) {
  const int64_t max_tiles = (ceil_div(R, c.bm) + (grouped ? experts : 0)) * gemm_n_tiles(epilogue, N, c.bn);
  if (max_tiles == 0) return {};
  if (max_tiles > INT_MAX || R > INT_MAX)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} rows x {} columns is too large a problem for int tile numbers",
                                               ctx.contract.op, R, N));
  const uint64_t shared = c.stage_bytes + uint64_t(16 + 2 * (experts + 1)) * 4;
  if (dev.max_shared_per_block && shared > dev.max_shared_per_block)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} experts need {} bytes of shared memory, {} has {}",
                                               ctx.contract.op, experts, shared, dev.uri, dev.max_shared_per_block));
  auto k = kernel(ctx, dev, c.image, entry);
  if (!k) return k.error();
  const int64_t grid = std::min<int64_t>(max_tiles, int64_t(dev.compute_units) * c.ctas_per_sm);
  return launch(ctx, *k, {uint32_t(grid)}, {uint32_t(c.threads)}, args, uint32_t(shared));
}

}  // namespace

std::string tma_misfit(const DeviceFacts& dev, int epilogue, const GemmArgs& g, GemmKernel which) {
  const int64_t ldb = epilogue == kGemmSwiglu ? 2 * g.N : g.N;
  const uint64_t shared = tma_shared(epilogue, g, which);
  if (!ptx::find(kSm90.image, "sm_90a")) return "its PTX image was not built";
  if (!dev.has("tensor_map")) return fmt::format("{} makes no tensor maps", dev.uri);
  if (epilogue == kGemmF32) return "not a grouped bf16 GEMM";
  if (g.K % 8 || ldb % 8 || g.N % 8 || g.a % 16 || g.b % 16 || g.out % 16)
    return fmt::format("rows are not 16-byte aligned (K = {}, weight row {} elements)", g.K, ldb);
  if (dev.max_shared_per_block && shared > dev.max_shared_per_block)
    return fmt::format("{} experts need {} bytes of shared memory, {} has {}", g.EL, shared, dev.uri,
                       dev.max_shared_per_block);
  return {};
}

Status launch_gemm(ops::OpContext& ctx, int epilogue, const GemmArgs& g, GemmKernel which, const ops::Tensor* a,
                   const ops::Tensor* b) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  if (which == GemmKernel::kTma || which == GemmKernel::kSwap || which == GemmKernel::kSwapWs) {
    if (!a || !b) return Error(HAL_INTERNAL, fmt::format("{}: the TMA kernels need the tensors", ctx.contract.op));
    return launch_gemm_tma(ctx, *dev, epilogue, g, *a, *b, which);
  }
  const bool aligned = g.K % 8 == 0 && g.N % 8 == 0;
  if (which == GemmKernel::kSm90Basic && (!aligned || !ptx::find(kSm90.image, "sm_90a")))
    return Error(HAL_UNSUPPORTED, fmt::format("{}: the cp.async wgmma kernel cannot run: K = {} or N = {} is not a "
                                              "multiple of 8, or its image was not built",
                                              ctx.contract.op, g.K, g.N));
  const GemmConfig& c = !aligned ? kSm80Unaligned : which == GemmKernel::kSm80 ? kSm80 : kSm90;
  return launch_tiled(ctx, *dev, c, c.entries[epilogue], epilogue, g.R, g.N, g.offsets ? g.EL : 1, g.offsets != 0, g);
}

namespace {

// ---- moe_gate ------------------------------------------------------------------------------
struct GateArgs {
  uint64_t logits, bias, ids, weights;
  int64_t T, E, softmax, n_groups, topk_groups, topk, normalize;
  double routed_scale;
  int64_t per_warp_bytes;
};
// Why the fast path (moe_routing.cu, "moe_gate fast path") cannot take these arguments, or ""
// if it can: sigmoid, E = 32 * P with P <= 8 or P even <= 16, V = 4, 2 or 1 values a load as P
// allows (both rows V * 4-byte aligned), topk <= 32, and every group kept or n_groups <= 32 with
// a group of gs experts that is either gs / V whole lanes of one 32 * V chunk or whole chunks.
std::string gate_fast_misfit(const GateArgs& a) {
  const int64_t P = a.E / 32, V = P % 4 == 0 ? 4 : P % 2 == 0 ? 2 : 1, W = 32 * V, gs = a.E / a.n_groups;
  if (a.softmax) return "softmax scores";
  if (a.E % 32 || P > 16 || (P > 8 && P % 2)) return fmt::format("E = {} is not 32 x (1..8, or even up to 16)", a.E);
  if (a.topk > 32) return fmt::format("topk = {} > 32", a.topk);
  if (a.topk_groups < a.n_groups && a.n_groups > 32) return fmt::format("n_groups = {} > 32", a.n_groups);
  if (a.topk_groups < a.n_groups && !(gs % V == 0 && W % gs == 0) && gs % W != 0)
    return fmt::format("groups of {} experts do not fit lanes of {} ({} experts a chunk)", gs, V, W);
  if (a.logits % (4 * V) || a.bias % (4 * V)) return fmt::format("logits or bias not {}-byte aligned", 4 * V);
  return {};
}

// The gate's arguments from a call (an OpContext, or an ApplyContext with a call).
template <typename Ctx>
GateArgs gate_args(const Ctx& c) {
  const auto& p = c.params();
  return GateArgs{address_of(c, "logits"), address_of(c, "bias"), address_of(c, "topk_ids"),
                  address_of(c, "topk_weights"), c.dim("T"), c.dim("E"), p.s("score") == "softmax",
                  p.i("n_groups"), p.i("topk_groups"), p.i("topk"), p.b("normalize"), p.f("routed_scale"), 0};
}

// "sm80.fast": the register fast path (hc_moe_gate_p<E/32>) where it takes the call.
bool gate_fast_applies(const ops::ApplyContext& c, std::string* why) {
  if (!c.has_call()) return true;
  const GateArgs a = gate_args(c);
  std::string misfit;
  if (a.n_groups < 1 || a.E < 1 || a.E % a.n_groups) misfit = "E is not divisible into n_groups groups";
  else misfit = gate_fast_misfit(a);
  if (misfit.empty()) return true;
  if (why) *why = misfit;
  return false;
}

// "sm80.fast" (fast = true) and "sm80.general": the same checks, then the kernel.
Status moe_gate(ops::OpContext& ctx, bool fast) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const auto& p = ctx.params();
  const int64_t T = ctx.dim("T"), E = ctx.dim("E");
  const int64_t G = p.i("n_groups"), TG = p.i("topk_groups"), K = p.i("topk");
  const float scale = float(p.f("routed_scale"));
  if (E < 1 || G < 1 || E % G != 0)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("moe_gate: E = {} is not divisible into n_groups = {} groups", E, G));
  if (TG < 1 || TG > G)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("moe_gate: topk_groups = {} is not in [1, n_groups = {}]", TG, G));
  if (K < 1 || K > TG * (E / G))
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("moe_gate: topk = {} is not in [1, {}] (topk_groups x E / n_groups)", K, TG * (E / G)));
  if (!std::isfinite(scale))
    return Error(HAL_INVALID_ARGUMENT, fmt::format("moe_gate: routed_scale = {} is not finite", scale));
  if (T == 0) return {};
  const ops::Tensor* bias = ctx.optional_tensor("bias");
  const bool softmax = p.s("score") == "softmax";
  GateArgs a{ctx.tensor("logits").address(), bias ? bias->address() : 0, ctx.tensor("topk_ids").address(),
             ctx.tensor("topk_weights").address(), T, E, softmax, G, TG, K, p.b("normalize"), double(scale), 0};
  // The register fast path (hc_moe_gate_p<E/32>, moe_routing.cu), chosen where it applies
  // (gate_fast_applies), else the general kernel.
  if (fast) {
    if (const std::string why = gate_fast_misfit(a); !why.empty())
      return Error(HAL_UNSUPPORTED, fmt::format("moe_gate: the fast path cannot run: {}", why));
    auto k = kernel(ctx, *dev, "moe_routing", fmt::format("hc_moe_gate_p{}", E / 32).c_str());
    if (!k) return k.error();
    return launch(ctx, *k, {uint32_t(ceil_div(T, 4))}, {128}, a);
  }
  const int64_t per_warp = (16 * E + 5 * G + 15) / 16 * 16;
  const int64_t limit = dev->max_shared_per_block ? dev->max_shared_per_block : 48 * 1024;
  const int64_t warps = std::min<int64_t>(4, std::min<int64_t>(48 * 1024, limit) / per_warp);
  if (warps < 1)
    return Error(HAL_UNSUPPORTED, fmt::format("moe_gate: E = {} experts need {} bytes of shared memory per token", E,
                                              per_warp));
  auto k = kernel(ctx, *dev, "moe_routing", "hc_moe_gate");
  if (!k) return k.error();
  a.per_warp_bytes = per_warp;
  return launch(ctx, *k, {uint32_t(ceil_div(T, warps))}, {uint32_t(32 * warps)}, a, uint32_t(warps * per_warp));
}

// ---- moe_permute ---------------------------------------------------------------------------
struct FusedPermuteArgs {
  PermutePlanArgs plan;
  uint64_t x, permuted;
  int64_t K, H;
};
struct ScatterArgs {
  uint64_t x, slot_to_row, permuted;
  int64_t T, K, H;
};

// The plan layouts, each an implementation ("sm80.fused", "sm80.spread", "sm80.one",
// "sm80.two"; see moe_permute below).
enum class PermutePlan { kFused, kSpread, kOne, kTwo };

// "sm80.fused": rows are written, H % 8 == 0, and there are local experts and slots.
bool permute_fused_applies(const ops::ApplyContext& c, std::string* why) {
  if (!c.has_call()) return true;
  std::string misfit;
  if (c.dim("EL") < 1) misfit = "no local experts";
  else if (c.dim("T") < 1 || c.dim("K") < 1) misfit = "no slots";
  else if (!c.params().b("write_permuted")) misfit = "write_permuted is false";
  else if (c.dim("H") % 8) misfit = fmt::format("H = {} is not a multiple of 8", c.dim("H"));
  if (misfit.empty()) return true;
  if (why) *why = misfit;
  return false;
}
// "sm80.spread": the plan spread over the SMs needs local experts.
bool permute_spread_applies(const ops::ApplyContext& c, std::string* why) {
  if (!c.has_call() || c.dim("EL") > 0) return true;
  if (why) *why = "no local experts";
  return false;
}

}  // namespace

// The plan: B blocks of W warps, each warp with a histogram of EL counters in shared memory;
// block b hands out the rows of slots [b * per_block, (b + 1) * per_block). With several blocks
// each also counts all T*K slots itself, which spares a workspace and a launch.
//   - spread (the fused kernels' layout and "sm80.spread"): about one block of 16 warps per SM,
//     per_block a multiple of K, so that a fused kernel's block then copies its own tokens'
//     rows: one launch, no scatter waiting for the whole plan; faster at 4096 and at 128
//     tokens (docs/PERFORMANCE.md, "moe_permute in one launch").
//   - else "sm80.two" (only when named): the earlier layout (up to 2048 slots one block of 32
//     warps, else blocks of ~1024 slots and 8 warps); "sm80.one" (the default without local
//     experts): the single-block plan.
Result<PermuteLayout> permute_layout(const ops::OpContext& ctx, const DeviceFacts& dev, bool spread, bool two) {
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), EL = ctx.dim("EL"), E = ctx.dim("E");
  const int64_t begin = ctx.params().i("expert_begin");
  const char* op = ctx.contract.op.c_str();
  if (begin < 0 || EL < 0 || begin + EL > E)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("{}: local experts [{}, {}) do not lie within [0, {})", op, begin, begin + EL, E));
  if (T * K > INT_MAX) return Error(HAL_OUT_OF_RANGE, fmt::format("{}: T * K = {} exceeds int32", op, T * K));
  const int64_t slots = T * K;
  const int64_t limit = std::min<int64_t>(dev.max_shared_per_block ? dev.max_shared_per_block : 48 * 1024, 96 * 1024);
  const int64_t some_slots = std::max<int64_t>(slots, 1);  // T * K = 0 still runs one plan block
  PermuteLayout l{1, 1, some_slots, 0};
  if (spread) {
    const int64_t unit = std::lcm<int64_t>(32, std::max<int64_t>(K, 1));  // whole tokens, whole warp groups of slots
    l.per_block = ceil_div(ceil_div(some_slots, std::max<int64_t>(1, dev.compute_units)), unit) * unit;
    l.B = ceil_div(some_slots, l.per_block);
  } else if (two && slots > 2048 && EL > 0) {
    l.B = std::min<int64_t>(128, ceil_div(slots, 1024));
    l.per_block = ceil_div(ceil_div(slots, l.B), 32) * 32;
  }
  const bool multi = l.B > 1;
  const int64_t counters = multi ? 3 * EL : EL;  // cnt (+ pre, tot with several blocks)
  // 16 warps in the spread layout, so that a block (about one per SM) has 16 warps copying
  // rows (the fused kernel's registers allow up to 896 threads); 32-warp blocks were slower than
  // 8-warp ones in the plan alone (docs/kernels/ptx.md).
  l.W = std::min<int64_t>(spread ? 16 : multi ? 8 : 32, (limit - 4 * (counters + 32)) / std::max<int64_t>(4 * EL, 1));
  if (l.W < 1) return Error(HAL_UNSUPPORTED, fmt::format("{}: {} local experts do not fit in shared memory", op, EL));
  if (l.B > INT_MAX) return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} plan blocks", op, l.B));
  l.shared = uint32_t(4 * (l.W * EL + counters + 32));
  return l;
}

PermutePlanArgs permute_plan_args(const ops::OpContext& ctx, const PermuteLayout& l) {
  return PermutePlanArgs{ctx.tensor("topk_ids").address(),    ctx.tensor("expert_counts").address(),
                         ctx.tensor("expert_offsets").address(), ctx.tensor("row_to_slot").address(),
                         ctx.tensor("slot_to_row").address(), ctx.tensor("num_rows").address(),
                         ctx.dim("T") * ctx.dim("K"),         ctx.dim("E"),
                         ctx.params().i("expert_begin"),      ctx.dim("EL"),
                         l.per_block};
}

namespace {

// kFused ("sm80.fused", the default where it applies): the spread plan and each block's row
// copies in one launch (hc_moe_permute_fused, where H % 8 == 0 and the rows are written).
// kSpread ("sm80.spread", the default without the fused kernel: write_permuted=false, H % 8 !=
// 0): the same plan layout, then the scatter where rows are written. kTwo / kOne: their plans,
// then hc_moe_permute_scatter, one block per token.
Status moe_permute(ops::OpContext& ctx, PermutePlan how) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H"), EL = ctx.dim("EL");
  const bool write = T > 0 && K > 0 && ctx.params().b("write_permuted");
  const bool spread = EL > 0 && (how == PermutePlan::kFused || how == PermutePlan::kSpread);
  const bool fused = how == PermutePlan::kFused;
  if (fused && !(spread && write && H % 8 == 0))
    return Error(HAL_UNSUPPORTED, "moe_permute: the fused plan needs local experts, rows to write and H % 8 == 0");
  auto layout = permute_layout(ctx, *dev, spread, how == PermutePlan::kTwo);
  if (!layout) return layout.error();
  auto plan = kernel(ctx, *dev, "moe_routing", fused ? "hc_moe_permute_fused" : "hc_moe_permute_plan");
  if (!plan) return plan.error();
  const PermutePlanArgs a = permute_plan_args(ctx, *layout);
  const Dim3 grid{uint32_t(layout->B)}, block{uint32_t(32 * layout->W)};
  if (fused) {
    FusedPermuteArgs f{a, ctx.tensor("x").address(), ctx.tensor("permuted").address(), K, H};
    return launch(ctx, *plan, grid, block, f, layout->shared);
  }
  HALCYON_TRY(launch(ctx, *plan, grid, block, a, layout->shared));
  // write_permuted = false: the caller reads the rows through row_to_slot (the gather GEMM).
  if (!write) return {};
  auto scatter = kernel(ctx, *dev, "moe_routing", "hc_moe_permute_scatter");
  if (!scatter) return scatter.error();
  ScatterArgs s{ctx.tensor("x").address(), a.slot_to_row, ctx.tensor("permuted").address(), T, K, H};
  return launch(ctx, *scatter, {uint32_t(T)}, {128}, s);
}

// ---- grouped GEMMs -------------------------------------------------------------------------
// An empty inner dimension: every output is 0.
Status zero_rows(ops::OpContext& ctx, int64_t bytes) {
  const ops::Tensor& out = ctx.tensor("out");
  return ctx.stream.fill<uint16_t>(out.buffer, out.offset, uint64_t(bytes), uint16_t(0));
}
// The grouped GEMM of a call (an OpContext, or an ApplyContext with a call): the SwiGLU one
// (a [R, H] x w_gate_up [EL, H, 2I]) or the down projection (a [R, I] x w [EL, I, H]).
template <typename Ctx>
GemmArgs grouped_args(const Ctx& c, int epilogue) {
  const bool swiglu = epilogue == kGemmSwiglu;
  const int64_t H = c.dim("H"), I = c.dim("I");
  return GemmArgs{address_of(c, "a"), address_of(c, swiglu ? "w_gate_up" : "w"), address_of(c, "expert_offsets"),
                  address_of(c, "out"), c.dim("R"), swiglu ? H : I, swiglu ? I : H, c.dim("EL")};
}
Status grouped_gemm(ops::OpContext& ctx, int epilogue, GemmKernel which) {
  const bool swiglu = epilogue == kGemmSwiglu;
  const GemmArgs g = grouped_args(ctx, epilogue);
  if (g.R == 0 || g.N == 0 || g.EL == 0) return {};
  if (g.K == 0) return zero_rows(ctx, g.R * g.N * 2);  // silu(0) * 0, or a sum of nothing
  return launch_gemm(ctx, epilogue, g, which, &ctx.tensor("a"), &ctx.tensor(swiglu ? "w_gate_up" : "w"));
}
template <int Epilogue, GemmKernel Which>
Status grouped_with(ops::OpContext& ctx) {
  return grouped_gemm(ctx, Epilogue, Which);
}

// Predicates of the Hopper grouped GEMMs. Without a call: what the device alone decides.
template <int Epilogue, GemmKernel Which>
bool tma_applies(const ops::ApplyContext& c, std::string* why) {
  std::string misfit;
  if (!c.has_call()) {
    if (!c.facts.has("tensor_map")) misfit = fmt::format("{} makes no tensor maps", c.facts.uri);
  } else {
    misfit = tma_misfit(c.facts, Epilogue, grouped_args(c, Epilogue), Which);
  }
  if (misfit.empty()) return true;
  if (why) *why = misfit;
  return false;
}
template <int Epilogue>
bool basic_applies(const ops::ApplyContext& c, std::string* why) {
  if (!c.has_call()) return true;
  const GemmArgs g = grouped_args(c, Epilogue);
  if (g.K % 8 == 0 && g.N % 8 == 0) return true;
  if (why) *why = fmt::format("K = {} or N = {} is not a multiple of 8 (the sm80 kernel's unaligned build runs it)", g.K, g.N);
  return false;
}
// The warp-specialized builds are fast only as the cubin ptxas made (the driver's JIT spills
// their 232-register consumers).
bool swapw_preferred(const ops::ApplyContext& c, std::string* why) {
  if (cubin_applies(c, kSm90.image)) return true;
  if (why) *why = "its cubin does not run here (or the run asks for the PTX), and JIT-compiled it spills";
  return false;
}
// The 256-thread swap-AB kernel: for the down projection above kTmaDeepRingRows rows per expert.
template <int Epilogue>
bool swap_preferred(const ops::ApplyContext& c, std::string* why) {
  if (Epilogue == kGemmSwiglu) {
    if (why) *why = "the row-tile kernel is faster for the SwiGLU GEMM";
    return false;
  }
  if (!c.has_call() || c.dim("R") > kTmaDeepRingRows * c.dim("EL")) return true;
  if (why) *why = fmt::format("experts average <= {} rows: the row-tile kernel with its deeper ring is faster", kTmaDeepRingRows);
  return false;
}

// ---- moe_grouped_gemm_swiglu_gather ----------------------------------------------------------
// The SwiGLU GEMM reading row r as x[row_to_slot[r] / topk]. "sm90.swapw": the warp-specialized
// swap-AB kernel whose producer warps gather the rows with cp.async
// (hc_moe_gemm_swiglu_gather_sm90swapw), the default on sm_90a where its cubin loads; "sm80":
// the portable mma.sync kernel with the same row source (gemm_sm80.cu), elsewhere or for rows
// that are not 16-byte aligned.
struct GatherGemmArgs {
  uint64_t x, b, offsets, out;
  int64_t R, K, N, EL;
  uint64_t row_to_slot;
  int64_t topk, T;
};
template <typename Ctx>
GatherGemmArgs gather_args(const Ctx& c) {
  return GatherGemmArgs{address_of(c, "x"),   address_of(c, "w_gate_up"), address_of(c, "expert_offsets"),
                        address_of(c, "out"), c.dim("R"), c.dim("H"), c.dim("I"), c.dim("EL"),
                        address_of(c, "row_to_slot"), c.params().i("topk"), c.dim("T")};
}
// The tile scan's scratch (32 ints for 16 warps), the tile map, then a row table per producer
// warp (gemm_sm90.cu, S_GATHER_WARPS; the weight warp leaves its table unused).
uint64_t gather_shared(int64_t EL) {
  return 1024 + kSwapRingBytes + uint64_t(32 + 2 * (EL + 1) + kSwapGatherWarps * kSwapTn) * 4;
}
std::string gather_misfit(const DeviceFacts& dev, const GatherGemmArgs& g) {
  const uint64_t shared = gather_shared(g.EL);
  if (!ptx::find(kSm90.image, "sm_90a")) return "its PTX image was not built";
  if (!dev.has("tensor_map")) return fmt::format("{} makes no tensor maps", dev.uri);
  if (g.K % 8 || g.N % 8 || g.x % 16 || g.b % 16 || g.out % 16)
    return fmt::format("rows are not 16-byte aligned (H = {}, I = {})", g.K, g.N);
  if (dev.max_shared_per_block && shared > dev.max_shared_per_block)
    return fmt::format("{} experts need {} bytes of shared memory, {} has {}", g.EL, shared, dev.uri,
                       dev.max_shared_per_block);
  if (g.T * g.topk > INT_MAX || g.K > INT_MAX) return fmt::format("T * topk = {} or H = {} exceeds int32", g.T * g.topk, g.K);
  return {};
}
bool gather_swapw_applies(const ops::ApplyContext& c, std::string* why) {
  std::string misfit;
  if (!c.has_call()) {
    if (!c.facts.has("tensor_map")) misfit = fmt::format("{} makes no tensor maps", c.facts.uri);
  } else {
    misfit = gather_misfit(c.facts, gather_args(c));
  }
  if (misfit.empty()) return true;
  if (why) *why = misfit;
  return false;
}
// Whether the gather path of the MoE layer pays with this kernel (moe_gather_pays): it gathers
// the token rows with cp.async (no TMA row gather before Blackwell), and whatever the memory it
// streams at most ~20 GB/s of weights per SM (~1.6 us per 32 KB k-step: 15 GB in 5.3-5.6 ms on
// 132 SMs of an H100 and of an H200), while the GEMM on permuted rows streams them at ~80% of the
// memory's peak. So it pays where the peak is low per SM: faster on an H100 (3.35 TB/s, 25 GB/s
// per SM), slower on an H200 (4.81 TB/s, 37 GB/s per SM) (docs/PERFORMANCE.md, "the gather path
// on the H100"). Break-even lies near 26 GB/s
// per SM (20 / 0.8, plus the copy's ~4% of the bytes). The portable gather kernel ("sm80") has
// not been measured against the copy: it makes no claim.
bool gather_swapw_pays(const ops::ApplyContext& c, std::string* why) {
  const uint64_t bw = c.facts.memory_bytes_per_s;
  const uint32_t sms = c.facts.compute_units;
  if (!bw || !sms) {
    if (why) *why = "the device's peak memory bandwidth or SM count is unknown";
    return false;
  }
  if (double(bw) / sms <= 28e9) return true;
  if (why) *why = fmt::format("{:.1f} GB/s of peak memory bandwidth per SM > 28: the permuted copy is faster", double(bw) / sms / 1e9);
  return false;
}

Status swiglu_gather(ops::OpContext& ctx, bool swapw) {
  const GatherGemmArgs g = gather_args(ctx);
  const int64_t R = g.R, H = g.K, I = g.N, EL = g.EL;
  if (g.topk < 1)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: topk = {} is not positive", ctx.contract.op, g.topk));
  if (R == 0 || I == 0 || EL == 0) return {};
  if (H == 0) return zero_rows(ctx, R * I * 2);  // silu(0) * 0
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const int64_t n_tiles = gemm_n_tiles(kGemmSwiglu, I, kSwapBn);
  if ((ceil_div(R, kSwapTn) + EL) * n_tiles > INT_MAX || R > INT_MAX)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} rows x {} columns is too large a problem for int tile numbers",
                                               ctx.contract.op, R, I));
  if (swapw) {
    if (std::string why = gather_misfit(*dev, g); !why.empty())
      return Error(HAL_UNSUPPORTED, fmt::format("{}: the TMA kernel cannot run: {}", ctx.contract.op, why));
    auto tb = bf16_map(ctx, ctx.tensor("w_gate_up"), {uint64_t(2 * I), uint64_t(H), uint64_t(EL)});
    if (!tb) return tb.error();
    auto k = kernel(ctx, *dev, kSm90.image, "hc_moe_gemm_swiglu_gather_sm90swapw", CodeFrom::kCubinIfExact);
    if (!k) return k.error();
    const int64_t grid = std::min<int64_t>((ceil_div(R, kSwapTn) + EL) * n_tiles, dev->compute_units);
    return launch_packed(ctx, *k, {uint32_t(grid)}, {uint32_t(kSwapGatherThreads)}, uint32_t(gather_shared(EL)),
                         [&](ArgPack& a) {
                           a.value(*tb).value(g.x).value(g.row_to_slot).value(g.offsets).value(g.out).value(g.R);
                           a.value(g.K).value(g.N).value(g.EL).value(g.topk).value(g.T);
                           trace_args(ctx, a);
                         });
  }
  const bool aligned = H % 8 == 0 && I % 8 == 0;
  return launch_tiled(ctx, *dev, aligned ? kSm80 : kSm80Unaligned,
                      aligned ? "hc_moe_gemm_swiglu_gather_sm80" : "hc_moe_gemm_swiglu_gather_sm80_u", kGemmSwiglu, R,
                      I, EL, true, g);
}

// ---- moe_combine ---------------------------------------------------------------------------
struct CombineArgs {
  uint64_t expert_out, weights, slot_to_row, out;
  int64_t R, T, K, H;
};
Status moe_combine(ops::OpContext& ctx) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const int64_t R = ctx.dim("R"), T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H");
  if (T == 0 || H == 0) return {};
  auto k = kernel(ctx, *dev, "moe_routing", "hc_moe_combine");
  if (!k) return k.error();
  CombineArgs a{ctx.tensor("expert_out").address(), ctx.tensor("topk_weights").address(),
                ctx.tensor("slot_to_row").address(), ctx.tensor("out").address(), R, T, K, H};
  // 256 threads a token (H = 7168: 3-4 chunks of 8 columns each): faster than 128 or 512 on
  // the H200, level on the H100 (docs/PERFORMANCE.md, "combine with 256 threads").
  return launch(ctx, *k, {uint32_t(T)}, {256}, a);
}

// The implementations. Names say the target and the variant; see docs/kernels/ptx.md.
// An implementation whose kernel honours RunOptions::sm_trace (the swap-AB kernels).
ops::OpImpl traced(ops::OpImpl i) {
  i.records_sm = true;
  return i;
}

ops::OpImpl impl(const char* op, const char* target, int priority, ops::OpImplFn fn, const char* name,
                 const char* summary, ops::OpPredicate applies = nullptr, ops::OpPredicate preferred = nullptr,
                 bool automatic = true, ops::OpPredicate fused_pays = nullptr) {
  return ops::OpImpl{op,   HAL_MODULE_PTX, target,    "",         priority,   fn, name, applies, preferred,
                     automatic, fused_pays, summary};
}

ops::RegisterOpImpl r1(impl("moe_gate", "sm_80", 20, [](ops::OpContext& c) { return moe_gate(c, true); }, "sm80.fast",
                            "register fast path (sigmoid; E = 32 x P; topk <= 32)", gate_fast_applies));
ops::RegisterOpImpl r2(impl("moe_gate", "sm_80", 10, [](ops::OpContext& c) { return moe_gate(c, false); },
                            "sm80.general", "one warp per token, scores in shared memory"));
ops::RegisterOpImpl r3(impl("moe_permute", "sm_80", 30, [](ops::OpContext& c) { return moe_permute(c, PermutePlan::kFused); },
                            "sm80.fused", "plan blocks that copy their own tokens' rows: one launch",
                            permute_fused_applies));
ops::RegisterOpImpl r4(impl("moe_permute", "sm_80", 20, [](ops::OpContext& c) { return moe_permute(c, PermutePlan::kSpread); },
                            "sm80.spread", "plan blocks spread over the SMs, then the scatter", permute_spread_applies));
ops::RegisterOpImpl r5(impl("moe_permute", "sm_80", 10, [](ops::OpContext& c) { return moe_permute(c, PermutePlan::kOne); },
                            "sm80.one", "a single-block plan, then the scatter"));
ops::RegisterOpImpl r6(impl("moe_permute", "sm_80", 5, [](ops::OpContext& c) { return moe_permute(c, PermutePlan::kTwo); },
                            "sm80.two", "the earlier layout (32-warp block up to 2048 slots, else 8-warp blocks), then the scatter",
                            nullptr, nullptr, false));
ops::RegisterOpImpl r7(impl("moe_grouped_gemm_swiglu", "sm_80", 10, grouped_with<kGemmSwiglu, GemmKernel::kSm80>, "sm80",
                            "mma.sync, cp.async (any NVIDIA GPU from sm_80)"));
ops::RegisterOpImpl r8(impl("moe_grouped_gemm", "sm_80", 10, grouped_with<kGemmBf16, GemmKernel::kSm80>, "sm80",
                            "mma.sync, cp.async (any NVIDIA GPU from sm_80)"));
ops::RegisterOpImpl r9(impl("moe_combine", "sm_80", 10, moe_combine, "sm80", "256 threads a token"));
ops::RegisterOpImpl r10(impl("moe_grouped_gemm_swiglu_gather", "sm_80", 10, [](ops::OpContext& c) { return swiglu_gather(c, false); },
                             "sm80", "mma.sync reading rows through row_to_slot"));
#ifdef HALCYON_PTX_HAVE_SM90_GEMM
ops::RegisterOpImpl r11(traced(impl("moe_grouped_gemm_swiglu", "sm_90a", 40, grouped_with<kGemmSwiglu, GemmKernel::kSwapWs>,
                             "sm90.swapw", "wgmma swap-AB, warp-specialized (TMA; its cubin)",
                             tma_applies<kGemmSwiglu, GemmKernel::kSwapWs>, swapw_preferred)));
ops::RegisterOpImpl r12(traced(impl("moe_grouped_gemm_swiglu", "sm_90a", 30, grouped_with<kGemmSwiglu, GemmKernel::kSwap>,
                             "sm90.swap", "wgmma swap-AB, 256 threads (TMA)", tma_applies<kGemmSwiglu, GemmKernel::kSwap>,
                             swap_preferred<kGemmSwiglu>)));
ops::RegisterOpImpl r13(impl("moe_grouped_gemm_swiglu", "sm_90a", 20, grouped_with<kGemmSwiglu, GemmKernel::kTma>, "sm90.tma",
                             "wgmma row tiles of 256 (TMA; 5-slot weight ring at <= 64 rows per expert)",
                             tma_applies<kGemmSwiglu, GemmKernel::kTma>));
ops::RegisterOpImpl r14(impl("moe_grouped_gemm_swiglu", "sm_90a", 15, grouped_with<kGemmSwiglu, GemmKernel::kSm90Basic>,
                             "sm90.basic", "wgmma, cp.async", basic_applies<kGemmSwiglu>));
ops::RegisterOpImpl r15(traced(impl("moe_grouped_gemm", "sm_90a", 40, grouped_with<kGemmBf16, GemmKernel::kSwapWs>, "sm90.swapw",
                             "wgmma swap-AB, warp-specialized (TMA; its cubin)", tma_applies<kGemmBf16, GemmKernel::kSwapWs>,
                             swapw_preferred)));
ops::RegisterOpImpl r16(traced(impl("moe_grouped_gemm", "sm_90a", 30, grouped_with<kGemmBf16, GemmKernel::kSwap>, "sm90.swap",
                             "wgmma swap-AB, 256 threads (TMA)", tma_applies<kGemmBf16, GemmKernel::kSwap>,
                             swap_preferred<kGemmBf16>)));
ops::RegisterOpImpl r17(impl("moe_grouped_gemm", "sm_90a", 20, grouped_with<kGemmBf16, GemmKernel::kTma>, "sm90.tma",
                             "wgmma row tiles of 256 (TMA; 5-slot weight ring at <= 64 rows per expert)",
                             tma_applies<kGemmBf16, GemmKernel::kTma>));
ops::RegisterOpImpl r18(impl("moe_grouped_gemm", "sm_90a", 15, grouped_with<kGemmBf16, GemmKernel::kSm90Basic>, "sm90.basic",
                             "wgmma, cp.async", basic_applies<kGemmBf16>));
ops::RegisterOpImpl r19(traced(impl("moe_grouped_gemm_swiglu_gather", "sm_90a", 20,
                             [](ops::OpContext& c) { return swiglu_gather(c, true); }, "sm90.swapw",
                             "wgmma swap-AB, producer warps gather rows with cp.async (its cubin)", gather_swapw_applies,
                             swapw_preferred, true, gather_swapw_pays)));
#endif

}  // namespace
}  // namespace halcyon::ptxop
