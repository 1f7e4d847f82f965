// PTX implementation of comm_dispatch (kernels/ptx/comm/comm_dispatch.cu): a persistent
// grid of at most a few blocks per compute unit, each moving chunks of chunk_rows rows.
#include "ptx_launch.hpp"
#include "../src/ep_call.hpp"

namespace halcyon::ptxop {
namespace {

struct DispatchArgs {
  uint64_t x, src_row, out;
  int64_t T, R, H, chunk_rows;
};

// Four 256-thread blocks per SM keep enough 16-byte loads in flight to stream at the
// memory's rate; more blocks than chunks would idle.
constexpr int64_t kBlocksPerUnit = 4;

Status comm_dispatch(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), chunk = ctx.params().i("chunk_rows");
  if (chunk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("comm_dispatch: chunk_rows = {} must be >= 1", chunk));
  if (R == 0) return {};
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  auto k = kernel(ctx, *dev, "comm", "hc_comm_dispatch");
  if (!k) return k.error();
  const int64_t chunks = ceil_div(R, chunk);
  const int64_t grid = std::min<int64_t>(chunks, int64_t(dev->compute_units) * kBlocksPerUnit);
  DispatchArgs a{ctx.tensor("x").address(), ctx.tensor("src_row").address(), ctx.tensor("out").address(),
                 ctx.dim("T"), R, ctx.dim("H"), chunk};
  return launch(ctx, *k, {uint32_t(grid)}, {256}, a);
}

ops::RegisterOpImpl r_dispatch({"comm_dispatch", HAL_MODULE_PTX, "sm_80", "", 10, comm_dispatch});

// ---- ep_dispatch, ep_combine (kernels/ptx/comm/ep_exchange.cu) ----------------------------
// Grid (blocks, ranks of the launch): every block must be resident at once (they wait on each
// other's flags), so blocks x ranks stay within the stream's compute units.
constexpr uint32_t kEpThreads = 512;  // 512 threads x 8 pieces of 16 bytes in flight: 64 KiB an SM
constexpr int64_t kEpMax = ops::EpPeers::kMaxRanks;

struct EpDispatchPtxArgs {
  uint64_t x, topk_ids, slot_dest, expert_offsets;
  int64_t T, K, H, E, RC, C, chunk_rows, generation, zero_tail, dedup, P, rank0, EO;
  uint64_t recv[kEpMax], counts[kEpMax], count_flags[kEpMax], chunk_flags[kEpMax], row_source[kEpMax];
};
struct EpCombinePtxArgs {
  uint64_t topk_weights, slot_dest, out;
  int64_t T, K, H, RC, chunk_rows, generation, P, rank0;
  uint64_t expert_out[kEpMax], ready[kEpMax];
};

Result<uint32_t> ep_blocks(const ops::OpContext& ctx, const DeviceFacts& dev, int64_t launch_ranks, int64_t chunks) {
  if (launch_ranks > int64_t(dev.compute_units))
    return Error(HAL_UNSUPPORTED, fmt::format("{}: {} ranks in one launch need as many resident blocks, the stream has "
                                              "{} compute units", ctx.contract.op, launch_ranks, dev.compute_units));
  return uint32_t(std::max<int64_t>(1, std::min<int64_t>(chunks, int64_t(dev.compute_units) / launch_ranks)));
}

// A build of hc_ep_dispatch: its PTX image and the shared memory it needs beyond the counters.
struct DispatchBuild {
  const char* image;
  uint64_t staging_bytes;
};
// The lanes store the rows (ep_exchange.cu).
constexpr DispatchBuild kLaneStores{"ep_exchange", 0};
// Bulk copies store them (ep_exchange_sm90.cu) from per-warp staging rings: kStages = 3 pieces of
// kPiece = 3584 bytes a warp, 128-byte aligned after the counters.
constexpr DispatchBuild kBulkStores{"ep_exchange_sm90", (kEpThreads / 32) * 3 * 3584 + 128};

Status ep_dispatch(ops::OpContext& ctx, const DispatchBuild& build) {
  auto c = ops::ep_dispatch_call(ctx);
  if (!c) return c.error();
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  const int64_t chunks = ceil_div(std::max<int64_t>(c->T * c->K, 1), c->chunk_rows);
  auto blocks = ep_blocks(ctx, *dev, c->launch_ranks, chunks);
  if (!blocks) return blocks.error();
  // A batch of expert ids, the count matrix, next, run, tot, base and owner per expert, the received
  // total, and a counter per chunk of the block (hc_ep_dispatch's layout).
  const uint64_t shared = uint64_t(kEpThreads + c->world * c->E + 5 * c->E + 1 + ceil_div(chunks, *blocks)) * 4 +
                          build.staging_bytes;
  if (shared > dev->max_shared_per_block)
    return Error(HAL_UNSUPPORTED, fmt::format("ep_dispatch: {} ranks x {} experts and {} chunks of {} rows need {} bytes "
                                              "of shared memory, a block has {} (larger chunk_rows need less)", c->world,
                                              c->E, chunks, c->chunk_rows, shared, dev->max_shared_per_block));
  auto k = kernel(ctx, *dev, build.image, "hc_ep_dispatch");
  if (!k) return k.error();
  EpDispatchPtxArgs a{ctx.tensor("x").address(), ctx.tensor("topk_ids").address(), ctx.tensor("slot_dest").address(),
                      ctx.tensor("expert_offsets").address(), c->T, c->K, c->H, c->E, c->RC, c->C, c->chunk_rows,
                      c->generation, c->zero_tail, c->dedup, c->world, c->rank0, c->EO, {}, {}, {}, {}, {}};
  for (size_t q = 0; q < c->ranks.size(); ++q) {
    a.recv[q] = c->ranks[q].recv, a.counts[q] = c->ranks[q].counts;
    a.count_flags[q] = c->ranks[q].count_flags, a.chunk_flags[q] = c->ranks[q].chunk_flags;
    a.row_source[q] = c->ranks[q].row_source;
  }
  return launch(ctx, *k, {*blocks, uint32_t(c->launch_ranks)}, {kEpThreads}, a, uint32_t(shared));
}

// A build of ep_combine: its kernel and block size (ep_exchange.cu).
struct CombineBuild {
  const char* kernel;
  uint32_t threads;
};
constexpr CombineBuild kCombine512{"hc_ep_combine", kEpThreads}, kCombine1024{"hc_ep_combine_wide", 2 * kEpThreads};
// On two H200s (docs/PERFORMANCE.md, 2026-11-28 afternoon) the 1024-thread build moved 95-96% of
// the peer copy's rate on a 24-SM partition where the 512-thread one moved 84-85%, and 96-97%
// against 98-99% on 32 SMs: with few SMs each must hide more of the link's latency behind
// more warps. The registry's ep_combine takes the 1024-thread build up to this many units.
constexpr uint32_t kWideCombineMaxUnits = 24;

// build: null = by the stream's compute units (kWideCombineMaxUnits).
Status ep_combine(ops::OpContext& ctx, const CombineBuild* build) {
  auto c = ops::ep_combine_call(ctx);
  if (!c) return c.error();
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  auto blocks = ep_blocks(ctx, *dev, c->launch_ranks, ceil_div(std::max<int64_t>(c->T, 1), c->chunk_rows));
  if (!blocks) return blocks.error();
  if (!build) build = dev->compute_units <= kWideCombineMaxUnits ? &kCombine1024 : &kCombine512;
  auto k = kernel(ctx, *dev, "ep_exchange", build->kernel);
  if (!k) return k.error();
  EpCombinePtxArgs a{ctx.tensor("topk_weights").address(), ctx.tensor("slot_dest").address(), ctx.tensor("out").address(),
                     c->T, c->K, c->H, c->RC, c->chunk_rows, c->generation, c->world, c->rank0, {}, {}};
  for (size_t q = 0; q < c->ranks.size(); ++q) a.expert_out[q] = c->ranks[q].expert_out, a.ready[q] = c->ranks[q].ready;
  return launch(ctx, *k, {*blocks, uint32_t(c->launch_ranks)}, {build->threads}, a);
}

// A build chosen by name only (comparisons, tests), never by the registry.
ops::OpImpl named(const char* op, const char* target, const char* name, ops::OpImplFn fn, const char* summary) {
  ops::OpImpl i{op, HAL_MODULE_PTX, target, "", 5, fn};
  i.name = name;
  i.automatic = false;
  i.summary = summary;
  return i;
}

ops::RegisterOpImpl r_ep_dispatch({"ep_dispatch", HAL_MODULE_PTX, "sm_80", "", 10,
                                   [](ops::OpContext& c) { return ep_dispatch(c, kLaneStores); }});
// On two H200s it was no faster than the lanes' stores (docs/expert_parallel.md).
ops::RegisterOpImpl r_ep_dispatch_tma(named(
    "ep_dispatch", "sm_90a", "sm90.tma", [](ops::OpContext& c) { return ep_dispatch(c, kBulkStores); },
    "rows stored by bulk copies (TMA) from a per-warp staging ring"));
ops::RegisterOpImpl r_ep_combine({"ep_combine", HAL_MODULE_PTX, "sm_80", "", 10,
                                  [](ops::OpContext& c) { return ep_combine(c, nullptr); }});
ops::RegisterOpImpl r_ep_combine_wide(named(
    "ep_combine", "sm_80", "wide", [](ops::OpContext& c) { return ep_combine(c, &kCombine1024); },
    "1024 threads, one (token, 8-column) piece each, whatever the stream's units"));
ops::RegisterOpImpl r_ep_combine_narrow(named(
    "ep_combine", "sm_80", "narrow", [](ops::OpContext& c) { return ep_combine(c, &kCombine512); },
    "512 threads, two (token, 8-column) pieces each, whatever the stream's units"));

}  // namespace
}  // namespace halcyon::ptxop
