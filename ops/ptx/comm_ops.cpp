// PTX implementation of comm_dispatch (kernels/ptx/comm/comm_dispatch.cu): a persistent
// grid of at most a few blocks per compute unit, each moving chunks of chunk_rows rows.
#include "ptx_launch.hpp"

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

}  // namespace
}  // namespace halcyon::ptxop
