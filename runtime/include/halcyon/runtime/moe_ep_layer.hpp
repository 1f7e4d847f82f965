// The MoE layer with expert parallelism over a communicator (hal.h "Communicators";
// docs/expert_parallel.md). Each rank holds its own tokens and the weights of the experts it
// owns; a forward pass
//   router GEMM + moe_gate (local)      -> which expert, with which weight, for each (token, k)
//   dispatch: moe_permute by owning rank, then all-to-all of the rows and their expert ids
//   expert side: moe_permute by local expert, grouped GEMMs (SwiGLU up, down), rows back in
//                arrival order
//   combine: all-to-all back, then moe_combine with the gate weights on the owning rank of
//            the token
// computes, for every token, what the single-rank MoeLayer computes with all experts (the
// same operators on the same rows: on the CPU the same bits, CTest unit.moe_ep).
//
// This is the reference path: it reads routing counts to the host (three host waits per
// forward, around the exchanges). EpTransport chooses between the communicator's all-to-all,
// direct writes into peer-mapped buffers, and the dispatch/combine kernels (kPeerKernel: no
// host wait, the exchange on its own stream beside the grouped GEMMs; docs/expert_parallel.md).
#pragma once

#include <halcyon/runtime/moe_layer.hpp>

#include <memory>

namespace halcyon::rt {

// Experts owned by `rank` of `ranks`: [first, end), contiguous, sizes differing by at most 1
// (any rank count; ranks > experts leaves some ranks without experts).
struct ExpertRange {
  int64_t first = 0, end = 0;
  int64_t count() const { return end - first; }
};
ExpertRange ep_expert_range(int64_t experts, uint32_t rank, uint32_t ranks);
// The rank that owns `expert`.
uint32_t ep_owner(int64_t experts, uint32_t ranks, int64_t expert);

// What the last forward() moved, for benchmarks and tests.
struct MoeEpStats {
  int64_t rows_sent = 0;      // (token, k) rows this rank dispatched (its own rank included)
  int64_t rows_received = 0;  // rows its experts computed
  uint64_t dispatch_bytes = 0, combine_bytes = 0;  // to or from other ranks only
  // Host wall clock; kPeerKernel: timing events around each exchange, summed over the
  // micro-batches (expert_ms = how long the combines stood waiting for the GEMMs: before each
  // combine, from the end of the exchange queued ahead of it, when later; with one micro-batch,
  // from the end of dispatch to the start of combine). Filled only when asked for.
  float dispatch_ms = 0, expert_ms = 0, combine_ms = 0;
};

// How rows travel between ranks.
//   kAllToAll  hal_comm_all_to_all into buffers of this call (any communicator);
//   kPeerWrite each rank copies its rows straight into the owning rank's receive buffer, and
//              the expert outputs straight back into the token's rank, through peer-mapped
//              buffers (hal_comm_buffer_create/share, made once and grown collectively); a
//              barrier marks each side complete.
//   kPeerKernel the ep_dispatch and ep_combine kernels (kernels/comm) on a second stream (on
//              EpOptions::comm_partition where given): rows stored straight into the owners'
//              expert-contiguous buffers, flags in peer memory instead of host waits; the
//              grouped GEMMs run on the caller's stream (the compute partition) on the
//              received buffer as it lies. No host synchronisation in forward(); buffers are
//              made once at create() for EpOptions::max_tokens tokens per rank. With
//              EpOptions::micro_batches > 1 the tokens go in slices, each with its own
//              exchange, and one slice's dispatch and combine run beside another's GEMMs.
enum class EpTransport { kAllToAll, kPeerWrite, kPeerKernel };

// kPeerKernel's settings.
struct EpOptions {
  const Partition* comm_partition = nullptr;  // where dispatch and combine run; null: the device
  int64_t max_tokens = 1024;                  // tokens per rank and forward, at most
  int64_t dispatch_chunk_rows = 64;  // (token, k) rows per dispatch chunk: the planner's chunk in rows
  int64_t combine_chunk_rows = 8;    // tokens per combine chunk
  int64_t timeout_ms = 60000;        // host implementations: how long a rank waits for the others
  // Dispatch sends a token's row to another rank once, however many of that rank's experts it
  // goes to; the receiver copies it into the other rows (kernels/comm/ep_dispatch.contract).
  // false: one row over the link per (token, expert). The same on every rank.
  bool dedup = true;
  // MoeEpLayer: the forward's tokens in this many micro-batches (slice i: tokens [T*i/n,
  // T*(i+1)/n)), each with its own EpExchange for ceil(max_tokens / n) tokens, so that one's
  // dispatch and combine run beside another's GEMMs (docs/expert_parallel.md). >= 1, and the
  // same on every rank: each exchange is collective, so the count comes from here, never from
  // the data (a rank with fewer tokens than micro-batches sends empty slices). EpExchange
  // itself ignores it.
  int64_t micro_batches = 1;
  // MoeEpLayer: the first micro-batch's dispatch and the last one's combine, which nothing in
  // the forward runs beside (the GEMMs wait for the one, the caller for the other), run on the
  // caller's stream with all its units instead of the comm partition; the exchanges between
  // them stay on the comm partition beside the GEMMs. false: every exchange on the comm
  // partition (where the caller runs other work beside the layer on its own stream).
  bool edge_exchanges_on_caller = true;
};

// The exchange memory of the dispatch/combine kernels (ep_dispatch, ep_combine: kernels/comm)
// for one rank of a communicator: this rank's buffer (received rows, expert outputs, the count
// matrix and the flags) and every other rank's, mapped here. Made once, collectively, for
// EpOptions::max_tokens tokens per rank; kPeerKernel runs on it, `halcyon bench ep` times it.
class EpExchange {
 public:
  // Collective. Every size of the layout is overflow-checked, and P * capacity must fit the
  // kernels' i32 row indices; a rank's failed check, buffer, export or import fails every rank
  // at once (Comm::agree), not after its peers' timeout.
  static Result<EpExchange> create(const Device& device, const Comm& comm, int64_t experts, int64_t topk,
                                   int64_t hidden, const EpOptions& options);
  // Collective, queued on `stream` (no host wait): the next generation's dispatch of x [T, H]
  // routed by topk_ids [T, K] (0 <= T <= max_tokens: a rank without tokens still publishes its
  // counts and receives its peers' rows); the rows land in every owner's received().
  Status dispatch(const Stream& stream, const Tensor& x, const Tensor& topk_ids, ops::RunOptions run = {});
  // Collective, queued: the same generation's combine, out [T, H] (T of the last dispatch) =
  // the gate-weighted sum of every token's rows of the owners' expert_outputs().
  Status combine(const Stream& stream, const Tensor& topk_weights, const Tensor& out, ops::RunOptions run = {});
  Tensor received() const;        // [capacity, H]: this rank's experts' rows, expert after expert
  Tensor expert_outputs() const;  // [capacity, H]: where those rows' outputs go, at the same rows
  Tensor expert_offsets(int64_t local) const;  // [local + 1]: the segments of received()
  Tensor slot_dest() const;       // [T, K] of the last dispatch: owner * capacity + row
  int64_t capacity() const;
  int32_t generation() const;

 private:
  struct State;
  std::shared_ptr<State> st_;
};

class MoeEpLayer {
 public:
  // `weights`: the router (and bias) for all experts, w_gate_up/w_down for this rank's experts
  // only (ep_expert_range of the communicator's rank and size). config.expert_begin and
  // local_experts are set from the communicator; a config that names other values is an error.
  // Collective, whatever the transport: every rank checks the config and its weights (a rank
  // without experts its router and bias), then the ranks agree (Comm::agree), so a refusal on
  // one rank fails create() on every rank at once ("rank R failed: ..." / "rank R refused").
  static Result<MoeEpLayer> create(const Device& device, const Comm& comm, MoeLayerConfig config,
                                   MoeLayerWeights weights, MoeLayerOptions options = {},
                                   EpTransport transport = EpTransport::kAllToAll, EpOptions ep = {});

  // Collective: every rank calls it (with its own T >= 1 tokens). x [T, H] bf16 -> out [T, H].
  Status forward(const Stream& stream, const Tensor& x, Tensor& out, MoeEpStats* stats = nullptr);

  const MoeLayerConfig& config() const { return config_; }
  ExpertRange experts() const { return {config_.expert_begin, config_.expert_begin + config_.local()}; }

 private:
  struct Routing;
  Status gate(const Stream& stream, const Tensor& x, const Tensor& logits, const Tensor& ids,
              const Tensor& weights) const;
  Status route(const Stream& stream, const Tensor& x, Routing& r);
  Status dispatch(const Stream& stream, Routing& r);
  Status run_experts(const Stream& stream, Routing& r);
  Status combine(const Stream& stream, Routing& r, Tensor& out);
  Status ensure_peer_buffers(const Routing& r);
  Status peer_dispatch(const Stream& stream, Routing& r);
  Status peer_combine(const Stream& stream, Routing& r);
  Status create_kernel_buffers();
  Status create_kernel_locals(const EpOptions& each);
  Status kernel_forward(const Stream& stream, const Tensor& x, Tensor& out, MoeEpStats* stats);
  Status kernel_dispatch(const Stream& stream, int64_t batch, const Tensor& x, const Tensor& ids, bool timed);
  Status kernel_experts(const Stream& stream, int64_t batch);
  Status kernel_combine(const Stream& stream, int64_t batch, const Tensor& weights, const Tensor& out, bool timed);
  Status kernel_stats(const Stream& stream, int64_t tokens, MoeEpStats& stats);
  Device device_;
  Comm comm_;
  uint32_t rank_ = 0, ranks_ = 1;
  MoeLayerConfig config_;
  MoeLayerWeights weights_;
  MoeLayerOptions options_;
  EpTransport transport_ = EpTransport::kAllToAll;
  // kPeerWrite: every rank's receive buffer (rows, then their expert ids) and return buffer,
  // mapped here; capacities in rows, per rank, the same on every rank.
  std::vector<Buffer> recv_peers_, back_peers_;
  std::vector<uint64_t> recv_capacity_, back_capacity_;
  // kPeerKernel: one exchange buffer per rank (recv, expert outputs, counts and flags), every
  // rank's mapped here and its addresses in peers_; the own side's tensors; the comm stream.
  struct KernelState;
  std::shared_ptr<KernelState> kernel_;
};

}  // namespace halcyon::rt
