// What the launchers of ep_dispatch and ep_combine (ops/host, ops/ptx) share: the call
// resolved to ranks and every rank's addresses, from the contract's world form (every rank a
// slice of the stacked tensors) or from RunOptions::ep_peers (one rank of a communicator).
#pragma once

#include <halcyon/ops/op.hpp>

namespace halcyon::ops {

struct EpCall {
  int64_t launch_ranks = 1;  // ranks this launch computes (P of the world form, 1 for one rank)
  int64_t world = 1;         // ranks of the exchange
  int64_t rank0 = 0;         // the first rank this launch computes
  int64_t T = 0, K = 1, H = 1, E = 1, RC = 0, C = 0, EO = 0, chunk_rows = 1;
  int32_t generation = 1;
  bool zero_tail = false;
  bool dedup = true;  // ep_dispatch: a token's row crosses to a rank once (kernels/comm/ep_dispatch.contract)
  int64_t timeout_ms = 60000;
  std::vector<EpPeers::Rank> ranks;  // [world]
};

Result<EpCall> ep_dispatch_call(const OpContext& ctx);
Result<EpCall> ep_combine_call(const OpContext& ctx);

}  // namespace halcyon::ops
