// Host implementation of comm_dispatch: one block per chunk of destination rows, so the
// CPU backend schedules the copy in the same units a GPU kernel does.
#include <halcyon/kernels/reference/comm.hpp>

#include <fmt/format.h>

#include "host_kernels.hpp"
#include "../src/ep_call.hpp"

namespace halcyon::host {
namespace {

struct DispatchArgs {
  uint64_t x, src_row, out;
  int64_t T, R, H, chunk_rows;
};
void dispatch_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<DispatchArgs>(blob);
  const int64_t begin = int64_t(ctx->block_id[0]) * a.chunk_rows;
  const ref::RowRange rows{begin, std::min(a.R, begin + a.chunk_rows)};
  Status s = ref::comm_dispatch(ptr<const ref::bf16>(a.x), a.T, ptr<const int32_t>(a.src_row), a.R, a.H,
                                ptr<ref::bf16>(a.out), rows);
  if (!s.ok()) hal_log(HAL_LOG_ERROR, fmt::format("comm_dispatch (host kernel): {}", s.error().message()).c_str());
}
HostKernel k_dispatch("comm_dispatch", dispatch_kernel,
                      {HALCYON_ARG_PTR(DispatchArgs, x), HALCYON_ARG_PTR(DispatchArgs, src_row),
                       HALCYON_ARG_PTR(DispatchArgs, out), HALCYON_ARG_VAL(DispatchArgs, T),
                       HALCYON_ARG_VAL(DispatchArgs, R), HALCYON_ARG_VAL(DispatchArgs, H),
                       HALCYON_ARG_VAL(DispatchArgs, chunk_rows)},
                      sizeof(DispatchArgs));

Status comm_dispatch(ops::OpContext& ctx) {
  const int64_t R = ctx.dim("R"), chunk = ctx.params().i("chunk_rows");
  if (chunk < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("comm_dispatch: chunk_rows = {} must be >= 1", chunk));
  if (R == 0) return {};
  DispatchArgs a{ctx.tensor("x").address(), ctx.tensor("src_row").address(), ctx.tensor("out").address(),
                 ctx.dim("T"), R, ctx.dim("H"), chunk};
  return launch(ctx, "comm_dispatch", uint64_t((R + chunk - 1) / chunk), a);
}

ops::RegisterOpImpl r_dispatch({"comm_dispatch", HAL_MODULE_HOST, "host", "", 0, comm_dispatch});

constexpr int64_t EpPeersMax = ops::EpPeers::kMaxRanks;

// ---- ep_dispatch, ep_combine --------------------------------------------------------------
// One host block runs the whole protocol (kernels/reference comm.hpp): the world form all
// ranks' steps in turn, one rank of a communicator its own steps with waits for the others
// (other processes over shared memory), so a block never waits for a later block of its own.

struct EpDispatchArgs {
  uint64_t x, topk_ids, slot_dest, expert_offsets;
  int64_t T, K, H, E, RC, C, EO, chunk_rows, generation, zero_tail, dedup, world, rank0, one_rank, timeout_ms;
  uint64_t recv[EpPeersMax], counts[EpPeersMax], count_flags[EpPeersMax], chunk_flags[EpPeersMax];
  uint64_t row_source[EpPeersMax];
};

ref::EpShape ep_shape(int64_t world, int64_t T, int64_t K, int64_t H, int64_t E, int64_t RC, int64_t C,
                      int64_t chunk_rows, int64_t generation) {
  ref::EpShape s;
  s.P = world, s.T = T, s.K = K, s.H = H, s.E = E, s.RC = RC, s.C = C, s.chunk_rows = chunk_rows;
  s.generation = int32_t(generation);
  return s;
}

void ep_dispatch_kernel(const hal_host_launch_ctx*, const void* blob) {
  auto a = args_of<EpDispatchArgs>(blob);
  ref::EpShape s = ep_shape(a.world, a.T, a.K, a.H, a.E, a.RC, a.C, a.chunk_rows, a.generation);
  s.dedup = a.dedup != 0;
  Status st;
  if (!a.one_rank) {
    st = ref::ep_dispatch_world(s, ptr<const ref::bf16>(a.x), ptr<const int32_t>(a.topk_ids), ptr<ref::bf16>(a.recv[0]),
                                ptr<int32_t>(a.counts[0]), ptr<int32_t>(a.count_flags[0]), ptr<int32_t>(a.chunk_flags[0]),
                                ptr<int32_t>(a.row_source[0]), ptr<int32_t>(a.slot_dest), ptr<int32_t>(a.expert_offsets),
                                a.zero_tail != 0);
  } else {
    ref::EpDispatchPeer peers[EpPeersMax];
    for (int64_t q = 0; q < a.world; ++q)
      peers[q] = {ptr<ref::bf16>(a.recv[q]), ptr<int32_t>(a.counts[q]), ptr<int32_t>(a.count_flags[q]),
                  ptr<int32_t>(a.chunk_flags[q]), ptr<int32_t>(a.row_source[q])};
    int32_t* offsets = ptr<int32_t>(a.expert_offsets);
    st = ref::ep_dispatch_rank(s, a.rank0, ptr<const ref::bf16>(a.x), ptr<const int32_t>(a.topk_ids), peers,
                               ptr<int32_t>(a.slot_dest), offsets, a.zero_tail != 0, a.timeout_ms);
    for (int64_t i = s.max_local() + 1; st.ok() && i < a.EO; ++i) offsets[i] = offsets[s.max_local()];
  }
  report("ep_dispatch", st);
}
HostKernel k_ep_dispatch(
    "ep_dispatch", ep_dispatch_kernel,
    {HALCYON_ARG_PTR(EpDispatchArgs, x), HALCYON_ARG_PTR(EpDispatchArgs, topk_ids),
     HALCYON_ARG_PTR(EpDispatchArgs, slot_dest), HALCYON_ARG_PTR(EpDispatchArgs, expert_offsets),
     HALCYON_ARG_VAL(EpDispatchArgs, T), HALCYON_ARG_VAL(EpDispatchArgs, K), HALCYON_ARG_VAL(EpDispatchArgs, H),
     HALCYON_ARG_VAL(EpDispatchArgs, E), HALCYON_ARG_VAL(EpDispatchArgs, RC), HALCYON_ARG_VAL(EpDispatchArgs, C),
     HALCYON_ARG_VAL(EpDispatchArgs, EO), HALCYON_ARG_VAL(EpDispatchArgs, chunk_rows),
     HALCYON_ARG_VAL(EpDispatchArgs, generation), HALCYON_ARG_VAL(EpDispatchArgs, zero_tail),
     HALCYON_ARG_VAL(EpDispatchArgs, dedup), HALCYON_ARG_VAL(EpDispatchArgs, world), HALCYON_ARG_VAL(EpDispatchArgs, rank0),
     HALCYON_ARG_VAL(EpDispatchArgs, one_rank), HALCYON_ARG_VAL(EpDispatchArgs, timeout_ms),
     HALCYON_ARG_VAL(EpDispatchArgs, recv), HALCYON_ARG_VAL(EpDispatchArgs, counts),
     HALCYON_ARG_VAL(EpDispatchArgs, count_flags), HALCYON_ARG_VAL(EpDispatchArgs, chunk_flags),
     HALCYON_ARG_VAL(EpDispatchArgs, row_source)},
    sizeof(EpDispatchArgs));

Status ep_dispatch(ops::OpContext& ctx) {
  auto c = ops::ep_dispatch_call(ctx);
  if (!c) return c.error();
  EpDispatchArgs a{ctx.tensor("x").address(), ctx.tensor("topk_ids").address(), ctx.tensor("slot_dest").address(),
                   ctx.tensor("expert_offsets").address(), c->T, c->K, c->H, c->E, c->RC, c->C, c->EO, c->chunk_rows,
                   c->generation, c->zero_tail, c->dedup, c->world, c->rank0, ctx.ep_peers != nullptr,
                   c->timeout_ms, {}, {}, {}, {}, {}};
  for (size_t q = 0; q < c->ranks.size(); ++q) {
    a.recv[q] = c->ranks[q].recv, a.counts[q] = c->ranks[q].counts;
    a.count_flags[q] = c->ranks[q].count_flags, a.chunk_flags[q] = c->ranks[q].chunk_flags;
    a.row_source[q] = c->ranks[q].row_source;
  }
  return launch(ctx, "ep_dispatch", 1, a);
}

struct EpCombineArgs {
  uint64_t topk_weights, slot_dest, out;
  int64_t T, K, H, RC, chunk_rows, generation, world, rank0, one_rank, timeout_ms;
  uint64_t expert_out[EpPeersMax], ready[EpPeersMax];
};

void ep_combine_kernel(const hal_host_launch_ctx*, const void* blob) {
  auto a = args_of<EpCombineArgs>(blob);
  const ref::EpShape s = ep_shape(a.world, a.T, a.K, a.H, 1, a.RC, 0, a.chunk_rows, a.generation);
  Status st;
  if (!a.one_rank) {
    st = ref::ep_combine_world(s, ptr<const ref::bf16>(a.expert_out[0]), ptr<const float>(a.topk_weights),
                               ptr<const int32_t>(a.slot_dest), ptr<ref::bf16>(a.out), ptr<int32_t>(a.ready[0]));
  } else {
    ref::EpCombinePeer peers[EpPeersMax];
    for (int64_t q = 0; q < a.world; ++q) peers[q] = {ptr<const ref::bf16>(a.expert_out[q]), ptr<int32_t>(a.ready[q])};
    st = ref::ep_combine_rank(s, a.rank0, peers, ptr<const float>(a.topk_weights), ptr<const int32_t>(a.slot_dest),
                              ptr<ref::bf16>(a.out), a.timeout_ms);
  }
  report("ep_combine", st);
}
HostKernel k_ep_combine(
    "ep_combine", ep_combine_kernel,
    {HALCYON_ARG_PTR(EpCombineArgs, topk_weights), HALCYON_ARG_PTR(EpCombineArgs, slot_dest),
     HALCYON_ARG_PTR(EpCombineArgs, out), HALCYON_ARG_VAL(EpCombineArgs, T), HALCYON_ARG_VAL(EpCombineArgs, K),
     HALCYON_ARG_VAL(EpCombineArgs, H), HALCYON_ARG_VAL(EpCombineArgs, RC), HALCYON_ARG_VAL(EpCombineArgs, chunk_rows),
     HALCYON_ARG_VAL(EpCombineArgs, generation), HALCYON_ARG_VAL(EpCombineArgs, world),
     HALCYON_ARG_VAL(EpCombineArgs, rank0), HALCYON_ARG_VAL(EpCombineArgs, one_rank),
     HALCYON_ARG_VAL(EpCombineArgs, timeout_ms), HALCYON_ARG_VAL(EpCombineArgs, expert_out),
     HALCYON_ARG_VAL(EpCombineArgs, ready)},
    sizeof(EpCombineArgs));

Status ep_combine(ops::OpContext& ctx) {
  auto c = ops::ep_combine_call(ctx);
  if (!c) return c.error();
  EpCombineArgs a{ctx.tensor("topk_weights").address(), ctx.tensor("slot_dest").address(), ctx.tensor("out").address(),
                  c->T, c->K, c->H, c->RC, c->chunk_rows, c->generation, c->world, c->rank0,
                  ctx.ep_peers != nullptr, c->timeout_ms, {}, {}};
  for (size_t q = 0; q < c->ranks.size(); ++q) a.expert_out[q] = c->ranks[q].expert_out, a.ready[q] = c->ranks[q].ready;
  return launch(ctx, "ep_combine", 1, a);
}

ops::RegisterOpImpl r_ep_dispatch({"ep_dispatch", HAL_MODULE_HOST, "host", "", 0, ep_dispatch});
ops::RegisterOpImpl r_ep_combine({"ep_combine", HAL_MODULE_HOST, "host", "", 0, ep_combine});

}  // namespace
}  // namespace halcyon::host
