// attention_prefill on Hopper, warp-specialised (kernels/ptx/attention/attention_sm90_ws.cu):
// a TMA producer warpgroup and two wgmma consumer warpgroups ping-ponging over 128-row query
// tiles and 128-key tiles. Registered as "sm90.ws" for sm_90a above the cp.async wgmma kernel
// ("sm90a", attention_ops.cpp) where its predicate holds: D = 64 or 128, a positive scale (its
// softmax takes the row max on unscaled scores), tensor maps, and the shared memory it needs.
// Its consumers take 240 registers with setmaxnreg: loaded as the toolkit's cubin where the
// device runs it (ptx_launch.hpp, CodeFrom::kCubinIfExact).
#include <halcyon/kernels/reference/attention.hpp>

#include <algorithm>

#include "ptx_launch.hpp"

namespace halcyon::ptxop {
namespace {

constexpr int64_t kWsRows = 128, kWsThreads = 384;
constexpr const char* kWsImage = "attention_sm90_ws";

// The kernel's WsCfg<D, KN>::kShared: the Q tile and a ring of K and V tiles of KN keys (4
// stages at D = 64, 2 at D = 128), 1024 bytes of alignment slack.
uint32_t ws_shared(int64_t D, int64_t KN) {
  const int64_t stages = D == 64 ? 4 : 2;
  return uint32_t(kWsRows * D * 2 + 2 * stages * KN * D * 2 + 1024);
}

float resolved_scale(const ops::ParamSet& p, int64_t D) { return ref::attention_scale(float(p.f("scale")), D); }

// Keys a tile of the kernel that runs: the 176-key build exists for D = 128 only (D = 64 runs
// the 128-key kernel under either name).
int64_t keys_of(int64_t D, int KN) { return D == 128 ? KN : 128; }

template <int KN>
bool ws_applies(const ops::ApplyContext& c, std::string* why) {
  auto no = [&](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  if (!ptx::find(kWsImage, "sm_90a")) return no("its PTX image was not built");
  if (!c.facts.has("tensor_map")) return no(fmt::format("{} makes no tensor maps", c.facts.uri));
  if (!c.has_call()) return true;
  for (const char* t : {"q", "k", "v", "out"})
    if (address_of(c, t) % 16 != 0) return no(fmt::format("tensor '{}' is not 16-byte aligned", t));
  const int64_t D = c.dim("D");
  if (D != 64 && D != 128) return no(fmt::format("D = {} (the kernel has 64 and 128)", D));
  if (!(resolved_scale(c.params(), D) > 0.f)) return no("the scale is not positive");
  const uint32_t need = ws_shared(D, keys_of(D, KN));
  if (c.facts.max_shared_per_block && c.facts.max_shared_per_block < need)
    return no(fmt::format("{} has {} bytes of shared memory a block, the kernel needs {}", c.facts.uri,
                          c.facts.max_shared_per_block, need));
  return true;
}

// How the CTAs take the query tiles: one CTA a tile (the hardware hands out the next tile as a
// CTA ends), or persistent, one CTA an SM walking every gridDim-th tile, its producer loading
// the next tile's Q, K and V while the consumers finish the last. kAuto: persistent for D = 128
// without a causal mask, where it measured faster (H200, 2026-11-29: 1.021-1.028x cuDNN's time
// against 1.030-1.038x, bench/paired_vs_torch.py); one CTA a tile for causal calls (their tiles
// differ in length and the fixed walk, tiles j = c mod the SM count, does not balance them:
// sm90.wsp ran causal b1 h128 1.14-1.18x sm90.ws's time, timed after it) and at D = 64
// (persistent measured 0-5% slower there), except where the sequences average at most one tile
// of queries: there a causal tile is about as long as the next, and one CTA a tile launches an
// empty tile number (find_seq_tile) for each sequence besides its tiles. B 4096 x 100 tokens,
// H200 (2026-11-29, sixth session): causal d128 4.26 -> 3.17 ms, d64 3.79 -> 2.73 ms.
enum class WsGrid { kAuto, kPersistent, kOneTile };

template <int KN, WsGrid kGrid>
Status prefill_ws(ops::OpContext& ctx) {
  const auto& p = ctx.params();
  ref::AttentionPrefillShape s{ctx.dim("B"), ctx.dim("Tq"), ctx.dim("Tk"), ctx.dim("Hq"), ctx.dim("Hkv"), ctx.dim("D"),
                               p.b("causal"), float(p.f("scale"))};
  HALCYON_TRY(ref::attention_prefill_check(s));
  if (s.Tq == 0) return {};
  const int64_t tiles = ceil_div(s.Tq, kWsRows) + s.B;
  if (tiles * s.Hq > INT32_MAX || s.Hq > 65535 || s.Tq > INT32_MAX || s.Tk > INT32_MAX)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("attention_prefill: {} query tiles x {} heads ({} and {} rows) is "
                                                   "too large a problem for the sm90.ws kernel",
                                                   tiles, s.Hq, s.Tq, s.Tk));
  HALCYON_ASSIGN_OR_RETURN(auto dev, facts(ctx));
  const int64_t kn = keys_of(s.D, KN);
  HALCYON_ASSIGN_OR_RETURN(TensorMap tq, head_map(ctx, ctx.tensor("q"), s.Tq, s.Hq, s.D, kWsRows));
  // No keys at all: every row sees none and the kernel reads no K or V; any valid map will do.
  TensorMap tk = tq, tv = tq;
  if (s.Tk > 0) {
    HALCYON_ASSIGN_OR_RETURN(tk, head_map(ctx, ctx.tensor("k"), s.Tk, s.Hkv, s.D, kn));
    HALCYON_ASSIGN_OR_RETURN(tv, head_map(ctx, ctx.tensor("v"), s.Tk, s.Hkv, s.D, kn));
  }
  // The 176-key build runs one CTA a tile only.
  const bool short_seqs = s.Tq <= kWsRows * s.B;  // at most one tile of queries a sequence on average
  const bool persistent = kn == 128 && (kGrid == WsGrid::kPersistent ||
                                        (kGrid == WsGrid::kAuto && ((!s.causal && s.D == 128) || short_seqs)));
  const char* entry = kn == 176     ? "hc_attn_prefill_d128n176_sm90ws"
                      : s.D == 64   ? (persistent ? "hc_attn_prefill_d64_sm90wsp" : "hc_attn_prefill_d64_sm90ws")
                      : persistent ? "hc_attn_prefill_d128_sm90wsp"
                                    : "hc_attn_prefill_d128_sm90ws";
  auto k = kernel(ctx, dev, kWsImage, entry, CodeFrom::kCubinIfExact);
  if (!k) return k.error();
  const double scale_log2 = double(ref::attention_scale(s.scale, s.D)) * 1.4426950408889634;
  const Dim3 grid = persistent ? Dim3{uint32_t(std::min<int64_t>(tiles * s.Hq, dev.compute_units))}
                                : Dim3{uint32_t(tiles), uint32_t(s.Hq)};
  return launch_packed(ctx, *k, grid, {uint32_t(kWsThreads)}, ws_shared(s.D, kn),
                       [&](ArgPack& a) {
                         a.value(tq).value(tk).value(tv).value(ctx.tensor("out").address());
                         a.value(ctx.tensor("lse").address()).value(ctx.tensor("cu_seqlens_q").address());
                         a.value(ctx.tensor("cu_seqlens_k").address()).value(s.B).value(s.Tq).value(s.Tk);
                         a.value(s.Hq).value(s.Hkv).value(int64_t(s.causal)).value(scale_log2);
                       });
}

ops::RegisterOpImpl r_prefill_ws({"attention_prefill", HAL_MODULE_PTX, "sm_90a", "", 30,
                                  prefill_ws<128, WsGrid::kAuto>, "sm90.ws", ws_applies<128>, nullptr, true, nullptr,
                                  "wgmma, TMA producer + 2 ping-pong consumer warpgroups (D 64, 128; its cubin); "
                                  "persistent at D 128 without a causal mask, and for short sequences"});
// The same kernel with 176-key tiles at D = 128 (FlashAttention-3's non-causal d128 tile): by
// name only. On the H100 it was level at s4096 non-causal, slower for causal b1 h128 at s4096
// (541.6 against 584.1 TFLOP/s) and faster at 16k causal (docs/PERFORMANCE.md): no rule yet.
ops::RegisterOpImpl r_prefill_ws176({"attention_prefill", HAL_MODULE_PTX, "sm_90a", "", 25,
                                     prefill_ws<176, WsGrid::kAuto>, "sm90.ws176", ws_applies<176>, nullptr, false,
                                     nullptr, "sm90.ws with 176-key tiles at D 128 (D 64: sm90.ws)"});
// sm90.ws with each grid forced, by name: the persistent walk on causal calls too (its tests
// cover the hand-over between tiles of different lengths), and one CTA a tile everywhere (the
// schedule before 2026-11-29, for comparisons).
ops::RegisterOpImpl r_prefill_wsp({"attention_prefill", HAL_MODULE_PTX, "sm_90a", "", 24,
                                   prefill_ws<128, WsGrid::kPersistent>, "sm90.wsp", ws_applies<128>, nullptr, false,
                                   nullptr, "sm90.ws, persistent always"});
ops::RegisterOpImpl r_prefill_ws1({"attention_prefill", HAL_MODULE_PTX, "sm_90a", "", 23,
                                   prefill_ws<128, WsGrid::kOneTile>, "sm90.ws1", ws_applies<128>, nullptr, false,
                                   nullptr, "sm90.ws, one CTA a tile always"});

}  // namespace
}  // namespace halcyon::ptxop
