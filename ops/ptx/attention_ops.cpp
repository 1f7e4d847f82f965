// PTX implementations of the attention operators (kernels/ptx/attention/attention_sm80.cu):
// mma.sync kernels for any NVIDIA GPU from sm_80. Shape errors (D, Hq vs Hkv, block size) are
// returned before anything is queued; data-dependent inputs (offsets, block table, seq_lens)
// stay on the device and are never trusted for addressing (the kernels clamp them), so
// nothing here syncs. `halcyon run` checks those values on the host before launching.
//
// Split-KV (decode, MLA): the keys of a sequence are cut into chunks so that the grid fills
// the device; each chunk writes its normalised output and lse (f32) to a workspace and
// hc_attn_combine_sm80 merges them. The split is chosen here, from shapes only: the table's
// capacity MB * BS bounds every sequence's length (seq_lens stay on the device).
#include <halcyon/kernels/reference/attention.hpp>

#include "ptx_launch.hpp"

#include <cmath>

namespace halcyon::ptxop {
namespace {

constexpr int kRows = 64, kKeys = 64, kThreads = 128;
constexpr int64_t kDecodeRows = 16;  // query rows a key-split decode CTA owns (the kernels' kDecRows)
constexpr int kMlaRows = 16, kMlaKeys = 32;
constexpr const char* kImage = "attention_sm80";

// The kernels read 16-byte chunks with cp.async: every row must start 16-byte aligned.
Status check_aligned(const ops::OpContext& ctx, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (ctx.tensor(n).address() % 16 != 0)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: tensor '{}' at address {:#x} is not 16-byte aligned",
                                                     ctx.contract.op, n, ctx.tensor(n).address()));
  return {};
}

double scale_log2(float scale, int64_t head_dim) {
  return double(ref::attention_scale(scale, head_dim)) * 1.4426950408889634;  // exp2 domain
}

// The split-KV partials of one call, in a buffer of its own that the caller releases once the
// kernels are queued: the backend frees it after the work queued before the release (CUDA:
// stream-ordered, hal.h), so calls on several streams never share a scratch buffer.
Result<Buffer> workspace(const ops::OpContext& ctx, uint64_t bytes) { return ctx.device.allocate(bytes); }

// Keys per split: a multiple of `tile`, at least 4 tiles, so that ctas x splits fills about
// two waves of the device.
int64_t split_len(const DeviceFacts& dev, int64_t ctas, int64_t capacity, int64_t tile) {
  const int64_t want = ceil_div(2 * int64_t(dev.compute_units), std::max<int64_t>(ctas, 1));
  const int64_t max_splits = std::max<int64_t>(1, ceil_div(capacity, 4 * tile));
  const int64_t splits = std::clamp<int64_t>(want, 1, max_splits);
  return ceil_div(ceil_div(capacity, splits), tile) * tile;
}

// Keys per split for kernels that run `per_sm` CTAs an SM: the fewest splits (each at least 4
// tiles) whose CTAs fill their waves to 90%, else the best filling; a multiple of `tile`.
int64_t split_len_waves(const DeviceFacts& dev, int64_t ctas, int64_t capacity, int64_t tile, int64_t per_sm) {
  const int64_t slots = int64_t(dev.compute_units) * per_sm, max_splits = std::max<int64_t>(1, capacity / (4 * tile));
  int64_t best = 1;
  double best_fill = 0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    const int64_t total = std::max<int64_t>(ctas, 1) * s;
    const double fill = double(total) / double(ceil_div(total, slots) * slots);
    if (fill >= 0.9) {
      best = s;
      break;
    }
    if (fill > best_fill + 0.01) best_fill = fill, best = s;
  }
  return ceil_div(ceil_div(capacity, best), tile) * tile;
}

struct FwdArgs {
  uint64_t q, k, v, out, lse, seq_a, seq_b, part_o, part_lse;
  int64_t B, Hq, Hkv, Sq, NB, BS, MB, causal, split_len;
  double scale_log2;
};
struct CombineArgs {
  uint64_t part_o, part_lse, out, lse;
  int64_t rows, splits, D;
};

Status combine(const ops::OpContext& ctx, const DeviceFacts& dev, uint64_t part_o, uint64_t part_lse, int64_t rows,
               int64_t splits, int64_t D) {
  auto k = kernel(ctx, dev, kImage, "hc_attn_combine_sm80");
  if (!k) return k.error();
  CombineArgs a{part_o, part_lse, ctx.tensor("out").address(), ctx.tensor("lse").address(), rows, splits, D};
  return launch(ctx, *k, {uint32_t(rows)}, {128}, a);
}

// The checks and the grid both prefill kernels share: 64-row query tile numbers, at most
// Tq / 64 + B of them (find_seq_tile's; CTAs with an empty number exit); 0 tiles: nothing to
// launch. The kernels keep B, Tq and Tk in 32 bits.
Result<int64_t> prefill_tiles(const ops::OpContext& ctx, ref::AttentionPrefillShape* s) {
  const auto& p = ctx.params();
  *s = {ctx.dim("B"), ctx.dim("Tq"), ctx.dim("Tk"), ctx.dim("Hq"), ctx.dim("Hkv"), ctx.dim("D"), p.b("causal"),
        float(p.f("scale"))};
  HALCYON_TRY(ref::attention_prefill_check(*s));
  HALCYON_TRY(check_aligned(ctx, {"q", "k", "v", "out"}));
  const int64_t tiles = s->Tq == 0 ? 0 : ceil_div(s->Tq, kRows) + s->B;
  if (tiles > INT32_MAX || s->Hq > 65535 || s->Tq > INT32_MAX || s->Tk > INT32_MAX)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("attention_prefill: {} query tiles x {} heads (Tq {}, Tk {}) is too large a grid", tiles,
                             s->Hq, s->Tq, s->Tk));
  return tiles;
}

Status prefill(ops::OpContext& ctx) {
  ref::AttentionPrefillShape s;
  HALCYON_ASSIGN_OR_RETURN(const int64_t tiles, prefill_tiles(ctx, &s));
  if (tiles == 0) return {};
  HALCYON_ASSIGN_OR_RETURN(auto dev, facts(ctx));
  auto k = kernel(ctx, dev, kImage, s.D == 64 ? "hc_attn_fwd_d64_sm80" : "hc_attn_fwd_d128_sm80");
  if (!k) return k.error();
  FwdArgs a{ctx.tensor("q").address(), ctx.tensor("k").address(), ctx.tensor("v").address(),
            ctx.tensor("out").address(), ctx.tensor("lse").address(), ctx.tensor("cu_seqlens_q").address(),
            ctx.tensor("cu_seqlens_k").address(), 0, 0, s.B, s.Hq, s.Hkv, 1, /*NB = Tq*/ s.Tq, /*BS = Tk*/ s.Tk,
            /*MB = 0: prefill*/ 0, s.causal, 0, scale_log2(s.scale, s.D)};
  return launch(ctx, *k, {uint32_t(tiles), uint32_t(s.Hq)}, {kThreads}, a, uint32_t(5 * kRows * s.D * 2));
}

// Hopper (attention_sm90.cu): wgmma for both products. Chosen over the sm_80 kernel on an
// sm_90a device: correct on the H100 and 1.5x faster there (docs/kernels/attention.md).
struct PrefillSm90Args {
  uint64_t q, k, v, out, lse, cu_q, cu_k;
  int64_t B, Tq, Tk, Hq, Hkv, causal;
  double scale_log2;
};
Status prefill_sm90(ops::OpContext& ctx) {
  ref::AttentionPrefillShape s;
  HALCYON_ASSIGN_OR_RETURN(const int64_t tiles, prefill_tiles(ctx, &s));
  if (tiles == 0) return {};
  HALCYON_ASSIGN_OR_RETURN(auto dev, facts(ctx));
  auto k = kernel(ctx, dev, "attention_sm90", s.D == 64 ? "hc_attn_prefill_d64_sm90" : "hc_attn_prefill_d128_sm90");
  if (!k) return k.error();
  PrefillSm90Args a{ctx.tensor("q").address(), ctx.tensor("k").address(), ctx.tensor("v").address(),
                    ctx.tensor("out").address(), ctx.tensor("lse").address(), ctx.tensor("cu_seqlens_q").address(),
                    ctx.tensor("cu_seqlens_k").address(), s.B, s.Tq, s.Tk, s.Hq, s.Hkv, s.causal,
                    scale_log2(s.scale, s.D)};
  return launch(ctx, *k, {uint32_t(tiles), uint32_t(s.Hq)}, {kThreads}, a, uint32_t(5 * kRows * s.D * 2 + 1024));
}

// One paged-decode kernel's launch: where it is, its block and dynamic shared memory, the
// query rows a CTA owns (of a KV head's Sq x G), and how the keys are split: by waves
// (`waves`: CTAs an SM from shared memory, whole waves filled), else about two waves.
struct DecodeKernel {
  const char* image;
  std::string entry;
  uint32_t threads, smem;
  int64_t tile_rows;
  bool waves;
  // With `waves`, where the CTAs already make two waves or more: split further until a CTA has
  // at most this many key tiles (0: no limit). See sm90.tma's registration for the figures.
  int64_t max_tiles = 0;
};

Result<ref::AttentionDecodeShape> decode_shape(const ops::OpContext& ctx) {
  ref::AttentionDecodeShape s{ctx.dim("B"), ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("Hkv"), ctx.dim("D"),
                              ctx.dim("NB"), ctx.dim("BS"), ctx.dim("MB"), float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_decode_check(s));
  HALCYON_TRY(check_aligned(ctx, {"q", "k_cache", "v_cache", "out"}));
  return s;
}

// The grid of one paged-decode call: row tiles, splits (keys `len` each) and, with more than
// one split, the call's own partials buffer (released when the plan goes, after the kernels
// that use it are queued).
struct DecodePlan {
  int64_t m_tiles = 0, len = 0, splits = 0, rows = 0;
  Buffer scratch;
  uint64_t part_o = 0, part_lse = 0;
};

// Row tiles of `tile_rows` query rows a (sequence, KV head) needs: its Sq x Hq / Hkv rows.
int64_t decode_row_tiles(const ref::AttentionDecodeShape& s, int64_t tile_rows) {
  return ceil_div(s.Sq * (s.Hq / s.Hkv), tile_rows);
}

Result<DecodePlan> decode_plan(const ops::OpContext& ctx, const DeviceFacts& dev, const ref::AttentionDecodeShape& s,
                               const DecodeKernel& dk) {
  DecodePlan pl;
  pl.m_tiles = decode_row_tiles(s, dk.tile_rows);
  const int64_t capacity = s.MB * s.BS;
  // CTAs an SM: what shared memory allows, each with 1 KiB reserved by the driver and 768 bytes
  // of static row data (the per-block limit + 1 KiB is the per-SM one on the H100: 228 KiB).
  const int64_t per_sm = std::clamp<int64_t>((dev.max_shared_per_block + 1024) / (dk.smem + 1792), 1, 4);
  const int64_t ctas = s.B * s.Hkv * pl.m_tiles, slots = int64_t(dev.compute_units) * per_sm;
  pl.len = dk.waves ? split_len_waves(dev, ctas, capacity, kKeys, per_sm) : split_len(dev, ctas, capacity, kKeys);
  if (dk.waves && dk.max_tiles > 0 && ceil_div(ctas * ceil_div(capacity, pl.len), slots) >= 2)
    while (pl.len > dk.max_tiles * kKeys) pl.len = ceil_div(ceil_div(pl.len, 2), kKeys) * kKeys;
  pl.splits = ceil_div(capacity, pl.len);
  pl.rows = s.B * s.Sq * s.Hq;
  if (s.B * s.Hkv > 65535 || pl.splits > 65535 || pl.m_tiles > INT32_MAX)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("attention_decode: B * Hkv = {} is too large a grid", s.B * s.Hkv));
  if (pl.splits > 1) {
    HALCYON_ASSIGN_OR_RETURN(pl.scratch, workspace(ctx, uint64_t(pl.splits * pl.rows * (s.D + 1) * 4)));
    pl.part_o = pl.scratch.address();
    pl.part_lse = pl.part_o + uint64_t(pl.splits * pl.rows * s.D * 4);
  }
  return pl;
}

Status decode_launch(ops::OpContext& ctx, const ref::AttentionDecodeShape& s, const DecodeKernel& dk) {
  if (s.B == 0) return {};
  HALCYON_ASSIGN_OR_RETURN(auto dev, facts(ctx));
  auto k = kernel(ctx, dev, dk.image, dk.entry.c_str());
  if (!k) return k.error();
  HALCYON_ASSIGN_OR_RETURN(const DecodePlan pl, decode_plan(ctx, dev, s, dk));
  FwdArgs a{ctx.tensor("q").address(), ctx.tensor("k_cache").address(), ctx.tensor("v_cache").address(),
            ctx.tensor("out").address(), ctx.tensor("lse").address(), ctx.tensor("block_table").address(),
            ctx.tensor("seq_lens").address(), pl.part_o, pl.part_lse, s.B, s.Hq, s.Hkv, s.Sq, s.NB, s.BS, s.MB, 1,
            pl.len, scale_log2(s.scale, s.D)};
  HALCYON_TRY(launch(ctx, *k, {uint32_t(pl.m_tiles), uint32_t(s.B * s.Hkv), uint32_t(pl.splits)}, {dk.threads}, a,
                     dk.smem));
  if (pl.splits == 1) return {};
  return combine(ctx, dev, pl.part_o, pl.part_lse, pl.rows, pl.splits, s.D);
}

// Paged decode with `stages` key tiles in flight a CTA (2: the prefill kernel's double buffer).
// ksplit: the key-split kernels (16-row tiles, the warps share a tile's keys; Sq x G <= 16).
Status decode_with(ops::OpContext& ctx, int stages, bool waves, bool ksplit = false) {
  HALCYON_ASSIGN_OR_RETURN(const auto s, decode_shape(ctx));
  const std::string entry = fmt::format("hc_attn_fwd_d{}{}{}_sm80", s.D, stages == 2 ? "" : fmt::format("_s{}", stages),
                                        ksplit ? "_ks" : "");
  return decode_launch(ctx, s,
                       {kImage, entry, kThreads, uint32_t((kRows + 2 * stages * kKeys) * s.D * 2), ksplit ? 16 : kRows, waves});
}

Status decode(ops::OpContext& ctx) { return decode_with(ctx, 2, false); }
// d64: 4 stages (72 KiB); d128: 3 stages (112 KiB, two CTAs an SM on the H100; 4 stages, one CTA
// an SM, ran at about 0.55x: docs/kernels/attention.md).
Status decode_deep(ops::OpContext& ctx) { return decode_with(ctx, ctx.dim("D") == 64 ? 4 : 3, true); }
Status decode_ksplit(ops::OpContext& ctx) { return decode_with(ctx, ctx.dim("D") == 64 ? 4 : 3, true, true); }

// Shared memory a block may take must hold `stages` K/V tiles of the call's D.
template <int STAGES_D64, int STAGES_D128>
bool decode_fits(const ops::ApplyContext& ctx, std::string* why) {
  if (!ctx.has_call() || !ctx.facts.max_shared_per_block) return true;
  const int64_t D = ctx.dim("D"), stages = D == 64 ? STAGES_D64 : STAGES_D128;
  const int64_t need = (kRows + 2 * stages * kKeys) * D * 2 + 768;
  if (need <= ctx.facts.max_shared_per_block) return true;
  if (why) *why = fmt::format("it needs {} bytes of shared memory a block, {} has {}", need, ctx.facts.uri,
                              ctx.facts.max_shared_per_block);
  return false;
}

struct MlaArgs {
  uint64_t q, kv, out, lse, table, lens, part_o, part_lse;
  int64_t B, Sq, Hq, NB, BS, MB, split_len;
  double scale_log2;
};

// One MLA kernel's launch geometry: rows a CTA owns, keys a tile, threads, dynamic shared
// memory, and how splits are chosen.
struct MlaKernel {
  const char* image;
  const char* entry;
  int64_t rows, keys, threads;
  uint32_t shared;
  bool one_cta_per_sm;  // split so that CTAs fill whole waves of one CTA an SM (else two waves)
  // The toolkit's cubin where the device runs it (kernels that take registers with setmaxnreg:
  // the driver's JIT may spill them, docs/backends/cuda.md), and a tensor map over the cache
  // as the first parameter.
  CodeFrom code = CodeFrom::kPtx;
  bool tma = false;
};
constexpr MlaKernel kMlaSm80{kImage, "hc_attn_mla_sm80", kMlaRows, kMlaKeys, kThreads,
                            uint32_t((kMlaRows * 576 + 2 * kMlaKeys * 576 + kMlaRows * kMlaKeys) * 2), false};
// attention_mla_sm90.cu (kMlaShared there): 64 rows, tiles of 64 keys, 2 warpgroups; 1 KiB of
// alignment, Q + 2 KV stages, P, and 1792 bytes of row data: 232192 bytes, no static part.
constexpr uint32_t kMlaSm90Shared = 1024 + 3 * 64 * 576 * 2 + 64 * 64 * 2 + 64 * 28;
constexpr MlaKernel kMlaSm90{"attention_mla_sm90", "hc_attn_mla_sm90", 64, 64, 256, kMlaSm90Shared, true};
constexpr MlaKernel kMlaSm90C2{"attention_mla_sm90", "hc_attn_mla_sm90_c2", 64, 64, 256, kMlaSm90Shared, true};
constexpr MlaKernel kMlaSm90Ov{"attention_mla_sm90", "hc_attn_mla_sm90_ov", 64, 64, 256, kMlaSm90Shared, true};
// attention_mla_sm90_ws.cu (kMwsShared there): as kMlaSm90 plus the producer warpgroup (384
// threads) and 10 mbarriers: 232272 bytes.
constexpr uint32_t kMlaSm90WsShared = 1024 + 3 * 64 * 576 * 2 + 64 * 64 * 2 + 64 * 28 + 10 * 8;
constexpr const char* kMlaWsImage = "attention_mla_sm90_ws";
constexpr MlaKernel kMlaSm90Ws{kMlaWsImage, "hc_attn_mla_sm90ws", 64, 64, 384, kMlaSm90WsShared, true,
                               CodeFrom::kCubinIfExact};
constexpr MlaKernel kMlaSm90WsSfirst{kMlaWsImage, "hc_attn_mla_sm90ws_sfirst", 64, 64, 384, kMlaSm90WsShared, true,
                                     CodeFrom::kCubinIfExact};
constexpr MlaKernel kMlaSm90WsTma{kMlaWsImage, "hc_attn_mla_sm90ws_tma", 64, 64, 384, kMlaSm90WsShared, true,
                                  CodeFrom::kCubinIfExact, true};
// P in each tile's own stage (the kernel's PST builds): a buffer a stage.
constexpr MlaKernel kMlaSm90WsPs{kMlaWsImage, "hc_attn_mla_sm90ws_ps", 64, 64, 384, kMlaSm90WsShared, true,
                                 CodeFrom::kCubinIfExact};
constexpr MlaKernel kMlaSm90WsTmaPs{kMlaWsImage, "hc_attn_mla_sm90ws_tma_ps", 64, 64, 384, kMlaSm90WsShared, true,
                                    CodeFrom::kCubinIfExact, true};
// attention_mla_sm90_pair.cu (kMpShared there): Q and two slots, P_a's buffer, row data, 28
// mbarriers.
constexpr uint32_t kMlaSm90PairShared = 1024 + 3 * 64 * 576 * 2 + 64 * 64 * 2 + 64 * 28 + 28 * 8;
constexpr const char* kMlaPairImage = "attention_mla_sm90_pair";
constexpr MlaKernel kMlaSm90Pair{kMlaPairImage, "hc_attn_mla_sm90_pair", 64, 64, 384, kMlaSm90PairShared, true,
                                 CodeFrom::kCubinIfExact, true};
constexpr MlaKernel kMlaSm90PairBlk{kMlaPairImage, "hc_attn_mla_sm90_pair_blk", 64, 64, 384, kMlaSm90PairShared, true,
                                    CodeFrom::kCubinIfExact, true};

Status mla_with(ops::OpContext& ctx, const MlaKernel& mk) {
  ref::AttentionMlaShape s{ctx.dim("B"), ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("NB"), ctx.dim("BS"), ctx.dim("MB"),
                           float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_mla_decode_check(s));
  HALCYON_TRY(check_aligned(ctx, {"q", "kv_cache", "out"}));
  if (s.B == 0) return {};
  HALCYON_ASSIGN_OR_RETURN(auto dev, facts(ctx));
  auto k = kernel(ctx, dev, mk.image, mk.entry, mk.code);
  if (!k) return k.error();
  const int64_t m_tiles = ceil_div(s.Sq * s.Hq, mk.rows);
  const int64_t capacity = s.MB * s.BS;
  const int64_t len = mk.one_cta_per_sm ? split_len_waves(dev, s.B * m_tiles, capacity, mk.keys, 1)
                                        : split_len(dev, s.B * m_tiles, capacity, mk.keys);
  const int64_t splits = ceil_div(capacity, len);
  const int64_t rows = s.B * s.Sq * s.Hq;
  if (s.B > 65535 || splits > 65535)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("attention_mla_decode: B = {} is too large a grid", s.B));
  MlaArgs a{ctx.tensor("q").address(), ctx.tensor("kv_cache").address(), ctx.tensor("out").address(),
            ctx.tensor("lse").address(), ctx.tensor("block_table").address(), ctx.tensor("seq_lens").address(),
            0, 0, s.B, s.Sq, s.Hq, s.NB, s.BS, s.MB, len, scale_log2(s.scale, ref::kMlaQkDim)};
  Buffer scratch;  // released when this returns, after the kernels that use it are queued
  if (splits > 1) {
    HALCYON_ASSIGN_OR_RETURN(scratch, workspace(ctx, uint64_t(splits * rows * (ref::kMlaVDim + 1) * 4)));
    const uint64_t ws = scratch.address();
    a.part_o = ws;
    a.part_lse = ws + uint64_t(splits * rows * ref::kMlaVDim * 4);
  }
  const Dim3 grid{uint32_t(m_tiles), uint32_t(s.B), uint32_t(splits)};
  if (mk.tma) {  // [NB * BS][576] rows, boxes of 64 columns x 64 rows (one tile of one 64-column block)
    HALCYON_ASSIGN_OR_RETURN(TensorMap map, dense_map(ctx, ctx.tensor("kv_cache"), HAL_TENSOR_MAP_BF16, 2,
                                                      {uint64_t(ref::kMlaQkDim), uint64_t(s.NB * s.BS)}, 64, 64));
    HALCYON_TRY(launch_packed(ctx, *k, grid, {uint32_t(mk.threads)}, mk.shared, [&](ArgPack& p) {
      p.value(map).value(a.q).value(a.kv).value(a.out).value(a.lse).value(a.table).value(a.lens).value(a.part_o);
      p.value(a.part_lse).value(a.B).value(a.Sq).value(a.Hq).value(a.NB).value(a.BS).value(a.MB);
      p.value(a.split_len).value(a.scale_log2);
    }));
  } else {
    HALCYON_TRY(launch(ctx, *k, grid, {uint32_t(mk.threads)}, a, mk.shared));
  }
  if (splits == 1) return {};
  return combine(ctx, dev, a.part_o, a.part_lse, rows, splits, ref::kMlaVDim);
}

Status mla_decode(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm80); }
Status mla_decode_sm90(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90); }
Status mla_decode_sm90_c2(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90C2); }
Status mla_decode_sm90_ov(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90Ov); }
Status mla_decode_sm90_ws(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90Ws); }
Status mla_decode_sm90_ws_sfirst(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90WsSfirst); }
Status mla_decode_sm90_ws_tma(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90WsTma); }
Status mla_decode_sm90_ws_ps(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90WsPs); }
Status mla_decode_sm90_ws_tma_ps(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90WsTmaPs); }
Status mla_decode_sm90_pair(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90Pair); }
Status mla_decode_sm90_pair_blk(ops::OpContext& ctx) { return mla_with(ctx, kMlaSm90PairBlk); }

// The sm_90a MLA kernels take 227 KiB of shared memory: H100/H200 class, not every sm_90 part.
template <uint32_t need = kMlaSm90Shared>
bool mla_sm90_applies(const ops::ApplyContext& ctx, std::string* why) {
  if (ctx.facts.max_shared_per_block >= need) return true;
  if (why)
    *why = fmt::format("it needs {} bytes of shared memory a block, {} has {}", need, ctx.facts.uri,
                       ctx.facts.max_shared_per_block);
  return false;
}

ops::RegisterOpImpl r_prefill({"attention_prefill", HAL_MODULE_PTX, "sm_80", "", 10, prefill});
ops::RegisterOpImpl r_prefill_sm90({"attention_prefill", HAL_MODULE_PTX, "sm_90a", "", 20, prefill_sm90});
ops::RegisterOpImpl r_decode({"attention_decode", HAL_MODULE_PTX, "sm_80", "", 10, decode, "sm80", nullptr, nullptr,
                             true, nullptr, "mma.sync, 2 K/V stages, rows = the Sq x G queries of a KV head"});
// Deeper pipelines, splits by whole waves. sm80.deep is chosen: on the H100 it ran 1.00-1.02x
// (Hkv 16) and 1.28-1.30x (Hkv 2) as fast as sm80 (docs/PERFORMANCE.md).
ops::RegisterOpImpl r_decode_deep({"attention_decode", HAL_MODULE_PTX, "sm_80", "", 12, decode_deep, "sm80.deep",
                                  decode_fits<4, 3>, nullptr, true, nullptr,
                                  "as sm80 with 3 (d128) or 4 (d64) K/V stages, splits filling whole waves"});
// The key-split kernels serve calls with at most 16 query rows a KV head (Sq x Hq / Hkv).
bool sixteen_rows(const ops::ApplyContext& ctx, std::string* why) {
  if (!ctx.has_call() || ctx.dim("Hkv") == 0) return true;
  const int64_t rows = ctx.dim("Sq") * (ctx.dim("Hq") / ctx.dim("Hkv"));
  if (rows <= 16) return true;
  if (why) *why = fmt::format("Sq x Hq / Hkv = {} query rows a KV head, more than its 16", rows);
  return false;
}
bool ksplit_applies(const ops::ApplyContext& ctx, std::string* why) {
  return decode_fits<4, 3>(ctx, why) && sixteen_rows(ctx, why);
}
// Chosen where it applies: on the H100 it ran 1.08x (Hkv 16: 100% of the copy rate) and 1.06x
// (Hkv 2: 89%) as fast as sm80.deep (docs/PERFORMANCE.md, run 3).
ops::RegisterOpImpl r_decode_ksplit({"attention_decode", HAL_MODULE_PTX, "sm_80", "", 14, decode_ksplit, "sm80.ksplit",
                                    ksplit_applies, nullptr, true, nullptr,
                                    "as sm80.deep, the 4 warps sharing each tile's keys (<= 16 rows a KV head)"});
// Hopper paged decode (attention_decode_sm90.cu): the key split of sm80.ksplit with a producer
// warp issuing TMA boxes (min(BS, 64) key rows x 1 head x D dims) into a ring of stages
// (mbarriers), 160 threads a CTA.
constexpr const char* kDecodeSm90Image = "attention_decode_sm90";
// DecCfg<D, STAGES, KT>::kShared: 1 KiB of alignment, STAGES K and V tiles of `keys` keys, 16 query rows
// padded to D + 8 elements, the mbarriers (8 bytes each, 2 a stage, in 128-byte units).
uint32_t decode_sm90_shared(int64_t D, int64_t stages, int64_t keys = kKeys) {
  return uint32_t(1024 + stages * 2 * keys * D * 2 + kDecodeRows * (D + 8) * 2 + ceil_div(16 * stages, 128) * 128);
}
// Whether a block of the build with `stages` stages fits the device's shared memory (unknown
// limits pass: the launch then says).
bool decode_sm90_fits(const DeviceFacts& dev, int64_t D, int64_t stages, int64_t keys = kKeys) {
  return !dev.max_shared_per_block || decode_sm90_shared(D, stages, keys) <= dev.max_shared_per_block;
}
// Whether the unsplit grid of one CTA an SM (the deep build: twice the stages) fills a single
// wave to 90% or more. Its SMs then keep as many bytes in flight as two CTAs of the shallow
// build (6 x 32 KiB against 2 x 3 at d128), and no key split, partials or combine are needed
// where the shallow build would split to fill its two slots an SM. On an H200 (2026-11-29,
// fourth session) b64 Hkv 2 (128 CTAs on 132 SMs) ran 1.9% faster so in two calls (138.8 against
// 141.4 us; 139.1-140.1 against 140.6-141.4), where a grid of several waves (b64 Hkv 16, 7.8
// waves unsplit) kept the shallow build ahead (964.5 against 975.0).
bool one_full_wave(const DeviceFacts& dev, const ref::AttentionDecodeShape& s, int64_t deep_stages) {
  const int64_t ctas = s.B * s.Hkv * decode_row_tiles(s, kDecodeRows), sms = dev.compute_units;
  return decode_sm90_fits(dev, s.D, deep_stages) && ctas <= sms && 10 * ctas >= 9 * sms;
}
// KT: keys a tile (64, or 128 in the k128 builds). PAIR: a d64 cache's KV heads two to a CTA,
// seen as Hkv / 2 heads of 128 dims (decode_sm90's PAIR: the d128 kernel, each query row
// padded with zeros to its pair's 128 dims, each output row its own head's half).
template <int STAGES_D128, int STAGES_D64, int MAX_TILES, int KT = kKeys, bool PAIR = false>
Status decode_sm90(ops::OpContext& ctx) {
  HALCYON_ASSIGN_OR_RETURN(auto s, decode_shape(ctx));
  if (s.B == 0) return {};
  if (PAIR && (s.D != 64 || s.Hkv % 2 != 0))  // decode_pair_applies refuses these calls
    return Error(HAL_INTERNAL, "attention_decode head pairs: D must be 64 and Hkv even");
  HALCYON_ASSIGN_OR_RETURN(auto dev, facts(ctx));
  if (PAIR) s.Hkv /= 2;  // the pairs; s.D stays the rows' 64 (partials, combine)
  const int64_t Dk = PAIR ? 128 : s.D;  // the kernel's head dims
  int64_t stages = Dk == 64 ? STAGES_D64 : STAGES_D128, max_tiles = MAX_TILES;
  // The deep build (twice the stages, one CTA an SM) has no head-pair form: pairs keep theirs.
  if (!PAIR && MAX_TILES > 0 && one_full_wave(dev, s, 2 * stages)) stages *= 2, max_tiles = 0;
  const DecodeKernel dk{kDecodeSm90Image,
                        fmt::format("hc_attn_decode_d{}_s{}{}_sm90", PAIR ? "64p" : std::to_string(s.D), stages,
                                    KT == 128 ? "_k128" : ""),
                        160, decode_sm90_shared(Dk, stages, KT), kDecodeRows, true, max_tiles};
  auto k = kernel(ctx, dev, dk.image, dk.entry.c_str());
  if (!k) return k.error();
  HALCYON_ASSIGN_OR_RETURN(const DecodePlan pl, decode_plan(ctx, dev, s, dk));
  const int64_t box_rows = std::min<int64_t>(s.BS, kKeys);
  // The caches [NB, BS, Hkv, D] seen as [NB x BS rows, Hkv, D / 64, 64], a box a row's whole
  // head slice (one request of D x 2 bytes a row; on an H200 0.3-1.6% faster than a box a
  // 64-dim half in four comparisons, 2026-11-29), without L2 promotion: every byte is read
  // once, and on an H200 (Nsight Compute: L2 at 95-97% of its throughput with 256-byte
  // promotion) the decode ran 4.6% faster without it (1003.8 against 1051.3 us at Hkv 16;
  // 128-byte promotion 1009.0; Hkv 2 level), docs/PERFORMANCE.md 2026-11-28.
  HALCYON_ASSIGN_OR_RETURN(TensorMap tk, head_row_map(ctx, ctx.tensor("k_cache"), s.NB * s.BS, s.Hkv, Dk, box_rows,
                                                      HAL_TENSOR_MAP_L2_NONE));
  HALCYON_ASSIGN_OR_RETURN(TensorMap tv, head_row_map(ctx, ctx.tensor("v_cache"), s.NB * s.BS, s.Hkv, Dk, box_rows,
                                                      HAL_TENSOR_MAP_L2_NONE));
  const double sl2 = scale_log2(s.scale, s.D);
  HALCYON_TRY(launch_packed(ctx, *k, {uint32_t(pl.m_tiles), uint32_t(s.B * s.Hkv), uint32_t(pl.splits)}, {dk.threads},
                            dk.smem, [&](ArgPack& a) {
                              a.value(tk).value(tv).value(ctx.tensor("q").address()).value(ctx.tensor("out").address());
                              a.value(ctx.tensor("lse").address()).value(ctx.tensor("block_table").address());
                              a.value(ctx.tensor("seq_lens").address()).value(pl.part_o).value(pl.part_lse);
                              a.value(s.B).value(s.Hq).value(s.Hkv).value(s.Sq).value(s.NB).value(s.BS).value(s.MB);
                              a.value(pl.len).value(sl2);
                            }));
  if (pl.splits == 1) return {};
  return combine(ctx, dev, pl.part_o, pl.part_lse, pl.rows, pl.splits, s.D);
}
// Where it runs: its image built, tensor maps, at most 16 query rows a KV head, D 64 or 128,
// boxes that never cross a cache block (BS a multiple of 64, or dividing 64 and >= 8: the
// swizzle's 8-row unit), and its shared memory.
template <int STAGES_D128, int STAGES_D64, int KT = kKeys>
bool decode_sm90_applies(const ops::ApplyContext& ctx, std::string* why) {
  auto no = [&](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  if (!ptx::find(kDecodeSm90Image, "sm_90a")) return no("its PTX image was not built");
  if (!ctx.facts.has("tensor_map")) return no(fmt::format("{} makes no tensor maps", ctx.facts.uri));
  if (!sixteen_rows(ctx, why)) return false;
  if (!ctx.has_call()) return true;
  const int64_t D = ctx.dim("D"), BS = ctx.dim("BS");
  if (D != 64 && D != 128) return no(fmt::format("D = {} (the kernel has 64 and 128)", D));
  if (!(BS % kKeys == 0 || (BS >= 8 && kKeys % BS == 0)))
    return no(fmt::format("block size {}: a TMA box of min(BS, 64) rows would cross a block (it needs a multiple of "
                          "64 or a divisor of 64 from 8)", BS));
  for (const char* t : {"k_cache", "v_cache"})
    if (address_of(ctx, t) % 16 != 0) return no(fmt::format("tensor '{}' is not 16-byte aligned", t));
  const int64_t stages = D == 64 ? STAGES_D64 : STAGES_D128;
  if (decode_sm90_fits(ctx.facts, D, stages, KT)) return true;
  return no(fmt::format("it needs {} bytes of shared memory a block, {} has {}", decode_sm90_shared(D, stages, KT),
                        ctx.facts.uri, ctx.facts.max_shared_per_block));
}
// Whether the TMA kernel pays over sm80.ksplit: where the memory's peak per SM is above what
// cp.async streams an SM. On the H100 (3.35 TB/s, 25 GB/s per SM) both are held by the memory:
// sm90.tma ran at 99% / 88% of the copy rate (Hkv 16 / 2) against sm80.ksplit's 100% / 89%
// (docs/PERFORMANCE.md, 2026-11-25 02:33 UTC). On the H200 (4.8 TB/s, 36 GB/s per SM)
// sm80.ksplit reached 3.3 TB/s, 25 GB/s per SM (78% of the copy rate, 00:40 UTC): its ceiling
// an SM, which the TMA ring (up to 6 x 32 KiB in flight an SM, no CTA-wide barrier) is built to
// lift. The same threshold as the MoE gather rule (28 GB/s per SM, moe_ops.cpp). Measured on an
// H200 since (2026-11-25 and 2026-11-28): sm90.tma 1.18x (Hkv 16) and 1.13x (Hkv 2) as fast as
// sm80.ksplit there.
bool tma_pays(const ops::ApplyContext& c, std::string* why) {
  const uint64_t bw = c.facts.memory_bytes_per_s;
  const uint32_t sms = c.facts.compute_units;
  if (!bw || !sms) {
    if (why) *why = "the device's peak memory bandwidth or SM count is unknown";
    return false;
  }
  if (double(bw) / sms > 28e9) return true;
  if (why)
    *why = fmt::format("{:.1f} GB/s of peak memory bandwidth per SM <= 28: cp.async (sm80.ksplit) keeps up",
                       double(bw) / sms / 1e9);
  return false;
}
// Two CTAs an SM (3 stages at d128, 6 at d64), chosen where tma_pays and sm90.tma.k128 (below) is
// not (d64, or a part without its shared memory), except where one CTA an SM
// with twice the stages fills one wave unsplit (one_full_wave: then it runs that build); that
// build for every grid by name only (`sm90.tma1`; H100: 201.1 against 202.7 us at Hkv 2, 1439.4
// against 1429.3 at Hkv 16). At most 32 key tiles a CTA where its CTAs make two waves or more: on an
// H200 (2026-11-29, third session, three calls) b64 Hkv 16 kv 8192 ran 1.5-3.3% faster in 4
// splits of 32 tiles (4096 CTAs) than unsplit (1024 CTAs, 3.88 waves); at Hkv 2 (one wave of
// 2 splits) every further split was slower (2 waves 1.5%, 16 waves 8%), so one wave stays.
ops::RegisterOpImpl r_decode_sm90({"attention_decode", HAL_MODULE_PTX, "sm_90a", "", 16, decode_sm90<3, 6, 32>, "sm90.tma",
                                  decode_sm90_applies<3, 6>, tma_pays, true, nullptr,
                                  "key split fed by a TMA producer warp, 3 (d128) / 6 (d64) stages, 2 CTAs an SM"});
ops::RegisterOpImpl r_decode_sm90_1({"attention_decode", HAL_MODULE_PTX, "sm_90a", "", 15, decode_sm90<6, 12, 0>,
                                    "sm90.tma1", decode_sm90_applies<6, 12>, nullptr, false, nullptr,
                                    "as sm90.tma with 6 (d128) / 12 (d64) stages, one CTA an SM (named only)"});
// Tiles of 128 keys (KT = 128: each compute warp's step over 32 keys), one CTA an SM (d128: 3
// stages of 64 KiB), splits by whole waves. A step costs about as much whatever its keys
// (attention_decode_sm90.cu), and twice the keys a step lift the rate at which the last CTAs of
// a wave can take their stages. On an H200 (2026-11-29, ninth session, two bench runs in one
// call): b64 Hkv 2 137.8 / 137.6 us against sm90.tma's 140.6 / 140.4 (cuDNN 135.2), Hkv 16
// 961.0 / 975.2 against 967.4 / 990.8 (cuDNN 960.7). Chosen over sm90.tma at d128. At d64 (H200,
// 2026-11-30, calls 7-10) it was within 1.5% of sm90.tma either way (b64 Hkv 16 0.3-0.9% slower
// but 0.9% faster once, Hkv 2 1.4-1.8% faster): d64 keeps sm90.tma, and the head pairs where
// they fill a wave (sm90.tma.k128.pair).
bool k128_preferred(const ops::ApplyContext& ctx, std::string* why) {
  if (!tma_pays(ctx, why)) return false;
  if (!ctx.has_call() || ctx.dim("D") == 128) return true;
  if (why)
    *why = fmt::format("D = {}: within 1.5% of sm90.tma there (which, or the head pairs, takes it)", ctx.dim("D"));
  return false;
}
ops::RegisterOpImpl r_decode_sm90_k128({"attention_decode", HAL_MODULE_PTX, "sm_90a", "", 17,
                                       decode_sm90<3, 6, 0, 128>, "sm90.tma.k128", decode_sm90_applies<3, 6, 128>,
                                       k128_preferred, true, nullptr,
                                       "as sm90.tma with tiles of 128 keys (32 a warp), one CTA an SM"});
// Where the head-pair builds run: as sm90.tma (whose 128-dim shared memory they take), on a d64
// cache with an even Hkv, at most 16 query rows a pair (Sq x 2 Hq / Hkv).
template <int KT>
bool decode_pair_applies(const ops::ApplyContext& ctx, std::string* why) {
  if (!decode_sm90_applies<3, 6, KT>(ctx, why)) return false;
  if (!ctx.has_call()) return true;
  std::string w;
  const int64_t D = ctx.dim("D"), Hkv = ctx.dim("Hkv"), rows = ctx.dim("Sq") * 2 * (ctx.dim("Hq") / Hkv);
  if (D != 64) w = fmt::format("D = {}: head pairs are of d64 heads", D);
  else if (Hkv % 2 != 0) w = fmt::format("Hkv = {} is odd: no head pairs", Hkv);
  else if (rows > kDecodeRows) w = fmt::format("Sq x 2 Hq / Hkv = {} query rows a head pair, more than its 16", rows);
  else if (!decode_sm90_fits(ctx.facts, 128, 3, KT))
    w = fmt::format("it needs {} bytes of shared memory a block, {} has {}", decode_sm90_shared(128, 3, KT),
                    ctx.facts.uri, ctx.facts.max_shared_per_block);
  else return true;
  if (why) *why = std::move(w);
  return false;
}
// A d64 cache's KV heads two to a CTA: reads of 256 contiguous bytes a row instead of 128, the
// d128 kernels' geometry. `sm90.tma.k128.pair` is chosen at d64 where tma_pays and the pairs
// make at least one wave (B x Hkv / 2 >= the SMs): on an H200 (2026-11-30, call 10) b64 Hq16
// Hkv 16 kv8192 ran 500.3 us against sm90.tma's 519.5 and k128's 514.8 (cuDNN 495.6; the
// 64-key pair build 507.0), while at Hkv 2 (64 pairs, split to fill the SMs) pairs were slower
// (81.7 against 79.6). `sm90.tma.pair` (sm90.tma's 64-key tiles, two CTAs an SM) by name only.
bool pair_preferred(const ops::ApplyContext& ctx, std::string* why) {
  if (!tma_pays(ctx, why)) return false;
  if (!ctx.has_call()) return true;
  const int64_t pairs = ctx.dim("B") * (ctx.dim("Hkv") / 2);
  if (pairs >= int64_t(ctx.facts.compute_units)) return true;
  if (why)
    *why = fmt::format("{} head pairs fill less than a wave of {} SMs (measured slower there)", pairs,
                       ctx.facts.compute_units);
  return false;
}
ops::RegisterOpImpl r_decode_sm90_pair({"attention_decode", HAL_MODULE_PTX, "sm_90a", "", 9,
                                       decode_sm90<3, 6, 32, kKeys, true>, "sm90.tma.pair", decode_pair_applies<kKeys>,
                                       nullptr, false, nullptr,
                                       "as sm90.tma on a d64 cache, two KV heads a CTA (named only)"});
ops::RegisterOpImpl r_decode_sm90_k128_pair({"attention_decode", HAL_MODULE_PTX, "sm_90a", "", 18,
                                            decode_sm90<3, 6, 0, 128, true>, "sm90.tma.k128.pair",
                                            decode_pair_applies<128>, pair_preferred, true, nullptr,
                                            "as sm90.tma.k128 on a d64 cache, two KV heads a CTA"});
ops::RegisterOpImpl r_mla({"attention_mla_decode", HAL_MODULE_PTX, "sm_80", "", 10, mla_decode, "sm80",
                          nullptr, nullptr, true, nullptr, "mma.sync, 16 rows a CTA (the cache read once a 16-row block)"});
ops::RegisterOpImpl r_mla_sm90({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 20, mla_decode_sm90, "sm90",
                               mla_sm90_applies<>, nullptr, true, nullptr,
                               "wgmma, 64 rows a CTA (the cache read once a 64-row block), 2 warpgroups"});
// Variants measured slower than sm90 on the H100 (run 3: 1.02x and 1.07x the time at Sq 1):
// only when named, for comparisons (the bench and the GPU test run them).
ops::RegisterOpImpl r_mla_sm90_c2({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 15, mla_decode_sm90_c2,
                                  "sm90.c2", mla_sm90_applies<>, nullptr, false, nullptr,
                                  "as sm90, S in two independent wgmma accumulator chains (named only: slower)"});
ops::RegisterOpImpl r_mla_sm90_ov({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 16, mla_decode_sm90_ov,
                                  "sm90.ov", mla_sm90_applies<>, nullptr, false, nullptr,
                                  "as sm90.c2, the next tile's S queued behind this tile's P V (named only: slower)"});
// Warp-specialised (producer warpgroup, two consumers taking alternate tiles): chosen only where
// its cubin loads (setmaxnreg: runs 1 and 2 on the H100 went through the driver's JIT and took
// 666 / 973 us at Sq 1; run 3, the cubin and the fixed copy order, 301 us). sm90.ws.tma (below)
// goes before it where the block size allows TMA.
template <const char* const* IMAGE>
bool mla_cubin(const ops::ApplyContext& ctx, std::string* why) {
  if (cubin_applies(ctx, *IMAGE)) return true;
  if (why) *why = "its cubin does not load here (the JIT-compiled PTX is not the measured code)";
  return false;
}
constexpr auto mla_ws_cubin = mla_cubin<&kMlaWsImage>;
// The TMA build: cache blocks of a multiple of 64 rows (a tile in one block), tensor maps, rows
// addressable by a 32-bit coordinate.
template <uint32_t SHARED = kMlaSm90WsShared>
bool mla_ws_tma_applies(const ops::ApplyContext& ctx, std::string* why) {
  if (!mla_sm90_applies<SHARED>(ctx, why)) return false;
  auto no = [&](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  if (!ctx.facts.has("tensor_map")) return no(fmt::format("{} makes no tensor maps", ctx.facts.uri));
  if (!ctx.has_call()) return true;
  if (ctx.dim("BS") % 64 != 0) return no(fmt::format("BS = {} is not a multiple of 64", ctx.dim("BS")));
  if (ctx.dim("NB") * ctx.dim("BS") > INT32_MAX)
    return no(fmt::format("NB x BS = {} cache rows, more than a tensor map coordinate", ctx.dim("NB") * ctx.dim("BS")));
  return true;
}
ops::RegisterOpImpl r_mla_sm90_ws({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 22, mla_decode_sm90_ws,
                                  "sm90.ws", mla_sm90_applies<kMlaSm90WsShared>, mla_ws_cubin, true, nullptr,
                                  "wgmma, 64 rows a CTA, a cp.async producer warpgroup and two consumers on alternate tiles"});
ops::RegisterOpImpl r_mla_sm90_ws_sfirst({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 17,
                                         mla_decode_sm90_ws_sfirst, "sm90.ws.sfirst",
                                         mla_sm90_applies<kMlaSm90WsShared>, nullptr, false, nullptr,
                                         "as sm90.ws, each tile's S queued first always (named only: a comparison)"});
// Chosen where it applies: on the H100 (run 3, docs/PERFORMANCE.md) 281.0 us at Sq 1 (71% of the
// copy rate) against sm90.ws's 301.0, and 527.2 against 547.3 us at Sq 2. Run 4: the CTS passed
// with it chosen for the BS 64 cases, racecheck 0 hazards and memcheck 0 errors there.
ops::RegisterOpImpl r_mla_sm90_ws_tma({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 24, mla_decode_sm90_ws_tma,
                                      "sm90.ws.tma", mla_ws_tma_applies<>, mla_ws_cubin, true, nullptr,
                                      "as sm90.ws, the tiles copied by TMA (BS a multiple of 64)"});
// P in the stages (a P buffer a stage: a tile's P is published before the other tile's P V):
// named only until measured.
ops::RegisterOpImpl r_mla_sm90_ws_ps({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 18, mla_decode_sm90_ws_ps,
                                     "sm90.ws.ps", mla_sm90_applies<kMlaSm90WsShared>, mla_ws_cubin, false, nullptr,
                                     "as sm90.ws, each tile's P in its own stage's rope block (named only)"});
ops::RegisterOpImpl r_mla_sm90_ws_tma_ps({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 19,
                                         mla_decode_sm90_ws_tma_ps, "sm90.ws.tma.ps", mla_ws_tma_applies<>,
                                         mla_ws_cubin, false, nullptr,
                                         "as sm90.ws.tma, each tile's P in its own stage's rope block (named only)"});
// Pairs of tiles, both S of a pair at once and only the softmaxes chained (FlashMLA's schedule),
// each slot's copy completing in two groups (sm90.pair) or block by block (sm90.pair.blk). H200,
// beside sm90.ws.tma in one process, three runs each (docs/PERFORMANCE.md, 2026-12-01 second
// session, calls 12 and 14): Sq 2 x Hq 128 sm90.pair 467.2-471.2 us, sm90.pair.blk 470.9-474.2,
// sm90.ws.tma 501.0-506.0; Sq 1 x Hq 128 sm90.pair.blk 258.5-261.2, sm90.ws.tma 261.7-262.1,
// sm90.pair 263.5-264.3. At Sq 1 a sequence's cache is read by 2 CTAs instead of 4, fewer copies hit L2 and
// their latency is on the chain of the pairs (the wait accounting: consumer 1 waits 22-25% of its
// loop for its tile), which the block-by-block copies shorten. So the registry takes sm90.pair
// from 256 query rows a sequence and sm90.pair.blk below; not measured on an H100. Over other
// Hq (2026-12-01 third session, `--mla-shapes`, calls 5-6): at 128 rows (Hq 64 x Sq 2, Hq 128 x
// Sq 1) sm90.pair.blk 2.5-3% faster than sm90.pair, at 16-64 rows 0.3-1.3%, at 256 rows (Hq
// 16-128) the two within 1% either way and at 512 level: the rule holds where it matters.
bool mla_pair_rows(const ops::ApplyContext& ctx, bool many, std::string* why) {
  if (!ctx.has_call() || (ctx.dim("Sq") * ctx.dim("Hq") >= 256) == many) return mla_cubin<&kMlaPairImage>(ctx, why);
  if (why)
    *why = fmt::format("Sq x Hq = {} query rows a sequence: {} 256 the other build is faster",
                       ctx.dim("Sq") * ctx.dim("Hq"), many ? "below" : "from");
  return false;
}
bool mla_pair_preferred(const ops::ApplyContext& ctx, std::string* why) { return mla_pair_rows(ctx, true, why); }
bool mla_pair_blk_preferred(const ops::ApplyContext& ctx, std::string* why) { return mla_pair_rows(ctx, false, why); }
ops::RegisterOpImpl r_mla_sm90_pair({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 25, mla_decode_sm90_pair,
                                    "sm90.pair", mla_ws_tma_applies<kMlaSm90PairShared>, mla_pair_preferred, true,
                                    nullptr,
                                    "wgmma, TMA, pairs of key tiles: both S at once, the softmaxes chained (BS a "
                                    "multiple of 64; chosen from 256 query rows a sequence)"});
ops::RegisterOpImpl r_mla_sm90_pair_blk({"attention_mla_decode", HAL_MODULE_PTX, "sm_90a", "", 26,
                                        mla_decode_sm90_pair_blk, "sm90.pair.blk",
                                        mla_ws_tma_applies<kMlaSm90PairShared>, mla_pair_blk_preferred, true, nullptr,
                                        "as sm90.pair, the copies completing block by block (chosen below 256 query "
                                        "rows a sequence)"});

}  // namespace
}  // namespace halcyon::ptxop
