// moe_permute's plan for one block (kernels/ptx/moe): shared by moe_routing.cu (moe_permute,
// sm_80) and permute_fp8.cu (moe_permute_fp8, sm_90a), whose fused kernels run it before
// copying their own tokens' rows. Device code only.
#pragma once

// ----------------------------------------------------------------------------------------
// moe_permute, step 1 (B blocks of W warps): counts, offsets, both index maps. Block b owns
// slots [b * per_block, (b + 1) * per_block); warp w of it a contiguous run of those;
// hist[w][e] counts its slots per local expert (pass 1), becomes the first row of warp w's
// slots of expert e (column scan + expert scan + the slots of expert e in blocks before b), and
// pass 2 hands out rows in slot order (__match_any_sync ranks equal experts within 32 slots),
// which makes the order stable: by expert, then by slot. With B > 1 every block first counts
// all slots itself (pre[e]: those of expert e before its own slots, tot[e]: all of them; the
// B blocks read T*K ids each, from L2), so no block waits for another and no scratch memory is
// needed; block 0 writes the counts and offsets. No atomic decides an order: the only atomics
// are these shared-memory counts.
// ----------------------------------------------------------------------------------------
// A warp's walk over slots [s0, s1) of topk_ids, eight groups of 32 per step so that their
// loads are all in flight before the first use. f(slot, local, key, peers) runs for every lane
// of each group: key = the local expert (or a per-lane key past EL for slots that are not
// local), peers = the lanes of the group with the same key.
template <typename F>
__device__ __forceinline__ void walk_slots(const int* __restrict__ topk_ids, long long s0, long long s1,
                                           long long expert_begin, long long EL, long long E, F&& f) {
  const int lane = threadIdx.x & 31;
  for (long long b = s0; b < s1; b += 256) {
    int ids[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const long long s = b + j * 32 + lane;
      ids[j] = s < s1 ? topk_ids[s] : -1;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int id = ids[j];
      const bool local = id >= expert_begin && id < expert_begin + EL && id < E;
      const int key = local ? id - (int)expert_begin : (int)EL + lane;
      f(b + j * 32 + lane, local, key, __match_any_sync(0xffffffffu, key));
    }
  }
}

__device__ __forceinline__ void permute_plan_block(const int* __restrict__ topk_ids, int* __restrict__ expert_counts,
                                                   int* __restrict__ expert_offsets, int* __restrict__ row_to_slot,
                                                   int* __restrict__ slot_to_row, int* __restrict__ num_rows,
                                                   long long slots, long long E, long long expert_begin,
                                                   long long EL_, long long per_block) {
  extern __shared__ __align__(16) int ismem[];
  const int EL = (int)EL_;
  const int W = blockDim.x >> 5, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int* hist = ismem;            // [W][EL]
  int* cnt = hist + W * EL;     // [EL]
  int* scratch = cnt + EL;      // [32]
  int* pre = scratch + 32;      // [EL] with several blocks: slots of expert e before this block's
  int* tot = pre + EL;          // [EL] with several blocks: all slots of expert e
  const bool multi = gridDim.x > 1;
  for (int i = threadIdx.x; i < W * EL; i += blockDim.x) hist[i] = 0;
  if (multi)
    for (int i = threadIdx.x; i < EL; i += blockDim.x) pre[i] = tot[i] = 0;
  __syncthreads();
  const long long bs0 = blockIdx.x * per_block;
  const long long bs1 = bs0 + per_block < slots ? bs0 + per_block : slots;
  if (multi) {  // 16 loads in flight per thread before their counts
    for (long long b = 0; b < slots; b += 16LL * blockDim.x) {
      int ids[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const long long s = b + (long long)j * blockDim.x + threadIdx.x;
        ids[j] = s < slots ? topk_ids[s] : -1;
      }
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const long long s = b + (long long)j * blockDim.x + threadIdx.x;
        const int id = ids[j];
        if (id >= expert_begin && id < expert_begin + EL && id < E) {
          atomicAdd(&tot[id - (int)expert_begin], 1);
          if (s < bs0) atomicAdd(&pre[id - (int)expert_begin], 1);
        }
      }
    }
  }
  const long long seg = ((bs1 - bs0 + W - 1) / W + 31) / 32 * 32;
  const long long s0 = bs0 + warp * seg, s1 = s0 + seg < bs1 ? s0 + seg : bs1;
  int* h = hist + warp * EL;
  const unsigned lt = (1u << lane) - 1u;

  walk_slots(topk_ids, s0, s1, expert_begin, EL, E, [&](long long, bool local, int key, unsigned peers) {
    if (local && (peers & lt) == 0) h[key] += __popc(peers);
    __syncwarp();
  });
  __syncthreads();

  // Column scan: hist[w][e] = slots of expert e in warps before w (plus, with several blocks,
  // in blocks before this one); cnt[e] = the expert's total.
  const int per = (EL + blockDim.x - 1) / blockDim.x;
  const int e0 = threadIdx.x * per;
  int mine = 0;
  for (int e = e0; e < e0 + per && e < EL; ++e) {
    int run = multi ? pre[e] : 0;
    for (int w = 0; w < W; ++w) {
      int c = hist[w * EL + e];
      hist[w * EL + e] = run;
      run += c;
    }
    const int total = multi ? tot[e] : run;
    cnt[e] = total;
    if (blockIdx.x == 0) expert_counts[e] = total;
    mine += total;
  }
  // Exclusive scan of the per-thread totals -> expert offsets; hist becomes absolute rows.
  int incl = mine;
  for (int o = 1; o < 32; o <<= 1) {
    int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int w = 0; w < W; ++w) {
      int c = scratch[w];
      scratch[w] = run;
      run += c;
    }
    if (blockIdx.x == 0) {
      expert_offsets[EL] = run;
      *num_rows = run;
    }
  }
  __syncthreads();
  int run = scratch[warp] + incl - mine;
  for (int e = e0; e < e0 + per && e < EL; ++e) {
    if (blockIdx.x == 0) expert_offsets[e] = run;
    for (int w = 0; w < W; ++w) hist[w * EL + e] += run;
    run += cnt[e];
  }
  __syncthreads();

  walk_slots(topk_ids, s0, s1, expert_begin, EL, E, [&](long long s, bool local, int key, unsigned peers) {
    const int row = local ? h[key] + __popc(peers & lt) : -1;
    __syncwarp();
    if (local && (peers & lt) == 0) h[key] += __popc(peers);
    __syncwarp();
    if (s < s1) slot_to_row[s] = row;
    if (row >= 0) row_to_slot[row] = (int)s;
  });
}
