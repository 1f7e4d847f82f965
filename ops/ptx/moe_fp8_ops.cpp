// PTX implementations of the FP8 MoE operators (kernels/ptx/moe/gemm_sm90_fp8.cu,
// permute_fp8.cu): e4m3 quantization, the quantizing permute and the block-scaled grouped GEMMs
// on Hopper (sm_90a: wgmma with e4m3 operands and the tensor memory accelerator). Before sm_90a
// there are no FP8 wgmma tensor cores (sm_89's FP8 mma.sync is not implemented here):
// "sm80.none" implementations say so through their predicate, so that listings,
// hal_device_can_run-based choices and run_op give that reason.
#include "ptx_launch.hpp"

#include <algorithm>
#include <climits>
#include <string>

namespace halcyon::ptxop {
namespace {

constexpr const char* kImage = "moe_gemm_sm90_fp8";
// gemm_sm90_fp8.cu's builds: tiles of up to `tn` tokens x 64 * boxes() weight rows, a ring of
// `slots` slots of tn token rows + the weight boxes (two mbarriers a slot) and tn f32 token
// scales. Tall tiles (tn 256): 2 boxes that both consumers share, each taking part of the tokens.
struct Fp8Build {
  int slots, tn;
  const char* suffix;  // of the entry names
  bool staged = false;  // the staged epilogue (tall builds: output rows by tensor stores, a map of `out`)
  // Clusters of 2 CTAs on n-tiles 2j and 2j + 1 of one expert's m-tile, the token rows multicast
  // into both (tall builds; the kernel's __cluster_dims__): needs an even n-tile count.
  bool cluster = false;
  // The quantizing epilogue (moe_grouped_gemm_fp8_swiglu_quant; clustered SwiGLU build): e4m3 rows
  // of h staged in shared memory, the cluster's two CTAs exchanging their tokens' maxima.
  bool quant = false;
  constexpr int64_t boxes() const { return tall() ? 2 : 4; }
  constexpr int64_t bn() const { return 64 * boxes(); }  // weight rows of a tile (SwiGLU: gate + up)
  // Tall builds keep a_scale x w_scale per box in the scale ring (f32 [2][tn] a slot) and need
  // every 64-row weight box inside one 128-row scale block.
  constexpr bool tall() const { return tn > 128; }
  constexpr int64_t ring_scales() const { return tall() ? 2 * tn : tn; }
};
constexpr Fp8Build kSwapw{4, 64, "sm90swapw"}, kSwapw5{5, 64, "sm90swapw5"}, kWide{4, 128, "sm90wide"},
    kTall{4, 256, "sm90tall"}, kTallPf{4, 256, "sm90tallpf"}, kTallS{3, 256, "sm90talls", true},
    kTallMc{4, 256, "sm90tallmc", false, true}, kTallSMc{3, 256, "sm90tallsmc", true, true},
    kTallMcQ{4, 256, "sm90tallmc", false, true, true};
constexpr int64_t kThreads = 384;
// The kernel's layout (grouped_gemm_fp8): 1 KiB of alignment, the slots, their barriers and scale
// rings, the tile map; staged builds then a staging buffer of 256 rows of the tile's outputs
// (bf16) + 16 bytes, from a 128-byte boundary; the quantizing build there 256 rows of 64 e4m3,
// 2 x 2 x 128 f32 maxima and four barriers (quant_smem).
uint64_t fp8_shared(int64_t EL, const Fp8Build& b, bool swiglu) {
  const uint64_t slot = uint64_t(b.tn) * 128 + uint64_t(b.boxes()) * 64 * 128;
  const uint64_t base = 1024 + b.slots * (slot + 16 + uint64_t(b.ring_scales()) * 4) + uint64_t(16 + 2 * (EL + 1)) * 4;
  if (b.quant) return (base + 127) / 128 * 128 + 256 * 64 + 2 * 2 * 128 * 4 + 4 * 8;
  if (!b.staged) return base;
  const uint64_t outs = swiglu ? uint64_t(b.bn()) / 2 : uint64_t(b.bn());
  return (base + 1023) / 1024 * 1024 + 2 * (outs / 64) * 128 * 128;  // 2 consumers x halves of 128 rows x 64 bf16
}

enum class Fp8Gemm { kSwiglu, kSwigluGather, kDown, kSwigluQuant };

// The GEMM of a call by its contract names: inputs, output, K (reduction) and N (outputs).
struct Fp8Call {
  const char *a, *a_scale, *w, *out;
  int64_t K, N;
};
template <typename Ctx>
Fp8Call fp8_call(const Ctx& c, Fp8Gemm which) {
  switch (which) {
    case Fp8Gemm::kSwiglu: return {"a", "a_scale", "w_gate_up", "out", c.dim("H"), c.dim("I")};
    case Fp8Gemm::kSwigluGather: return {"x", "x_scale", "w_gate_up", "out", c.dim("H"), c.dim("I")};
    case Fp8Gemm::kSwigluQuant: return {"a", "a_scale", "w_gate_up", "q", c.dim("H"), c.dim("I")};
    case Fp8Gemm::kDown: break;
  }
  return {"a", "a_scale", "w", "out", c.dim("I"), c.dim("H")};
}

// A tile's n-tiles over N outputs (SwiGLU: a tile's weight rows are half gate, half up).
int64_t fp8_n_tiles(const Fp8Build& b, bool swiglu, int64_t N) { return swiglu ? ceil_div(N, b.bn() / 2) : ceil_div(N, b.bn()); }

// Why the FP8 kernel cannot take this call, or "".
template <typename Ctx>
std::string fp8_misfit(const DeviceFacts& dev, const Ctx& c, Fp8Gemm which, const Fp8Build& build) {
  if (!ptx::find(kImage, "sm_90a")) return "its PTX image was not built";
  if (!dev.has("tensor_map")) return fmt::format("{} makes no tensor maps", dev.uri);
  const Fp8Call f = fp8_call(c, which);
  if (f.K % 16) return fmt::format("K = {} is not a multiple of 16 (the TMA row pitch)", f.K);
  for (const char* t : {f.a, f.w})
    if (address_of(c, t) % 16) return fmt::format("{} is not 16-byte aligned", t);
  if (address_of(c, f.out) % 4) return fmt::format("{} is not 4-byte aligned", f.out);
  if (build.quant && (f.N % 128 || address_of(c, f.out) % 16))
    return fmt::format("its epilogue quantizes whole 1x128 groups with 16-byte stores: it needs I % 128 == 0 and q "
                       "16-byte aligned (I = {})", f.N);
  if (build.staged && (f.N % 8 || address_of(c, "out") % 16))
    return fmt::format("its tensor stores of output rows need N % 8 == 0 and out 16-byte aligned (N = {})", f.N);
  const uint64_t shared = fp8_shared(c.dim("EL"), build, which != Fp8Gemm::kDown);
  if (dev.max_shared_per_block && shared > dev.max_shared_per_block)
    return fmt::format("{} experts need {} bytes of shared memory, {} has {}", c.dim("EL"), shared, dev.uri,
                       dev.max_shared_per_block);
  if (c.dim("R") > INT_MAX || f.K > INT_MAX || 2 * f.N > INT_MAX) return "a dimension exceeds int32";
  // The up box of SwiGLU n-tile j starts at weight row I + 64 j: inside one scale block only
  // when I is a multiple of 64 (the down GEMM's boxes start at multiples of 64).
  if (build.tall() && which != Fp8Gemm::kDown && f.N % 64)
    return fmt::format("I = {} is not a multiple of 64: its tall tiles need every 64-row weight box inside one "
                       "128-row scale block", f.N);
  if (build.cluster && fp8_n_tiles(build, which != Fp8Gemm::kDown, f.N) % 2)
    return fmt::format("{} n-tiles is odd: a cluster's two CTAs take n-tiles 2j and 2j + 1",
                       fp8_n_tiles(build, which != Fp8Gemm::kDown, f.N));
  const int64_t NW = which == Fp8Gemm::kDown ? f.N : 2 * f.N;
  if (c.dim("EL") * ceil_div(NW, 128) * ceil_div(f.K, 128) > INT_MAX) return "w_scale has 2^31 or more elements";
  if (which == Fp8Gemm::kSwigluGather && c.dim("T") * c.params().i("topk") > INT_MAX)
    return "T * topk exceeds int32";
  return {};
}
template <Fp8Gemm Which, const Fp8Build& Build>
bool fp8_applies(const ops::ApplyContext& c, std::string* why) {
  std::string misfit;
  if (!c.has_call()) {
    if (!c.facts.has("tensor_map")) misfit = fmt::format("{} makes no tensor maps", c.facts.uri);
  } else {
    misfit = fp8_misfit(c.facts, c, Which, Build);
  }
  if (misfit.empty()) return true;
  if (why) *why = misfit;
  return false;
}
// An e4m3 tensor map: boxes of 128 bytes x `rows`, the kernels' K-major wgmma operands.
Result<TensorMap> e4m3_map(const ops::OpContext& ctx, const ops::Tensor& t, std::initializer_list<uint64_t> dims,
                           uint32_t rows) {
  return dense_map(ctx, t, HAL_TENSOR_MAP_U8, 1, dims, 128, rows);
}

template <Fp8Gemm Which, const Fp8Build& Build>
Status fp8_gemm(ops::OpContext& ctx) {
  const bool swiglu = Which != Fp8Gemm::kDown, gather = Which == Fp8Gemm::kSwigluGather;
  const Fp8Call f = fp8_call(ctx, Which);
  const int64_t R = ctx.dim("R"), EL = ctx.dim("EL");
  if (gather && ctx.params().i("topk") < 1)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: topk = {} is not positive", ctx.contract.op, ctx.params().i("topk")));
  if (R == 0 || f.N == 0 || EL == 0) return {};
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  if (std::string why = fp8_misfit(*dev, ctx, Which, Build); !why.empty())
    return Error(HAL_UNSUPPORTED, fmt::format("{}: the FP8 kernel cannot run: {}", ctx.contract.op, why));
  const int64_t NW = swiglu ? 2 * f.N : f.N;
  const int64_t n_tiles = fp8_n_tiles(Build, swiglu, f.N);
  const int64_t max_tiles = (ceil_div(R, Build.tn) + EL) * n_tiles;
  if (max_tiles > INT_MAX)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} rows x {} columns is too large a problem for int tile numbers",
                                               ctx.contract.op, R, f.N));
  const ops::Tensor& a = ctx.tensor(f.a);
  auto tb = e4m3_map(ctx, ctx.tensor(f.w), {uint64_t(f.K), uint64_t(NW), uint64_t(EL)}, 64);
  if (!tb) return tb.error();
  const bool quant = Which == Fp8Gemm::kSwigluQuant;
  const std::string entry = fmt::format("hc_moe_gemm_fp8_{}{}",
                                        gather ? "swiglu_gather_" : quant ? "swiglu_quant_" : swiglu ? "swiglu_" : "",
                                        Build.suffix);
  auto k = kernel(ctx, *dev, kImage, entry.c_str(), CodeFrom::kCubinIfExact);
  if (!k) return k.error();
  uint32_t grid = uint32_t(std::min<int64_t>(max_tiles, dev->compute_units));
  if (Build.cluster) grid = std::max(grid & ~1u, 2u);  // whole clusters (max_tiles is even there)
  const uint64_t a_scale = address_of(ctx, f.a_scale), w_scale = address_of(ctx, "w_scale");
  const uint64_t offsets = address_of(ctx, "expert_offsets"), out = address_of(ctx, f.out);
  if (gather) {
    const int64_t T = ctx.dim("T"), topk = ctx.params().i("topk");
    return launch_packed(ctx, *k, {grid}, {uint32_t(kThreads)}, uint32_t(fp8_shared(EL, Build, swiglu)), [&](ArgPack& p) {
      p.value(*tb).value(a.address()).value(a_scale).value(w_scale).value(address_of(ctx, "row_to_slot"));
      p.value(offsets).value(out).value(R).value(f.K).value(f.N).value(EL).value(topk).value(T);
    });
  }
  auto ta16 = e4m3_map(ctx, a, {uint64_t(f.K), uint64_t(R)}, 16);
  if (!ta16) return ta16.error();
  // Staged builds: `out` in boxes of 64 outputs x 16 rows, for the tensor stores of their epilogue.
  Result<TensorMap> tout = TensorMap{};
  if constexpr (Build.staged)
    tout = dense_map(ctx, ctx.tensor(f.out), HAL_TENSOR_MAP_BF16, 2, {uint64_t(f.N), uint64_t(R)}, 64, 16);
  if (!tout) return tout.error();
  return launch_packed(ctx, *k, {grid}, {uint32_t(kThreads)}, uint32_t(fp8_shared(EL, Build, swiglu)), [&](ArgPack& p) {
    p.value(*ta16).value(*tb);
    if (Build.staged) p.value(*tout);
    p.value(a_scale).value(w_scale).value(offsets).value(out);
    if (quant) p.value(address_of(ctx, "q_scale"));
    p.value(R).value(f.K).value(f.N).value(EL);
  });
}

// ---- moe_quantize_fp8 ----------------------------------------------------------------------
struct QuantArgs {
  uint64_t x, q, scale;
  int64_t R, K;
};
// The grid is capped at 16 blocks of 256 threads an SM (two waves of the 8 that fit; one wave
// was level on the H200, 2026-11-30).
Status quantize(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), K = ctx.dim("K");
  if (R == 0 || K == 0) return {};
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  auto k = kernel(ctx, *dev, kImage, "hc_moe_quantize_fp8");
  if (!k) return k.error();
  const int64_t groups = R * ceil_div(K, 128);
  const int64_t blocks = std::min<int64_t>(ceil_div(groups, 8), int64_t(dev->compute_units) * 16);
  QuantArgs a{ctx.tensor("x").address(), ctx.tensor("q").address(), ctx.tensor("scale").address(), R, K};
  return launch(ctx, *k, {uint32_t(blocks)}, {256}, a);
}

// ---- moe_permute_fp8 -----------------------------------------------------------------------
// moe_permute's spread plan (a block an SM, whole tokens a block), then each block quantizes its
// own tokens' rows into their permuted rows (kernels/ptx/moe/permute_fp8.cu), in one launch.
struct PermuteFp8Args {
  PermutePlanArgs plan;
  uint64_t x, permuted, permuted_scale;
  int64_t K, H;
};
constexpr const char* kPermuteImage = "moe_permute_fp8";
Status permute_fp8(ops::OpContext& ctx) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const int64_t T = ctx.dim("T"), K = ctx.dim("K"), EL = ctx.dim("EL");
  // Without local experts or slots the single-block plan (it writes the counts and num_rows).
  auto layout = permute_layout(ctx, *dev, EL > 0 && T * K > 0, false);
  if (!layout) return layout.error();
  auto k = kernel(ctx, *dev, kPermuteImage, "hc_moe_permute_fp8");
  if (!k) return k.error();
  PermuteFp8Args a{permute_plan_args(ctx, *layout), ctx.tensor("x").address(), ctx.tensor("permuted").address(),
                   ctx.tensor("permuted_scale").address(), K, ctx.dim("H")};
  return launch(ctx, *k, {uint32_t(layout->B)}, {uint32_t(32 * layout->W)}, a, layout->shared);
}
bool permute_image_built(const ops::ApplyContext&, std::string* why) {
  if (ptx::find(kPermuteImage, "sm_90a")) return true;
  if (why) *why = "its PTX image was not built";
  return false;
}

// Where there is no FP8 tensor core: never applies, and says why.
bool no_fp8(const ops::ApplyContext& c, std::string* why) {
  if (why)
    *why = fmt::format("no FP8 kernel for sm_80: FP8 wgmma tensor cores and e4m3 conversions need sm_90a (this device: "
                       "{}; sm_89's FP8 mma.sync is not implemented)", c.facts.arch.empty() ? c.facts.uri : c.facts.arch);
  return false;
}
Status no_fp8_run(ops::OpContext& ctx) {
  return Error(HAL_UNSUPPORTED, fmt::format("{}: this GPU has no FP8 wgmma tensor cores (sm_90a needed)", ctx.contract.op));
}

ops::OpImpl impl(const char* op, const char* target, int priority, ops::OpImplFn fn, const char* name, const char* summary,
                 ops::OpPredicate applies, ops::OpPredicate preferred = nullptr, ops::OpPredicate fused_pays = nullptr) {
  return ops::OpImpl{op, HAL_MODULE_PTX, target, "", priority, fn, name, applies, preferred, true, fused_pays, summary};
}
// The FP8 gather form has not been shown to pay on a GPU: on the H100 (docs/PERFORMANCE.md,
// "FP8 experts") it was level with the permuted copy at 128 and 512 tokens (within 2% of the
// layer) and 1.6 ms slower at 4096 tokens, where the copy path takes the 128-token tiles
// (sm90.wide). So the FP8 layer takes the copy path unless asked for the gather.
bool gather_pays(const ops::ApplyContext&, std::string* why) {
  if (why) *why = "measured level with the permuted copy at 128-512 tokens and slower at 4096 (H100)";
  return false;
}
// Which tile the registry takes, by the rows experts average (R / EL; R is the call's row
// capacity, T x topk in the layer): 64-token tiles (sm90.swapw) up to 56 rows, 128-token tiles
// (sm90.wide: half the token re-reads a k-step of swapw) up to 88, tall tiles (sm90.tall: up to
// 256 tokens, an expert's weights streamed once) above; each where it can run, else the next
// (tall, wide, swapw). The gather form has only swapw in the choice.
// H100 (docs/PERFORMANCE.md, "FP8 experts"): at 4096 tokens (128 rows an expert) sm90.tall took
// 3.76 + 2.13 ms (SwiGLU + down), sm90.wide 4.43 + 2.58, sm90.swapw 5.07 + 2.97; at 512 and 128
// tokens swapw and wide were level (97% and 100% of the copy rate). H200 (2026-11-29): at 48
// rows (1536 tokens) swapw 2.92 ms against tall's 3.15, at 32 swapw 2.77 against 2.96; the
// experts under the power cap (--preheat-ms 1000, sixth session), tall / wide / swapw: 48 rows
// 3.44 / 3.10 / 3.08 ms, 64 rows 3.78 / 3.40 / 4.37, 80 rows 4.14 / 3.87 / 5.54, 96 rows 4.41 /
// 4.37 / 5.99 (the down GEMM already faster with tall there), 128 rows 5.21 / 6.32; at full clock
// wide was 4-5% faster than tall at 64 rows and level at 96 (third session).
// The down GEMM's tall tiles take the staged epilogue (sm90.talls) where it runs: on the H200
// (2026-11-29, eighth session, the same call each) its down GEMM took 1647-1695 us against
// sm90.tall's 1830-1853 at 4096 tokens (128 rows an expert), 1456 against 1509-1529 at 3072 (96),
// 1354 against 1402 at 2560 (80) and 3528 against 3984 at 8192; it was 7% slower at 2048 (64
// rows, where sm90.wide is the choice anyway). The SwiGLU GEMM stays on sm90.tall: with the staged
// epilogue (and its 3 slots) it was level at 4096 and 2-7% slower at 2560-3072.
// Tall tiles run in 2-CTA clusters that multicast their token rows (sm90.tallmc for SwiGLU,
// sm90.tallsmc for the down GEMM) where experts average at least 128 rows and the n-tile count
// is even. H200, 2026-11-30, experts (SwiGLU + down), clustered against not: 4096 tokens (128
// rows) level at full clock, 4.94-4.97 against 5.01-5.04 ms under the power cap (--preheat-ms
// 1000, three alternated rounds); 8192 tokens (256) 10.47 against 10.64 ms; but 3072 tokens
// (96 rows) 3.93-4.00 against 3.75-3.79 ms (two alternated rounds): slower below 128 rows.
constexpr int64_t kWideRows = 56, kTallRows = 88, kClusterRows = 128;
// The tall build for this GEMM: the down GEMM's with the staged epilogue where it runs; the
// clustered one before the plain one where experts average kClusterRows or more.
template <Fp8Gemm Which>
const Fp8Build& fp8_tall_choice(const ops::ApplyContext& c) {
  const bool clusters = c.dim("R") >= kClusterRows * std::max<int64_t>(c.dim("EL"), 1);
  if constexpr (Which == Fp8Gemm::kDown) {
    if (clusters && fp8_applies<Which, kTallSMc>(c, nullptr)) return kTallSMc;
    if (fp8_applies<Which, kTallS>(c, nullptr)) return kTallS;
  }
  return clusters && fp8_applies<Which, kTallMc>(c, nullptr) ? kTallMc : kTall;
}
template <Fp8Gemm Which>
const Fp8Build& fp8_choice(const ops::ApplyContext& c) {
  if (!c.has_call()) return kSwapw;
  const int64_t R = c.dim("R"), EL = std::max<int64_t>(c.dim("EL"), 1);
  const bool tall = fp8_applies<Which, kTall>(c, nullptr), wide = fp8_applies<Which, kWide>(c, nullptr);
  const Fp8Build& tall_build = fp8_tall_choice<Which>(c);
  if (R > kTallRows * EL && tall) return tall_build;
  if (R > kWideRows * EL && wide) return kWide;
  if (R > kWideRows * EL && tall) return tall_build;
  return kSwapw;
}
// The registry's choice falls on `Build` (fp8_choice); else says which.
template <Fp8Gemm Which, const Fp8Build& Build>
bool fp8_preferred(const ops::ApplyContext& c, std::string* why) {
  const Fp8Build& chosen = fp8_choice<Which>(c);
  if (&chosen == &Build) return true;
  const char* name = &chosen == &kTallS     ? "sm90.talls"
                     : &chosen == &kTallSMc ? "sm90.tallsmc"
                     : &chosen == &kTallMc  ? "sm90.tallmc"
                     : &chosen == &kTall    ? "sm90.tall"
                     : &chosen == &kWide ? "sm90.wide"
                                         : "sm90.swapw";
  if (why)
    *why = fmt::format("experts average {} rows: {} (sm90.swapw up to {}, sm90.wide up to {}, tall tiles above: "
                       "sm90.talls for the down GEMM, sm90.tall for SwiGLU, in clusters (sm90.tallsmc, sm90.tallmc) "
                       "from {} rows)",
                       c.has_call() ? c.dim("R") / std::max<int64_t>(c.dim("EL"), 1) : 0, name, kWideRows, kTallRows,
                       kClusterRows);
  return false;
}

#define HC_NO_FP8(op, n) \
  ops::RegisterOpImpl n(impl(op, "sm_80", 1, no_fp8_run, "sm80.none", "none: no FP8 tensor cores before sm_90a", no_fp8));
HC_NO_FP8("moe_quantize_fp8", r0)
HC_NO_FP8("moe_permute_fp8", r26)
HC_NO_FP8("moe_grouped_gemm_fp8_swiglu", r1)
HC_NO_FP8("moe_grouped_gemm_fp8_swiglu_gather", r2)
HC_NO_FP8("moe_grouped_gemm_fp8", r3)
HC_NO_FP8("moe_grouped_gemm_fp8_swiglu_quant", r28)
#undef HC_NO_FP8

bool image_built(const ops::ApplyContext&, std::string* why) {
  if (ptx::find(kImage, "sm_90a")) return true;
  if (why) *why = "its PTX image was not built";
  return false;
}
ops::RegisterOpImpl r4(impl("moe_quantize_fp8", "sm_90a", 10, quantize, "sm90",
                            "8 lanes a 1x128 group, 16-byte loads and stores", image_built));
ops::RegisterOpImpl r27(impl("moe_permute_fp8", "sm_90a", 10, permute_fp8, "sm90",
                             "the plan and each block's token rows quantized into their slots' rows, one launch",
                             permute_image_built));
// The builds the registry chooses among by rows an expert (fp8_choice).
#define HC_FP8_CHOSEN(n, op, which, build, prio, nm, summary)                                             \
  ops::RegisterOpImpl n(impl(op, "sm_90a", prio, fp8_gemm<which, build>, nm, summary, fp8_applies<which, build>, \
                             fp8_preferred<which, build>));
HC_FP8_CHOSEN(r5, "moe_grouped_gemm_fp8_swiglu", Fp8Gemm::kSwiglu, kSwapw, 40, "sm90.swapw",
              "wgmma e4m3 swap-AB, warp-specialized, fp32 promotion per 128 of K (TMA; its cubin)")
ops::RegisterOpImpl r6(impl("moe_grouped_gemm_fp8_swiglu_gather", "sm_90a", 40, fp8_gemm<Fp8Gemm::kSwigluGather, kSwapw>,
                            "sm90.swapw", "wgmma e4m3 swap-AB, producer warps gather rows with cp.async (its cubin)",
                            fp8_applies<Fp8Gemm::kSwigluGather, kSwapw>, nullptr, gather_pays));
HC_FP8_CHOSEN(r7, "moe_grouped_gemm_fp8", Fp8Gemm::kDown, kSwapw, 40, "sm90.swapw",
              "wgmma e4m3 swap-AB, warp-specialized, fp32 promotion per 128 of K (TMA; its cubin)")
// An implementation taken only when named (RunOptions::impl, `--impl op=name`).
ops::OpImpl named(ops::OpImpl i) {
  i.automatic = false;
  return i;
}
// The GEMM kernels with a 5-slot ring, by name only (comparisons: docs/kernels/fp8.md).
ops::RegisterOpImpl r8(named(impl("moe_grouped_gemm_fp8_swiglu", "sm_90a", 30, fp8_gemm<Fp8Gemm::kSwiglu, kSwapw5>,
                                  "sm90.swapw5", "sm90.swapw with a 5-slot ring", fp8_applies<Fp8Gemm::kSwiglu, kSwapw5>)));
ops::RegisterOpImpl r9(named(impl("moe_grouped_gemm_fp8_swiglu_gather", "sm_90a", 30, fp8_gemm<Fp8Gemm::kSwigluGather, kSwapw5>,
                                  "sm90.swapw5", "sm90.swapw with a 5-slot ring", fp8_applies<Fp8Gemm::kSwigluGather, kSwapw5>,
                                  nullptr, gather_pays)));
ops::RegisterOpImpl r10(named(impl("moe_grouped_gemm_fp8", "sm_90a", 30, fp8_gemm<Fp8Gemm::kDown, kSwapw5>, "sm90.swapw5",
                                   "sm90.swapw with a 5-slot ring", fp8_applies<Fp8Gemm::kDown, kSwapw5>)));
// Tiles of up to 128 tokens: the choice where experts average 57-88 rows (fp8_choice); the
// gather form's wide build, with three gathering warps for 128 rows, was slower (10.4 ms at
// 4096 tokens): by name only.
HC_FP8_CHOSEN(r11, "moe_grouped_gemm_fp8_swiglu", Fp8Gemm::kSwiglu, kWide, 35, "sm90.wide",
              "sm90.swapw with 128-token tiles, one set of temporaries (experts of 57-88 rows on average)")
HC_FP8_CHOSEN(r13, "moe_grouped_gemm_fp8", Fp8Gemm::kDown, kWide, 35, "sm90.wide",
              "sm90.swapw with 128-token tiles, one set of temporaries (experts of 57-88 rows on average)")
#define HC_FP8_NAMED(n, op, which, build, prio, nm, summary, pays)                                     \
  ops::RegisterOpImpl n(named(impl(op, "sm_90a", prio, fp8_gemm<which, build>, nm, summary,            \
                                   fp8_applies<which, build>, nullptr, pays)));
HC_FP8_NAMED(r12, "moe_grouped_gemm_fp8_swiglu_gather", Fp8Gemm::kSwigluGather, kWide, 35, "sm90.wide",
             "sm90.swapw with 128-token tiles", gather_pays)
// sm90.tall with the weight boxes of 4 more k-steps prefetched into L2 (more HBM reads in flight
// than the 4-slot ring holds), by name.
HC_FP8_NAMED(r18, "moe_grouped_gemm_fp8_swiglu", Fp8Gemm::kSwiglu, kTallPf, 37, "sm90.tallpf",
             "sm90.tall with the weights of 4 more k-steps prefetched into L2", nullptr)
HC_FP8_NAMED(r19, "moe_grouped_gemm_fp8", Fp8Gemm::kDown, kTallPf, 37, "sm90.tallpf",
             "sm90.tall with the weights of 4 more k-steps prefetched into L2", nullptr)
// sm90.tall with 3 slots and its outputs staged in shared memory, then written by tensor stores
// (16-row groups) while the next tile runs: the down GEMM's choice for tall tiles (fp8_choice), the
// SwiGLU GEMM's by name.
HC_FP8_NAMED(r20, "moe_grouped_gemm_fp8_swiglu", Fp8Gemm::kSwiglu, kTallS, 37, "sm90.talls",
             "sm90.tall with 3 slots and the output rows written by tensor stores", nullptr)
// The staged clustered build for SwiGLU (as sm90.talls), by name.
HC_FP8_NAMED(r24, "moe_grouped_gemm_fp8_swiglu", Fp8Gemm::kSwiglu, kTallSMc, 38, "sm90.tallsmc",
             "sm90.talls in 2-CTA clusters on neighbouring n-tiles, the token rows multicast", nullptr)
#undef HC_FP8_NAMED
// Tall tiles: up to 256 tokens x 128 weight rows, the two consumer warpgroups sharing the weight
// boxes and splitting the tokens: an expert of up to 256 rows streams its weights once. The
// choice where experts average more than 88 rows (fp8_choice).
HC_FP8_CHOSEN(r16, "moe_grouped_gemm_fp8_swiglu", Fp8Gemm::kSwiglu, kTall, 36, "sm90.tall",
              "256-token tiles, the consumers split the tokens (where sm90.tallmc cannot run)")
HC_FP8_CHOSEN(r17, "moe_grouped_gemm_fp8", Fp8Gemm::kDown, kTall, 36, "sm90.tall",
              "256-token tiles, the consumers split the tokens (where sm90.talls cannot run)")
HC_FP8_CHOSEN(r21, "moe_grouped_gemm_fp8", Fp8Gemm::kDown, kTallS, 37, "sm90.talls",
              "sm90.tall with 3 slots and the output rows written by tensor stores (where sm90.tallsmc cannot run)")
// Tall tiles in clusters of 2 CTAs on n-tiles 2j and 2j + 1 of one expert, each copying half of
// the token rows into both (TMA multicast): the tall choice where the n-tile count is even.
HC_FP8_CHOSEN(r22, "moe_grouped_gemm_fp8_swiglu", Fp8Gemm::kSwiglu, kTallMc, 38, "sm90.tallmc",
              "sm90.tall in 2-CTA clusters on neighbouring n-tiles, the token rows multicast (experts of > 88 rows)")
HC_FP8_CHOSEN(r25, "moe_grouped_gemm_fp8", Fp8Gemm::kDown, kTallSMc, 38, "sm90.tallsmc",
              "sm90.talls in 2-CTA clusters on neighbouring n-tiles, the token rows multicast (experts of > 88 rows)")
HC_FP8_CHOSEN(r23, "moe_grouped_gemm_fp8", Fp8Gemm::kDown, kTallMc, 38, "sm90.tallmc",
              "sm90.tall in 2-CTA clusters on neighbouring n-tiles, the token rows multicast (where the staged builds "
              "cannot run)")
#undef HC_FP8_CHOSEN

// The quantizing SwiGLU GEMM: sm90.tallmc with h written as e4m3 + 1x128 scales from its
// epilogue (a group's 128 outputs are the cluster's two tiles). It runs any call the clustered
// build runs with I % 128 == 0, and is chosen when the op is called; but it does not beat the
// pair it fuses, so the layer does not call it unless named (fused_pays). H200, 2026-11-30
// (docs/PERFORMANCE.md, fifth session): in `halcyon bench moe --dtype fp8` at 4096 tokens it took
// 2961-3113 us against sm90.tallmc's 2571-2636 + moe_quantize_fp8's 90-91; in
// bench/probes/fp8_kernel_rate.cu (128 experts of 128 rows) 1307-1311 against 1217 + 38 us
// (1.043x). Its epilogue runs with both consumers out of the k-loop, and the quantization there
// (the maxima exchange, an IEEE division a value, the staged byte rows) costs more than the
// separate kernel's pass over h; cutting all three left it 1.006-1.011x the pair.
bool quant_pays(const ops::ApplyContext&, std::string* why) {
  if (why)
    *why = "measured slower than sm90.tallmc + moe_quantize_fp8 (H200: 1.04x in the kernel harness, 1.09-1.17x in "
           "halcyon bench moe at 4096 tokens)";
  return false;
}
ops::RegisterOpImpl r29(impl("moe_grouped_gemm_fp8_swiglu_quant", "sm_90a", 38, fp8_gemm<Fp8Gemm::kSwigluQuant, kTallMcQ>,
                             "sm90.tallmc",
                             "sm90.tallmc with h quantized in the epilogue (the cluster's two CTAs exchange each "
                             "token's maxima)",
                             fp8_applies<Fp8Gemm::kSwigluQuant, kTallMcQ>, nullptr, quant_pays));

}  // namespace
}  // namespace halcyon::ptxop
