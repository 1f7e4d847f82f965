// comm_dispatch (kernels/comm/comm_dispatch.contract) in OpenCL C: out[r] = x[src_row[r]], one
// chunk of chunk_rows rows at a time. A persistent grid: group g moves chunks g, g + G, ...
// (G groups, sized by the launcher from the units the stream's partition may use), its
// work-items along the H columns. A row whose src_row lies outside [0, T) is skipped.
#include "common.h"

__kernel void hc_comm_dispatch(__global const ushort* x, __global const int* src_row, __global ushort* out, long T,
                               long R, long H, long chunk_rows) {
  long chunks = (R + chunk_rows - 1) / chunk_rows;
  for (long c = get_group_id(0); c < chunks; c += get_num_groups(0)) {
    long end = min(R, (c + 1) * chunk_rows);
    for (long r = c * chunk_rows; r < end; ++r) {
      long src = src_row[r];
      if (src < 0 || src >= T) continue;
      for (long h = get_local_id(0); h < H; h += get_local_size(0)) out[r * H + h] = x[src * H + h];
    }
  }
}
