// CPU reference of the communication operators (kernels/comm/*.contract), with the
// conventions of moe.hpp: pure functions over host pointers, arguments checked before
// anything is written, work split by destination rows.
#pragma once

#include <halcyon/kernels/reference/moe.hpp>

namespace halcyon::ref {

// comm_dispatch: out[r] = x[src_row[r]] for the destination rows in `rows` (default all R).
// x [T, H], src_row [R], out [R, H]. Every src_row value must lie in [0, T).
Status comm_dispatch(const bf16* x, int64_t T, const int32_t* src_row, int64_t R, int64_t H, bf16* out,
                     RowRange rows = {});

}  // namespace halcyon::ref
