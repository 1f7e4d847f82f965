// Host implementation of comm_dispatch: one block per chunk of destination rows, so the
// CPU backend schedules the copy in the same units a GPU kernel does.
#include <halcyon/kernels/reference/comm.hpp>

#include <fmt/format.h>

#include "host_kernels.hpp"

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

}  // namespace
}  // namespace halcyon::host
