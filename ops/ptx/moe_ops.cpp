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

// Which Hopper kernel runs the grouped GEMMs: HALCYON_PTX_SM90_GEMM=basic keeps the cp.async
// kernel even where a TMA one could run; =tma requires the row-tile TMA kernel, =swap the
// 256-thread swap-AB TMA kernel and =swapw its warp-specialized build (an error says why one
// cannot run), so that tests know which one they checked. Unset: the warp-specialized swap-AB
// kernel for both GEMMs wherever its cubin loads (a device of exactly sm_90a); measured
// 2026-11-23 at 4096 tokens in one call per machine (docs/PERFORMANCE.md): H200 experts
// 5.95-6.08 ms vs 7.30-7.79 ms with the row tiles (SwiGLU 3.82-3.96 vs 4.54-5.08 ms), H100
// 8.33 vs 8.67-8.69 ms, and level or faster at 128 and 512 tokens. The driver's JIT spills its
// 232-register consumers, so without the cubin the earlier choice stands: the 256-thread
// swap-AB kernel for the down projection above kTmaDeepRingRows rows per expert, the row-tile
// kernel otherwise.
enum class Sm90Gemm { kAuto, kBasic, kTma, kSwap, kSwapWs };
Sm90Gemm sm90_gemm() {
  const char* v = std::getenv("HALCYON_PTX_SM90_GEMM");
  if (v && std::string_view(v) == "basic") return Sm90Gemm::kBasic;
  if (v && std::string_view(v) == "tma") return Sm90Gemm::kTma;
  if (v && std::string_view(v) == "swap") return Sm90Gemm::kSwap;
  if (v && std::string_view(v) == "swapw") return Sm90Gemm::kSwapWs;
  return Sm90Gemm::kAuto;
}

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
  hal_tensor_map_desc d{};
  d.struct_size = sizeof d;
  d.buffer = t.buffer.get();
  d.offset = t.offset;
  d.dtype = HAL_TENSOR_MAP_BF16;
  d.rank = uint32_t(dims.size());
  uint64_t stride = 2;
  uint32_t i = 0;
  for (uint64_t n : dims) {
    d.dims[i] = n;
    d.strides[i] = stride;
    d.box[i] = i == 0 ? 64 : i == 1 ? rows : 1;
    stride *= n;
    ++i;
  }
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = HAL_TENSOR_MAP_L2_256B;
  return ctx.device.encode_tensor_map(d);
}

// Launches the TMA kernel, or returns false in *ran when it does not apply here (no tensor
// maps on this device, rows not 16-byte aligned, too many experts for its shared memory).
Status launch_gemm_tma(ops::OpContext& ctx, const DeviceFacts& dev, int epilogue, const GemmArgs& g,
                       const ops::Tensor& a, const ops::Tensor& b, bool* ran) {
  *ran = false;
  const Sm90Gemm mode = sm90_gemm();
  if (mode == Sm90Gemm::kBasic) return {};
  const int64_t ldb = epilogue == kGemmSwiglu ? 2 * g.N : g.N;
  const bool deep = g.R <= kTmaDeepRingRows * g.EL;
  // The same tiles and rings as swap-AB, with a producer warpgroup.
  const bool swap_ws = mode == Sm90Gemm::kSwapWs || (mode == Sm90Gemm::kAuto && cubin_applies(dev, "moe_gemm_sm90"));
  const bool swap = swap_ws || mode == Sm90Gemm::kSwap || (mode == Sm90Gemm::kAuto && !deep && epilogue == kGemmBf16);
  const uint64_t shared =
      1024 + (swap ? kSwapRingBytes : tma_ring_bytes(deep ? 5 : 4)) + uint64_t(16 + 2 * (g.EL + 1)) * 4;
  std::string why;
  if (epilogue == kGemmF32 || !g.offsets) why = "not a grouped bf16 GEMM";
  else if (g.K % 8 || ldb % 8 || g.N % 8 || g.a % 16 || g.b % 16 || g.out % 16)
    why = fmt::format("rows are not 16-byte aligned (K = {}, weight row {} elements)", g.K, ldb);
  else if (dev.max_shared_per_block && shared > dev.max_shared_per_block)
    why = fmt::format("{} experts need {} bytes of shared memory, {} has {}", g.EL, shared, dev.uri,
                      dev.max_shared_per_block);
  if (!why.empty()) {
    if (mode != Sm90Gemm::kAuto)
      return Error(HAL_UNSUPPORTED, fmt::format("{}: the TMA kernel cannot run: {}", ctx.contract.op, why));
    return {};
  }
  auto ta = bf16_map(ctx, a, {uint64_t(g.K), uint64_t(g.R)});
  // No tensor maps on this device: the cp.async kernel (unless the TMA one was required).
  if (!ta && ta.error().status() == HAL_UNSUPPORTED && mode == Sm90Gemm::kAuto) return {};
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
  *ran = true;
  const int threads = swap_ws ? kSwapWsThreads : swap ? kSwapThreads : kTmaThreads;
  return launch_packed(ctx, *k, {uint32_t(grid)}, {uint32_t(threads)}, uint32_t(shared),
                       [&](ArgPack& a) {
                         a.value(*ta).value(*ta16).value(*tb).value(g.offsets).value(g.out).value(g.R).value(g.K);
                         a.value(g.N).value(g.EL);
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

Status launch_gemm(ops::OpContext& ctx, int epilogue, const GemmArgs& g, bool hopper, const ops::Tensor* a,
                   const ops::Tensor* b) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const bool aligned = g.K % 8 == 0 && g.N % 8 == 0;
  hopper = hopper && ptx::find(kSm90.image, "sm_90a") != nullptr;
  if (hopper && a && b) {
    bool ran = false;
    HALCYON_TRY(launch_gemm_tma(ctx, *dev, epilogue, g, *a, *b, &ran));
    if (ran) return {};
  }
  const GemmConfig& c = !aligned ? kSm80Unaligned : !hopper ? kSm80 : kSm90;
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

Status moe_gate(ops::OpContext& ctx) {
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
  // The register fast path (hc_moe_gate_p<E/32>, moe_routing.cu) where it applies, else the
  // general kernel. HALCYON_PTX_GATE=general keeps the general kernel; =fast requires the fast
  // path (an error says why it cannot run), so that tests know which kernel they checked.
  const char* mode = std::getenv("HALCYON_PTX_GATE");
  const bool want_general = mode && std::string_view(mode) == "general";
  const bool want_fast = mode && std::string_view(mode) == "fast";
  if (!want_general) {
    const std::string why = gate_fast_misfit(a);
    if (why.empty()) {
      auto k = kernel(ctx, *dev, "moe_routing", fmt::format("hc_moe_gate_p{}", E / 32).c_str());
      if (!k) return k.error();
      return launch(ctx, *k, {uint32_t(ceil_div(T, 4))}, {128}, a);
    }
    if (want_fast) return Error(HAL_UNSUPPORTED, fmt::format("moe_gate: the fast path cannot run: {}", why));
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
struct PlanArgs {
  uint64_t ids, counts, offsets, row_to_slot, slot_to_row, num_rows;
  int64_t slots, E, expert_begin, EL, per_block;
};
struct FusedPermuteArgs {
  PlanArgs plan;
  uint64_t x, permuted;
  int64_t K, H;
};
struct ScatterArgs {
  uint64_t x, slot_to_row, permuted;
  int64_t T, K, H;
};

Status moe_permute(ops::OpContext& ctx) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), H = ctx.dim("H"), EL = ctx.dim("EL");
  const int64_t E = ctx.dim("E");
  const int64_t begin = ctx.params().i("expert_begin");
  if (begin < 0 || EL < 0 || begin + EL > E)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("moe_permute: local experts [{}, {}) do not lie within [0, {})", begin, begin + EL, E));
  if (T * K > INT_MAX) return Error(HAL_OUT_OF_RANGE, fmt::format("moe_permute: T * K = {} exceeds int32", T * K));
  // The plan: B blocks of W warps, each warp with a histogram of EL counters in shared memory;
  // block b hands out the rows of slots [b * per_block, (b + 1) * per_block). With several blocks
  // each also counts all T*K slots itself, which spares a workspace and a launch.
  //   - default: about one block of 16 warps per SM, per_block a multiple of K, so that each
  //     block then copies its own tokens' rows (hc_moe_permute_fused, where H % 8 == 0 and the
  //     rows are written): one launch, no scatter waiting for the whole plan. H100, 2026-11-23:
  //     213.7 us instead of 218 at 4096 tokens, 20.6 instead of 33.9 at 128.
  //   - HALCYON_PTX_PERMUTE_PLAN=two: the earlier layout (up to 2048 slots one block of 32 warps,
  //     else blocks of ~1024 slots and 8 warps), then hc_moe_permute_scatter, one block per
  //     token; =one: the single-block plan, then the scatter (both for comparison and tests).
  // Without the fused kernel (write_permuted=false, H % 8 != 0) the plan runs in the default
  // layout and the scatter follows where rows are written.
  const int64_t slots = T * K;
  const int64_t limit = std::min<int64_t>(dev->max_shared_per_block ? dev->max_shared_per_block : 48 * 1024, 96 * 1024);
  const char* how_env = std::getenv("HALCYON_PTX_PERMUTE_PLAN");
  const std::string_view how = how_env ? how_env : "";
  const bool write = T > 0 && K > 0 && ctx.params().b("write_permuted");
  const bool spread = EL > 0 && how != "one" && how != "two";
  const bool fused = spread && write && H % 8 == 0;
  const int64_t some_slots = std::max<int64_t>(slots, 1);  // T * K = 0 still runs one plan block
  int64_t B = 1, per_block = some_slots;
  if (spread) {
    const int64_t unit = std::lcm<int64_t>(32, std::max<int64_t>(K, 1));  // whole tokens, whole warp groups of slots
    per_block = ceil_div(ceil_div(some_slots, std::max<int64_t>(1, dev->compute_units)), unit) * unit;
    B = ceil_div(some_slots, per_block);
  } else if (how == "two" && slots > 2048 && EL > 0) {
    B = std::min<int64_t>(128, ceil_div(slots, 1024));
    per_block = ceil_div(ceil_div(slots, B), 32) * 32;
  }
  const bool multi = B > 1;
  const int64_t counters = multi ? 3 * EL : EL;  // cnt (+ pre, tot with several blocks)
  // 16 warps in the default layout, so that a block (about one per SM) has 16 warps copying
  // rows (the fused kernel's registers allow up to 896 threads); 32-warp blocks measured ~10 us
  // slower than 8-warp ones in the plan alone (H100, 2026-11-23).
  const int64_t W = std::min<int64_t>(spread ? 16 : multi ? 8 : 32,
                                      (limit - 4 * (counters + 32)) / std::max<int64_t>(4 * EL, 1));
  if (W < 1)
    return Error(HAL_UNSUPPORTED, fmt::format("moe_permute: {} local experts do not fit in shared memory", EL));
  if (B > INT_MAX) return Error(HAL_OUT_OF_RANGE, fmt::format("moe_permute: {} plan blocks", B));
  auto plan = kernel(ctx, *dev, "moe_routing", fused ? "hc_moe_permute_fused" : "hc_moe_permute_plan");
  if (!plan) return plan.error();
  PlanArgs a{ctx.tensor("topk_ids").address(),    ctx.tensor("expert_counts").address(),
             ctx.tensor("expert_offsets").address(), ctx.tensor("row_to_slot").address(),
             ctx.tensor("slot_to_row").address(), ctx.tensor("num_rows").address(),
             slots, E, begin, EL, per_block};
  const uint32_t shared = uint32_t(4 * (W * EL + counters + 32));
  if (fused) {
    FusedPermuteArgs f{a, ctx.tensor("x").address(), ctx.tensor("permuted").address(), K, H};
    return launch(ctx, *plan, {uint32_t(B)}, {uint32_t(32 * W)}, f, shared);
  }
  HALCYON_TRY(launch(ctx, *plan, {uint32_t(B)}, {uint32_t(32 * W)}, a, shared));
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
Status grouped_swiglu(ops::OpContext& ctx, bool hopper) {
  const int64_t R = ctx.dim("R"), H = ctx.dim("H"), I = ctx.dim("I"), EL = ctx.dim("EL");
  if (R == 0 || I == 0 || EL == 0) return {};
  if (H == 0) return zero_rows(ctx, R * I * 2);  // silu(0) * 0
  GemmArgs g{ctx.tensor("a").address(), ctx.tensor("w_gate_up").address(), ctx.tensor("expert_offsets").address(),
             ctx.tensor("out").address(), R, H, I, EL};
  return launch_gemm(ctx, kGemmSwiglu, g, hopper, &ctx.tensor("a"), &ctx.tensor("w_gate_up"));
}
Status grouped_down(ops::OpContext& ctx, bool hopper) {
  const int64_t R = ctx.dim("R"), H = ctx.dim("H"), I = ctx.dim("I"), EL = ctx.dim("EL");
  if (R == 0 || H == 0 || EL == 0) return {};
  if (I == 0) return zero_rows(ctx, R * H * 2);
  GemmArgs g{ctx.tensor("a").address(), ctx.tensor("w").address(), ctx.tensor("expert_offsets").address(),
             ctx.tensor("out").address(), R, I, H, EL};
  return launch_gemm(ctx, kGemmBf16, g, hopper, &ctx.tensor("a"), &ctx.tensor("w"));
}
Status swiglu_sm80(ops::OpContext& ctx) { return grouped_swiglu(ctx, false); }
Status down_sm80(ops::OpContext& ctx) { return grouped_down(ctx, false); }

// ---- moe_grouped_gemm_swiglu_gather ----------------------------------------------------------
// The SwiGLU GEMM reading row r as x[row_to_slot[r] / topk]. On sm_90a where its cubin loads:
// the warp-specialized swap-AB kernel whose producer warps gather the rows with cp.async
// (hc_moe_gemm_swiglu_gather_sm90swapw); elsewhere, or for rows that are not 16-byte aligned,
// the portable mma.sync kernel with the same row source (gemm_sm80.cu). HALCYON_PTX_SM90_GEMM
// =swapw requires the former, =basic keeps the latter (tests check both).
struct GatherGemmArgs {
  uint64_t x, b, offsets, out;
  int64_t R, K, N, EL;
  uint64_t row_to_slot;
  int64_t topk, T;
};
Status swiglu_gather(ops::OpContext& ctx, bool hopper) {
  const int64_t R = ctx.dim("R"), T = ctx.dim("T"), H = ctx.dim("H"), I = ctx.dim("I"), EL = ctx.dim("EL");
  const int64_t topk = ctx.params().i("topk");
  if (topk < 1)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: topk = {} is not positive", ctx.contract.op, topk));
  if (R == 0 || I == 0 || EL == 0) return {};
  if (H == 0) return zero_rows(ctx, R * I * 2);  // silu(0) * 0
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const ops::Tensor &x = ctx.tensor("x"), &w = ctx.tensor("w_gate_up");
  const GatherGemmArgs g{x.address(), w.address(), ctx.tensor("expert_offsets").address(),
                         ctx.tensor("out").address(), R, H, I, EL, ctx.tensor("row_to_slot").address(), topk, T};
  const int64_t n_tiles = gemm_n_tiles(kGemmSwiglu, I, kSwapBn);
  if ((ceil_div(R, kSwapTn) + EL) * n_tiles > INT_MAX || R > INT_MAX)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} rows x {} columns is too large a problem for int tile numbers",
                                               ctx.contract.op, R, I));
  const Sm90Gemm mode = sm90_gemm();
  hopper = hopper && ptx::find(kSm90.image, "sm_90a") != nullptr;
  if (hopper && mode != Sm90Gemm::kBasic && (mode == Sm90Gemm::kSwapWs || cubin_applies(*dev, kSm90.image))) {
    // The tile scan's scratch (32 ints for 16 warps), the tile map, then a row table per
    // producer warp (gemm_sm90.cu, S_GATHER_WARPS; the weight warp leaves its table unused).
    const uint64_t shared = 1024 + kSwapRingBytes + uint64_t(32 + 2 * (EL + 1) + kSwapGatherWarps * kSwapTn) * 4;
    std::string why;
    if (H % 8 || I % 8 || g.x % 16 || g.b % 16 || g.out % 16)
      why = fmt::format("rows are not 16-byte aligned (H = {}, I = {})", H, I);
    else if (dev->max_shared_per_block && shared > dev->max_shared_per_block)
      why = fmt::format("{} experts need {} bytes of shared memory, {} has {}", EL, shared, dev->uri,
                        dev->max_shared_per_block);
    else if (T * topk > INT_MAX || H > INT_MAX)
      why = fmt::format("T * topk = {} or H = {} exceeds int32", T * topk, H);
    Result<TensorMap> tb = Error(HAL_UNSUPPORTED, "");
    if (why.empty()) {
      tb = bf16_map(ctx, w, {uint64_t(2 * I), uint64_t(H), uint64_t(EL)});
      if (!tb && tb.error().status() != HAL_UNSUPPORTED) return tb.error();
      if (!tb) why = fmt::format("{} makes no tensor maps", dev->uri);
    }
    if (why.empty()) {
      auto k = kernel(ctx, *dev, kSm90.image, "hc_moe_gemm_swiglu_gather_sm90swapw", CodeFrom::kCubinIfExact);
      if (!k) return k.error();
      const int64_t grid = std::min<int64_t>((ceil_div(R, kSwapTn) + EL) * n_tiles, dev->compute_units);
      return launch_packed(ctx, *k, {uint32_t(grid)}, {uint32_t(kSwapGatherThreads)}, uint32_t(shared), [&](ArgPack& a) {
        a.value(*tb).value(g.x).value(g.row_to_slot).value(g.offsets).value(g.out).value(g.R).value(g.K);
        a.value(g.N).value(g.EL).value(g.topk).value(g.T);
      });
    }
    if (mode == Sm90Gemm::kSwapWs)
      return Error(HAL_UNSUPPORTED, fmt::format("{}: the TMA kernel cannot run: {}", ctx.contract.op, why));
  }
  const bool aligned = H % 8 == 0 && I % 8 == 0;
  return launch_tiled(ctx, *dev, aligned ? kSm80 : kSm80Unaligned,
                      aligned ? "hc_moe_gemm_swiglu_gather_sm80" : "hc_moe_gemm_swiglu_gather_sm80_u", kGemmSwiglu, R,
                      I, EL, true, g);
}
Status swiglu_gather_sm80(ops::OpContext& ctx) { return swiglu_gather(ctx, false); }

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
  // 256 threads a token (H = 7168: 3-4 chunks of 8 columns each): the H200 ran the combine in
  // 142.3-142.8 us instead of 146.4-146.9 with 128 threads (512: 148.4-149.2), the H100 level
  // (188.4-188.8 us for all three), 2026-11-23 ~21:53 UTC, same calls.
  return launch(ctx, *k, {uint32_t(T)}, {256}, a);
}

ops::RegisterOpImpl r1({"moe_gate", HAL_MODULE_PTX, "sm_80", "", 10, moe_gate});
ops::RegisterOpImpl r2({"moe_permute", HAL_MODULE_PTX, "sm_80", "", 10, moe_permute});
ops::RegisterOpImpl r3({"moe_grouped_gemm_swiglu", HAL_MODULE_PTX, "sm_80", "", 10, swiglu_sm80});
ops::RegisterOpImpl r4({"moe_grouped_gemm", HAL_MODULE_PTX, "sm_80", "", 10, down_sm80});
ops::RegisterOpImpl r5({"moe_combine", HAL_MODULE_PTX, "sm_80", "", 10, moe_combine});
ops::RegisterOpImpl r8({"moe_grouped_gemm_swiglu_gather", HAL_MODULE_PTX, "sm_80", "", 10, swiglu_gather_sm80});
#ifdef HALCYON_PTX_HAVE_SM90_GEMM
Status swiglu_sm90(ops::OpContext& ctx) { return grouped_swiglu(ctx, true); }
Status down_sm90(ops::OpContext& ctx) { return grouped_down(ctx, true); }
ops::RegisterOpImpl r6({"moe_grouped_gemm_swiglu", HAL_MODULE_PTX, "sm_90a", "", 20, swiglu_sm90});
ops::RegisterOpImpl r7({"moe_grouped_gemm", HAL_MODULE_PTX, "sm_90a", "", 20, down_sm90});
Status swiglu_gather_sm90(ops::OpContext& ctx) { return swiglu_gather(ctx, true); }
ops::RegisterOpImpl r9({"moe_grouped_gemm_swiglu_gather", HAL_MODULE_PTX, "sm_90a", "", 20, swiglu_gather_sm90});
#endif

}  // namespace
}  // namespace halcyon::ptxop
