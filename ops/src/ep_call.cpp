#include "ep_call.hpp"

#include <fmt/format.h>

namespace halcyon::ops {
namespace {

Status check_common(const char* op, const EpCall& c) {
  if (c.chunk_rows < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: chunk_rows = {} must be >= 1", op, c.chunk_rows));
  if (c.generation < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: generation = {} must be >= 1", op, c.generation));
  if (c.world < 1 || c.world > EpPeers::kMaxRanks)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: {} ranks; 1 to {} are supported", op, c.world, EpPeers::kMaxRanks));
  if (c.world * c.RC > INT32_MAX)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: {} ranks x {} rows do not fit int32 slot_dest", op, c.world, c.RC));
  return {};
}

// RunOptions::ep_peers: this launch is rank `rank` alone, its tensors a world of one.
Status take_peers(const char* op, const OpContext& ctx, EpCall& c) {
  const EpPeers& p = *ctx.ep_peers;
  if (ctx.dim("P") != 1)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: one rank of a communicator (RunOptions::ep_peers) takes tensors "
                                                   "of one rank, P = 1, not {}", op, ctx.dim("P")));
  if (p.ranks.empty() || p.rank >= p.ranks.size())
    return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: ep_peers: rank {} of {} ranks", op, p.rank, p.ranks.size()));
  c.world = int64_t(p.ranks.size());
  c.rank0 = p.rank;
  c.ranks = p.ranks;
  c.timeout_ms = p.timeout_ms;
  for (size_t q = 0; q < p.ranks.size(); ++q)
    for (uint64_t a : {p.ranks[q].recv, p.ranks[q].counts, p.ranks[q].count_flags, p.ranks[q].chunk_flags,
                       p.ranks[q].row_source, p.ranks[q].expert_out, p.ranks[q].ready})
      if (a % 4)
        return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: ep_peers: an address of rank {} is not 4-byte aligned", op, q));
  return {};
}

}  // namespace

Result<EpCall> ep_dispatch_call(const OpContext& ctx) {
  constexpr const char* kOp = "ep_dispatch";
  EpCall c;
  c.T = ctx.dim("T"), c.K = ctx.dim("K"), c.H = ctx.dim("H"), c.E = ctx.dim("E"), c.RC = ctx.dim("RC");
  c.EO = ctx.dim("EO"), c.C = ctx.dim("C");
  c.chunk_rows = ctx.params().i("chunk_rows");
  c.generation = int32_t(ctx.params().i("generation"));
  c.zero_tail = ctx.params().b("zero_tail");
  c.dedup = ctx.params().b("dedup");
  c.launch_ranks = ctx.dim("P");
  if (ctx.ep_peers) {
    HALCYON_TRY(take_peers(kOp, ctx, c));
    const EpPeers& p = *ctx.ep_peers;
    if (p.capacity != c.RC || p.experts != c.E || p.chunk_flags < c.C)
      return Error(HAL_INVALID_ARGUMENT,
                   fmt::format("{}: ep_peers hold {} rows, {} experts, {} chunk flags per rank; the call has capacity "
                               "{}, {} experts and needs {} chunk flags", kOp, p.capacity, p.experts, p.chunk_flags,
                               c.RC, c.E, c.C));
    c.C = p.chunk_flags;
    if (c.EO < (c.E + c.world - 1) / c.world + 1)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: expert_offsets has {} entries, {} needed", kOp, c.EO,
                                                     (c.E + c.world - 1) / c.world + 1));
  } else {
    c.world = c.launch_ranks;
    const uint64_t recv = ctx.tensor("recv").address(), counts = ctx.tensor("counts").address();
    const uint64_t cflags = ctx.tensor("count_flags").address(), kflags = ctx.tensor("chunk_flags").address();
    const uint64_t source = ctx.tensor("row_source").address();
    for (int64_t q = 0; q < c.world; ++q) {
      EpPeers::Rank r;
      r.recv = recv + uint64_t(q * c.RC * c.H * 2);
      r.counts = counts + uint64_t(q * c.world * c.E * 4);
      r.count_flags = cflags + uint64_t(q * c.world * 4);
      r.chunk_flags = kflags + uint64_t(q * c.world * c.C * 4);
      r.row_source = source + uint64_t(q * c.RC * 4);
      c.ranks.push_back(r);
    }
  }
  HALCYON_TRY(check_common(kOp, c));
  return c;
}

Result<EpCall> ep_combine_call(const OpContext& ctx) {
  constexpr const char* kOp = "ep_combine";
  EpCall c;
  c.T = ctx.dim("T"), c.K = ctx.dim("K"), c.H = ctx.dim("H"), c.RC = ctx.dim("RC");
  c.chunk_rows = ctx.params().i("chunk_rows");
  c.generation = int32_t(ctx.params().i("generation"));
  c.launch_ranks = ctx.dim("P");
  if (ctx.ep_peers) {
    HALCYON_TRY(take_peers(kOp, ctx, c));
    if (ctx.ep_peers->capacity != c.RC)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: ep_peers hold {} rows per rank, expert_out has {}", kOp,
                                                     ctx.ep_peers->capacity, c.RC));
  } else {
    c.world = c.launch_ranks;
    const uint64_t eout = ctx.tensor("expert_out").address(), ready = ctx.tensor("ready").address();
    for (int64_t q = 0; q < c.world; ++q) {
      EpPeers::Rank r;
      r.expert_out = eout + uint64_t(q * c.RC * c.H * 2);
      r.ready = ready + uint64_t(q * c.world * 4);
      c.ranks.push_back(r);
    }
  }
  HALCYON_TRY(check_common(kOp, c));
  return c;
}

}  // namespace halcyon::ops
