// A mixture-of-experts layer (DeepSeek-V3 style) built from the operators:
//   router GEMM (gemm_bf16) -> moe_gate -> moe_permute -> moe_grouped_gemm_swiglu
//   -> moe_grouped_gemm (down) -> moe_combine
// on any device whose backend implements them (the CPU always). On the gather path the up
// projection reads the rows straight from x through row_to_slot instead
// (moe_grouped_gemm_swiglu_gather), and moe_permute runs with write_permuted=false: the
// permuted copy of x (T*K rows of H) is never written. The gather path is the default where
// it pays (the CPU, and Hopper GPUs of little memory bandwidth per SM; see moe_gather_path);
// MoeLayerOptions::path chooses it, or the copy, explicitly. Both paths compute the same rows (on the CPU the same bits). Expert parallelism: only the local experts [expert_begin, expert_begin +
// local_experts) have weights here; tokens routed elsewhere contribute nothing to this rank's
// output.
#pragma once

#include <halcyon/ops/op.hpp>

#include <array>
#include <functional>
#include <optional>

namespace halcyon::rt {

// The layer takes the operator layer's tensors and implementations.
using ops::DType;
using ops::OpImpl;
using ops::Tensor;

struct MoeLayerConfig {
  int64_t hidden = 7168;
  int64_t inter = 2048;  // expert intermediate size
  int64_t experts = 256;
  int64_t topk = 8;
  std::string score = "sigmoid";
  int64_t n_groups = 8;
  int64_t topk_groups = 4;
  bool normalize = true;
  double routed_scale = 2.5;
  int64_t expert_begin = 0;
  int64_t local_experts = -1;  // -1: all experts are local

  int64_t local() const { return local_experts < 0 ? experts : local_experts; }
  static MoeLayerConfig deepseek_v3() { return {}; }
};

// Checks a config before anything is sized from it (MoeLayer::create, the C ABI, the host
// reference): hidden, inter, experts and topk >= 1, topk <= experts, local_experts -1 or more,
// the local experts [expert_begin, expert_begin + local()) within [0, experts), the gate's
// settings as moe_gate takes them (score sigmoid or softmax, experts divisible into n_groups,
// topk_groups in [1, n_groups], topk <= topk_groups * experts / n_groups, routed_scale a finite
// f32: a bad one fails here, not at the first forward), and the byte counts of the bf16
// weights ([H, E], [EL, H, 2I], [EL, I, H]) at most 2^63 - 1: every size derived from the
// config (the FP8 weights' are smaller) is then representable. Errors name the field.
Status check_moe_config(const MoeLayerConfig& c);

// FP8 expert weights as DeepSeek-V3 ships them (docs/kernels/fp8.md): e4m3, each expert's
// matrix [out, in] with the input dimension contiguous, one f32 scale per 128 x 128 block.
struct MoeFp8Weights {
  Tensor w_gate_up;        // [EL, 2I, H] e4m3: rows [0, I) gate, [I, 2I) up
  Tensor w_gate_up_scale;  // [EL, ceil(2I / 128), ceil(H / 128)] f32
  Tensor w_down;           // [EL, H, I] e4m3
  Tensor w_down_scale;     // [EL, ceil(H / 128), ceil(I / 128)] f32
};

// The shapes of a config's FP8 weights, in MoeFp8Weights' order (w_gate_up, w_gate_up_scale,
// w_down, w_down_scale): what create() checks, and what the C ABI builds its tensors with.
std::array<std::vector<int64_t>, 4> moe_fp8_weight_shapes(const MoeLayerConfig& c);

struct MoeLayerWeights {
  Tensor w_router;                // [H, E] bf16
  std::optional<Tensor> bias;     // [E] f32, selection only
  Tensor w_gate_up;               // [EL, H, 2I] bf16: columns [0, I) gate, [I, 2I) up
  Tensor w_down;                  // [EL, I, H] bf16
  // FP8 experts. Where the device implements the FP8 operators (their implementations'
  // predicates decide: Hopper sm_90a and the CPU, not sm_80) the layer runs its experts on
  // these: activations quantized per 1x128 group (moe_quantize_fp8), then
  // moe_grouped_gemm_fp8_swiglu[_gather] and moe_grouped_gemm_fp8 (the copy path takes
  // moe_grouped_gemm_fp8_swiglu_quant, h quantized in the GEMM's epilogue, where that pays for
  // the call: ops::fused_pays_for_call). Elsewhere it runs the bf16
  // experts above if they are given (no buffer: not given), else, with
  // MoeLayerOptions::fp8_fallback = kDequantize, these dequantized to bf16; else create() fails
  // with the reason.
  std::optional<MoeFp8Weights> fp8 = std::nullopt;
};

// The router side of the weights for `config` (checked by check_moe_config): w_router [H, E]
// bf16 and the bias [E] f32 where given, in memory of `device` and within their buffers.
// MoeLayer::create checks them; the expert-parallel layer checks them on a rank that owns no
// expert (it runs the router, not the experts).
Status check_moe_router(const Device& device, const MoeLayerConfig& config, const MoeLayerWeights& weights);

// How the up projection gets its rows: kGather (moe_grouped_gemm_swiglu_gather on rows read
// through row_to_slot), kCopy (moe_permute writes the permuted copy, then
// moe_grouped_gemm_swiglu), kAuto (gather where it pays: moe_gather_path).
enum class MoePath { kAuto, kGather, kCopy };

// FP8 weights with no bf16 ones, on a device that cannot run the FP8 operators (no FP8 kernel:
// sm_80, the GCN targets): kFail, create() fails with the reason; kDequantize, create()
// dequantizes them once into bf16 expert weights the layer owns (each weight its e4m3 value
// times its block's scale, the fp32 product rounded to bf16; read to the host, converted and
// written back) and runs the bf16 experts: the checkpoint runs anywhere, at the cost of device
// memory for the bf16 weights (twice the FP8 bytes) and the bf16 experts' speed.
enum class MoeFp8Fallback { kFail, kDequantize };

struct MoeLayerOptions {
  MoePath path = MoePath::kAuto;
  MoeFp8Fallback fp8_fallback = MoeFp8Fallback::kFail;
  // Per operator, the implementation to run (RunOptions::impl): {"moe_grouped_gemm",
  // "sm90.tma"}. An op not named takes the registry's choice.
  std::map<std::string, std::string, std::less<>> impl;
  ops::CodeSource code = ops::CodeSource::kAuto;  // for every op (RunOptions::code)
  ops::RunOptions run_options(std::string_view op) const;
};

// Whether a layer on `device` with `options` takes the gather path: kGather and kCopy say so
// (kGather where the device implements the gather op); kAuto takes it where the
// implementation of moe_grouped_gemm_swiglu_gather that would run (the registry's choice, or
// the one options name) says it pays (moe_gather_pays). Read when a layer is created; tools
// that time the layer's stages use it to time the same ones.
bool moe_gather_path(const Device& device, const MoeLayerOptions& options = {});
// The same for the gather op `gather_op` (the FP8 layer's: moe_grouped_gemm_fp8_swiglu_gather).
bool moe_gather_path(const Device& device, const MoeLayerOptions& options, std::string_view gather_op);
// Whether the gather path pays with `impl` (an implementation of moe_grouped_gemm_swiglu_gather)
// on a device of these facts: the implementation's own rule (OpImpl::fused_pays; the host
// one: always; the PTX sm_90a one: peak memory bandwidth per SM at most 28 GB/s, so an H100
// SXM yes and an H200 no; without a rule: no, not shown to beat the copy it saves).
bool moe_gather_pays(const OpImpl& impl, const ops::DeviceFacts& device, std::string* why = nullptr);

// moe_gate's parameters for a layer of `config` (score, groups, top-k, normalisation, scale):
// the single-rank and the expert-parallel layer route alike.
std::map<std::string, std::string> moe_gate_params(const MoeLayerConfig& config);

// Milliseconds per stage of the last forward() that asked for times. On the gather path,
// `permute` is moe_permute without the row copy and `up` is moe_grouped_gemm_swiglu_gather.
// On the FP8 path `quant` is the moe_quantize_fp8 calls: the SwiGLU output before `down`, and on
// the gather path the tokens before `up`; the copy path's rows come quantized from `permute`
// (moe_permute_fp8).
struct MoeStageTimes {
  float router = 0, gate = 0, permute = 0, up = 0, down = 0, combine = 0, quant = 0;
  float total() const { return router + gate + permute + up + down + combine + quant; }
};

class MoeLayer {
 public:
  static Result<MoeLayer> create(const Device& device, MoeLayerConfig config, MoeLayerWeights weights,
                                 MoeLayerOptions options = {});

  // x [T, H] bf16 -> out [T, H] bf16, queued on `stream`. With `times`, each stage is
  // bracketed by events and the call waits for the stream to read them.
  Status forward(const Stream& stream, const Tensor& x, Tensor& out, MoeStageTimes* times = nullptr);

  const MoeLayerConfig& config() const { return config_; }
  const MoeLayerOptions& options() const { return options_; }
  // True when forward() takes the gather path (no permuted copy; see moe_gather_path).
  bool gathers_rows() const { return gather_; }
  // True when forward() runs the experts in FP8 (MoeLayerWeights::fp8).
  bool runs_fp8() const { return fp8_; }
  // True when create() dequantized the FP8 weights into bf16 ones (MoeFp8Fallback::kDequantize).
  bool dequantized_fp8() const { return dequantized_; }
  // True when the last forward() quantized h in the SwiGLU GEMM's epilogue
  // (moe_grouped_gemm_fp8_swiglu_quant, chosen per call): its workspace then holds no bf16 h.
  bool quantized_in_up_gemm() const { return quant_fused_; }
  // Workspace of the last forward (logits, ids, weights, permuted rows...), by op output name:
  // views, shaped for that call's tokens, into one buffer. On the gather path, and on the FP8
  // copy path that permutes quantized rows, there is no "permuted" entry.
  const std::map<std::string, Tensor, std::less<>>& workspace() const { return ws_; }

  // The workspace grows only: forward() with more tokens than workspace_capacity() replaces it
  // by one for at least that many (rounded up to a step of 128 tokens); calls with fewer
  // reuse it. reserve() sizes it ahead, e.g. to a server's largest batch, so that no call
  // allocates. Capacity is -1 before the first forward or reserve.
  Status reserve(int64_t tokens);
  int64_t workspace_capacity() const { return ws_capacity_; }

 private:
  struct WorkspaceRegion {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset = 0;  // bytes into ws_buffer_
  };
  Result<std::vector<WorkspaceRegion>> workspace_layout(int64_t tokens) const;
  Status ensure_workspace(int64_t tokens);
  Status forward_fp8_experts(const Stream& stream, const Tensor& x, const std::function<Status(float*)>& mark,
                             MoeStageTimes* times);
  Status forward_fp8_down(const Stream& stream, const std::function<Status(float*)>& mark, MoeStageTimes* times);
  // The FP8 copy path permutes quantized rows (moe_permute_fp8: each token row read and
  // quantized once, its e4m3 row and scales written to its slots' rows) instead of permuting
  // bf16 rows and quantizing the T*K of them: bit for bit the same rows (quantization is per
  // row), a fraction of the bytes.
  bool permutes_quantized() const { return fp8_ && !gather_; }
  Device device_;
  MoeLayerConfig config_;
  MoeLayerWeights weights_;
  MoeLayerOptions options_;
  bool gather_ = false;
  bool fp8_ = false;
  bool dequantized_ = false;
  bool quant_fused_ = false;  // the last forward's (quantized_in_up_gemm)
  Buffer ws_buffer_;
  std::vector<WorkspaceRegion> ws_regions_;  // laid out for ws_capacity_ tokens
  int64_t ws_capacity_ = -1;
  int64_t ws_tokens_ = -1;                   // what ws_ is shaped for
  std::map<std::string, Tensor, std::less<>> ws_;
};

}  // namespace halcyon::rt
