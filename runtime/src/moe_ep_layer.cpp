#include <halcyon/runtime/moe_ep_layer.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace halcyon::rt {
using namespace halcyon::ops;

namespace {
// experts * k / ranks, in 128 bits: the product passes int64 for experts past 2^63 / ranks.
int64_t share_of(int64_t experts, uint64_t k, uint32_t ranks) {
  return int64_t((unsigned __int128)uint64_t(experts) * k / ranks);
}
}  // namespace

ExpertRange ep_expert_range(int64_t experts, uint32_t rank, uint32_t ranks) {
  return {share_of(experts, rank, ranks), share_of(experts, uint64_t(rank) + 1, ranks)};
}

uint32_t ep_owner(int64_t experts, uint32_t ranks, int64_t expert) {
  // The largest rank whose range starts at or before `expert` (ranges may be empty).
  const auto guess = (unsigned __int128)uint64_t(expert) * ranks / uint64_t(std::max<int64_t>(experts, 1));
  uint32_t r = uint32_t(std::min<unsigned __int128>(ranks - 1, guess));
  while (r + 1 < ranks && ep_expert_range(experts, r + 1, ranks).first <= expert) ++r;
  while (r > 0 && ep_expert_range(experts, r, ranks).first > expert) --r;
  return r;
}

// One forward's tensors and host-side routing. Exchange buffers live for one call.
struct MoeEpLayer::Routing {
  int64_t T = 0;
  Tensor x, topk_ids, topk_weights;
  std::vector<int32_t> ids;                 // topk_ids on the host, slot order (t * K + k)
  Tensor send_rows, slot_to_row;            // rows grouped by destination rank; slot -> row
  Tensor send_ids;                          // the expert of each sent row
  std::vector<uint64_t> send_first, send_count;  // rows per destination rank
  std::vector<uint64_t> recv_first, recv_count;  // rows per source rank
  std::vector<uint64_t> matrix;             // rows rank q sends rank p: matrix[q * ranks + p]
  int64_t received = 0;
  Tensor recv_rows, recv_ids, back_rows;    // expert side, rows in arrival order
  Tensor returned;                          // expert outputs back home, in send_rows' order
  MoeEpStats stats;
};

// kPeerKernel's exchanges (one per micro-batch), stream and events, and the routing tensors
// (sized for max_tokens).
struct MoeEpLayer::KernelState {
  // One micro-batch: its exchange, its hand-offs between the two streams, and timing events on
  // the comm stream around its dispatch (d0, d1) and its combine (c0, c1).
  struct Batch {
    EpExchange ex;
    Event dispatched, computed;
    Event d0, d1, c0, c1;
  };
  EpOptions opt;
  std::vector<Batch> batches;
  Stream comm;                  // dispatch and combine
  Event routed, combined;       // the gate's hand-off to the comm stream, and the last combine's back
  Event handoff;                // an exchange's end, where the next exchange runs on the other stream
  // hidden: the SwiGLU GEMM's output, one for all micro-batches: their GEMMs run in turn on the
  // caller's stream, so one's down GEMM has read it before the next one's up GEMM writes it.
  Tensor logits, topk_ids, topk_weights, hidden;
};

namespace {

using TensorMap = std::map<std::string, Tensor, std::less<>>;

// A tensor of `rows` x `cols` (its buffer holds at least one row: a rank may get no rows).
Result<Tensor> rows_tensor(const Device& d, DType dt, int64_t rows, int64_t cols) {
  auto t = make_tensor(d, dt, {std::max<int64_t>(rows, 1), cols});
  if (!t) return t.error();
  t->shape[0] = rows;
  return t;
}

template <typename T>
Status read_vector(const Stream& s, const Tensor& t, std::vector<T>& out) {
  out.resize(size_t(t.bytes() / sizeof(T)));
  return s.read(t.buffer, t.offset, out.data(), out.size() * sizeof(T));
}

template <typename T>
Result<Tensor> upload(const Device& d, const Stream& s, DType dt, std::vector<int64_t> shape, const std::vector<T>& v) {
  auto t = make_tensor(d, dt, std::move(shape));
  if (!t) return t.error();
  if (!v.empty()) HALCYON_TRY(s.write(t->buffer, 0, v.data(), v.size() * sizeof(T)));
  return t;
}

// Byte offsets and sizes per rank of rows [first, first + count) of `row_bytes` each.
void byte_ranges(const std::vector<uint64_t>& first, const std::vector<uint64_t>& count, uint64_t row_bytes,
                 std::vector<uint64_t>& offsets, std::vector<uint64_t>& sizes) {
  offsets.resize(first.size());
  sizes.resize(first.size());
  for (size_t p = 0; p < first.size(); ++p) {
    offsets[p] = first[p] * row_bytes;
    sizes[p] = count[p] * row_bytes;
  }
}

// The all-to-all of rows of `row_bytes`, rank p's rows at [send_first[p], +send_count[p]) of
// `send`, landing at recv_first[p] of `recv`.
Status exchange(const Comm& comm, const Stream& s, const Tensor& send, const std::vector<uint64_t>& send_first,
                const std::vector<uint64_t>& send_count, const Tensor& recv, const std::vector<uint64_t>& recv_first,
                const std::vector<uint64_t>& recv_count, uint64_t row_bytes) {
  std::vector<uint64_t> so, ss, ro, rs;
  byte_ranges(send_first, send_count, row_bytes, so, ss);
  byte_ranges(recv_first, recv_count, row_bytes, ro, rs);
  for (auto& o : so) o += send.offset;
  for (auto& o : ro) o += recv.offset;
  return comm.all_to_all(s, send.buffer, so, ss, recv.buffer, ro, rs);
}

uint64_t remote_bytes(const std::vector<uint64_t>& count, uint32_t self, uint64_t row_bytes) {
  uint64_t n = 0;
  for (size_t p = 0; p < count.size(); ++p)
    if (p != self) n += count[p] * row_bytes;
  return n;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The product of `factors`, or an error naming `what` and them where it passes int64: counts
// the buffers are sized from go through checked_extent (the factors as the shape of a byte
// array), never through a product that may wrap to a small size.
Result<int64_t> product(std::string_view what, std::vector<int64_t> factors) {
  auto e = checked_extent(DType::u8, factors);
  if (!e) return Error(e.error().status(), fmt::format("{} = {}: {}", what, fmt::join(factors, " x "), e.error().message()));
  return e->elements;
}

// What every rank of an expert-parallel layer checks before the first collective (the caller
// agrees on it): the whole layer's config, this rank's local experts, and its weights. A rank
// that owns experts checks them as the single-rank layer does; a rank that owns none still
// checks the config and the router, which it runs.
Status check_ep_layer(const Device& device, const MoeLayerConfig& c, const MoeLayerWeights& w,
                      const MoeLayerOptions& o, const ExpertRange& mine, const hal_comm_info& info) {
  MoeLayerConfig whole = c;  // every expert local: what the ranks compute together
  whole.expert_begin = 0;
  whole.local_experts = -1;
  if (Status valid = check_moe_config(whole); !valid)
    return Error(valid.error().status(), "MoeEpLayer: " + valid.error().message());
  if (c.local_experts < -1)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeEpLayer: local_experts {} is below -1 (-1: set from the "
                                                   "communicator)", c.local_experts));
  const bool defaults = c.expert_begin == 0 && c.local_experts == -1;
  if (!defaults && (c.expert_begin != mine.first || c.local() != mine.count()))
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("MoeEpLayer: config names local experts [{}, {}), but rank {} of {} owns [{}, {})",
                             c.expert_begin, c.expert_begin + c.local(), info.rank, info.size, mine.first, mine.end));
  if (mine.count() == 0) {
    if (Status router = check_moe_router(device, c, w); !router)
      return Error(router.error().status(), "MoeEpLayer: " + router.error().message());
    return {};
  }
  MoeLayerConfig local = c;
  local.expert_begin = mine.first;
  local.local_experts = mine.count();
  MoeLayerOptions copy = o;
  copy.path = MoePath::kCopy;  // the expert side runs the copy path (docs/expert_parallel.md)
  auto check = MoeLayer::create(device, local, w, copy);
  if (!check) return Error(check.error().status(), "MoeEpLayer: " + check.error().message());
  return {};
}

}  // namespace

Result<MoeEpLayer> MoeEpLayer::create(const Device& device, const Comm& comm, MoeLayerConfig c, MoeLayerWeights w,
                                      MoeLayerOptions o, EpTransport transport, EpOptions ep) {
  auto info = comm.info();
  if (!info) return info.error();
  // Collective from here on, for every transport: a rank whose check failed would otherwise
  // return while its peers went on to wait for it in a collective (kPeerKernel's exchanges
  // here, the first forward's otherwise) until the communicator's timeout.
  const ExpertRange mine = ep_expert_range(c.experts, info->rank, info->size);
  HALCYON_TRY(comm.agree(check_ep_layer(device, c, w, o, mine, *info), "MoeEpLayer"));
  c.expert_begin = mine.first;
  c.local_experts = mine.count();
  MoeEpLayer layer;
  layer.device_ = device;
  layer.comm_ = comm;
  layer.rank_ = info->rank;
  layer.ranks_ = info->size;
  layer.config_ = std::move(c);
  layer.weights_ = std::move(w);
  layer.options_ = std::move(o);
  layer.transport_ = transport;
  layer.recv_capacity_.assign(info->size, 0);
  layer.back_capacity_.assign(info->size, 0);
  if (transport == EpTransport::kPeerKernel) {
    layer.kernel_ = std::make_shared<KernelState>();
    layer.kernel_->opt = ep;
    HALCYON_TRY(layer.create_kernel_buffers());
  }
  return layer;
}

// Router GEMM and gate: logits, topk_ids and topk_weights of x's tokens, on the device.
Status MoeEpLayer::gate(const Stream& s, const Tensor& x, const Tensor& logits, const Tensor& ids,
                        const Tensor& weights) const {
  TensorMap router{{"a", x}, {"b", weights_.w_router}, {"c", logits}};
  HALCYON_TRY(run_op(device_, s, "gemm_bf16", router, {}, options_.run_options("gemm_bf16")));
  TensorMap gate{{"logits", logits}, {"topk_ids", ids}, {"topk_weights", weights}};
  if (weights_.bias) gate["bias"] = *weights_.bias;
  return run_op(device_, s, "moe_gate", gate, moe_gate_params(config_), options_.run_options("moe_gate"));
}

// Router GEMM and gate on this rank's tokens; the chosen experts come to the host.
Status MoeEpLayer::route(const Stream& s, const Tensor& x, Routing& r) {
  const auto& c = config_;
  auto logits = make_tensor(device_, DType::f32, {r.T, c.experts});
  auto ids = make_tensor(device_, DType::i32, {r.T, c.topk});
  auto weights = make_tensor(device_, DType::f32, {r.T, c.topk});
  for (auto* t : {&logits, &ids, &weights})
    if (!*t) return t->error();
  r.x = x;
  r.topk_ids = *ids;
  r.topk_weights = *weights;
  HALCYON_TRY(gate(s, x, *logits, r.topk_ids, r.topk_weights));
  return read_vector(s, r.topk_ids, r.ids);
}

// Rows grouped by owning rank (moe_permute with the ranks as its "experts"), then the
// all-to-all of the rows and of their expert ids.
Status MoeEpLayer::dispatch(const Stream& s, Routing& r) {
  const auto& c = config_;
  const int64_t TK = r.T * c.topk, H = c.hidden;
  std::vector<int32_t> owner(r.ids.size());
  for (size_t i = 0; i < owner.size(); ++i) owner[i] = int32_t(ep_owner(c.experts, ranks_, r.ids[i]));
  auto dest = upload(device_, s, DType::i32, {r.T, c.topk}, owner);
  if (!dest) return dest.error();
  Tensor counts, offsets, row_to_slot, num_rows;
  for (auto [t, dt, n] : {std::tuple{&counts, DType::i32, int64_t(ranks_)}, {&offsets, DType::i32, int64_t(ranks_) + 1},
                          {&row_to_slot, DType::i32, TK}, {&num_rows, DType::i32, int64_t(1)}}) {
    auto made = make_tensor(device_, dt, {n});
    if (!made) return made.error();
    *t = std::move(made).value();
  }
  auto rows = make_tensor(device_, DType::bf16, {TK, H});
  auto slot = make_tensor(device_, DType::i32, {r.T, c.topk});
  if (!rows) return rows.error();
  if (!slot) return slot.error();
  r.send_rows = *rows;
  r.slot_to_row = *slot;
  TensorMap permute{{"x", r.x}, {"topk_ids", *dest}, {"permuted", r.send_rows}, {"expert_counts", counts},
                    {"expert_offsets", offsets}, {"row_to_slot", row_to_slot}, {"slot_to_row", r.slot_to_row},
                    {"num_rows", num_rows}};
  HALCYON_TRY(run_op(device_, s, "moe_permute", permute,
                     {{"n_experts", std::to_string(ranks_)}, {"expert_begin", "0"},
                      {"expert_end", std::to_string(ranks_)}, {"write_permuted", "true"}},
                     options_.run_options("moe_permute")));
  std::vector<int32_t> host_offsets, host_slot;
  HALCYON_TRY(read_vector(s, offsets, host_offsets));
  HALCYON_TRY(read_vector(s, r.slot_to_row, host_slot));
  // The expert of each sent row, in the rows' order.
  std::vector<int32_t> row_expert(size_t(TK), 0);
  for (size_t i = 0; i < host_slot.size(); ++i) row_expert[size_t(host_slot[i])] = r.ids[i];
  auto sid = upload(device_, s, DType::i32, {TK}, row_expert);
  if (!sid) return sid.error();
  r.send_ids = *sid;
  r.send_first.assign(ranks_, 0);
  r.send_count.assign(ranks_, 0);
  for (uint32_t p = 0; p < ranks_; ++p) {
    r.send_first[p] = uint64_t(host_offsets[p]);
    r.send_count[p] = uint64_t(host_offsets[p + 1] - host_offsets[p]);
  }
  // Who sends me how many rows: every rank's counts, column `rank_`.
  auto all = comm_.all_gather_values(r.send_count);
  if (!all) return all.error();
  r.recv_first.assign(ranks_, 0);
  r.recv_count.assign(ranks_, 0);
  uint64_t at = 0;
  for (uint32_t p = 0; p < ranks_; ++p) {
    r.recv_first[p] = at;
    r.recv_count[p] = (*all)[size_t(p) * ranks_ + rank_];
    at += r.recv_count[p];
  }
  r.received = int64_t(at);
  r.matrix = std::move(all).value();
  r.stats.rows_sent = TK;
  r.stats.rows_received = r.received;
  r.stats.dispatch_bytes = remote_bytes(r.send_count, rank_, uint64_t(H) * 2 + 4);
  if (transport_ == EpTransport::kPeerWrite) return peer_dispatch(s, r);
  auto recv_rows = rows_tensor(device_, DType::bf16, r.received, H);
  auto recv_ids = rows_tensor(device_, DType::i32, r.received, 1);
  if (!recv_rows) return recv_rows.error();
  if (!recv_ids) return recv_ids.error();
  r.recv_rows = *recv_rows;
  r.recv_ids = *recv_ids;
  HALCYON_TRY(exchange(comm_, s, r.send_rows, r.send_first, r.send_count, r.recv_rows, r.recv_first, r.recv_count,
                       uint64_t(H) * 2));
  HALCYON_TRY(exchange(comm_, s, r.send_ids, r.send_first, r.send_count, r.recv_ids, r.recv_first, r.recv_count, 4));
  return {};
}

// The local experts on the rows that arrived: moe_permute by expert, the two grouped GEMMs,
// and moe_combine with weight 1 to put the outputs back in arrival order (exact: one product
// by 1 and one rounding of a bf16 value).
Status MoeEpLayer::run_experts(const Stream& s, Routing& r) {
  const auto& c = config_;
  const int64_t R = r.received, H = c.hidden, I = c.inter, EL = c.local();
  auto back = rows_tensor(device_, DType::bf16, R, H);
  if (!back) return back.error();
  r.back_rows = *back;
  if (R == 0) return {};
  Tensor permuted, hidden, expert_out, counts, offsets, row_to_slot, slot_to_row, num_rows;
  for (auto [t, dt, shape] :
       {std::tuple{&permuted, DType::bf16, std::vector<int64_t>{R, H}}, {&hidden, DType::bf16, {R, I}},
        {&expert_out, DType::bf16, {R, H}}, {&counts, DType::i32, {EL}}, {&offsets, DType::i32, {EL + 1}},
        {&row_to_slot, DType::i32, {R}}, {&slot_to_row, DType::i32, {R, 1}}, {&num_rows, DType::i32, {1}}}) {
    auto made = make_tensor(device_, dt, shape);
    if (!made) return made.error();
    *t = std::move(made).value();
  }
  auto ones = upload(device_, s, DType::f32, {R, 1}, std::vector<float>(size_t(R), 1.0f));
  if (!ones) return ones.error();
  Tensor ids = r.recv_ids;
  ids.shape = {R, 1};
  TensorMap permute{{"x", r.recv_rows}, {"topk_ids", ids}, {"permuted", permuted}, {"expert_counts", counts},
                    {"expert_offsets", offsets}, {"row_to_slot", row_to_slot}, {"slot_to_row", slot_to_row},
                    {"num_rows", num_rows}};
  HALCYON_TRY(run_op(device_, s, "moe_permute", permute,
                     {{"n_experts", std::to_string(c.experts)}, {"expert_begin", std::to_string(c.expert_begin)},
                      {"expert_end", std::to_string(c.expert_begin + EL)}, {"write_permuted", "true"}},
                     options_.run_options("moe_permute")));
  TensorMap up{{"a", permuted}, {"w_gate_up", weights_.w_gate_up}, {"expert_offsets", offsets}, {"out", hidden}};
  HALCYON_TRY(run_op(device_, s, "moe_grouped_gemm_swiglu", up, {}, options_.run_options("moe_grouped_gemm_swiglu")));
  TensorMap down{{"a", hidden}, {"w", weights_.w_down}, {"expert_offsets", offsets}, {"out", expert_out}};
  HALCYON_TRY(run_op(device_, s, "moe_grouped_gemm", down, {}, options_.run_options("moe_grouped_gemm")));
  TensorMap unpermute{{"expert_out", expert_out}, {"topk_weights", *ones}, {"slot_to_row", slot_to_row},
                      {"out", r.back_rows}};
  return run_op(device_, s, "moe_combine", unpermute, {}, options_.run_options("moe_combine"));
}

// Outputs travel back the way the rows came; moe_combine weighs them into the tokens.
Status MoeEpLayer::combine(const Stream& s, Routing& r, Tensor& out) {
  const auto& c = config_;
  const int64_t TK = r.T * c.topk, H = c.hidden;
  r.stats.combine_bytes = remote_bytes(r.recv_count, rank_, uint64_t(H) * 2);
  if (transport_ == EpTransport::kPeerWrite) {
    HALCYON_TRY(peer_combine(s, r));
  } else {
    auto returned = make_tensor(device_, DType::bf16, {TK, H});
    if (!returned) return returned.error();
    r.returned = *returned;
    HALCYON_TRY(exchange(comm_, s, r.back_rows, r.recv_first, r.recv_count, r.returned, r.send_first, r.send_count,
                         uint64_t(H) * 2));
  }
  TensorMap comb{{"expert_out", r.returned}, {"topk_weights", r.topk_weights}, {"slot_to_row", r.slot_to_row},
                 {"out", out}};
  return run_op(device_, s, "moe_combine", comb, {}, options_.run_options("moe_combine"));
}

// ---- kPeerWrite --------------------------------------------------------------------------

namespace {
constexpr uint64_t kPeerRowStep = 128;  // capacities grow in steps of this many rows

// Rows that ranks [q0, q1) send to ranks [p0, p1), from the all-gathered count matrix.
uint64_t rows_sent(const std::vector<uint64_t>& matrix, uint32_t ranks, uint32_t q0, uint32_t q1, uint32_t p0,
                   uint32_t p1) {
  uint64_t n = 0;
  for (uint32_t q = q0; q < q1; ++q)
    for (uint32_t p = p0; p < p1; ++p) n += matrix[size_t(q) * ranks + p];
  return n;
}
}  // namespace

// Collective. Every rank learns every rank's needs, so all decide alike whether to grow; a
// rank that grows (or not) still takes part in both shares.
Status MoeEpLayer::ensure_peer_buffers(const Routing& r) {
  const uint64_t row = uint64_t(config_.hidden) * 2;
  auto needs = comm_.all_gather_values(std::vector<uint64_t>{uint64_t(r.received), uint64_t(r.T * config_.topk)});
  if (!needs) return needs.error();
  bool grow = recv_peers_.empty();
  for (uint32_t p = 0; p < ranks_; ++p)
    grow = grow || (*needs)[2 * p] > recv_capacity_[p] || (*needs)[2 * p + 1] > back_capacity_[p];
  if (!grow) return {};
  auto step = [](uint64_t rows) { return std::max<uint64_t>(1, (rows + kPeerRowStep - 1) / kPeerRowStep) * kPeerRowStep; };
  for (uint32_t p = 0; p < ranks_; ++p) {
    recv_capacity_[p] = std::max(recv_capacity_[p], step((*needs)[2 * p]));
    back_capacity_[p] = std::max(back_capacity_[p], step((*needs)[2 * p + 1]));
  }
  recv_peers_.clear();
  back_peers_.clear();
  // This rank's two buffers, agreed on before the shares (a rank that could not make its
  // buffers would leave its peers waiting in them).
  Buffer recv, back;
  auto made = [&]() -> Status {
    auto recv_bytes = product("MoeEpLayer: the receive buffer's rows x (2 hidden + 4) bytes",
                              {int64_t(recv_capacity_[rank_]), int64_t(row) + 4});
    auto back_bytes = product("MoeEpLayer: the return buffer's rows x 2 hidden bytes",
                              {int64_t(back_capacity_[rank_]), int64_t(row)});
    if (!recv_bytes) return recv_bytes.error();
    if (!back_bytes) return back_bytes.error();
    auto r = comm_.buffer(uint64_t(*recv_bytes));
    if (!r) return r.error();
    auto b = comm_.buffer(uint64_t(*back_bytes));
    if (!b) return b.error();
    recv = std::move(r).value();
    back = std::move(b).value();
    return {};
  };
  HALCYON_TRY(comm_.agree(made(), "MoeEpLayer"));
  auto rp = comm_.share(recv);
  if (!rp) return rp.error();
  auto bp = comm_.share(back);
  if (!bp) return bp.error();
  recv_peers_ = std::move(rp).value();
  back_peers_ = std::move(bp).value();
  return {};
}

// Rows and ids copied straight into each owner's receive buffer (rows of rank q after those of
// ranks < q), then a barrier: every rank's receive buffer is complete.
Status MoeEpLayer::peer_dispatch(const Stream& s, Routing& r) {
  HALCYON_TRY(ensure_peer_buffers(r));
  const uint64_t row = uint64_t(config_.hidden) * 2;
  for (uint32_t p = 0; p < ranks_; ++p) {
    const uint64_t n = r.send_count[p];
    if (n == 0) continue;
    const uint64_t at = rows_sent(r.matrix, ranks_, 0, rank_, p, p + 1);  // from ranks before me
    HALCYON_TRY(s.copy(recv_peers_[p], at * row, r.send_rows.buffer, r.send_rows.offset + r.send_first[p] * row, n * row));
    HALCYON_TRY(s.copy(recv_peers_[p], recv_capacity_[p] * row + at * 4, r.send_ids.buffer,
                       r.send_ids.offset + r.send_first[p] * 4, n * 4));
  }
  HALCYON_TRY(s.synchronize());
  HALCYON_TRY(comm_.barrier());
  Tensor rows{recv_peers_[rank_], 0, DType::bf16, {r.received, config_.hidden}};
  Tensor ids{recv_peers_[rank_], recv_capacity_[rank_] * row, DType::i32, {r.received, 1}};
  r.recv_rows = rows;
  r.recv_ids = ids;
  return {};
}

// Each owner copies the outputs of rank q's rows straight into q's return buffer, where q sent
// them from (q's send order), then a barrier.
Status MoeEpLayer::peer_combine(const Stream& s, Routing& r) {
  const uint64_t row = uint64_t(config_.hidden) * 2;
  for (uint32_t q = 0; q < ranks_; ++q) {
    const uint64_t n = r.recv_count[q];
    if (n == 0) continue;
    const uint64_t at = rows_sent(r.matrix, ranks_, q, q + 1, 0, rank_);  // q's rows for ranks before me
    HALCYON_TRY(s.copy(back_peers_[q], at * row, r.back_rows.buffer, r.back_rows.offset + r.recv_first[q] * row, n * row));
  }
  HALCYON_TRY(s.synchronize());
  HALCYON_TRY(comm_.barrier());
  r.returned = Tensor{back_peers_[rank_], 0, DType::bf16, {r.T * config_.topk, config_.hidden}};
  return {};
}

Status MoeEpLayer::forward(const Stream& stream, const Tensor& x, Tensor& out, MoeEpStats* stats) {
  const auto& c = config_;
  if (x.shape.size() != 2 || x.shape[0] < 1 || x.shape[1] != c.hidden || x.dtype != DType::bf16)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeEpLayer: x is {} {}, expected bf16 [T >= 1, {}]",
                                                   dtype_name(x.dtype), x.shape_string(), c.hidden));
  if (out.shape != x.shape || out.dtype != DType::bf16)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeEpLayer: out is {} {}, expected bf16 {}", dtype_name(out.dtype),
                                                   out.shape_string(), x.shape_string()));
  // Every count derived from T (rows, byte ranges) is at most T * topk rows of 2 * hidden + 4
  // bytes: checked once here (x's own size bounds T * hidden).
  if (auto rows = product("MoeEpLayer: the (token, k) rows tokens x topk", {x.shape[0], c.topk}); !rows)
    return rows.error();
  if (auto bytes = product("MoeEpLayer: the bytes sent, tokens x topk x (2 hidden + 4)",
                           {x.shape[0], c.topk, 2 * c.hidden + 4});
      !bytes)
    return bytes.error();
  if (transport_ == EpTransport::kPeerKernel) return kernel_forward(stream, x, out, stats);
  Routing r;
  r.T = x.shape[0];
  HALCYON_TRY(route(stream, x, r));
  auto t0 = std::chrono::steady_clock::now();
  HALCYON_TRY(dispatch(stream, r));
  HALCYON_TRY(stream.synchronize());
  r.stats.dispatch_ms = float(ms_since(t0));
  t0 = std::chrono::steady_clock::now();
  HALCYON_TRY(run_experts(stream, r));
  HALCYON_TRY(stream.synchronize());
  r.stats.expert_ms = float(ms_since(t0));
  t0 = std::chrono::steady_clock::now();
  HALCYON_TRY(combine(stream, r, out));
  // The exchange buffers go with `r`; the backend keeps them until the queued work is done.
  if (stats) {
    HALCYON_TRY(stream.synchronize());
    r.stats.combine_ms = float(ms_since(t0));
    *stats = r.stats;
  }
  return {};
}

// ---- EpExchange, kPeerKernel -------------------------------------------------------------

struct EpExchange::State {
  Device device;
  EpOptions opt;
  int64_t E = 0, K = 0, H = 0, RC = 0, C = 0, T = 0;
  uint32_t rank = 0;
  Buffer mine;                 // this rank's exchange buffer
  std::vector<Buffer> mapped;  // every rank's, mapped here
  ops::EpPeers peers;
  uint64_t off_eout = 0, off_counts = 0, off_cflags = 0, off_kflags = 0, off_ready = 0, off_source = 0;
  Tensor slot_dest, expert_offsets;
  int32_t generation = 0;
};

namespace {
uint64_t align_up(uint64_t v) { return (v + 255) / 256 * 256; }
Tensor view(const Tensor& t, std::vector<int64_t> shape, uint64_t offset = 0) {
  return Tensor{t.buffer, t.offset + offset, t.dtype, std::move(shape)};
}
// Rows [first, end) of a row-major 2-d tensor (none when first == end).
Tensor rows_of(const Tensor& t, int64_t first, int64_t end) {
  return view(t, {end - first, t.shape[1]}, uint64_t(first * t.shape[1]) * dtype_size(t.dtype));
}

// Collective: each named value must be rank 0's on every rank. A difference is the same error
// on every rank, rather than a rank waiting in a kernel for a peer that made other buffers.
Status same_on_every_rank(const Comm& comm, const char* who,
                          const std::vector<std::pair<const char*, int64_t>>& values) {
  std::vector<int64_t> mine;
  for (const auto& v : values) mine.push_back(v.second);
  auto all = comm.all_gather_values(mine);
  if (!all) return all.error();
  const size_t n = mine.size();
  for (size_t p = 1; p < all->size() / n; ++p)
    for (size_t i = 0; i < n; ++i)
      if ((*all)[p * n + i] != (*all)[i])
        return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: rank {} has {} = {}, rank 0 has {}: it must be the same on "
                                                       "every rank", who, p, values[i].first, (*all)[p * n + i], (*all)[i]));
  return {};
}
}  // namespace

// Each rank's exchange buffer holds
//   recv [RC, H] bf16 | expert outputs [RC, H] bf16 | counts [P, E] | count flags [P] |
//   chunk flags [P, C] | ready flags [P] | row sources [RC] i32
// with RC = P * max_tokens * min(K, experts per rank): all a rank can receive. Each region
// starts at a multiple of 256 bytes.
struct ExchangeLayout {
  int64_t RC = 0, C = 0;
  uint64_t off_eout = 0, off_counts = 0, off_cflags = 0, off_kflags = 0, off_ready = 0, off_source = 0, total = 0;
};

// The layout for P ranks, every count and byte size checked: a config whose products pass
// int64 (or the kernels' i32 row indices) is an error naming them, not a wrapped small buffer.
Result<ExchangeLayout> exchange_layout(int64_t P, int64_t E, int64_t K, int64_t H, const EpOptions& opt) {
  const int64_t T = opt.max_tokens;
  if (P > int64_t(ops::EpPeers::kMaxRanks))
    return Error(HAL_UNSUPPORTED, fmt::format("EpExchange: the dispatch/combine kernels take at most {} ranks, the "
                                              "communicator has {}", ops::EpPeers::kMaxRanks, P));
  if (T < 1 || opt.dispatch_chunk_rows < 1 || opt.combine_chunk_rows < 1 || E < 1 || K < 1 || H < 1)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("EpExchange: experts {}, topk {}, hidden {}, EpOptions max_tokens {}, dispatch_chunk_rows "
                             "{} and combine_chunk_rows {} must all be >= 1", E, K, H, T, opt.dispatch_chunk_rows,
                             opt.combine_chunk_rows));
  ExchangeLayout l;
  const int64_t ELM = E / P + (E % P != 0);  // experts per rank, at most (E + P - 1 could wrap)
  auto rc = product("EpExchange: the receive capacity ranks x EpOptions::max_tokens x min(topk, experts per rank)",
                    {P, T, std::min(K, ELM)});
  if (!rc) return rc.error();
  l.RC = *rc;
  // slot_dest holds owner * RC + row, and row_source and expert_offsets rows, all in i32.
  if (l.RC > std::numeric_limits<int32_t>::max() / P)
    return Error(HAL_OUT_OF_RANGE, fmt::format("EpExchange: {} ranks x a capacity of {} rows (EpOptions::max_tokens {} x "
                                               "min(topk {}, experts per rank {}) per rank) is past the kernels' i32 row "
                                               "index (slot_dest = rank x capacity + row < 2^31)", P, l.RC, T, K, ELM));
  auto tk = product("EpExchange: the (token, k) slots EpOptions::max_tokens x topk", {T, K});
  if (!tk) return tk.error();
  l.C = *tk / opt.dispatch_chunk_rows + (*tk % opt.dispatch_chunk_rows != 0);
  struct Region {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t* offset;
  };
  uint64_t recv_offset = 0;
  const Region regions[] = {{"received rows", DType::bf16, {l.RC, H}, &recv_offset},
                            {"expert outputs", DType::bf16, {l.RC, H}, &l.off_eout},
                            {"counts", DType::i32, {P, E}, &l.off_counts},
                            {"count flags", DType::i32, {P}, &l.off_cflags},
                            {"chunk flags", DType::i32, {P, l.C}, &l.off_kflags},
                            {"ready flags", DType::i32, {P}, &l.off_ready},
                            {"row sources", DType::i32, {l.RC}, &l.off_source}};
  constexpr uint64_t kLimit = uint64_t(std::numeric_limits<int64_t>::max()) - 255;
  uint64_t at = 0;
  for (const Region& r : regions) {
    auto e = checked_extent(r.dtype, r.shape);
    if (!e) return Error(e.error().status(), fmt::format("EpExchange: the {}: {}", r.name, e.error().message()));
    if (uint64_t(e->bytes) > kLimit - at)
      return Error(HAL_OUT_OF_RANGE, fmt::format("EpExchange: the exchange buffer holds more than 2^63 bytes (the {} "
                                                 "{} {}: {} bytes after {})", r.name, dtype_name(r.dtype),
                                                 fmt::join(r.shape, " x "), e->bytes, at));
    *r.offset = at;
    at = align_up(at + uint64_t(e->bytes));
  }
  l.total = at;
  return l;
}

// Collective: every step that can fail on one rank alone is followed by an agreement
// (Comm::agree) before the next collective, so that all ranks fail together instead of the
// others waiting for the failed one until the communicator's timeout.
Result<EpExchange> EpExchange::create(const Device& device, const Comm& comm, int64_t E, int64_t K, int64_t H,
                                      const EpOptions& opt) {
  auto info = comm.info();
  if (!info) return info.error();
  auto layout = exchange_layout(info->size, E, K, H, opt);
  HALCYON_TRY(comm.agree(layout ? Status{} : Status{layout.error()}, "EpExchange"));
  // Every rank lays out its peers' buffers from its own shape (capacity, chunk flags per rank):
  // one that differs would write past a peer's buffer or wait for chunks never sent.
  HALCYON_TRY(same_on_every_rank(comm, "EpExchange", {{"experts", E}, {"topk", K}, {"hidden", H},
                                                      {"EpOptions::max_tokens", opt.max_tokens},
                                                      {"EpOptions::dispatch_chunk_rows", opt.dispatch_chunk_rows},
                                                      {"EpOptions::dedup", opt.dedup ? 1 : 0}}));
  const ExchangeLayout& l = *layout;
  auto st = std::make_shared<State>();
  st->device = device, st->opt = opt, st->E = E, st->K = K, st->H = H, st->rank = info->rank;
  st->RC = l.RC, st->C = l.C;
  st->off_eout = l.off_eout, st->off_counts = l.off_counts, st->off_cflags = l.off_cflags;
  st->off_kflags = l.off_kflags, st->off_ready = l.off_ready, st->off_source = l.off_source;
  // Flags start at 0 (generations start at 1), before any peer can see the buffer.
  auto zeroed = [&]() -> Status {
    auto mine = comm.buffer(l.total);
    if (!mine) return mine.error();
    st->mine = std::move(mine).value();
    auto s = device.create_stream();
    if (!s) return s.error();
    HALCYON_TRY(s->fill(st->mine, 0, l.total, uint8_t(0)));
    return s->synchronize();
  };
  HALCYON_TRY(comm.agree(zeroed(), "EpExchange"));
  auto mapped = comm.share(st->mine);  // all ranks fail alike on a failed export or import
  if (!mapped) return mapped.error();
  st->mapped = std::move(mapped).value();
  st->peers.rank = info->rank;
  st->peers.capacity = st->RC;
  st->peers.chunk_flags = st->C;
  st->peers.experts = E;
  st->peers.timeout_ms = opt.timeout_ms;
  for (const Buffer& b : st->mapped) {
    const uint64_t a = b.address();
    st->peers.ranks.push_back(
        {a, a + st->off_counts, a + st->off_cflags, a + st->off_kflags, a + st->off_source, a + st->off_eout,
         a + st->off_ready});
  }
  auto tensors = [&]() -> Status {
    auto dest = make_tensor(device, DType::i32, {opt.max_tokens, K});
    auto offsets = make_tensor(device, DType::i32, {E + 1});
    if (!dest) return dest.error();
    if (!offsets) return offsets.error();
    st->slot_dest = std::move(dest).value();
    st->expert_offsets = std::move(offsets).value();
    return {};
  };
  // The agreement is also the barrier the exchange needs: no rank leaves it before every rank
  // has mapped its peers' buffers.
  HALCYON_TRY(comm.agree(tensors(), "EpExchange"));
  EpExchange ex;
  ex.st_ = std::move(st);
  return ex;
}

Status EpExchange::dispatch(const Stream& s, const Tensor& x, const Tensor& topk_ids, ops::RunOptions run) {
  State& st = *st_;
  // T = 0 is a rank without tokens this time: it still publishes its (zero) counts and waits
  // for its peers' rows, since every rank's dispatch waits for all.
  const int64_t T = x.shape.empty() ? 0 : x.shape[0];
  if (x.shape.size() != 2 || x.shape[1] != st.H || T > st.opt.max_tokens || topk_ids.shape != std::vector<int64_t>{T, st.K})
    return Error(HAL_INVALID_ARGUMENT, fmt::format("EpExchange::dispatch: x {} and topk_ids {}, expected [T, {}] and "
                                                   "[T, {}] with 0 <= T <= max_tokens = {}", x.shape_string(),
                                                   topk_ids.shape_string(), st.H, st.K, st.opt.max_tokens));
  st.T = T;
  ++st.generation;
  run.ep_peers = &st.peers;
  const int64_t chunks = (T * st.K + st.opt.dispatch_chunk_rows - 1) / st.opt.dispatch_chunk_rows;
  TensorMap d{{"x", view(x, {1, T, st.H})},
              {"topk_ids", view(topk_ids, {1, T, st.K})},
              {"recv", Tensor{st.mine, 0, DType::bf16, {1, st.RC, st.H}}},
              {"slot_dest", view(st.slot_dest, {1, T, st.K})},
              {"expert_offsets", view(st.expert_offsets, {1, st.E + 1})},
              {"counts", Tensor{st.mine, st.off_counts, DType::i32, {1, 1, st.E}}},
              {"count_flags", Tensor{st.mine, st.off_cflags, DType::i32, {1, 1}}},
              {"chunk_flags", Tensor{st.mine, st.off_kflags, DType::i32, {1, 1, chunks}}},
              {"row_source", Tensor{st.mine, st.off_source, DType::i32, {1, st.RC}}}};
  return run_op(st.device, s, "ep_dispatch", d,
                {{"experts", std::to_string(st.E)}, {"capacity", std::to_string(st.RC)},
                 {"chunk_rows", std::to_string(st.opt.dispatch_chunk_rows)},
                 {"generation", std::to_string(st.generation)}, {"zero_tail", "false"},
                 {"dedup", st.opt.dedup ? "true" : "false"}},
                run);
}

Status EpExchange::combine(const Stream& s, const Tensor& topk_weights, const Tensor& out, ops::RunOptions run) {
  State& st = *st_;
  if (st.generation == 0 || topk_weights.shape != std::vector<int64_t>{st.T, st.K} ||
      out.shape != std::vector<int64_t>{st.T, st.H})
    return Error(HAL_INVALID_ARGUMENT, fmt::format("EpExchange::combine: topk_weights {} and out {}, expected [{}, {}] "
                                                   "and [{}, {}] (the last dispatch's tokens)", topk_weights.shape_string(),
                                                   out.shape_string(), st.T, st.K, st.T, st.H));
  run.ep_peers = &st.peers;
  TensorMap comb{{"expert_out", Tensor{st.mine, st.off_eout, DType::bf16, {1, st.RC, st.H}}},
                 {"topk_weights", view(topk_weights, {1, st.T, st.K})},
                 {"slot_dest", view(st.slot_dest, {1, st.T, st.K})},
                 {"out", view(out, {1, st.T, st.H})},
                 {"ready", Tensor{st.mine, st.off_ready, DType::i32, {1, 1}}}};
  return run_op(st.device, s, "ep_combine", comb,
                {{"chunk_rows", std::to_string(st.opt.combine_chunk_rows)}, {"generation", std::to_string(st.generation)}},
                run);
}

Tensor EpExchange::received() const { return Tensor{st_->mine, 0, DType::bf16, {st_->RC, st_->H}}; }
Tensor EpExchange::expert_outputs() const { return Tensor{st_->mine, st_->off_eout, DType::bf16, {st_->RC, st_->H}}; }
Tensor EpExchange::expert_offsets(int64_t local) const { return view(st_->expert_offsets, {local + 1}); }
Tensor EpExchange::slot_dest() const { return view(st_->slot_dest, {st_->T, st_->K}); }
int64_t EpExchange::capacity() const { return st_->RC; }
int32_t EpExchange::generation() const { return st_->generation; }

namespace {

// One step of the comm stream's queue: micro-batch `batch`'s dispatch or combine.
struct CommStep {
  bool combine = false;
  int64_t batch = 0;
};

// The comm stream's queue for n micro-batches: dispatch 0, then for each i, dispatch i+1 ahead
// of combine i: d0 d1 c0 d2 c1 ... d(n-1) c(n-2) c(n-1). The same on every rank (a kernel waits
// for its peers' counterparts; one queued behind a kernel that they queue after theirs would
// never start).
// Why dispatch i+1 goes ahead of combine i: combine i waits (an event) for the GEMMs of i, and
// everything queued behind it on the comm stream waits with it. Queued ahead, dispatch i+1 runs
// while the GEMMs of i run, so the GEMMs of i+1 can start the moment those of i end. Dispatch
// i+2 then follows combine i, both running while the GEMMs of i+1 run: the compute stream never
// idles as long as a micro-batch's combine plus dispatch take no longer than its GEMMs (issue
// 20's two-H200 numbers for the whole batch: about 0.95 + 0.95 ms of exchanges on 24 comm SMs
// against 6.8 ms of GEMMs). Past that point the comm stream is the longer one in any order and
// the layer cannot reach its compute side; queuing more dispatches ahead (all of them first, at
// the extreme) could then trim the GEMMs' idle time, at the price of holding every combine
// behind rows no GEMM needs yet. With n = 2 every order is d0 d1 c0 c1.
std::vector<CommStep> comm_order(int64_t n) {
  std::vector<CommStep> order{{false, 0}};
  for (int64_t i = 0; i < n; ++i) {
    if (i + 1 < n) order.push_back({false, i + 1});
    order.push_back({true, i});
  }
  return order;
}

// Micro-batch i of n takes tokens [first, end) of T.
struct Slice {
  int64_t first, end;
};
Slice slice_of(int64_t T, int64_t i, int64_t n) { return {T * i / n, T * (i + 1) / n}; }

}  // namespace

// Collective (every rank creates its layer): one exchange per micro-batch, each for
// ceil(max_tokens / micro_batches) tokens with its own flags and generations, the comm stream,
// events, tensors. This rank's own objects first, agreed on, then the exchanges (collective,
// each agreeing inside): nothing that can fail on one rank alone follows the last collective.
Status MoeEpLayer::create_kernel_buffers() {
  auto& k = *kernel_;
  const int64_t n = k.opt.micro_batches;
  // Compared first, so that a rank whose count is bad does not leave the others waiting.
  HALCYON_TRY(same_on_every_rank(comm_, "MoeEpLayer", {{"EpOptions::micro_batches", n},
                                                      {"EpOptions::edge_exchanges_on_caller",
                                                       k.opt.edge_exchanges_on_caller ? 1 : 0}}));
  if (n < 1)  // the same on every rank (compared above): all return here
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeEpLayer: EpOptions::micro_batches = {} must be >= 1", n));
  EpOptions each = k.opt;
  each.max_tokens = k.opt.max_tokens / n + (k.opt.max_tokens % n > 0);  // rounded up; max_tokens + n - 1 can wrap
  HALCYON_TRY(comm_.agree(create_kernel_locals(each), "MoeEpLayer"));
  for (auto& b : k.batches) {
    auto ex = EpExchange::create(device_, comm_, config_.experts, config_.topk, config_.hidden, each);
    if (!ex) return ex.error();
    b.ex = std::move(ex).value();
  }
  return {};
}

// This rank's part of create_kernel_buffers, no collective: each micro-batch's events, the
// comm stream and its events, and the gate's and the GEMMs' tensors (the exchanges' capacity
// from their layout, checked as EpExchange::create checks it).
Status MoeEpLayer::create_kernel_locals(const EpOptions& each) {
  auto& k = *kernel_;
  const auto& c = config_;
  auto layout = exchange_layout(ranks_, c.experts, c.topk, c.hidden, each);
  if (!layout) return layout.error();
  k.batches.resize(size_t(k.opt.micro_batches));
  for (KernelState::Batch& b : k.batches)
    for (auto [ev, timing] : {std::pair{&b.dispatched, false}, {&b.computed, false}, {&b.d0, true}, {&b.d1, true},
                              {&b.c0, true}, {&b.c1, true}}) {
      auto e = device_.create_event(timing);
      if (!e) return e.error();
      *ev = std::move(e).value();
    }
  auto comm = device_.create_stream(k.opt.comm_partition);
  if (!comm) return comm.error();
  k.comm = std::move(comm).value();
  for (Event* ev : {&k.routed, &k.combined, &k.handoff}) {
    auto e = device_.create_event(false);
    if (!e) return e.error();
    *ev = std::move(e).value();
  }
  const int64_t T = k.opt.max_tokens;
  for (auto [t, dt, shape] :
       {std::tuple{&k.logits, DType::f32, std::vector<int64_t>{T, c.experts}}, {&k.topk_ids, DType::i32, {T, c.topk}},
        {&k.topk_weights, DType::f32, {T, c.topk}}, {&k.hidden, DType::bf16, {std::max<int64_t>(layout->RC, 1), c.inter}}}) {
    auto made = make_tensor(device_, dt, shape);
    if (!made) return Error(made.error().status(), fmt::format("MoeEpLayer: {}", made.error().message()));
    *t = std::move(made).value();
  }
  return {};
}

// Stream order: gate for all T tokens (caller's stream) -> the comm stream's queue of
// comm_order: each micro-batch's dispatch -> its grouped GEMMs (caller's stream) -> its combine
// (comm) -> the caller's stream waits for the last combine. Events carry each hand-off; the
// ranks meet only through the kernels' flags. One micro-batch is the plain chain
// gate -> dispatch -> GEMMs -> combine.
Status MoeEpLayer::kernel_forward(const Stream& s, const Tensor& x, Tensor& out, MoeEpStats* stats) {
  auto& k = *kernel_;
  const auto& c = config_;
  const int64_t T = x.shape[0], K = c.topk, E = c.experts, n = int64_t(k.batches.size());
  if (T > k.opt.max_tokens)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeEpLayer: x has {} tokens, more than EpOptions::max_tokens = {} "
                                                   "the exchange buffers were made for", T, k.opt.max_tokens));
  const Tensor ids = view(k.topk_ids, {T, K}), weights = view(k.topk_weights, {T, K});
  HALCYON_TRY(gate(s, x, view(k.logits, {T, E}), ids, weights));
  HALCYON_TRY(s.record(k.routed));
  HALCYON_TRY(k.comm.wait(k.routed));
  // Host order: each event is recorded before a stream is told to wait for it. The first
  // dispatch and the last combine go to the caller's stream when asked (EpOptions::
  // edge_exchanges_on_caller): the GEMMs there wait for the one and the caller for the other,
  // so nothing would run beside them. Either way the exchanges run one after another in
  // comm_order on every rank: where one moves to the other stream, it waits for the end of the
  // one before. Two exchanges of a rank in flight at once could each hold units (or a CPU
  // pool) that the other's counterpart on a peer needs to start: a wait that never ends.
  const Stream* last = &k.comm;
  for (const CommStep& step : comm_order(n)) {
    const Slice sl = slice_of(T, step.batch, n);
    const bool edge = k.opt.edge_exchanges_on_caller && step.batch == (step.combine ? n - 1 : 0);
    const Stream& on = edge ? s : k.comm;
    if (step.combine) HALCYON_TRY(kernel_experts(s, step.batch));  // its GEMMs, before any hand-off wait
    if (&on != last) {
      HALCYON_TRY(last->record(k.handoff));
      HALCYON_TRY(on.wait(k.handoff));
      last = &on;
    }
    if (step.combine)
      HALCYON_TRY(kernel_combine(on, step.batch, rows_of(weights, sl.first, sl.end), rows_of(out, sl.first, sl.end),
                                 stats != nullptr));
    else
      HALCYON_TRY(kernel_dispatch(on, step.batch, rows_of(x, sl.first, sl.end), rows_of(ids, sl.first, sl.end),
                                  stats != nullptr));
  }
  HALCYON_TRY(k.comm.record(k.combined));
  HALCYON_TRY(s.wait(k.combined));
  return stats ? kernel_stats(s, T, *stats) : Status{};
}

// Micro-batch i's dispatch on stream `on` (the comm stream or the caller's; timed when
// statistics are asked for), then the event its GEMMs wait for.
Status MoeEpLayer::kernel_dispatch(const Stream& on, int64_t i, const Tensor& x, const Tensor& ids, bool timed) {
  auto& b = kernel_->batches[size_t(i)];
  if (timed) HALCYON_TRY(on.record(b.d0));
  HALCYON_TRY(b.ex.dispatch(on, x, ids, options_.run_options("ep_dispatch")));
  if (timed) HALCYON_TRY(on.record(b.d1));
  return on.record(b.dispatched);
}

// Micro-batch i's grouped GEMMs on the caller's stream once its rows have landed: straight on
// its exchange's received rows, the outputs into its exchange's expert outputs.
Status MoeEpLayer::kernel_experts(const Stream& s, int64_t i) {
  auto& k = *kernel_;
  auto& b = k.batches[size_t(i)];
  const int64_t EL = config_.local();
  HALCYON_TRY(s.wait(b.dispatched));
  if (EL > 0) {
    const Tensor offsets = b.ex.expert_offsets(EL), hidden = view(k.hidden, {b.ex.capacity(), config_.inter});
    TensorMap up{{"a", b.ex.received()}, {"w_gate_up", weights_.w_gate_up}, {"expert_offsets", offsets}, {"out", hidden}};
    HALCYON_TRY(run_op(device_, s, "moe_grouped_gemm_swiglu", up, {}, options_.run_options("moe_grouped_gemm_swiglu")));
    TensorMap down{{"a", hidden}, {"w", weights_.w_down}, {"expert_offsets", offsets}, {"out", b.ex.expert_outputs()}};
    HALCYON_TRY(run_op(device_, s, "moe_grouped_gemm", down, {}, options_.run_options("moe_grouped_gemm")));
  }
  return s.record(b.computed);
}

// Micro-batch i's combine on stream `on`, after its GEMMs (timed when asked for).
Status MoeEpLayer::kernel_combine(const Stream& on, int64_t i, const Tensor& weights, const Tensor& out, bool timed) {
  auto& b = kernel_->batches[size_t(i)];
  HALCYON_TRY(on.wait(b.computed));
  if (timed) HALCYON_TRY(on.record(b.c0));
  HALCYON_TRY(b.ex.combine(on, weights, out, options_.run_options("ep_combine")));
  if (timed) return on.record(b.c1);
  return {};
}

// Statistics only: what moved, read back after the forward; times from the comm stream's
// events in its queue's order (expert_ms: each combine's wait for its GEMMs after the step
// before it ended).
Status MoeEpLayer::kernel_stats(const Stream& s, int64_t T, MoeEpStats& out) {
  auto& k = *kernel_;
  const int64_t EL = config_.local(), H = config_.hidden;
  HALCYON_TRY(s.synchronize());
  MoeEpStats st;
  st.rows_sent = T * config_.topk;
  int64_t remote = 0;
  for (const auto& b : k.batches) {
    std::vector<int32_t> dest, offsets;
    HALCYON_TRY(read_vector(s, b.ex.slot_dest(), dest));
    HALCYON_TRY(read_vector(s, b.ex.expert_offsets(EL), offsets));
    for (int32_t v : dest) remote += v >= 0 && v / b.ex.capacity() != int64_t(rank_);
    st.rows_received += offsets[size_t(EL)];
  }
  st.dispatch_bytes = uint64_t(remote) * uint64_t(H) * 2;  // within forward()'s checked T * K * (2H + 4)
  st.combine_bytes = st.dispatch_bytes;
  const Event* last_end = nullptr;
  for (const CommStep& step : comm_order(int64_t(k.batches.size()))) {
    const auto& b = k.batches[size_t(step.batch)];
    const Event& start = step.combine ? b.c0 : b.d0;
    const Event& end = step.combine ? b.c1 : b.d1;
    auto ms = end.elapsed_since(start);
    if (!ms) return ms.error();
    (step.combine ? st.combine_ms : st.dispatch_ms) += *ms;
    if (step.combine) {
      auto waited = start.elapsed_since(*last_end);
      if (!waited) return waited.error();
      st.expert_ms += std::max(0.0f, *waited);  // the two may run on different streams
    }
    last_end = &end;
  }
  out = st;
  return {};
}

}  // namespace halcyon::rt
