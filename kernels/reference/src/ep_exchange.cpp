// Expert-parallel dispatch and combine reference: the protocol of comm.hpp, one rank's steps
// over its view of every rank's exchange memory, and the contracts' world form.
#include <halcyon/kernels/reference/comm.hpp>

#include "check.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace halcyon::ref {
namespace {

constexpr const char* kDispatch = "ep_dispatch";
constexpr const char* kCombine = "ep_combine";

Status check_shape(const char* op, const EpShape& s, int64_t rank) {
  HALCYON_TRY(detail::check_size(op, "P", s.P, 1));
  if (s.P > kEpMaxRanks) return detail::invalid("{}: P = {} ranks, at most {}", op, s.P, kEpMaxRanks);
  if (rank < 0 || rank >= s.P) return detail::invalid("{}: rank {} is not in [0, P = {})", op, rank, s.P);
  HALCYON_TRY(detail::check_size(op, "T", s.T, 0));
  HALCYON_TRY(detail::check_size(op, "K", s.K, 1));
  HALCYON_TRY(detail::check_size(op, "H", s.H, 1));
  HALCYON_TRY(detail::check_size(op, "E", s.E, 1));
  HALCYON_TRY(detail::check_size(op, "RC", s.RC, 0));
  HALCYON_TRY(detail::check_size(op, "chunk_rows", s.chunk_rows, 1));
  if (s.P * s.RC > detail::kMaxI32) return detail::invalid("{}: P * RC = {} does not fit int32", op, s.P * s.RC);
  return {};
}

int64_t chunks_of(const EpShape& s, int64_t slots) { return (slots + s.chunk_rows - 1) / s.chunk_rows; }

// Where each expert's rows start in its owner's recv, and how many rows each rank receives,
// from the complete count matrix [P, E].
struct Layout {
  std::vector<int64_t> start;     // [E]
  std::vector<int64_t> received;  // [P]
};
Layout layout_of(const EpShape& s, const int32_t* m) {
  Layout l{std::vector<int64_t>(size_t(s.E)), std::vector<int64_t>(size_t(s.P))};
  for (int64_t q = 0; q < s.P; ++q) {
    int64_t at = 0;
    for (int64_t e = ep_first_expert(s.E, q, s.P); e < ep_first_expert(s.E, q + 1, s.P); ++e) {
      l.start[size_t(e)] = at;
      for (int64_t p = 0; p < s.P; ++p) at += m[p * s.E + e];
    }
    l.received[size_t(q)] = at;
  }
  return l;
}

// Slots rank p sends: the sum of its row of the count matrix.
int64_t slots_of(const EpShape& s, const int32_t* m, int64_t p) {
  int64_t n = 0;
  for (int64_t e = 0; e < s.E; ++e) n += m[p * s.E + e];
  return n;
}

Status wait_for(const char* op, const char* step, int64_t rank, int64_t timeout_ms, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int spins = 0; !done(); ++spins) {
    if (spins < 1000) continue;
    if (std::chrono::steady_clock::now() > deadline)
      return Error(HAL_UNAVAILABLE, fmt::format("{}: rank {} waited {} ms for {}", op, rank, timeout_ms, step));
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 2000 ? 0 : 20));
  }
  return {};
}

}  // namespace

int64_t ep_owner_rank(int64_t E, int64_t P, int64_t e) {
  int64_t q = std::min<int64_t>(P - 1, e * P / std::max<int64_t>(E, 1));
  while (q + 1 < P && ep_first_expert(E, q + 1, P) <= e) ++q;
  while (q > 0 && ep_first_expert(E, q, P) > e) --q;
  return q;
}

void ep_flag_store(int32_t* flag, int32_t value) { std::atomic_ref<int32_t>(*flag).store(value, std::memory_order_release); }
int32_t ep_flag_load(const int32_t* flag) {
  return std::atomic_ref<int32_t>(*const_cast<int32_t*>(flag)).load(std::memory_order_acquire);
}

Status ep_dispatch_publish(const EpShape& s, int64_t rank, const int32_t* topk_ids, const EpDispatchPeer* peers) {
  HALCYON_TRY(check_shape(kDispatch, s, rank));
  HALCYON_TRY(detail::check_ptr(kDispatch, "topk_ids", topk_ids, s.T > 0));
  std::vector<int32_t> hist(size_t(s.E), 0);
  for (int64_t i = 0; i < s.T * s.K; ++i) {
    if (topk_ids[i] < 0 || topk_ids[i] >= s.E)
      return detail::invalid("{}: topk_ids[token {}, k {}] = {} is not in [0, E = {})", kDispatch, i / s.K, i % s.K,
                             topk_ids[i], s.E);
    ++hist[size_t(topk_ids[i])];
  }
  for (int64_t q = 0; q < s.P; ++q) std::copy(hist.begin(), hist.end(), peers[q].counts + rank * s.E);
  for (int64_t q = 0; q < s.P; ++q) ep_flag_store(peers[q].count_flags + rank, s.generation);
  return {};
}

bool ep_dispatch_counts_arrived(const EpShape& s, int64_t rank, const EpDispatchPeer* peers) {
  for (int64_t p = 0; p < s.P; ++p)
    if (ep_flag_load(peers[rank].count_flags + p) != s.generation) return false;
  return true;
}

Status ep_dispatch_send(const EpShape& s, int64_t rank, const bf16* x, const int32_t* topk_ids,
                        const EpDispatchPeer* peers, int32_t* slot_dest) {
  HALCYON_TRY(check_shape(kDispatch, s, rank));
  const int32_t* m = peers[rank].counts;
  const Layout l = layout_of(s, m);
  for (int64_t q = 0; q < s.P; ++q)
    if (l.received[size_t(q)] > s.RC)
      return detail::invalid("{}: rank {} receives {} rows, more than its capacity RC = {}", kDispatch, q,
                             l.received[size_t(q)], s.RC);
  if (slots_of(s, m, rank) != s.T * s.K)
    return detail::invalid("{}: row {} of the count matrix sums to {}, not T * K = {}", kDispatch, rank,
                           slots_of(s, m, rank), s.T * s.K);
  if (chunks_of(s, s.T * s.K) > s.C)
    return detail::invalid("{}: {} slots in chunks of {} need {} chunk flags, C = {}", kDispatch, s.T * s.K,
                           s.chunk_rows, chunks_of(s, s.T * s.K), s.C);
  std::vector<int64_t> next(size_t(s.E));  // the next row of each expert for this rank's slots
  for (int64_t e = 0; e < s.E; ++e) {
    next[size_t(e)] = l.start[size_t(e)];
    for (int64_t p = 0; p < rank; ++p) next[size_t(e)] += m[p * s.E + e];
  }
  const int64_t slots = s.T * s.K;
  for (int64_t c = 0; c < chunks_of(s, slots); ++c) {
    for (int64_t i = c * s.chunk_rows; i < std::min(slots, (c + 1) * s.chunk_rows); ++i) {
      const int64_t e = topk_ids[i], q = ep_owner_rank(s.E, s.P, e), row = next[size_t(e)]++;
      int64_t source = row;  // with dedup: the row of the token's first slot at another rank q
      for (int64_t j = i - i % s.K; s.dedup && q != rank && j < i; ++j)
        if (ep_owner_rank(s.E, s.P, topk_ids[j]) == q) {
          source = slot_dest[j] - q * s.RC;
          break;
        }
      if (source == row) std::copy_n(x + (i / s.K) * s.H, s.H, peers[q].recv + row * s.H);
      peers[q].row_source[row] = int32_t(source);
      slot_dest[i] = int32_t(q * s.RC + row);
    }
    for (int64_t q = 0; q < s.P; ++q) ep_flag_store(peers[q].chunk_flags + rank * s.C + c, s.generation);
  }
  return {};
}

bool ep_dispatch_rows_arrived(const EpShape& s, int64_t rank, const EpDispatchPeer* peers) {
  const int32_t* m = peers[rank].counts;
  for (int64_t p = 0; p < s.P; ++p)
    for (int64_t c = 0; c < std::min(s.C, chunks_of(s, slots_of(s, m, p))); ++c)
      if (ep_flag_load(peers[rank].chunk_flags + p * s.C + c) != s.generation) return false;
  return true;
}

Status ep_dispatch_finish(const EpShape& s, int64_t rank, const EpDispatchPeer* peers, int32_t* expert_offsets,
                          bool zero_tail) {
  HALCYON_TRY(check_shape(kDispatch, s, rank));
  const Layout l = layout_of(s, peers[rank].counts);
  const int64_t first = ep_first_expert(s.E, rank, s.P), local = ep_first_expert(s.E, rank + 1, s.P) - first;
  const int64_t total = l.received[size_t(rank)];
  bf16* recv = peers[rank].recv;
  int32_t* source = peers[rank].row_source;
  for (int64_t r = 0; r < total; ++r) {
    if (source[r] == r) continue;
    if (source[r] < 0 || source[r] >= total || source[source[r]] != source[r])
      return detail::invalid("{}: rank {}'s row {} is to be copied from row {}, which did not arrive", kDispatch, rank,
                             r, source[r]);
    std::copy_n(recv + source[r] * s.H, s.H, recv + r * s.H);
  }
  for (int64_t i = 0; i <= s.max_local(); ++i)
    expert_offsets[i] = int32_t(i < local ? l.start[size_t(first + i)] : total);
  if (zero_tail && total < s.RC) {
    std::fill(recv + total * s.H, recv + s.RC * s.H, bf16{});
    std::fill(source + total, source + s.RC, -1);
  }
  return {};
}

Status ep_combine_publish(const EpShape& s, int64_t rank, const EpCombinePeer* peers) {
  HALCYON_TRY(check_shape(kCombine, s, rank));
  for (int64_t q = 0; q < s.P; ++q) ep_flag_store(peers[q].ready + rank, s.generation);
  return {};
}

bool ep_combine_ready(const EpShape& s, int64_t rank, const EpCombinePeer* peers) {
  for (int64_t p = 0; p < s.P; ++p)
    if (ep_flag_load(peers[rank].ready + p) != s.generation) return false;
  return true;
}

Status ep_combine_gather(const EpShape& s, int64_t rank, const EpCombinePeer* peers, const float* topk_weights,
                         const int32_t* slot_dest, bf16* out) {
  HALCYON_TRY(check_shape(kCombine, s, rank));
  for (int64_t i = 0; i < s.T * s.K; ++i)
    if (slot_dest[i] < 0 || slot_dest[i] >= s.P * s.RC)
      return detail::invalid("{}: slot_dest[token {}, k {}] = {} is not in [0, P * RC = {})", kCombine, i / s.K,
                             i % s.K, slot_dest[i], s.P * s.RC);
  std::vector<double> acc(size_t(s.H));
  for (int64_t t = 0; t < s.T; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t d = slot_dest[t * s.K + k];
      const bf16* src = peers[d / s.RC].expert_out + (d % s.RC) * s.H;
      const double w = topk_weights[t * s.K + k];
      for (int64_t h = 0; h < s.H; ++h) acc[size_t(h)] += w * bf16_to_float(src[h]);
    }
    for (int64_t h = 0; h < s.H; ++h) out[t * s.H + h] = float_to_bf16(float(acc[size_t(h)]));
  }
  return {};
}

Status ep_dispatch_rank(const EpShape& s, int64_t rank, const bf16* x, const int32_t* topk_ids,
                        const EpDispatchPeer* peers, int32_t* slot_dest, int32_t* expert_offsets, bool zero_tail,
                        int64_t timeout_ms) {
  HALCYON_TRY(ep_dispatch_publish(s, rank, topk_ids, peers));
  HALCYON_TRY(wait_for(kDispatch, "every rank's counts", rank, timeout_ms,
                       [&] { return ep_dispatch_counts_arrived(s, rank, peers); }));
  HALCYON_TRY(ep_dispatch_send(s, rank, x, topk_ids, peers, slot_dest));
  HALCYON_TRY(wait_for(kDispatch, "every rank's rows", rank, timeout_ms,
                       [&] { return ep_dispatch_rows_arrived(s, rank, peers); }));
  return ep_dispatch_finish(s, rank, peers, expert_offsets, zero_tail);
}

Status ep_combine_rank(const EpShape& s, int64_t rank, const EpCombinePeer* peers, const float* topk_weights,
                       const int32_t* slot_dest, bf16* out, int64_t timeout_ms) {
  HALCYON_TRY(ep_combine_publish(s, rank, peers));
  HALCYON_TRY(wait_for(kCombine, "every rank's expert outputs", rank, timeout_ms,
                       [&] { return ep_combine_ready(s, rank, peers); }));
  return ep_combine_gather(s, rank, peers, topk_weights, slot_dest, out);
}

Status ep_dispatch_world(const EpShape& s, const bf16* x, const int32_t* topk_ids, bf16* recv, int32_t* counts,
                         int32_t* count_flags, int32_t* chunk_flags, int32_t* row_source, int32_t* slot_dest,
                         int32_t* expert_offsets, bool zero_tail) {
  HALCYON_TRY(check_shape(kDispatch, s, 0));
  std::vector<EpDispatchPeer> peers(size_t(s.P));
  for (int64_t q = 0; q < s.P; ++q)
    peers[size_t(q)] = {recv + q * s.RC * s.H, counts + q * s.P * s.E, count_flags + q * s.P,
                        chunk_flags + q * s.P * s.C, row_source + q * s.RC};
  const int64_t TK = s.T * s.K, EO = s.max_local() + 1;
  for (int64_t p = 0; p < s.P; ++p) HALCYON_TRY(ep_dispatch_publish(s, p, topk_ids + p * TK, peers.data()));
  for (int64_t p = 0; p < s.P; ++p) {
    if (!ep_dispatch_counts_arrived(s, p, peers.data()))
      return detail::invalid("{}: rank {}'s count flags are incomplete after every rank published", kDispatch, p);
    HALCYON_TRY(ep_dispatch_send(s, p, x + p * s.T * s.H, topk_ids + p * TK, peers.data(), slot_dest + p * TK));
  }
  for (int64_t p = 0; p < s.P; ++p) {
    if (!ep_dispatch_rows_arrived(s, p, peers.data()))
      return detail::invalid("{}: rank {}'s chunk flags are incomplete after every rank sent", kDispatch, p);
    HALCYON_TRY(ep_dispatch_finish(s, p, peers.data(), expert_offsets + p * EO, zero_tail));
  }
  return {};
}

Status ep_combine_world(const EpShape& s, const bf16* expert_out, const float* topk_weights, const int32_t* slot_dest,
                        bf16* out, int32_t* ready) {
  HALCYON_TRY(check_shape(kCombine, s, 0));
  std::vector<EpCombinePeer> peers(size_t(s.P));
  for (int64_t q = 0; q < s.P; ++q) peers[size_t(q)] = {expert_out + q * s.RC * s.H, ready + q * s.P};
  const int64_t TK = s.T * s.K;
  for (int64_t p = 0; p < s.P; ++p) HALCYON_TRY(ep_combine_publish(s, p, peers.data()));
  for (int64_t p = 0; p < s.P; ++p) {
    if (!ep_combine_ready(s, p, peers.data()))
      return detail::invalid("{}: rank {}'s ready flags are incomplete after every rank published", kCombine, p);
    HALCYON_TRY(ep_combine_gather(s, p, peers.data(), topk_weights + p * TK, slot_dest + p * TK, out + p * s.T * s.H));
  }
  return {};
}

}  // namespace halcyon::ref
