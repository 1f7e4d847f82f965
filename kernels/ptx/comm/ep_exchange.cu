// ep_dispatch and ep_combine for NVIDIA sm_80 and later: expert-parallel dispatch and combine
// through peer memory (kernels/comm/ep_*.contract; the protocol is the reference's,
// kernels/reference/include/halcyon/kernels/reference/comm.hpp). Rows are stored straight
// into the owning rank's expert-contiguous receive buffer (a mapping of the peer's memory:
// hal_comm_buffer_import), and ranks tell each other what has landed through flags in the
// receiver's memory: st.release.sys after a __threadfence_system by the block's first thread
// (the block's stores are ordered before it by bar.sync), ld.acquire.sys by the waiter. A flag
// holds the generation of the layer that raised it and is never reset.
//
// Launch: grid (blocks, ranks in this launch), kEpThreads threads (2 x kEpThreads for
// hc_ep_combine_wide). blockIdx.y is the rank's index in
// the launch: the world form runs every rank of the contract in one grid (each rank's memory a
// slice of the stacked tensors), a layer launches its own rank alone. Every block of the grid
// must be resident at once (blocks wait on flags raised by other blocks): the launchers keep
// blocks x ranks within the device's (or partition's) compute units.
// Device code only (compiled with `nvcc -ptx`).
#include <cstdint>

#include "../moe/gemm_common.cuh"  // hc::pack_bf16x2, hc::to_bf16: moe_combine's roundings

namespace {

constexpr int kMaxRanks = 8;
constexpr int kEpThreads = 512;  // the launchers' block size (ops/ptx/comm_ops.cpp); the wide combine takes twice
constexpr unsigned long long kWaitLimitNs = 20ull * 1000 * 1000 * 1000;  // a peer that never comes: trap

struct DispatchPeers {
  unsigned long long recv[kMaxRanks], counts[kMaxRanks], count_flags[kMaxRanks], chunk_flags[kMaxRanks];
  unsigned long long row_source[kMaxRanks];
};
struct CombinePeers {
  unsigned long long expert_out[kMaxRanks], ready[kMaxRanks];
};

__device__ __forceinline__ void flag_release(unsigned long long at, int v) {
  asm volatile("st.release.sys.global.s32 [%0], %1;" ::"l"(at), "r"(v) : "memory");
}
// After a __threadfence_system by the same thread: the fence and this store form the release.
__device__ __forceinline__ void flag_relaxed(unsigned long long at, int v) {
  asm volatile("st.relaxed.sys.global.s32 [%0], %1;" ::"l"(at), "r"(v) : "memory");
}
__device__ __forceinline__ int flag_acquire(unsigned long long at) {
  int v;
  asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(at) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Spins until the flag holds v. A rank that never raises it would hang the stream: after
// kWaitLimitNs the kernel traps, and the launch's stream reports the error.
__device__ void wait_flag(unsigned long long at, int v) {
  if (flag_acquire(at) == v) return;
  const unsigned long long t0 = now_ns();
  while (flag_acquire(at) != v) {
    __nanosleep(100);
    if (now_ns() - t0 > kWaitLimitNs) __trap();
  }
}
// Loads that bypass L1 (a line of an earlier generation may sit there) for the count matrix.
__device__ __forceinline__ int load_volatile(const int* p) { return *reinterpret_cast<const volatile int*>(p); }

__device__ __forceinline__ long long first_expert(long long E, long long q, long long P) { return E * q / P; }

// Pieces of 16 bytes each lane of a copying warp keeps in flight (a local load waits about a
// microsecond before its store can go over the link; with dedup the copies that stay on the GPU
// bound the kernel, and 16 ran 15-20% faster than 8 on two H200s: docs/expert_parallel.md).
constexpr int kCopyDepth = 16;
// Expert ids a thread loads at once when counting slots (its loads in flight together).
constexpr int kCountDepth = 8;
// A copying warp fences its stores (and so lets the chunks it finished be flagged) after about
// this many bytes: a fence waits for the warp's stores to land across the link, and chunks of
// a few rows would otherwise stall each warp every few rows.
constexpr long long kFenceBytes = 1024 * 1024;
// Combine reads each token's K rows, up to kCombineDepth of them in flight per thread (the
// DeepSeek-V3 top-8 in one go): remote reads wait a round trip over the link.
constexpr int kCombineDepth = 8;
// ... for kCombineItems (token, 8-column) pieces at once: 512 threads x 2 x 8 x 16 bytes =
// 128 KiB in flight an SM.
constexpr int kCombineItems = 2;
constexpr long long kCombinePassTokens = 1 << 16;

// Read-only input (dispatch's x) through the non-coherent path, not kept in L1 (read once).
__device__ __forceinline__ uint4 load_nc(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// One row of m 16-byte pieces by one warp, kCopyDepth pieces in flight per lane. kInput: src
// is read-only for the kernel's lifetime (dispatch's x); else it was written during it (by
// peers, or by other blocks) and is read from L2 (__ldcg), never a stale line of L1 or the
// read-only path.
template <bool kInput = true>
__device__ __forceinline__ void copy_row16(const uint4* src, uint4* dst, unsigned m, int lane) {
  for (unsigned c0 = lane; c0 < m; c0 += 32 * kCopyDepth) {
    uint4 v[kCopyDepth];
#pragma unroll
    for (int u = 0; u < kCopyDepth; ++u)
      if (c0 + 32 * u < m) v[u] = kInput ? load_nc(src + c0 + 32 * u) : __ldcg(src + c0 + 32 * u);
#pragma unroll
    for (int u = 0; u < kCopyDepth; ++u)
      if (c0 + 32 * u < m) dst[c0 + 32 * u] = v[u];
  }
}

#ifdef HC_EP_TMA_STORES
// sm_90: rows leave through the tensor memory accelerator. A warp stages a row in pieces of
// kPiece bytes in its own kStages-deep ring of shared memory (the lanes' loads, then stores to
// shared memory), and its first lane hands each piece to one bulk store (cp.async.bulk) to the
// destination, so the SM's store units no longer carry the rows over the link.
constexpr unsigned kPiece = 3584, kStages = 3;
constexpr int kPieceLoads = kPiece / 16 / 32;  // 16-byte loads a lane makes for one piece

__device__ __forceinline__ void bulk_store(void* dst, const void* src, unsigned bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(src));
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(s), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Until at most kStages - 1 pieces still read their shared memory: the oldest stage is free.
__device__ __forceinline__ void bulk_wait_stage() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kStages - 1) : "memory");
}
// Until every bulk store of this thread has been written; then its writes are ordered with the
// thread's generic accesses (the flags' fence and stores that follow).
__device__ __forceinline__ void bulk_wait_written() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// One row of `bytes` (a multiple of 16) from src to dst by one warp through its ring `ring`
// (kStages pieces); `next` is the ring's next stage, kept across rows.
__device__ __forceinline__ void copy_row_tma(const uint4* src, char* dst, unsigned bytes, int lane, uint4* ring,
                                             unsigned& next) {
  for (unsigned off = 0; off < bytes; off += kPiece) {
    const unsigned n = (bytes - off < kPiece ? bytes - off : kPiece) / 16;
    uint4 v[kPieceLoads];
#pragma unroll
    for (int u = 0; u < kPieceLoads; ++u)
      if (lane + 32 * u < n) v[u] = load_nc(src + off / 16 + lane + 32 * u);
    if (lane == 0) bulk_wait_stage();
    __syncwarp();
    uint4* stage = ring + next * (kPiece / 16);
#pragma unroll
    for (int u = 0; u < kPieceLoads; ++u)
      if (lane + 32 * u < n) stage[lane + 32 * u] = v[u];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the lanes' stores, before the bulk copy reads them
    __syncwarp();
    if (lane == 0) bulk_store(dst + off, stage, n * 16);
    next = next + 1 == kStages ? 0 : next + 1;
  }
}
#endif

// A destination d = q * RC + row (an i32 by the contracts, so P * RC < 2^31): the rank and the
// row by one 32-bit division, not the 64-bit routine a long long RC would call per row.
struct RankRow {
  unsigned q, row;
};
__device__ __forceinline__ RankRow split_dest(int d, long long RC) {
  const unsigned rc = (unsigned)RC, q = (unsigned)d / rc;
  return {q, (unsigned)d - q * rc};
}

// The row a slot j of this rank landed in at its owner, from the block's own tables: slot_dest
// for the block's slots [s0, ...) (written before the copies), else base[e] (the row of the
// block's first slot of expert e) less the slots of e in [j, s0). j >= s0 - K + 1 here.
__device__ __forceinline__ long long row_of_slot(long long j, int e, const int* topk_ids, const int* slot_dest,
                                                 const int* base, long long s0, long long q, long long RC) {
  if (j >= s0) return slot_dest[j] < 0 ? RC : slot_dest[j] - q * RC;
  long long row = base[e];
  for (long long i = j; i < s0; ++i) row -= topk_ids[i] == e;
  return row;
}
// dedup: the row slot s's bytes come from at rank q (not this rank): the row of the token's first
// slot (lowest k) owned by q, or `row` itself (s is that slot, or that slot's row was dropped).
// The token's earlier expert ids are loaded kIdBatch at a time, all in flight together.
constexpr int kIdBatch = 8;
__device__ __forceinline__ unsigned source_row(long long s, unsigned q, unsigned row, const int* topk_ids,
                                               const int* slot_dest, const int* base, const int* owner, long long s0,
                                               long long K, long long E, long long RC) {
  const long long t0 = s - s % K;
  for (long long j0 = t0; j0 < s; j0 += kIdBatch) {
    int ev[kIdBatch];
#pragma unroll
    for (int u = 0; u < kIdBatch; ++u) ev[u] = j0 + u < s ? topk_ids[j0 + u] : -1;
#pragma unroll
    for (int u = 0; u < kIdBatch; ++u) {
      const int e = ev[u];
      if (e < 0 || e >= E || owner[e] != (int)q) continue;
      const long long r = row_of_slot(j0 + u, e, topk_ids, slot_dest, base, s0, q, RC);
      return r < RC ? (unsigned)r : row;
    }
  }
  return row;
}

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
}  // namespace

// Shared memory (dynamic, ints): batch [blockDim] (the expert of each slot of a batch; first,
// for 16-byte reads), cnt [P*E] (the count matrix), next [E] (this rank's next row per expert),
// run [E] (this rank's slots per expert before the block's current batch), tot [E] (this rank's
// slots per expert), base [E] (the row of the block's first slot per expert), owner [E] (each
// expert's rank), the received total, then done [the block's chunks] (how many of its warps
// have finished each chunk).
//
// dedup: a slot bound for another rank whose token has an earlier slot there is not sent; its
// row_source entry at the owner names that slot's row, and the owner's blocks copy the row
// there once every chunk has arrived (kernels/comm/ep_dispatch.contract).
//
// Block b owns the contiguous chunks [chunks * b / grid, chunks * (b + 1) / grid). Its work
// before the first copy is a few steps of the grid's width, not one per chunk: every block
// counts all of this rank's slots once (all loads of a thread in flight together), the layout
// is a warp's prefix sum, and the destinations of the block's slots are found in batches of
// blockDim.
extern "C" __global__ void __launch_bounds__(kEpThreads, 1) hc_ep_dispatch(const unsigned short* __restrict__ x, const int* __restrict__ topk_ids,
                                          int* __restrict__ slot_dest, int* __restrict__ expert_offsets, long long T,
                                          long long K, long long H, long long E, long long RC, long long C,
                                          long long chunk_rows, long long generation, long long zero_tail,
                                          long long dedup, long long P, long long rank0, long long EO,
                                          DispatchPeers peers) {
  extern __shared__ int smem[];
  int* batch_e = smem;
  int* cnt = batch_e + blockDim.x;
  int* next = cnt + P * E;
  int* run = next + E;
  int* tot = run + E;
  int* base = tot + E;
  int* owner = base + E;
  int* received = owner + E;
  int* done = received + 1;
  const long long slots = T * K, chunks = (slots + chunk_rows - 1) / chunk_rows;
  const long long cb0 = chunks * blockIdx.x / gridDim.x, cb1 = chunks * (blockIdx.x + 1) / gridDim.x;
  const long long s0 = min(slots, cb0 * chunk_rows), s1 = min(slots, cb1 * chunk_rows);  // the block's slots
#ifdef HC_EP_TMA_STORES
  // The warps' staging rings, 128-byte aligned, after done[] (one counter per chunk of the block).
  const long long mine_max = (chunks + gridDim.x - 1) / gridDim.x;
  const unsigned long long ring_at = (reinterpret_cast<unsigned long long>(done + mine_max) + 127) & ~127ull;
  uint4* ring = reinterpret_cast<uint4*>(ring_at) + (threadIdx.x >> 5) * (kStages * kPiece / 16);
  unsigned next_stage = 0;
#endif
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const long long me = rank0 + blockIdx.y;
  const int gen = (int)generation;
  x += blockIdx.y * T * H;
  topk_ids += blockIdx.y * slots;
  slot_dest += blockIdx.y * slots;
  expert_offsets += blockIdx.y * EO;

  // 1. Every block counts this rank's slots per expert (tot) and those before its own (run);
  //    block 0 publishes tot in every rank's count matrix.
  for (long long e = tid; e < E; e += blockDim.x) tot[e] = 0, run[e] = 0;
  __syncthreads();
  for (long long i0 = tid; i0 < slots; i0 += (long long)blockDim.x * kCountDepth) {
    int ev[kCountDepth];
#pragma unroll
    for (int u = 0; u < kCountDepth; ++u) {
      const long long i = i0 + (long long)u * blockDim.x;
      ev[u] = i < slots ? topk_ids[i] : -1;
    }
#pragma unroll
    for (int u = 0; u < kCountDepth; ++u)
      if (ev[u] >= 0 && ev[u] < E) {
        atomicAdd(&tot[ev[u]], 1);
        if (i0 + (long long)u * blockDim.x < s0) atomicAdd(&run[ev[u]], 1);
      }
  }
  __syncthreads();
  if (blockIdx.x == 0) {
    for (long long q = 0; q < P; ++q)
      for (long long e = tid; e < E; e += blockDim.x) reinterpret_cast<int*>(peers.counts[q])[me * E + e] = tot[e];
    __syncthreads();
    if (tid == 0) {
      __threadfence_system();
      for (long long q = 0; q < P; ++q) flag_release(peers.count_flags[q] + 4 * me, gen);
    }
  }
  // 2. Every block waits for the whole count matrix, then reads it.
  if (tid < P) wait_flag(peers.count_flags[me] + 4 * tid, gen);
  __syncthreads();
  const int* own_counts = reinterpret_cast<const int*>(peers.counts[me]);
  for (long long i = tid; i < P * E; i += blockDim.x) cnt[i] = load_volatile(own_counts + i);
  __syncthreads();
  // 3. Layout, by warp 0 (32 experts a step, a prefix sum of their totals across the lanes):
  //    where each expert starts in its owner's buffer, and where this rank's rows of it go.
  if (warp == 0) {
    for (long long q = 0; q < P; ++q) {
      const long long e0 = first_expert(E, q, P), e1 = first_expert(E, q + 1, P);
      int carry = 0;
      for (long long eb = e0; eb < e1; eb += 32) {
        const long long e = eb + lane;
        int before = 0, total = 0;
        if (e < e1)
          for (long long p = 0; p < P; ++p) {
            total += cnt[p * E + e];
            if (p < me) before += cnt[p * E + e];
          }
        int incl = total;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int v = __shfl_up_sync(0xffffffffu, incl, o);
          if (lane >= o) incl += v;
        }
        const int at = carry + incl - total;
        if (e < e1) {
          if (q == me && blockIdx.x == 0) expert_offsets[e - e0] = at;
          next[e] = at + before;
        }
        carry += __shfl_sync(0xffffffffu, incl, 31);
      }
      if (q == me && lane == 0) *received = carry;
    }
    __syncwarp();
    if (blockIdx.x == 0)
      for (long long i = first_expert(E, me + 1, P) - first_expert(E, me, P) + lane; i < EO; i += 32)
        expert_offsets[i] = *received;
  }
  __syncthreads();
  for (long long e = tid; e < E; e += blockDim.x) {
    base[e] = next[e] + run[e];
    long long q = E > 0 ? e * P / E : 0;  // the owner: the largest q with first_expert(q) <= e
    while (q + 1 < P && first_expert(E, q + 1, P) <= e) ++q;
    while (q > 0 && first_expert(E, q, P) > e) --q;
    owner[e] = (int)q;
  }
  __syncthreads();
  // 4. Where each of the block's slots goes (slot_dest), a batch of blockDim slots at a time: a
  //    slot's row is next + run + its rank among the batch's earlier slots of the same expert.
  for (long long b0 = s0; b0 < s1; b0 += blockDim.x) {
    const long long n = s1 - b0 < (long long)blockDim.x ? s1 - b0 : blockDim.x;
    const int e = tid < n ? topk_ids[b0 + tid] : -1;
    batch_e[tid] = e;
    __syncthreads();
    int dest = -1;
    if (e >= 0 && e < E) {
      int rank_in_batch = 0;
      const int4* b4 = reinterpret_cast<const int4*>(batch_e);
      for (int j = 0; j < (tid >> 2); ++j) {
        const int4 v = b4[j];
        rank_in_batch += (v.x == e) + (v.y == e) + (v.z == e) + (v.w == e);
      }
      for (int j = tid & ~3; j < tid; ++j) rank_in_batch += batch_e[j] == e;
      const long long row = next[e] + run[e] + rank_in_batch;
      if (row < RC) dest = (int)(owner[e] * RC + row);  // a row past RC lands nowhere (dest -1)
    }
    if (tid < n) slot_dest[b0 + tid] = dest;
    __syncthreads();
    if (e >= 0 && e < E) atomicAdd(&run[e], 1);
  }
  for (long long i = tid; i < cb1 - cb0; i += blockDim.x) done[i] = 0;
  __syncthreads();  // the block's slot_dest entries and done[] are visible to all its warps
  // 5. The copies, warp by warp with no block-wide wait: warp w takes the block's slots s0 + w,
  //    s0 + w + warps, ... (it reads the next one's destination before copying the current row).
  //    A warp fences what it has stored (the fence waits until its stores have landed across
  //    the link) once it has stored kFenceBytes since its last fence, or at its end, and then
  //    counts itself in done[] of every chunk it has finished since; a chunk's last warp raises
  //    the chunk's flag at every rank. So a fence stalls one warp while the others keep the link
  //    busy, and few of them are needed whatever the chunk size.
  bool vec = (H & 7) == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  for (long long q = 0; q < P; ++q) vec = vec && (peers.recv[q] & 15) == 0;
  long long unfenced = 0;  // bytes stored since the last fence
  long long open = cb0;    // the first chunk this warp has not counted itself in
  long long s = s0 + warp;
  int d = s < s1 ? slot_dest[s] : -1;
  while (open < cb1) {
    if (s < s1) {
      const long long sn = s + warps;
      const int dn = sn < s1 ? slot_dest[sn] : -1;
      const RankRow at = split_dest(d < 0 ? 0 : d, RC);
      const unsigned from = d >= 0 && dedup && at.q != me
                                ? source_row(s, at.q, at.row, topk_ids, slot_dest, base, owner, s0, K, E, RC)
                                : at.row;
      if (d >= 0 && dedup && lane == 0) reinterpret_cast<int*>(peers.row_source[at.q])[at.row] = (int)from;
      if (d >= 0 && from == at.row) {
        const unsigned short* src = x + (s / K) * H;
        unsigned short* dst = reinterpret_cast<unsigned short*>(peers.recv[at.q]) + (long long)at.row * H;
#ifdef HC_EP_TMA_STORES
        if (vec)
          copy_row_tma(reinterpret_cast<const uint4*>(src), reinterpret_cast<char*>(dst), (unsigned)(2 * H), lane, ring,
                       next_stage);
        else
#else
        if (vec)
          copy_row16(reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), (unsigned)(H >> 3), lane);
        else
#endif
          for (long long h = lane; h < H; h += 32) dst[h] = src[h];
        unfenced += 2 * H;
      }
      s = sn, d = dn;
    }
    // The chunks before the one of slot s are finished for this warp (all, once s >= s1).
    const long long finished = s < s1 ? s / chunk_rows : cb1;
    if (finished == open || (unfenced < kFenceBytes && s < s1)) continue;
    __syncwarp();
    if (lane == 0) {
#ifdef HC_EP_TMA_STORES
      bulk_wait_written();
#endif
      __threadfence_system();
      bool fenced = false;
      for (long long c = open; c < finished; ++c)
        if (atomicAdd(&done[c - cb0], 1) == warps - 1) {
          // The other warps' fenced rows, seen through done[], before the flags: one fence, then
          // relaxed stores (a release each would fence again per rank).
          if (!fenced) __threadfence_system(), fenced = true;
          for (long long q = 0; q < P; ++q) flag_relaxed(peers.chunk_flags[q] + 4 * (me * C + c), gen);
        }
    }
    __syncwarp();
    open = finished, unfenced = 0;
  }
  // 6. Wait for every chunk of every rank that sends here: the grid shares the waits, or with
  //    dedup every block waits for all (its copies below read rows any chunk may have brought).
  const long long stride = (long long)gridDim.x * blockDim.x;
  const long long wait0 = dedup ? tid : (long long)blockIdx.x * blockDim.x + tid, wait_step = dedup ? blockDim.x : stride;
  for (long long p = 0; p < P; ++p) {
    long long sent = 0;
    for (long long e = 0; e < E; ++e) sent += cnt[p * E + e];
    long long n = (sent + chunk_rows - 1) / chunk_rows;
    if (n > C) n = C;
    for (long long c = wait0; c < n; c += wait_step) wait_flag(peers.chunk_flags[me] + 4 * (p * C + c), gen);
  }
  // 7. dedup: the rows that did not cross are copied from their token's row that did, a stripe of
  //    up to 32 rows a warp at a time (one load of their row_source entries, then a copy per row
  //    to make); stripes narrower than 32 where there are fewer rows than 32 a warp, so that
  //    every warp of the grid takes some (a small batch's copies would otherwise sit on a few
  //    warps). Without dedup every row came from x: row_source is the identity.
  unsigned short* own = reinterpret_cast<unsigned short*>(peers.recv[me]);
  int* own_source = reinterpret_cast<int*>(peers.row_source[me]);
  const long long total = min((long long)*received, RC);  // rows past RC were dropped
  if (dedup) {
    __syncthreads();  // the block's waits, before any of its warps reads what they cover
    const long long nw = (long long)gridDim.x * warps;
    const long long width = min(32ll, max(1ll, (total + nw - 1) / nw));  // rows a stripe
    for (long long r0 = ((long long)blockIdx.x * warps + warp) * width; r0 < total; r0 += nw * width) {
      const long long r = r0 + lane;
      const int from = lane < width && r < total ? __ldcg(own_source + r) : (int)r;
      unsigned moves = __ballot_sync(0xffffffffu, from != r && from >= 0 && from < total);
      while (moves) {
        const int i = __ffs(moves) - 1;
        moves &= moves - 1;
        const long long src = __shfl_sync(0xffffffffu, from, i), dst = r0 + i;
        if (vec)
          copy_row16<false>(reinterpret_cast<const uint4*>(own + src * H), reinterpret_cast<uint4*>(own + dst * H),
                            (unsigned)(H >> 3), lane);
        else
          for (long long h = lane; h < H; h += 32) own[dst * H + h] = __ldcg(own + src * H + h);
      }
    }
  } else {
    for (long long r = (long long)blockIdx.x * blockDim.x + tid; r < total; r += stride) own_source[r] = (int)r;
  }
  // 8. The conformance form zeroes the rows past what arrived (row_source -1).
  if (zero_tail) {
    for (long long i = total * H + (long long)blockIdx.x * blockDim.x + tid; i < RC * H; i += stride) own[i] = 0;
    for (long long r = total + (long long)blockIdx.x * blockDim.x + tid; r < RC; r += stride) own_source[r] = -1;
  }
}

// Combine: block 0 of each rank raises "my expert outputs are complete" in every rank's
// memory; every block waits until all ranks have, then sums its run of chunks' tokens: each thread
// owns 8-column pieces, k in order, fp32 fused multiply-adds from 0, one rounding (what
// moe_combine's kernel computes, so a layer's output equals the single-rank layer's).
// Items: the (token, 8-column) pieces a thread sums at once (kCombineDepth rows each in flight).
template <int Items>
__device__ __forceinline__ void ep_combine(const float* __restrict__ topk_weights, const int* __restrict__ slot_dest,
                                           unsigned short* __restrict__ out, long long T, long long K, long long H,
                                           long long RC, long long chunk_rows, long long generation, long long P,
                                           long long rank0, const CombinePeers& peers) {
  const int tid = threadIdx.x;
  const long long me = rank0 + blockIdx.y;
  const int gen = (int)generation;
  topk_weights += blockIdx.y * T * K;
  slot_dest += blockIdx.y * T * K;
  out += blockIdx.y * T * H;
  if (blockIdx.x == 0 && tid == 0) {
    __threadfence_system();
    for (long long q = 0; q < P; ++q) flag_release(peers.ready[q] + 4 * me, gen);
  }
  __shared__ unsigned long long eout[kMaxRanks];  // indexed by rank: no local-memory copy of the table
  if (tid < P) eout[tid] = peers.expert_out[tid];
  if (tid < P) wait_flag(peers.ready[me] + 4 * tid, gen);
  __syncthreads();
  bool vec = (H & 7) == 0 && (reinterpret_cast<uintptr_t>(out) & 15) == 0;
  for (long long q = 0; q < P; ++q) vec = vec && (eout[q] & 15) == 0;
  // Block b takes the contiguous chunks [chunks * b / grid, chunks * (b + 1) / grid), in passes
  // of at most kCombinePassTokens tokens (the flat piece index below stays 32-bit).
  const long long chunks = (T + chunk_rows - 1) / chunk_rows;
  const long long b0 = chunks * blockIdx.x / gridDim.x * chunk_rows;
  const long long b1 = min(T, chunks * (blockIdx.x + 1) / gridDim.x * chunk_rows);
  for (long long t0 = b0; t0 < b1; t0 += kCombinePassTokens) {
    const long long t1 = min(b1, t0 + kCombinePassTokens);
    if (vec) {
      // The pass's (token, 8-column piece) pairs as one flat range over the block, so no thread
      // idles at a row's or a chunk's end; each pair reads its K rows (through the peer
      // mappings) kCombineDepth at a time, all in flight before the first is summed.
      const unsigned m = (unsigned)(H >> 3), total = (unsigned)(t1 - t0) * m, step = blockDim.x;
      for (unsigned i0 = tid; i0 < total; i0 += Items * step) {
        float acc[Items][8];
        const int* dests[Items];
        const float* wts[Items];
        unsigned col[Items];
#pragma unroll
        for (int it = 0; it < Items; ++it) {
          const unsigned i = i0 + it * step < total ? i0 + it * step : i0, r = i / m;
          col[it] = i - r * m;
          dests[it] = slot_dest + (t0 + r) * K;
          wts[it] = topk_weights + (t0 + r) * K;
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[it][j] = 0.f;
        }
        for (long long k0 = 0; k0 < K; k0 += kCombineDepth) {
          uint4 v[Items][kCombineDepth];
          unsigned ok = 0;  // bit it * kCombineDepth + q: that row exists
#pragma unroll
          for (int it = 0; it < Items; ++it)
#pragma unroll
            for (int q = 0; q < kCombineDepth; ++q) {
              const int d = k0 + q < K ? dests[it][k0 + q] : -1;
              const bool has = d >= 0 && d < P * RC;
              ok |= unsigned(has) << (it * kCombineDepth + q);
              const RankRow at = split_dest(has ? d : 0, RC);
              v[it][q] = has ? reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned short*>(eout[at.q]) +
                                                              (long long)at.row * H)[col[it]]
                             : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
          for (int it = 0; it < Items; ++it)
#pragma unroll
            for (int q = 0; q < kCombineDepth; ++q) {
              if (!((ok >> (it * kCombineDepth + q)) & 1u)) continue;
              const float w = wts[it][k0 + q];
              const uint32_t u[4] = {v[it][q].x, v[it][q].y, v[it][q].z, v[it][q].w};
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                acc[it][2 * j] += w * bf16_lo(u[j]);
                acc[it][2 * j + 1] += w * bf16_hi(u[j]);
              }
            }
        }
#pragma unroll
        for (int it = 0; it < Items; ++it) {
          const unsigned i = i0 + it * step;
          if (i >= total) continue;
          uint4 o;
          o.x = hc::pack_bf16x2(acc[it][0], acc[it][1]);
          o.y = hc::pack_bf16x2(acc[it][2], acc[it][3]);
          o.z = hc::pack_bf16x2(acc[it][4], acc[it][5]);
          o.w = hc::pack_bf16x2(acc[it][6], acc[it][7]);
          reinterpret_cast<uint4*>(out + (t0 + i / m) * H)[col[it]] = o;
        }
      }
    } else {
      for (long long t = t0; t < t1; ++t) {
        const int* dests = slot_dest + t * K;
        const float* wts = topk_weights + t * K;
        for (long long h = tid; h < H; h += blockDim.x) {
          float acc = 0.f;
          for (long long k = 0; k < K; ++k) {
            const int d = dests[k];
            if (d < 0 || d >= P * RC) continue;
            const RankRow at = split_dest(d, RC);
            const unsigned short* row = reinterpret_cast<const unsigned short*>(eout[at.q]);
            const unsigned short v = *reinterpret_cast<const volatile unsigned short*>(row + (long long)at.row * H + h);
            acc += wts[k] * __uint_as_float(uint32_t(v) << 16);
          }
          out[t * H + h] = hc::to_bf16(acc);
        }
      }
    }
  }
}

// 512 threads, two pieces each: the registry's ep_combine on streams of more than 24 SMs
// (ops/ptx/comm_ops.cpp), "narrow" by name.
extern "C" __global__ void __launch_bounds__(kEpThreads, 1)
    hc_ep_combine(const float* __restrict__ topk_weights, const int* __restrict__ slot_dest,
                  unsigned short* __restrict__ out, long long T, long long K, long long H, long long RC,
                  long long chunk_rows, long long generation, long long P, long long rank0, CombinePeers peers) {
  ep_combine<kCombineItems>(topk_weights, slot_dest, out, T, K, H, RC, chunk_rows, generation, P, rank0, peers);
}
// 1024 threads, one piece each (the same bytes in flight an SM, twice the warps to hide the
// link's latency behind): the registry's ep_combine on streams of up to 24 SMs, "wide" by name.
extern "C" __global__ void __launch_bounds__(2 * kEpThreads, 1)
    hc_ep_combine_wide(const float* __restrict__ topk_weights, const int* __restrict__ slot_dest,
                       unsigned short* __restrict__ out, long long T, long long K, long long H, long long RC,
                       long long chunk_rows, long long generation, long long P, long long rank0, CombinePeers peers) {
  ep_combine<1>(topk_weights, slot_dest, out, T, K, H, RC, chunk_rows, generation, P, rank0, peers);
}
