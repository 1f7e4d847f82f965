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


// ---- Expert-parallel dispatch and combine (kernels/comm/ep_dispatch, ep_combine) ----------
//
// P ranks each hold T tokens and the experts [E*q/P, E*(q+1)/P) of rank q. Every rank has
// exchange memory that the others map (hal_comm_buffer_import); the functions below take one
// rank's view of all of it (EpDispatchPeer / EpCombinePeer, indexed by rank) and follow the
// protocol the GPU kernels follow, with the same flags:
//
//   dispatch of rank p, generation g
//     publish   p's (token, k) count per expert into row p of every rank's `counts`, then
//               count_flags[p] = g at every rank (release)
//     wait      own count_flags[*] == g (acquire): the count matrix is complete
//     send      every slot's row goes to its expert's owner's `recv`, at
//                 start of the expert in the owner's buffer (experts in order, each expert's
//                 rows from rank 0, then rank 1, ...) + rows of ranks < p for that expert +
//                 the slot's rank among p's slots for that expert (slot order);
//               slot_dest[slot] = owner * RC + row, and the owner's row_source[row] = the row
//               the bytes come from: with dedup, a slot whose token already has an earlier
//               slot (lower k) at the same other rank is not sent, its row_source is that
//               slot's row; every other slot's token row is written there, row_source = row.
//               After each chunk of chunk_rows slots, chunk_flags[p][c] = g at every rank
//               (release)
//     wait      own chunk_flags[q][c] == g for every rank q and chunk c < ceil(T_q*K/chunk)
//     finish    rows whose row_source names another row are copied from it (no chains: a
//               source row was always sent); expert_offsets of the own experts (ELM + 1
//               entries, ELM = ceil(E/P); entries past the own expert count repeat the
//               total); rows [total, RC) zeroed and their row_source -1 if asked
//   combine of rank p, generation g
//     publish   ready[p] = g at every rank (the own expert outputs are complete)
//     wait      own ready[*] == g
//     gather    out[t] = bf16(sum over k of topk_weights[t, k] * expert_out of the owner at
//               slot_dest[t, k]), summed in k order with fp64 (as moe_combine)
//
// No flag is ever reset: generation g+1 follows g (the caller counts), so back-to-back layers
// need no host step. Buffers are safe to reuse because rank p publishes its g+1 counts only
// after its combine g has read every peer's expert outputs.
inline constexpr int64_t kEpMaxRanks = 8;

struct EpDispatchPeer {
  bf16* recv = nullptr;            // [RC, H]
  int32_t* counts = nullptr;       // [P, E]
  int32_t* count_flags = nullptr;  // [P]
  int32_t* chunk_flags = nullptr;  // [P, C]
  int32_t* row_source = nullptr;   // [RC]: the row each received row is copied from (itself if sent)
};
struct EpCombinePeer {
  const bf16* expert_out = nullptr;  // [RC, H]
  int32_t* ready = nullptr;          // [P]
};
struct EpShape {
  int64_t P = 1, T = 0, K = 1, H = 1, E = 1;
  int64_t RC = 0;          // rows of each rank's recv / expert_out
  int64_t C = 0;           // chunk flags per source rank
  int64_t chunk_rows = 1;  // (token, k) slots per chunk (dispatch), tokens per chunk (combine)
  int32_t generation = 1;
  bool dedup = true;       // dispatch: a token's row crosses to a rank once (above)
  int64_t max_local() const { return (E + P - 1) / P; }  // ELM
};

// The first expert of rank q, and the rank that owns expert e (ranges as above).
inline int64_t ep_first_expert(int64_t E, int64_t q, int64_t P) { return E * q / P; }
int64_t ep_owner_rank(int64_t E, int64_t P, int64_t e);

// Flags: a release store and an acquire load of an int32 in (possibly shared) memory.
void ep_flag_store(int32_t* flag, int32_t value);
int32_t ep_flag_load(const int32_t* flag);

Status ep_dispatch_publish(const EpShape& s, int64_t rank, const int32_t* topk_ids, const EpDispatchPeer* peers);
bool ep_dispatch_counts_arrived(const EpShape& s, int64_t rank, const EpDispatchPeer* peers);
Status ep_dispatch_send(const EpShape& s, int64_t rank, const bf16* x, const int32_t* topk_ids,
                        const EpDispatchPeer* peers, int32_t* slot_dest);
bool ep_dispatch_rows_arrived(const EpShape& s, int64_t rank, const EpDispatchPeer* peers);
Status ep_dispatch_finish(const EpShape& s, int64_t rank, const EpDispatchPeer* peers, int32_t* expert_offsets,
                          bool zero_tail);

Status ep_combine_publish(const EpShape& s, int64_t rank, const EpCombinePeer* peers);
bool ep_combine_ready(const EpShape& s, int64_t rank, const EpCombinePeer* peers);
Status ep_combine_gather(const EpShape& s, int64_t rank, const EpCombinePeer* peers, const float* topk_weights,
                         const int32_t* slot_dest, bf16* out);

// One rank, waiting for the others (other processes or threads) between the steps; gives up
// after timeout_ms naming the step and what had arrived.
Status ep_dispatch_rank(const EpShape& s, int64_t rank, const bf16* x, const int32_t* topk_ids,
                        const EpDispatchPeer* peers, int32_t* slot_dest, int32_t* expert_offsets, bool zero_tail,
                        int64_t timeout_ms);
Status ep_combine_rank(const EpShape& s, int64_t rank, const EpCombinePeer* peers, const float* topk_weights,
                       const int32_t* slot_dest, bf16* out, int64_t timeout_ms);

// The contracts' world form: all P ranks in one call, their memory stacked (rank-major):
// x [P, T, H], topk_ids [P, T, K], recv [P, RC, H], counts [P, P, E], count_flags [P, P],
// chunk_flags [P, P, C], row_source [P, RC], slot_dest [P, T, K], expert_offsets [P, ELM + 1];
// every step is run for every rank before the next, so no wait ever waits.
Status ep_dispatch_world(const EpShape& s, const bf16* x, const int32_t* topk_ids, bf16* recv, int32_t* counts,
                         int32_t* count_flags, int32_t* chunk_flags, int32_t* row_source, int32_t* slot_dest,
                         int32_t* expert_offsets, bool zero_tail);
// expert_out [P, RC, H], topk_weights / slot_dest [P, T, K], out [P, T, H], ready [P, P].
Status ep_combine_world(const EpShape& s, const bf16* expert_out, const float* topk_weights, const int32_t* slot_dest,
                        bf16* out, int32_t* ready);

}  // namespace halcyon::ref
