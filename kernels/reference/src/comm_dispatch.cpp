// comm_dispatch reference: rows copied by a routing map.
#include <halcyon/kernels/reference/comm.hpp>

#include "check.hpp"

#include <algorithm>

namespace halcyon::ref {

Status comm_dispatch(const bf16* x, int64_t T, const int32_t* src_row, int64_t R, int64_t H, bf16* out,
                     RowRange rows) {
  constexpr const char* kOp = "comm_dispatch";
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "R", R, 0));
  HALCYON_TRY(detail::check_size(kOp, "H", H, 1));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "destination rows", rows, R));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(kOp, "x", x, any));
  HALCYON_TRY(detail::check_ptr(kOp, "src_row", src_row, any));
  HALCYON_TRY(detail::check_ptr(kOp, "out", out, any));
  for (int64_t d = r.begin; d < r.end; ++d)
    if (src_row[d] < 0 || src_row[d] >= T)
      return detail::invalid("{}: src_row[{}] = {} is not in [0, T = {})", kOp, d, src_row[d], T);
  for (int64_t d = r.begin; d < r.end; ++d) std::copy_n(x + int64_t(src_row[d]) * H, H, out + d * H);
  return {};
}

}  // namespace halcyon::ref
