// `halcyon bench ep`: expert-parallel dispatch and combine over a communicator
// (docs/expert_parallel.md). Each rank routes its tokens to random experts (top-k of E, the
// experts split evenly over the ranks), then times, as medians of --iters after a warm-up:
//   dispatch  the all-to-all of the routed rows (H bf16 each) to the ranks owning their experts
//   combine   the all-to-all of the expert outputs back
//   the same two as copies straight into peer-mapped buffers (hal_comm_buffer_create + share)
//   the same two by the ep_dispatch / ep_combine kernels (rt::EpExchange: rows stored into the
//             owners' expert-contiguous buffers, flags in peer memory), on a stream of a comm
//             partition of --comm-units units (0: the whole device), in chunks of --chunk-bytes
//             (the partition planner's chunk size; `halcyon bench overlap` prints its choice);
//             dispatch with a token's row crossing to a rank once (EpOptions::dedup, the
//             default) and with one row per (token, expert), and NCCL's all-to-all of only the
//             rows that cross with dedup (what a NCCL-based dedup dispatch would move)
//   layer     a whole MoeEpLayer forward (router, gate, dispatch, expert GEMMs, combine), with the
//             rows moved by the all-to-all, by direct writes into peer-mapped buffers, and by
//             the kernels on the comm partition beside the grouped GEMMs on the rest
//   overlap   the kernels' layer in one micro-batch, its grouped GEMMs alone (the compute side:
//             events around the GEMMs of a one-micro-batch forward, where no exchange runs beside
//             them), and the layer in --micro-batches slices (one's dispatch and combine beside
//             another's GEMMs) over the compute side: issue 20's target is 1.1x
// and reports per rank the bytes that crossed to other ranks, GB/s and latency (--json FILE:
// every figure, written by rank 0). --ranks N starts N
// processes on this machine, one rank each (the CPU communicator's transport is shared memory
// between processes); --rank R --ranks N --rendezvous NAME runs one rank of a job whose other
// ranks a launcher starts (one process per GPU). Beside NCCL's all-to-all of the same bytes
// when the device's communicator runs over NCCL; the CPU communicator has no such peer and
// says so.
#include <fmt/format.h>

#include <halcyon/runtime/moe_ep_layer.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "bench_common.hpp"
#include "cli_support.hpp"
#include "command.hpp"

extern char** environ;

namespace halcyon::bench {
namespace {

int usage(int rc) {
  fmt::print(rc ? stderr : stdout,
             "usage: halcyon bench ep [--device URI] [--ranks N] [--rank R --rendezvous NAME] [--tokens N]\n"
             "                        [--topk N] [--experts N] [--hidden N] [--inter N] [--iters N]\n"
             "                        [--comm-units N] [--chunk-bytes N] [--micro-batches N] [--impl OP=NAME]...\n"
             "                        [--json FILE]\n"
             "  Expert-parallel dispatch and combine (all-to-all of the routed rows and back) and a whole\n"
             "  MoeEpLayer forward, per rank: bytes to other ranks, GB/s, latency (medians of --iters,\n"
             "  default 10, after one warm-up). --ranks N (default 2) starts N processes here; with --rank\n"
             "  and --rendezvous, this process is one rank of a job started by a launcher.\n"
             "  The dispatch/combine kernels run on a partition of --comm-units units (default 0: no\n"
             "  split) in chunks of --chunk-bytes (default 524288, the planner's chunk size).\n"
             "  The kernels' layer is timed whole and in --micro-batches N slices (default 2: one's\n"
             "  dispatch and combine beside another's GEMMs), each against its grouped GEMMs alone\n"
             "  (the compute side; target: the micro-batched layer within 1.1x of it).\n"
             "  --impl OP=NAME runs that implementation of OP (ep_dispatch=sm90.tma, moe_grouped_gemm=...).\n"
             "  --json FILE: every figure of every rank, written by rank 0.\n"
             "  Defaults: cpu: 64 tokens per rank, top-8 of 16 experts, H 256, I 128 (tiny, for CI);\n"
             "  otherwise the DeepSeek-V3 shape per GPU (4096 tokens, top-8 of 256, H 7168, I 2048).\n");
  return rc;
}

struct Shape {
  int64_t tokens = -1, topk = 8, experts = -1, hidden = -1, inter = -1, iters = 10;
  int64_t comm_units = 0, chunk_bytes = 512 * 1024;
  int64_t micro_batches = 2;  // the kernels' layer in this many slices (EpOptions::micro_batches)
  rt::MoeLayerOptions layer;  // --impl OP=NAME: named implementations (ep_dispatch, ep_combine, the GEMMs)
};

// What one rank measured; rank 0 gathers and prints them.
struct RankResult {
  double dispatch_ms = 0, combine_ms = 0, layer_ms = 0, layer_peer_ms = 0;
  double peer_dispatch_ms = 0, peer_combine_ms = 0;  // the same bytes copied into peer-mapped buffers
  double kernel_dispatch_ms = 0, kernel_combine_ms = 0, layer_kernel_ms = 0;  // ep_dispatch / ep_combine
  double layer_kernel_gemm_ms = 0;  // that layer's expert side (grouped GEMMs), from one forward's events
  double layer_micro_ms = 0;        // the kernels' layer in Shape::micro_batches micro-batches
  double kernel_dispatch_slot_ms = 0, layer_micro_slot_ms = 0;  // the same with EpOptions::dedup off
  double layer_micro_comm_ms = 0;   // ... with every exchange on the comm partition (edge_exchanges_on_caller off)
  double dedup_dispatch_ms = 0;     // NCCL all-to-all of the rows that cross with dedup only
  uint32_t comm_units = 0;          // of the kernels' stream
  uint64_t dispatch_bytes = 0, combine_bytes = 0;
  uint64_t dedup_bytes = 0;         // to other ranks with dedup: one row per (token, other rank)
  int64_t rows_received = 0;
};

// A bf16 tensor filled on the device from a random block (bench_common's Filler): the
// DeepSeek-V3 shape's weights are gigabytes, too many to draw on the host. The same seed gives
// the same values on every rank (the router must agree).
Result<ops::Tensor> random_tensor(const Device& d, const Stream& s, std::vector<int64_t> shape, uint32_t seed, int shift) {
  auto t = ops::make_tensor(d, ops::DType::bf16, std::move(shape));
  if (!t) return t.error();
  Filler f{d, s, {}};
  HALCYON_TRY(f.init(seed, false, 1.0f, shift));
  HALCYON_TRY(f.fill(*t));
  HALCYON_TRY(s.synchronize());
  return t;
}

template <typename F>
Result<double> median_ms(int64_t iters, const Comm& comm, const Stream& s, F&& body) {
  std::vector<double> ms;
  for (int64_t i = 0; i <= iters; ++i) {
    HALCYON_TRY(comm.barrier());  // every rank starts together
    auto t0 = std::chrono::steady_clock::now();
    HALCYON_TRY(body());
    HALCYON_TRY(s.synchronize());
    if (i > 0) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

// Random routing: top-k distinct experts per token, the same on every run of a rank.
std::vector<int32_t> routing(const Shape& sh, uint32_t rank) {
  std::mt19937 rng(1234 + rank);
  std::vector<int32_t> all(size_t(sh.experts)), ids;
  for (int64_t e = 0; e < sh.experts; ++e) all[size_t(e)] = int32_t(e);
  for (int64_t t = 0; t < sh.tokens; ++t) {
    for (int64_t k = 0; k < sh.topk; ++k) std::swap(all[size_t(k)], all[size_t(k) + rng() % size_t(sh.experts - k)]);
    ids.insert(ids.end(), all.begin(), all.begin() + sh.topk);
  }
  return ids;
}

// The stream the dispatch/combine kernels run on: a partition of sh.comm_units units, or the
// whole device. `parts` keeps the partitions alive.
Result<Stream> comm_stream(const Device& dev, const Shape& sh, std::vector<Partition>& parts) {
  if (sh.comm_units <= 0) return dev.create_stream();
  // The coarse steps first; a count only the fine-grained steps grant (20 SMs of an H100) next.
  auto split = dev.split_n({{"comm", uint32_t(sh.comm_units)}, {"compute", 0}});
  if (!split) split = dev.split_n({{"comm", uint32_t(sh.comm_units)}, {"compute", 0}}, HAL_PARTITION_FINE_GRAINED);
  if (!split) return split.error();
  parts = std::move(split).value();
  return dev.create_stream(&parts[0]);
}

// The same routing's rows moved by ep_dispatch and back by ep_combine (rt::EpExchange) on the
// comm stream: each a host wall clock from a common barrier to that stream's end (the kernels
// finish only when every row for this rank has landed, so no second barrier).
Status time_kernels(const Device& dev, const Comm& comm, const Stream& cs, const Shape& sh, uint32_t rank,
                    bool dedup, RankResult& out) {
  rt::EpOptions o;
  o.dedup = dedup;
  o.max_tokens = sh.tokens;
  o.dispatch_chunk_rows = std::max<int64_t>(1, sh.chunk_bytes / (sh.hidden * 2));
  o.combine_chunk_rows = std::max<int64_t>(1, o.dispatch_chunk_rows / sh.topk);
  auto ex = rt::EpExchange::create(dev, comm, sh.experts, sh.topk, sh.hidden, o);
  if (!ex) return ex.error();
  const std::vector<int32_t> ids = routing(sh, rank);
  auto x = random_tensor(dev, cs, {sh.tokens, sh.hidden}, 5000 + rank, 0);
  auto y = ops::make_tensor(dev, ops::DType::bf16, {sh.tokens, sh.hidden});
  auto idt = ops::make_tensor(dev, ops::DType::i32, {sh.tokens, sh.topk});
  auto wt = ops::make_tensor(dev, ops::DType::f32, {sh.tokens, sh.topk});
  for (auto* t : {&x, &y, &idt, &wt})
    if (!*t) return t->error();
  HALCYON_TRY(cs.write(idt->buffer, idt->offset, ids.data(), ids.size() * 4));
  HALCYON_TRY(cs.fill(wt->buffer, wt->offset, wt->bytes(), 0.125f));
  HALCYON_TRY(cs.synchronize());
  // Each combine needs its dispatch's generation: time dispatch, then combine, alternately.
  std::vector<double> dms, cms;
  for (int64_t i = 0; i <= sh.iters; ++i) {
    for (int side = 0; side < 2; ++side) {
      HALCYON_TRY(comm.barrier());
      auto t0 = std::chrono::steady_clock::now();
      HALCYON_TRY(side == 0 ? ex->dispatch(cs, *x, *idt, sh.layer.run_options("ep_dispatch"))
                            : ex->combine(cs, *wt, *y, sh.layer.run_options("ep_combine")));
      HALCYON_TRY(cs.synchronize());
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) (side == 0 ? dms : cms).push_back(ms);
    }
  }
  if (!dedup) {
    out.kernel_dispatch_slot_ms = median(dms);
    return {};
  }
  out.kernel_dispatch_ms = median(dms);
  out.kernel_combine_ms = median(cms);
  auto info = cs.info();
  if (!info) return info.error();
  out.comm_units = info->units;
  return {};
}

// The all-to-all pair of one layer with random routing: rows to each owner and back.
Status time_exchanges(const Device& dev, const Comm& comm, const Stream& s, const Shape& sh, uint32_t rank,
                      uint32_t ranks, RankResult& out) {
  const std::vector<int32_t> ids = routing(sh, rank);
  std::vector<uint64_t> send_rows(ranks, 0), dedup_rows(ranks, 0);  // dedup: one per (token, other rank)
  for (int32_t e : ids) ++send_rows[rt::ep_owner(sh.experts, ranks, e)];
  for (int64_t t = 0; t < sh.tokens; ++t)
    for (uint32_t p = 0; p < ranks; ++p)
      for (int64_t k = 0; p != rank && k < sh.topk; ++k)
        if (rt::ep_owner(sh.experts, ranks, ids[size_t(t * sh.topk + k)]) == p) {
          ++dedup_rows[p];
          break;
        }
  auto all = comm.all_gather_values(send_rows);
  if (!all) return all.error();
  const uint64_t row = uint64_t(sh.hidden) * 2;
  std::vector<uint64_t> so(ranks), ss(ranks), ro(ranks), rs(ranks);
  uint64_t sent = 0, received = 0;
  for (uint32_t p = 0; p < ranks; ++p) {
    so[p] = sent;
    ss[p] = send_rows[p] * row;
    sent += ss[p];
    ro[p] = received;
    rs[p] = (*all)[size_t(p) * ranks + rank] * row;
    received += rs[p];
  }
  auto home = dev.allocate(std::max<uint64_t>(sent, 1));
  auto away = dev.allocate(std::max<uint64_t>(received, 1));
  if (!home) return home.error();
  if (!away) return away.error();
  auto dispatch = median_ms(sh.iters, comm, s, [&] { return comm.all_to_all(s, *home, so, ss, *away, ro, rs); });
  if (!dispatch) return dispatch.error();
  auto combine = median_ms(sh.iters, comm, s, [&] { return comm.all_to_all(s, *away, ro, rs, *home, so, ss); });
  if (!combine) return combine.error();
  out.dispatch_ms = *dispatch;
  out.combine_ms = *combine;
  // NCCL's all-to-all of only the rows that cross with dedup (none to itself): the bytes a dedup
  // dispatch over NCCL would move, without its local copies.
  auto dedup_all = comm.all_gather_values(dedup_rows);
  if (!dedup_all) return dedup_all.error();
  std::vector<uint64_t> dso(ranks), dss(ranks), dro(ranks), drs(ranks);
  for (uint32_t p = 0; p < ranks; ++p) {
    dso[p] = so[p], dss[p] = dedup_rows[p] * row;
    dro[p] = ro[p], drs[p] = (*dedup_all)[size_t(p) * ranks + rank] * row;
    out.dedup_bytes += dss[p];
  }
  auto dedup = median_ms(sh.iters, comm, s, [&] { return comm.all_to_all(s, *home, dso, dss, *away, dro, drs); });
  if (!dedup) return dedup.error();
  out.dedup_dispatch_ms = *dedup;
  // The same bytes copied straight into the peers' mapped buffers (what EpTransport::kPeerWrite
  // does), each side ended by a barrier: rank q's rows land in p's buffer after those of ranks
  // before q, and come back to where q sent them from.
  auto rows_between = [&](uint32_t q0, uint32_t q1, uint32_t p0, uint32_t p1) {
    uint64_t n = 0;
    for (uint32_t q = q0; q < q1; ++q)
      for (uint32_t p = p0; p < p1; ++p) n += (*all)[size_t(q) * ranks + p];
    return n * row;
  };
  auto home_shared = comm.buffer(std::max<uint64_t>(sent, 1));
  auto away_shared = comm.buffer(std::max<uint64_t>(received, 1));
  if (!home_shared) return home_shared.error();
  if (!away_shared) return away_shared.error();
  auto home_peers = comm.share(*home_shared);
  auto away_peers = comm.share(*away_shared);
  if (!home_peers) return home_peers.error();
  if (!away_peers) return away_peers.error();
  auto peer_dispatch = median_ms(sh.iters, comm, s, [&]() -> Status {
    for (uint32_t p = 0; p < ranks; ++p)
      if (ss[p]) HALCYON_TRY(s.copy((*away_peers)[p], rows_between(0, rank, p, p + 1), *home, so[p], ss[p]));
    HALCYON_TRY(s.synchronize());
    return comm.barrier();
  });
  if (!peer_dispatch) return peer_dispatch.error();
  auto peer_combine = median_ms(sh.iters, comm, s, [&]() -> Status {
    for (uint32_t q = 0; q < ranks; ++q)
      if (rs[q]) HALCYON_TRY(s.copy((*home_peers)[q], rows_between(q, q + 1, 0, rank), *away, ro[q], rs[q]));
    HALCYON_TRY(s.synchronize());
    return comm.barrier();
  });
  if (!peer_combine) return peer_combine.error();
  out.peer_dispatch_ms = *peer_dispatch;
  out.peer_combine_ms = *peer_combine;
  out.dispatch_bytes = sent - ss[rank];
  out.combine_bytes = received - rs[rank];
  out.rows_received = int64_t(received / row);
  return {};
}

Status time_layer(const Device& dev, const Comm& comm, const Stream& s, const Shape& sh, uint32_t rank, uint32_t ranks,
                  const std::vector<Partition>& parts, RankResult& out) {
  rt::MoeLayerConfig c;
  c.hidden = sh.hidden;
  c.inter = sh.inter;
  c.experts = sh.experts;
  c.topk = sh.topk;
  c.n_groups = 1;
  c.topk_groups = 1;
  const rt::ExpertRange mine = rt::ep_expert_range(sh.experts, rank, ranks);
  rt::MoeLayerWeights w;
  auto router = random_tensor(dev, s, {c.hidden, c.experts}, 99, 4);
  auto up = random_tensor(dev, s, {mine.count(), c.hidden, 2 * c.inter}, 7 + rank, 6);
  auto down = random_tensor(dev, s, {mine.count(), c.inter, c.hidden}, 1007 + rank, 6);
  auto x = random_tensor(dev, s, {sh.tokens, c.hidden}, 5000 + rank, 0);
  auto y = ops::make_tensor(dev, ops::DType::bf16, {sh.tokens, c.hidden});
  for (auto* t : {&router, &up, &down, &x, &y})
    if (!*t) return t->error();
  w.w_router = *router;
  w.w_gate_up = *up;
  w.w_down = *down;
  rt::EpOptions o;
  o.comm_partition = parts.empty() ? nullptr : &parts[0];
  // With a split, the kernel transport's GEMMs run on the compute partition's stream.
  auto compute = parts.empty() ? Result<Stream>(s) : dev.create_stream(&parts[1]);
  if (!compute) return compute.error();
  o.max_tokens = sh.tokens;
  o.dispatch_chunk_rows = std::max<int64_t>(1, sh.chunk_bytes / (sh.hidden * 2));
  o.combine_chunk_rows = std::max<int64_t>(1, o.dispatch_chunk_rows / sh.topk);
  // The kernels' layer last, whole then in micro-batches (the one-micro-batch forward's
  // GEMMs, with no exchange beside them, are the compute side).
  struct Run {
    rt::EpTransport transport;
    int64_t micro_batches;
    double* ms;
    bool dedup = true, edges = true;  // EpOptions::dedup, edge_exchanges_on_caller
  };
  const rt::EpTransport kernels = rt::EpTransport::kPeerKernel;
  for (const Run& run : {Run{rt::EpTransport::kAllToAll, 1, &out.layer_ms}, Run{rt::EpTransport::kPeerWrite, 1, &out.layer_peer_ms},
                         Run{kernels, 1, &out.layer_kernel_ms},
                         Run{kernels, sh.micro_batches, &out.layer_micro_slot_ms, false, true},
                         Run{kernels, sh.micro_batches, &out.layer_micro_comm_ms, true, false},
                         Run{kernels, sh.micro_batches, &out.layer_micro_ms}}) {
    o.micro_batches = run.micro_batches;
    o.dedup = run.dedup;
    o.edge_exchanges_on_caller = run.edges;
    auto layer = rt::MoeEpLayer::create(dev, comm, c, w, sh.layer, run.transport, o);
    if (!layer) return layer.error();
    const Stream& ls = run.transport == rt::EpTransport::kPeerKernel ? *compute : s;
    auto ms = median_ms(sh.iters, comm, ls, [&] { return layer->forward(ls, *x, *y); });
    if (!ms) return ms.error();
    *run.ms = *ms;
    if (run.ms == &out.layer_kernel_ms) {
      rt::MoeEpStats st;
      HALCYON_TRY(comm.barrier());
      HALCYON_TRY(layer->forward(ls, *x, *y, &st));
      out.layer_kernel_gemm_ms = st.expert_ms;
    }
  }
  return {};
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }
// GB/s of `bytes` in `ms` (0 when nothing was timed).
double gbs(uint64_t bytes, double ms) { return ratio(double(bytes), ms) / 1e6; }

void print_results(const std::vector<RankResult>& all, const Shape& sh, const std::string& uri, const std::string& transport) {
  fmt::print("halcyon bench ep on {} x {} ranks ({} communicator): {} tokens per rank, top-{} of {} experts, H {}, I {}\n",
             uri, all.size(), transport, sh.tokens, sh.topk, sh.experts, sh.hidden, sh.inter);
  fmt::print("{:>4} {:>12} {:>12} {:>10} {:>12} {:>12} {:>10} {:>10} {:>10}\n", "rank", "dispatch MB", "dispatch ms",
             "GB/s", "combine MB", "combine ms", "GB/s", "layer ms", "peer ms");
  for (size_t r = 0; r < all.size(); ++r) {
    const RankResult& x = all[r];
    fmt::print("{:>4} {:>12.3f} {:>12.3f} {:>10.2f} {:>12.3f} {:>12.3f} {:>10.2f} {:>10.3f} {:>10.3f}\n", r,
               x.dispatch_bytes / 1e6, x.dispatch_ms, gbs(x.dispatch_bytes, x.dispatch_ms), x.combine_bytes / 1e6,
               x.combine_ms, gbs(x.combine_bytes, x.combine_ms), x.layer_ms, x.layer_peer_ms);
  }
  fmt::print("peer writes (the same bytes copied into peer-mapped buffers, each side ended by a barrier):\n");
  for (size_t r = 0; r < all.size(); ++r) {
    const RankResult& x = all[r];
    fmt::print("{:>4} dispatch {:.3f} ms = {:.2f} GB/s, combine {:.3f} ms = {:.2f} GB/s\n", r, x.peer_dispatch_ms,
               gbs(x.dispatch_bytes, x.peer_dispatch_ms), x.peer_combine_ms, gbs(x.combine_bytes, x.peer_combine_ms));
  }
  fmt::print("dispatch/combine kernels (ep_dispatch / ep_combine, flags in peer memory, chunks of {} bytes), the same "
             "bytes; layer with them on the comm stream beside the GEMMs:\n", sh.chunk_bytes);
  for (size_t r = 0; r < all.size(); ++r) {
    const RankResult& x = all[r];
    const double pd = gbs(x.dispatch_bytes, x.peer_dispatch_ms), pc = gbs(x.combine_bytes, x.peer_combine_ms);
    const double kd = gbs(x.dispatch_bytes, x.kernel_dispatch_ms), kc = gbs(x.combine_bytes, x.kernel_combine_ms);
    fmt::print("{:>4} dispatch {:.3f} ms = {:.2f} GB/s ({:.0f}% of the peer copy), combine {:.3f} ms = {:.2f} GB/s "
               "({:.0f}%), on {} units; layer {:.3f} ms, its grouped GEMMs {:.3f} ms ({:.2f}x)\n", r,
               x.kernel_dispatch_ms, kd, 100 * ratio(kd, pd), x.kernel_combine_ms, kc, 100 * ratio(kc, pc),
               x.comm_units, x.layer_kernel_ms, x.layer_kernel_gemm_ms, ratio(x.layer_kernel_ms, x.layer_kernel_gemm_ms));
  }
  fmt::print("dispatch, a token's row crossing to a rank once (EpOptions::dedup, the layer's default; GB/s above count "
             "every (token, expert) row) against one row per (token, expert) and the communicator's all-to-all:\n");
  for (size_t r = 0; r < all.size(); ++r) {
    const RankResult& x = all[r];
    fmt::print("{:>4} dedup {:.3f} ms ({:.3f} MB over the link), one row per slot {:.3f} ms ({:.2f}x the time), the "
               "communicator's all-to-all of the slots' rows {:.3f} ms ({:.2f}x), of the dedup rows alone {:.3f} ms "
               "({:.2f}x)\n", r, x.kernel_dispatch_ms, x.dedup_bytes / 1e6, x.kernel_dispatch_slot_ms,
               ratio(x.kernel_dispatch_slot_ms, x.kernel_dispatch_ms), x.dispatch_ms,
               ratio(x.dispatch_ms, x.kernel_dispatch_ms), x.dedup_dispatch_ms,
               ratio(x.dedup_dispatch_ms, x.kernel_dispatch_ms));
  }
  fmt::print("overlap: the kernels' layer in {} micro-batches (one's dispatch and combine beside another's grouped "
             "GEMMs) against its compute side (the grouped GEMMs of a one-micro-batch forward, nothing beside them):\n",
             sh.micro_batches);
  for (size_t r = 0; r < all.size(); ++r) {
    const RankResult& x = all[r];
    fmt::print("{:>4} layer in 1 micro-batch {:.3f} ms, compute side {:.3f} ms, layer in {} micro-batches {:.3f} ms = "
               "{:.2f}x the compute side (target 1.1x); one row per slot {:.3f} ms = {:.2f}x; every exchange on the "
               "comm partition {:.3f} ms = {:.2f}x\n", r, x.layer_kernel_ms,
               x.layer_kernel_gemm_ms, sh.micro_batches, x.layer_micro_ms,
               ratio(x.layer_micro_ms, x.layer_kernel_gemm_ms), x.layer_micro_slot_ms,
               ratio(x.layer_micro_slot_ms, x.layer_kernel_gemm_ms), x.layer_micro_comm_ms,
               ratio(x.layer_micro_comm_ms, x.layer_kernel_gemm_ms));
  }
  // Every rank's forward ends with a combine that waits for every rank: the layer cannot end
  // before the longest rank's GEMMs, whatever the exchange.
  double longest = 0, slowest = 0;
  for (const RankResult& x : all) longest = std::max(longest, x.layer_kernel_gemm_ms), slowest = std::max(slowest, x.layer_micro_ms);
  fmt::print("  the longest rank's compute side {:.3f} ms, the slowest rank's layer in {} micro-batches {:.3f} ms = {:.2f}x\n",
             longest, sh.micro_batches, slowest, ratio(slowest, longest));
  fmt::print("  bytes: rows (H bf16) to or from other ranks only; ms: host wall clock from a common barrier to the "
             "stream's end, median of {}; layer ms: MoeEpLayer over the all-to-all, peer ms: over direct writes "
             "into peer-mapped buffers\n", sh.iters);
  if (transport.rfind("nccl", 0) == 0)
    fmt::print("  dispatch and combine in the first table are NCCL's grouped ncclSend/ncclRecv of the same bytes "
               "({} communicator)\n", transport);
  else
    fmt::print("  NCCL all-to-all of the same bytes: not run ({} communicator: NCCL needs one GPU per rank)\n",
               transport);
}

// Every figure of every rank (--json); ms are the medians printed, bytes to other ranks only.
std::string results_json(const std::vector<RankResult>& all, const Shape& sh, const std::string& uri,
                         const std::string& transport) {
  std::string j = fmt::format(
      "{{\n \"device\": \"{}\", \"ranks\": {}, \"communicator\": \"{}\", \"tokens\": {}, \"topk\": {}, "
      "\"experts\": {}, \"hidden\": {}, \"inter\": {}, \"iters\": {}, \"comm_units\": {}, \"chunk_bytes\": {}, "
      "\"micro_batches\": {}, \"target_ratio\": 1.1,\n \"per_rank\": [\n",
      uri, all.size(), transport, sh.tokens, sh.topk, sh.experts, sh.hidden, sh.inter, sh.iters, sh.comm_units,
      sh.chunk_bytes, sh.micro_batches);
  for (size_t r = 0; r < all.size(); ++r) {
    const RankResult& x = all[r];
    j += fmt::format(
        "  {{\"rank\": {}, \"dispatch_bytes\": {}, \"combine_bytes\": {}, \"rows_received\": {}, "
        "\"all_to_all_dispatch_ms\": {:.5f}, \"all_to_all_combine_ms\": {:.5f}, \"peer_dispatch_ms\": {:.5f}, "
        "\"peer_combine_ms\": {:.5f}, \"kernel_dispatch_ms\": {:.5f}, \"kernel_combine_ms\": {:.5f}, "
        "\"kernel_comm_units\": {}, \"layer_all_to_all_ms\": {:.5f}, \"layer_peer_ms\": {:.5f}, "
        "\"layer_kernel_ms\": {:.5f}, \"layer_kernel_gemm_ms\": {:.5f}, \"layer_micro_ms\": {:.5f}, "
        "\"micro_over_compute\": {:.4f}, \"dedup_bytes\": {}, \"kernel_dispatch_slot_ms\": {:.5f}, "
        "\"all_to_all_dedup_ms\": {:.5f}, \"layer_micro_slot_ms\": {:.5f}, \"layer_micro_comm_ms\": {:.5f}}}{}\n",
        r, x.dispatch_bytes, x.combine_bytes, x.rows_received, x.dispatch_ms, x.combine_ms, x.peer_dispatch_ms,
        x.peer_combine_ms, x.kernel_dispatch_ms, x.kernel_combine_ms, x.comm_units, x.layer_ms, x.layer_peer_ms,
        x.layer_kernel_ms, x.layer_kernel_gemm_ms, x.layer_micro_ms, ratio(x.layer_micro_ms, x.layer_kernel_gemm_ms),
        x.dedup_bytes, x.kernel_dispatch_slot_ms, x.dedup_dispatch_ms, x.layer_micro_slot_ms, x.layer_micro_comm_ms,
        r + 1 < all.size() ? "," : "");
  }
  return j + " ]\n}\n";
}

// One rank: measures, then rank 0 prints every rank's numbers (and writes them to `json`, when
// named). Returns the exit status.
int run_rank(const std::string& uri, const Shape& sh_in, uint32_t rank, uint32_t ranks, const std::string& name,
             const std::string& json) {
  auto fail = [&](const Error& e) {
    fmt::print(stderr, "halcyon bench ep: rank {} of {}: {}\n", rank, ranks, e.to_string());
    return 1;
  };
  auto dev = Device::open(uri.c_str());
  if (!dev) return fail(dev.error());
  auto info = dev->info();
  if (!info) return fail(info.error());
  const bool cpu = is_cpu(*info);
  Shape sh = sh_in;
  if (sh.tokens < 0) sh.tokens = cpu ? 64 : 4096;
  if (sh.experts < 0) sh.experts = cpu ? 16 : 256;
  if (sh.hidden < 0) sh.hidden = cpu ? 256 : 7168;
  if (sh.inter < 0) sh.inter = cpu ? 128 : 2048;
  auto comm = Comm::create(*dev, {rank, ranks, name, 60000});
  if (!comm) return fail(comm.error());
  auto s = dev->create_stream();
  if (!s) return fail(s.error());
  std::vector<Partition> parts;
  auto cs = comm_stream(*dev, sh, parts);
  if (!cs) return fail(cs.error());
  RankResult mine;
  if (auto st = time_exchanges(*dev, *comm, *s, sh, rank, ranks, mine); !st) return fail(st.error());
  for (bool dedup : {false, true})
    if (auto st = time_kernels(*dev, *comm, *cs, sh, rank, dedup, mine); !st) return fail(st.error());
  if (auto st = time_layer(*dev, *comm, *s, sh, rank, ranks, parts, mine); !st)
    return fail(st.error());
  auto all = comm->all_gather_values(std::vector<RankResult>{mine});
  if (!all) return fail(all.error());
  auto ci = comm->info();
  if (!ci) return fail(ci.error());
  if (rank != 0) return 0;
  print_results(*all, sh, info->uri, ci->transport);
  if (!json.empty() && !write_file("bench ep", json, results_json(*all, sh, info->uri, ci->transport))) return 1;
  return 0;
}

}  // namespace

int bench_ep(const std::vector<std::string>& args) {
  std::string device = "cpu:0", rendezvous, json, err;
  int64_t ranks = 2, rank = -1;
  Shape sh;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return usage(0);
    if (i + 1 >= args.size()) {
      fmt::print(stderr, "halcyon bench ep: {} needs a value (halcyon bench ep --help)\n", a);
      return 2;
    }
    const std::string& v = args[++i];
    auto integer = [&](int64_t* dst, int64_t lo, int64_t hi) {
      auto n = cli::parse_int(a, v, lo, hi, &err);
      if (n) *dst = *n;
      return bool(n);
    };
    bool ok = true;
    if (a == "--device") device = v;
    else if (a == "--rendezvous") rendezvous = v;
    else if (a == "--json") json = v;
    else if (a == "--ranks") ok = integer(&ranks, 1, 64);
    else if (a == "--rank") ok = integer(&rank, 0, 63);
    else if (a == "--iters") ok = integer(&sh.iters, 1, 10000);
    else if (a == "--tokens") ok = integer(&sh.tokens, 1, 1 << 20);
    else if (a == "--topk") ok = integer(&sh.topk, 1, 64);
    else if (a == "--experts") ok = integer(&sh.experts, 1, 4096);
    else if (a == "--hidden") ok = integer(&sh.hidden, 1, 65536);
    else if (a == "--inter") ok = integer(&sh.inter, 1, 65536);
    else if (a == "--comm-units") ok = integer(&sh.comm_units, 0, 1 << 16);
    else if (a == "--chunk-bytes") ok = integer(&sh.chunk_bytes, 1, int64_t(1) << 40);
    else if (a == "--micro-batches") ok = integer(&sh.micro_batches, 1, 4096);
    else if (a == "--impl") ok = cli::parse_impl(v, &sh.layer.impl, &err);
    else {
      fmt::print(stderr, "halcyon bench ep: unknown option '{}' (halcyon bench ep --help)\n", a);
      return 2;
    }
    if (!ok) {
      fmt::print(stderr, "halcyon bench ep: {}\n", err);
      return 2;
    }
  }
  if ((rank >= 0) != !rendezvous.empty()) {
    fmt::print(stderr, "halcyon bench ep: --rank and --rendezvous go together (one rank of a launched job)\n");
    return 2;
  }
  if (rank >= ranks) {
    fmt::print(stderr, "halcyon bench ep: --rank {} is not below --ranks {}\n", rank, ranks);
    return 2;
  }
  if (sh.topk > 0 && sh.experts > 0 && sh.topk > sh.experts) {
    fmt::print(stderr, "halcyon bench ep: --topk {} is more than --experts {}\n", sh.topk, sh.experts);
    return 2;
  }
  if (rank >= 0) return run_rank(device, sh, uint32_t(rank), uint32_t(ranks), rendezvous, json);
  // Each rank is a fresh process running this command with --rank (GPU drivers do not survive
  // a fork); this process only waits for them.
  const std::string name = fmt::format("bench-ep-{}", getpid());
  std::vector<pid_t> pids;
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<std::string> argv_s{"halcyon"};
    const std::vector<std::string>& global = cli::global_arguments();  // --backend-option ... as given here
    argv_s.insert(argv_s.end(), global.begin(), global.end());
    argv_s.insert(argv_s.end(), {"bench", "ep"});
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    for (std::string a : {std::string("--ranks"), std::to_string(ranks), std::string("--rank"), std::to_string(r),
                          std::string("--rendezvous"), name})
      argv_s.push_back(std::move(a));
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
      fmt::print(stderr, "halcyon bench ep: could not start rank {}\n", r);
      return 1;
    }
    pids.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}

}  // namespace halcyon::bench
