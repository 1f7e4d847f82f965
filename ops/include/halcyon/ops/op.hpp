// Operators: a contract plus implementations — host code for the CPU backend, PTX for NVIDIA
// (several variants per op on Hopper), HSA code objects for AMD. run_op() checks the call
// against the contract, picks an implementation through the registry (format, target, the
// implementation's predicates) or the one the caller names, and launches it.
#pragma once

#include <halcyon/halcyon.hpp>
#include <halcyon/ops/contract.hpp>
#include <halcyon/ops/tensor.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::ops {

// How a launch may get its machine code where a device can take either: kAuto is each
// launcher's choice (NVIDIA: the cubin ptxas built for kernels that take registers with
// setmaxnreg, on a device of exactly its target; the driver's JIT of the PTX otherwise), kIr
// the portable form compiled at load (PTX through the driver's JIT), kBinary the prebuilt
// binary wherever one exists for this device (a cubin). An option of the launch, not an
// implementation: the same kernel runs either way (comparisons, tests). It also decides
// whether an implementation that is fast only as a binary is preferred.
enum class CodeSource { kAuto, kIr, kBinary };

// Options of one run_op call.
// The expert-parallel operators (ep_dispatch, ep_combine: kernels/comm) run as one rank of a
// communicator: every rank's exchange memory as mapped in this process (hal_comm_buffer_import;
// entry `rank` is this rank's own). The call's tensors are then a world of one (P = 1): x,
// topk_ids, slot_dest, expert_offsets and out are this rank's, and the exchange outputs (recv,
// counts, count_flags, chunk_flags, row_source; ready) name this rank's own memory in one-rank shapes; the
// kernels reach every rank's through these addresses instead. Byte addresses, 4-byte aligned.
struct EpPeers {
  static constexpr uint32_t kMaxRanks = 8;
  struct Rank {
    uint64_t recv = 0, counts = 0, count_flags = 0, chunk_flags = 0, row_source = 0;  // ep_dispatch
    uint64_t expert_out = 0, ready = 0;                                  // ep_combine
  };
  uint32_t rank = 0;
  std::vector<Rank> ranks;  // one per rank of the communicator (at most kMaxRanks)
  int64_t capacity = 0;     // RC: rows of every rank's recv and expert_out
  int64_t chunk_flags = 0;  // C: chunk flags per source rank in every rank's chunk_flags
  int64_t experts = 0;      // E: columns of every rank's count matrix [ranks, E]
  int64_t timeout_ms = 60000;  // host implementations: how long a rank waits for the others
};

struct RunOptions {
  std::string impl;                       // "" = the registry's choice; else an implementation's name
  CodeSource code = CodeSource::kAuto;
  // Diagnostics for partition tests: an i32 tensor [n] on the same device. Each block b < n of
  // the operator's persistent kernel writes the compute unit it runs on (%smid) to element b;
  // other elements are left as they were. Only implementations with `records_sm` can; asking
  // another is HAL_UNSUPPORTED (never a silent no-op). Null: nothing recorded.
  const Tensor* sm_trace = nullptr;
  // The expert-parallel operators as one rank of a communicator (EpPeers); null: the world form.
  const EpPeers* ep_peers = nullptr;
};

// What implementation predicates read about a device (from hal_device_info).
struct DeviceFacts {
  std::string uri, arch, capabilities;
  uint32_t compute_units = 0;
  uint32_t max_shared_per_block = 0;
  uint64_t memory_bytes_per_s = 0;  // peak; 0 = unknown
  bool has(std::string_view capability) const;  // a tag of `capabilities`
};
Result<DeviceFacts> device_facts(const Device& device);

// What a predicate sees: the device, and when asked about a call, the call (its bound dims and
// params and its tensors); without a call (select_impl(device, op), listings) a predicate
// checks what it can of the device alone and lets shape conditions pass.
struct ApplyContext {
  const DeviceFacts& facts;
  const Device* device = nullptr;  // null in unit tests of a predicate on given facts
  const Binding* binding = nullptr;
  const std::map<std::string, Tensor, std::less<>>* tensors = nullptr;
  CodeSource code = CodeSource::kAuto;

  bool has_call() const { return binding != nullptr; }
  int64_t dim(std::string_view s) const { return binding->dim(s); }
  const ParamSet& params() const { return binding->params; }
  const Tensor* tensor(std::string_view name) const;  // null when absent
  // hal_device_can_run on the device (false without a device).
  bool can_run(hal_module_format format, const char* target, std::string* why = nullptr) const;
};
// True when the implementation applies; else false, and why (when `why` is given).
using OpPredicate = bool (*)(const ApplyContext& ctx, std::string* why);

// What an implementation gets: checked tensors (inputs and outputs by contract name; an
// absent optional input is simply missing), resolved dims and params.
struct OpContext {
  const Device& device;
  const Stream& stream;
  const Contract& contract;
  const Binding& binding;
  std::map<std::string, Tensor, std::less<>>& tensors;
  CodeSource code = CodeSource::kAuto;
  const Tensor* sm_trace = nullptr;  // RunOptions::sm_trace (only records_sm implementations read it)
  const EpPeers* ep_peers = nullptr;  // RunOptions::ep_peers (only ep_dispatch / ep_combine read it)

  const Tensor& tensor(std::string_view name) const;
  const Tensor* optional_tensor(std::string_view name) const;
  int64_t dim(std::string_view s) const { return binding.dim(s); }
  const ParamSet& params() const { return binding.params; }
  // Loads (once per device, then cached) an embedded module.
  Result<Module> module(hal_module_format format, const char* target, const void* data,
                        size_t size, const char* name) const;
};

using OpImplFn = Status (*)(OpContext& ctx);

// One implementation of an operator: a kernel (or a fixed way of launching kernels) for one
// module format and target. Fields are only appended, so that `{op, format, target, backend,
// priority, fn}` registrations stay valid.
struct OpImpl {
  std::string op;
  hal_module_format format = HAL_MODULE_HOST;  // the device must advertise "module.<format>"
  std::string target;   // "host", "sm_90a", "sm_80", "gfx942", ...: hal_device_can_run decides
  std::string backend;  // "" = any backend; else only devices of this URI scheme (tests; such
                        // an implementation is the backend's own: format and target not asked)
  int priority = 0;     // higher wins among those that can run
  OpImplFn fn = nullptr;
  // Unique among the op's implementations ("sm90.swapw", "sm80", "host"); "" at registration
  // takes the target without '_' ("sm_80" -> "sm80", "host", "gfx942").
  std::string name{};
  // Whether it can run this call on this device (shapes, alignment, shared memory, device
  // features); null = whenever the target runs. Checked for an explicit choice too.
  OpPredicate applies = nullptr;
  // Whether the registry's own choice should take it where it applies (a speed rule: "the
  // swap-AB kernel only where experts average more than 64 rows"); null = yes. An explicit
  // choice skips it.
  OpPredicate preferred = nullptr;
  // False: never the registry's choice, only when named (fixed variants for comparisons and
  // tests, such as a split count).
  bool automatic = true;
  // For an op that fuses a sequence of others (the gather GEMM fuses the permuted copy into
  // the up projection): whether on this device it beats that sequence; null = not shown to.
  OpPredicate fused_pays = nullptr;
  std::string summary{};  // one line for listings
  // Whether it honours RunOptions::sm_trace (its persistent kernel records %smid per block).
  bool records_sm = false;
};

// Registers an implementation (normally from a static initialiser next to it).
void register_op_impl(OpImpl impl);
struct RegisterOpImpl {
  explicit RegisterOpImpl(OpImpl impl) { register_op_impl(std::move(impl)); }
};

// Every implementation of `op`, highest rank first (backend-specific ones, then priority).
std::vector<OpImpl> impls_of(std::string_view op);

// How each implementation of `op` fares on a device (and a call, where given): `usable` =
// it can run (backend, format, hal_device_can_run, applies); `chosen` = the registry's choice;
// `why` says why one is unusable or passed over.
struct ImplVerdict {
  OpImpl impl;
  bool usable = false;
  bool chosen = false;
  std::string why{};
};
std::vector<ImplVerdict> judge_impls(const Device& device, std::string_view op, const ApplyContext* call = nullptr);

// The implementation run_op would choose for this device (no call: shape rules pass), or null
// (with why). With `options.impl`, that implementation if it can run, else null and why,
// listing the implementations and why each was refused.
const OpImpl* select_impl(const Device& device, std::string_view op, std::string* why = nullptr);
Result<const OpImpl*> select_impl(const Device& device, std::string_view op, const RunOptions& options,
                                  const ApplyContext* call = nullptr);

// The implementation run_op would take for this call (the tensors and params it would be
// given: the same binding, device checks and predicates), or the error it would return before
// launching; nothing runs. For tools that report or time the choice (`halcyon run`, `halcyon
// bench attention`).
Result<const OpImpl*> select_impl_for_call(const Device& device, std::string_view op,
                                           const std::map<std::string, Tensor, std::less<>>& tensors,
                                           const std::map<std::string, std::string>& params = {},
                                           const RunOptions& options = {});

// For an operator that fuses a sequence of others: whether the implementation run_op would take
// for this call beats that sequence here (its fused_pays, asked with the call; one named in
// `options` counts as chosen). False, with why, when it is not shown to, when none can run the
// call, or when the call is malformed; nothing runs. (MoeLayer: the quantizing SwiGLU GEMM.)
bool fused_pays_for_call(const Device& device, std::string_view op,
                         const std::map<std::string, Tensor, std::less<>>& tensors,
                         const std::map<std::string, std::string>& params = {}, const RunOptions& options = {},
                         std::string* why = nullptr);

// Runs `op` on `stream`: tensors holds inputs and pre-allocated outputs by name; params are
// text values ("8", "sigmoid", "true") checked against the contract; options may name the
// implementation (an unknown name, or one that cannot run this call, is an error that lists
// the implementations and why each was refused) and where machine code comes from. Every
// tensor's memory and the stream must belong to `device` (hal_buffer_info / hal_stream_info
// .device_uri): another device's are refused with the tensor's name before anything is queued.
Status run_op(const Device& device, const Stream& stream, std::string_view op,
              std::map<std::string, Tensor, std::less<>>& tensors,
              const std::map<std::string, std::string>& params = {}, const RunOptions& options = {});

// A call of `op` checked against its contract and its implementation chosen once
// (prepare_op), then queued as often as asked (run), each time reading and writing the memory
// its tensors name: for a caller that repeats one call on fixed buffers whose contents change
// (an inference server's decode step, the way a CUDA graph is replayed). A run repeats none of
// run_op's checks and not the choice, so what it costs on the host is the implementation's own
// launch work. Rules:
//   - Shapes, dtypes and params are those given to prepare_op; only the memory's contents may
//     change between runs. Device-side values (block tables, lengths, offsets) are read at run
//     time as in run_op, with the same device-side bounds the kernels apply.
//   - The tensors' buffers are held (each Tensor keeps its buffer's reference) until the
//     PreparedOp is destroyed; it may be moved, not copied.
//   - A run on one stream after another is ordered as run_op calls are: by the streams. Runs of
//     one PreparedOp from several threads at once are not supported (they write the same outputs).
//   - RunOptions::impl and code apply at prepare; sm_trace and ep_peers (pointers the caller
//     owns) are refused.
class PreparedOp {
 public:
  PreparedOp(PreparedOp&&) = default;
  PreparedOp& operator=(PreparedOp&&) = default;
  // Queues the call on `stream` (a stream of the device it was prepared for; another device's
  // is refused, checked once per stream handle).
  Status run(const Stream& stream);
  const OpImpl& impl() const { return *impl_; }  // the implementation chosen at prepare

 private:
  friend Result<PreparedOp> prepare_op(const Device&, std::string_view, std::map<std::string, Tensor, std::less<>>,
                                       const std::map<std::string, std::string>&, const RunOptions&);
  PreparedOp(Device device, const Contract* contract, Binding binding,
             std::map<std::string, Tensor, std::less<>> tensors, const OpImpl* impl, CodeSource code);
  Device device_;
  const Contract* contract_;  // the embedded contracts live for the process
  Binding binding_;
  std::map<std::string, Tensor, std::less<>> tensors_;
  const OpImpl* impl_;  // the registry keeps its entries' addresses
  hal_stream checked_stream_ = nullptr;  // the last stream run() found on device_
  CodeSource code_;
};
Result<PreparedOp> prepare_op(const Device& device, std::string_view op,
                              std::map<std::string, Tensor, std::less<>> tensors,
                              const std::map<std::string, std::string>& params = {}, const RunOptions& options = {});

// Allocates every output of `op` for the given inputs and params (shapes from the contract).
Status allocate_outputs(const Device& device, std::string_view op,
                        std::map<std::string, Tensor, std::less<>>& tensors,
                        const std::map<std::string, std::string>& params = {});

}  // namespace halcyon::ops
