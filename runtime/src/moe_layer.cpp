#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/kernels/reference/e4m3.hpp>
#include <halcyon/runtime/moe_layer.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <thread>
#include <vector>

namespace halcyon::rt {
using namespace halcyon::ops;  // the operator layer the layer runs on
namespace {

// A weight or call tensor: present, of `dtype` and `shape`, in memory of the layer's device
// (`uri`; the operators would refuse another device's too, but only at the first forward and in
// the operators' terms, not the layer's).
Status expect_shape(const char* what, const Tensor& t, DType dtype, std::vector<int64_t> shape, std::string_view uri) {
  if (!t.buffer) return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: {} has no buffer", what));
  auto b = t.buffer.info();
  if (!b) return b.error();
  if (std::string_view(b->device_uri) != uri)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("MoeLayer: {} is in memory of {}, the layer is on {}", what, b->device_uri, uri));
  if (t.dtype != dtype || t.shape != shape) {
    Tensor want;
    want.shape = shape;
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: {} is {} {}, expected {} {}", what, dtype_name(t.dtype),
                                                   t.shape_string(), dtype_name(dtype), want.shape_string()));
  }
  return check_in_buffer(t, b->size, fmt::format("MoeLayer: {}", what));
}

// Rows [n0, n1) of one FP8 expert matrix q [N, K] (scales [ceil(N / 128), ceil(K / 128)])
// dequantized into out [K, N]: each value its e4m3 value times its 128 x 128 block's scale in
// fp32, rounded once to bf16. 64 x 64 tiles, so that the transposed writes stay in cache.
void dequantize_rows(const uint8_t* q, const float* scale, int64_t N, int64_t K, int64_t n0, int64_t n1,
                     uint16_t* out) {
  const int64_t KB = (K + 127) / 128;
  for (int64_t k0 = 0; k0 < K; k0 += 64)
    for (int64_t nt = n0; nt < n1; nt += 64)
      for (int64_t n = nt; n < std::min(n1, nt + 64); ++n)
        for (int64_t k = k0; k < std::min(K, k0 + 64); ++k)
          out[k * N + n] = ref::float_to_bf16(ref::e4m3_to_float({q[n * K + k]}) * scale[(n / 128) * KB + k / 128]).bits;
}

// One matrix on the host's threads, 128-row blocks dealt round robin (a DeepSeek-V3 expert's
// gate/up matrix is 4096 x 7168: 32 blocks).
void dequantize_matrix(const uint8_t* q, const float* scale, int64_t N, int64_t K, uint16_t* out) {
  const int64_t blocks = (N + 127) / 128;
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::min<int64_t>(blocks, 32));
  auto work = [=](int64_t t) {
    for (int64_t b = t; b < blocks; b += threads) dequantize_rows(q, scale, N, K, 128 * b, std::min(N, 128 * b + 128), out);
  };
  std::vector<std::jthread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
}

// MoeFp8Fallback::kDequantize: the FP8 experts dequantized into the bf16 layouts ([EL, H, 2I]
// and [EL, I, H]: the FP8 matrices [rows, K] transposed) in new device tensors, which w then
// holds (the layer keeps them alive). One expert matrix at a time through the host, so that the
// host holds one matrix (at DeepSeek-V3's shape at most 29 MB of e4m3 and 59 MB of bf16), not the
// layer's 11 + 22 GB.
Status dequantize_fp8_experts(const Device& device, const MoeLayerConfig& c, const MoeFp8Weights& f,
                              MoeLayerWeights* w) {
  auto stream = device.create_stream();
  if (!stream) return stream.error();
  const int64_t H = c.hidden, I = c.inter, EL = c.local();
  auto gu16 = make_tensor(device, DType::bf16, {EL, H, 2 * I});
  if (!gu16) return gu16.error();
  auto dn16 = make_tensor(device, DType::bf16, {EL, I, H});
  if (!dn16) return dn16.error();
  struct Matrix {
    const Tensor &q, &scale;
    const Tensor& out;
    int64_t N, K;
  };
  const Matrix matrices[] = {{f.w_gate_up, f.w_gate_up_scale, *gu16, 2 * I, H}, {f.w_down, f.w_down_scale, *dn16, H, I}};
  std::vector<uint8_t> q;
  std::vector<float> scale;
  std::vector<uint16_t> out;
  for (int64_t e = 0; e < EL; ++e)
    for (const Matrix& m : matrices) {
      const int64_t values = m.N * m.K, scales = ((m.N + 127) / 128) * ((m.K + 127) / 128);
      q.resize(size_t(values));
      scale.resize(size_t(scales));
      out.resize(size_t(values));
      HALCYON_TRY(stream->read(m.q.buffer, m.q.offset + uint64_t(e * values), q.data(), uint64_t(values)));
      HALCYON_TRY(stream->read(m.scale.buffer, m.scale.offset + uint64_t(e * scales) * 4, scale.data(),
                               uint64_t(scales) * 4));
      dequantize_matrix(q.data(), scale.data(), m.N, m.K, out.data());
      HALCYON_TRY(stream->write(m.out.buffer, m.out.offset + uint64_t(e * values) * 2, out.data(), uint64_t(values) * 2));
    }
  w->w_gate_up = std::move(gu16).value();
  w->w_down = std::move(dn16).value();
  return {};
}

// moe_gate's parameters (kernels/moe/moe_gate.contract), checked when the layer is made rather
// than by the first forward's gate: the score function, experts split into n_groups equal
// groups, topk_groups of them kept, topk within the kept groups' experts, and routed_scale a
// finite f32. Call after topk and experts are known >= 1.
Status check_gate(const MoeLayerConfig& c) {
  if (c.score != "sigmoid" && c.score != "softmax")
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: score '{}' must be sigmoid or softmax", c.score));
  if (c.n_groups < 1 || c.experts % c.n_groups != 0)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: experts {} are not divisible into n_groups {} equal groups",
                                                   c.experts, c.n_groups));
  if (c.topk_groups < 1 || c.topk_groups > c.n_groups)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("MoeLayer: topk_groups {} is not in [1, n_groups {}]", c.topk_groups, c.n_groups));
  const int64_t kept = c.topk_groups * (c.experts / c.n_groups);  // <= experts: no overflow
  if (c.topk > kept)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: topk {} is more than the {} experts of the topk_groups {} "
                                                   "kept groups of {}", c.topk, kept, c.topk_groups,
                                                   c.experts / c.n_groups));
  if (!std::isfinite(c.routed_scale) || std::abs(c.routed_scale) > std::numeric_limits<float>::max())
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: routed_scale {} is not a finite f32", c.routed_scale));
  return {};
}

}  // namespace

Status check_moe_router(const Device& device, const MoeLayerConfig& c, const MoeLayerWeights& w) {
  auto info = device.info();
  if (!info) return info.error();
  HALCYON_TRY(expect_shape("w_router", w.w_router, DType::bf16, {c.hidden, c.experts}, info->uri));
  if (w.bias) HALCYON_TRY(expect_shape("bias", *w.bias, DType::f32, {c.experts}, info->uri));
  return {};
}

Status check_moe_config(const MoeLayerConfig& c) {
  const std::pair<const char*, int64_t> positive[] = {
      {"hidden", c.hidden}, {"inter", c.inter}, {"experts", c.experts}, {"topk", c.topk}};
  for (auto [field, v] : positive)
    if (v < 1) return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: {} {} must be >= 1", field, v));
  if (c.topk > c.experts)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: topk {} is more than experts {}", c.topk, c.experts));
  // -1 alone means "all experts": a more negative count is a caller's bug, not a request.
  if (c.local_experts < -1)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("MoeLayer: local_experts {} is below -1 (-1: all experts are local)", c.local_experts));
  HALCYON_TRY(check_gate(c));
  const int64_t E = c.experts, EL = c.local();
  int64_t end = 0;  // expert_begin + EL, which can overflow
  const bool wraps = __builtin_add_overflow(c.expert_begin, EL, &end);
  if (c.expert_begin < 0 || EL < 1 || wraps || end > E)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: local experts [{}, {}) do not lie within [0, {}) "
                                                   "(expert_begin {}, local_experts {})", c.expert_begin,
                                                   wraps ? "past 2^63" : std::to_string(end), E, c.expert_begin,
                                                   c.local_experts));
  // w_gate_up as [EL, H, I, 2]: the same count as [EL, H, 2I] with no 2 * I to overflow.
  struct Weight {
    const char* name;
    const char* dims;
    std::vector<int64_t> shape;
  };
  const Weight weights[] = {{"w_router", "[hidden, experts]", {c.hidden, E}},
                            {"w_gate_up", "[local experts, hidden, 2 * inter]", {EL, c.hidden, c.inter, 2}},
                            {"w_down", "[local experts, inter, hidden]", {EL, c.inter, c.hidden}}};
  for (const Weight& w : weights)
    if (auto e = checked_extent(DType::bf16, w.shape); !e)
      return Error(e.error().status(), fmt::format("MoeLayer: {} {}: {}", w.name, w.dims, e.error().message()));
  return {};
}

ops::RunOptions MoeLayerOptions::run_options(std::string_view op) const {
  ops::RunOptions o;
  if (auto it = impl.find(op); it != impl.end()) o.impl = it->second;
  o.code = code;
  return o;
}

std::map<std::string, std::string> moe_gate_params(const MoeLayerConfig& c) {
  return {{"score", c.score},
          {"n_groups", std::to_string(c.n_groups)},
          {"topk_groups", std::to_string(c.topk_groups)},
          {"topk", std::to_string(c.topk)},
          {"normalize", c.normalize ? "true" : "false"},
          {"routed_scale", fmt::format("{}", c.routed_scale)}};
}

bool moe_gather_pays(const OpImpl& impl, const ops::DeviceFacts& device, std::string* why) {
  if (!impl.fused_pays) {
    if (why) *why = fmt::format("{} has not been shown to beat the permuted copy", impl.name);
    return false;
  }
  return impl.fused_pays(ops::ApplyContext{device}, why);
}

bool moe_gather_path(const Device& device, const MoeLayerOptions& options) {
  return moe_gather_path(device, options, "moe_grouped_gemm_swiglu_gather");
}

bool moe_gather_path(const Device& device, const MoeLayerOptions& options, std::string_view kGatherOp) {
  if (options.path == MoePath::kCopy) return false;
  auto facts = device_facts(device);
  if (!facts) return false;
  const ApplyContext ctx{*facts, &device, nullptr, nullptr, options.code};
  auto impl = select_impl(device, kGatherOp, options.run_options(kGatherOp), &ctx);
  if (!impl) return false;
  if (options.path == MoePath::kGather) return true;
  return moe_gather_pays(**impl, *facts);
}

std::array<std::vector<int64_t>, 4> moe_fp8_weight_shapes(const MoeLayerConfig& c) {
  const int64_t H = c.hidden, I = c.inter, EL = c.local(), HG = (H + 127) / 128, IG = (I + 127) / 128;
  return {std::vector<int64_t>{EL, 2 * I, H}, {EL, (2 * I + 127) / 128, HG}, {EL, H, I}, {EL, HG, IG}};
}

Result<MoeLayer> MoeLayer::create(const Device& device, MoeLayerConfig c, MoeLayerWeights w, MoeLayerOptions o) {
  HALCYON_TRY(check_moe_config(c));
  const int64_t H = c.hidden, I = c.inter, EL = c.local();
  auto facts = device_facts(device);
  if (!facts) return facts.error();
  const std::string& uri = facts->uri;
  HALCYON_TRY(check_moe_router(device, c, w));
  const bool has_bf16 = w.w_gate_up.buffer || w.w_down.buffer || !w.fp8;
  if (has_bf16) {
    HALCYON_TRY(expect_shape("w_gate_up", w.w_gate_up, DType::bf16, {EL, H, 2 * I}, uri));
    HALCYON_TRY(expect_shape("w_down", w.w_down, DType::bf16, {EL, I, H}, uri));
  }
  if (w.fp8) {
    const auto shapes = moe_fp8_weight_shapes(c);
    HALCYON_TRY(expect_shape("fp8.w_gate_up", w.fp8->w_gate_up, DType::e4m3, shapes[0], uri));
    HALCYON_TRY(expect_shape("fp8.w_gate_up_scale", w.fp8->w_gate_up_scale, DType::f32, shapes[1], uri));
    HALCYON_TRY(expect_shape("fp8.w_down", w.fp8->w_down, DType::e4m3, shapes[2], uri));
    HALCYON_TRY(expect_shape("fp8.w_down_scale", w.fp8->w_down_scale, DType::f32, shapes[3], uri));
  }
  const ApplyContext dev_only{*facts, &device, nullptr, nullptr, o.code};
  // FP8 where the weights are given and the device implements every FP8 operator (their
  // predicates decide); else bf16, if those weights are given.
  std::string no_fp8;
  bool fp8 = false, dequantized = false;
  if (w.fp8) {
    fp8 = true;
    for (const char* op : {"moe_quantize_fp8", "moe_permute_fp8", "moe_grouped_gemm_fp8_swiglu", "moe_grouped_gemm_fp8"}) {
      auto impl = select_impl(device, op, o.run_options(op), &dev_only);
      if (!impl) {
        fp8 = false;
        no_fp8 = impl.error().message();
        break;
      }
    }
    if (!fp8 && !has_bf16) {
      if (o.fp8_fallback != MoeFp8Fallback::kDequantize)
        return Error(HAL_UNSUPPORTED, fmt::format("MoeLayer: FP8 experts only, and {} cannot run them: {} (the option "
                                                  "fp8_fallback = dequantize runs them as bf16 experts)",
                                                  facts->uri, no_fp8));
      HALCYON_TRY(dequantize_fp8_experts(device, c, *w.fp8, &w));
      w.fp8.reset();  // the layer keeps no reference on the FP8 weights it no longer reads
      dequantized = true;
    }
  }
  const bool gather = moe_gather_path(device, o, fp8 ? "moe_grouped_gemm_fp8_swiglu_gather" : "moe_grouped_gemm_swiglu_gather");
  std::vector<const char*> needed{"gemm_bf16", "moe_gate", "moe_permute", "moe_combine"};
  if (fp8) {
    needed.push_back("moe_quantize_fp8");
    if (!gather) needed.push_back("moe_permute_fp8");
    needed.push_back("moe_grouped_gemm_fp8");
    needed.push_back(gather ? "moe_grouped_gemm_fp8_swiglu_gather" : "moe_grouped_gemm_fp8_swiglu");
    if (o.path == MoePath::kGather && !gather) needed.back() = "moe_grouped_gemm_fp8_swiglu_gather";
  } else {
    needed.push_back("moe_grouped_gemm");
    needed.push_back(gather ? "moe_grouped_gemm_swiglu_gather" : "moe_grouped_gemm_swiglu");
    // kGather where no gather implementation can run: the check below says why.
    if (o.path == MoePath::kGather && !gather) needed.back() = "moe_grouped_gemm_swiglu_gather";
  }
  for (const char* op : needed) {
    auto impl = select_impl(device, op, o.run_options(op), &dev_only);
    if (!impl) return Error(impl.error().status(), fmt::format("MoeLayer: {}", impl.error().message()));
  }
  // Names of operators this layer does not run were not checked above: each must still be one
  // of its operator's implementations (a misspelling is an error, never ignored).
  for (auto& [op, name] : o.impl) {
    const std::vector<ops::OpImpl> all = ops::impls_of(op);
    if (all.empty())
      return Error(HAL_NOT_FOUND, fmt::format("MoeLayer: options name '{}' for operator '{}', which has no implementations",
                                              name, op));
    std::string names;
    for (const ops::OpImpl& i : all) names += (names.empty() ? "" : ", ") + i.name;
    if (std::none_of(all.begin(), all.end(), [&](const ops::OpImpl& i) { return i.name == name; }))
      return Error(HAL_NOT_FOUND, fmt::format("MoeLayer: options name '{}' for operator '{}', which has no "
                                              "implementation of that name (it has: {})", name, op, names));
  }
  MoeLayer layer;
  layer.device_ = device;
  layer.config_ = std::move(c);
  layer.weights_ = std::move(w);
  layer.options_ = std::move(o);
  layer.gather_ = gather;
  layer.fp8_ = fp8;
  layer.dequantized_ = dequantized;
  return layer;
}

// The workspace is one buffer laid out for ws_capacity_ tokens, and grows only: a call with
// fewer tokens takes views at the start of each region. Reallocating per token count would
// free a buffer that the previous call may still be using on every change of batch size (a
// server's batch varies call to call); rounding the capacity up to kWorkspaceTokenStep tokens
// bounds the reallocations of a slowly growing batch.
namespace {
constexpr int64_t kWorkspaceTokenStep = 128;
constexpr uint64_t kWorkspaceAlign = 256;  // each region, as hal.h aligns a device buffer
}  // namespace

Result<std::vector<MoeLayer::WorkspaceRegion>> MoeLayer::workspace_layout(int64_t T) const {
  const int64_t H = config_.hidden, I = config_.inter, E = config_.experts, K = config_.topk, EL = config_.local();
  int64_t TK = 0;  // the permuted row count; each region's byte count is checked by reserve()
  if (T < 0 || __builtin_mul_overflow(T, K, &TK))
    return Error(HAL_OUT_OF_RANGE, fmt::format("MoeLayer: a workspace for {} tokens: tokens x topk {} overflows int64", T, K));
  std::vector<WorkspaceRegion> r{{"logits", DType::f32, {T, E}},
                                 {"topk_ids", DType::i32, {T, K}},
                                 {"topk_weights", DType::f32, {T, K}},
                                 {"expert_counts", DType::i32, {EL}},
                                 {"expert_offsets", DType::i32, {EL + 1}},
                                 {"row_to_slot", DType::i32, {TK}},
                                 {"slot_to_row", DType::i32, {T, K}},
                                 {"num_rows", DType::i32, {1}},
                                 {"hidden", DType::bf16, {TK, I}},
                                 {"expert_out", DType::bf16, {TK, H}}};
  if (!gather_ && !fp8_) r.push_back({"permuted", DType::bf16, {TK, H}});
  if (fp8_) {
    // The quantized up-projection input: the T token rows (gather) or the T*K permuted rows.
    const int64_t rows = gather_ ? T : TK;
    r.push_back({"a_q", DType::e4m3, {rows, H}});
    r.push_back({"a_scale", DType::f32, {rows, (H + 127) / 128}});
    r.push_back({"hidden_q", DType::e4m3, {TK, I}});
    r.push_back({"hidden_scale", DType::f32, {TK, (I + 127) / 128}});
  }
  return r;
}

Status MoeLayer::reserve(int64_t tokens) {
  if (tokens <= ws_capacity_) return {};
  if (tokens > std::numeric_limits<int64_t>::max() - (kWorkspaceTokenStep - 1))
    return Error(HAL_OUT_OF_RANGE, fmt::format("MoeLayer: a workspace for {} tokens: rounding up to a multiple of {} "
                                               "overflows int64", tokens, kWorkspaceTokenStep));
  const int64_t capacity = (std::max<int64_t>(tokens, 1) + kWorkspaceTokenStep - 1) / kWorkspaceTokenStep * kWorkspaceTokenStep;
  auto layout = workspace_layout(capacity);
  if (!layout) return layout.error();
  // Each region's bytes and the aligned sum checked: a wrapped total would allocate a small
  // buffer that the operators' views then overrun.
  uint64_t bytes = 0;
  for (WorkspaceRegion& r : *layout) {
    r.offset = bytes;
    auto e = checked_extent(r.dtype, r.shape);
    if (!e)
      return Error(e.error().status(), fmt::format("MoeLayer: a workspace for {} tokens: region {} {}", capacity, r.name,
                                                   e.error().message()));
    const uint64_t limit = uint64_t(std::numeric_limits<int64_t>::max()) - (kWorkspaceAlign - 1);
    if (uint64_t(e->bytes) > limit - bytes)
      return Error(HAL_OUT_OF_RANGE, fmt::format("MoeLayer: a workspace for {} tokens holds more than 2^63 bytes (at "
                                                 "region {}, {} bytes after {})", capacity, r.name, e->bytes, bytes));
    bytes = (bytes + uint64_t(e->bytes) + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  }
  auto buf = device_.allocate(bytes);
  if (!buf) {
    return Error(buf.error().status(), fmt::format("MoeLayer: a workspace for {} tokens ({} bytes): {}", capacity, bytes,
                                                   buf.error().message()));
  }
  // The old buffer is released here; the backend keeps its memory until queued work that may
  // use it is done (hal.h), without waiting for that work.
  ws_.clear();
  ws_buffer_ = std::move(buf).value();
  ws_regions_ = std::move(layout).value();
  ws_capacity_ = capacity;
  ws_tokens_ = -1;
  return {};
}

Status MoeLayer::ensure_workspace(int64_t T) {
  HALCYON_TRY(reserve(T));
  if (T == ws_tokens_) return {};
  auto shaped = workspace_layout(T);  // the same regions, in the same order, shaped for T
  if (!shaped) return shaped.error();  // (not expected: T is within the capacity reserve checked)
  auto& layout = *shaped;
  ws_.clear();
  for (size_t i = 0; i < layout.size(); ++i) {
    Tensor t;
    t.buffer = ws_buffer_;
    t.offset = ws_regions_[i].offset;
    t.dtype = layout[i].dtype;
    t.shape = std::move(layout[i].shape);
    ws_[layout[i].name] = std::move(t);
  }
  ws_tokens_ = T;
  return {};
}

Status MoeLayer::forward(const Stream& stream, const Tensor& x, Tensor& out, MoeStageTimes* times) {
  const auto& c = config_;
  if (x.shape.size() != 2) return Error(HAL_INVALID_ARGUMENT, fmt::format("MoeLayer: x is {}, expected [T, {}]", x.shape_string(), c.hidden));
  const int64_t T = x.shape[0];
  auto dev = device_.info();
  if (!dev) return dev.error();
  HALCYON_TRY(expect_shape("x", x, DType::bf16, {T, c.hidden}, dev->uri));
  HALCYON_TRY(expect_shape("out", out, DType::bf16, {T, c.hidden}, dev->uri));
  HALCYON_TRY(ensure_workspace(T));
  auto& w = ws_;
  const std::string s_topk = std::to_string(c.topk);

  // Events between stages; stage i (from marks[i] to marks[i + 1]) adds to stage_of[i].
  std::vector<Event> marks;
  std::vector<float*> stage_of;
  MoeStageTimes sink;
  MoeStageTimes* tt = times ? times : &sink;
  if (times) *times = {};
  auto mark = [&](float* stage_before = nullptr) -> Status {
    if (!times) return {};
    auto ev = device_.create_event(true);
    if (!ev) return ev.error();
    HALCYON_TRY(stream.record(*ev));
    marks.push_back(std::move(ev).value());
    if (stage_before) stage_of.push_back(stage_before);
    return {};
  };
  using TensorMap = std::map<std::string, Tensor, std::less<>>;

  HALCYON_TRY(mark());
  TensorMap router{{"a", x}, {"b", weights_.w_router}, {"c", w["logits"]}};
  HALCYON_TRY(run_op(device_, stream, "gemm_bf16", router, {}, options_.run_options("gemm_bf16")));
  HALCYON_TRY(mark(&tt->router));

  TensorMap gate{{"logits", w["logits"]}, {"topk_ids", w["topk_ids"]}, {"topk_weights", w["topk_weights"]}};
  if (weights_.bias) gate["bias"] = *weights_.bias;
  HALCYON_TRY(run_op(device_, stream, "moe_gate", gate, moe_gate_params(c), options_.run_options("moe_gate")));
  HALCYON_TRY(mark(&tt->gate));

  // On the gather path the contract still wants a `permuted` tensor of [T*K, H] bf16, which
  // write_permuted=false leaves unwritten: expert_out has that shape, and the down projection
  // rewrites every row of it that combine reads, so it stands in without a 2*T*K*H-byte
  // allocation (and stays correct with an implementation that writes permuted anyway).
  TensorMap permute{{"x", x},
                    {"topk_ids", w["topk_ids"]},
                    {"permuted", gather_ ? w["expert_out"] : permutes_quantized() ? w["a_q"] : w["permuted"]},
                    {"expert_counts", w["expert_counts"]},
                    {"expert_offsets", w["expert_offsets"]},
                    {"row_to_slot", w["row_to_slot"]},
                    {"slot_to_row", w["slot_to_row"]},
                    {"num_rows", w["num_rows"]}};
  std::map<std::string, std::string> permute_params{{"n_experts", std::to_string(c.experts)},
                                                    {"expert_begin", std::to_string(c.expert_begin)},
                                                    {"expert_end", std::to_string(c.expert_begin + c.local())}};
  if (permutes_quantized()) {  // FP8 copy path: the rows come out quantized (e4m3 + scales)
    permute["permuted_scale"] = w["a_scale"];
    HALCYON_TRY(run_op(device_, stream, "moe_permute_fp8", permute, permute_params,
                       options_.run_options("moe_permute_fp8")));
  } else {
    permute_params["write_permuted"] = gather_ ? "false" : "true";
    HALCYON_TRY(run_op(device_, stream, "moe_permute", permute, permute_params, options_.run_options("moe_permute")));
  }
  HALCYON_TRY(mark(&tt->permute));

  if (fp8_) {
    HALCYON_TRY(forward_fp8_experts(stream, x, mark, tt));
  } else if (gather_) {
    TensorMap up{{"x", x},
                 {"w_gate_up", weights_.w_gate_up},
                 {"expert_offsets", w["expert_offsets"]},
                 {"row_to_slot", w["row_to_slot"]},
                 {"out", w["hidden"]}};
    HALCYON_TRY(run_op(device_, stream, "moe_grouped_gemm_swiglu_gather", up, {{"topk", s_topk}},
                       options_.run_options("moe_grouped_gemm_swiglu_gather")));
  } else {
    TensorMap up{{"a", w["permuted"]}, {"w_gate_up", weights_.w_gate_up}, {"expert_offsets", w["expert_offsets"]},
                 {"out", w["hidden"]}};
    HALCYON_TRY(run_op(device_, stream, "moe_grouped_gemm_swiglu", up, {}, options_.run_options("moe_grouped_gemm_swiglu")));
  }
  if (!fp8_) {
    HALCYON_TRY(mark(&tt->up));
    TensorMap down{{"a", w["hidden"]}, {"w", weights_.w_down}, {"expert_offsets", w["expert_offsets"]},
                   {"out", w["expert_out"]}};
    HALCYON_TRY(run_op(device_, stream, "moe_grouped_gemm", down, {}, options_.run_options("moe_grouped_gemm")));
    HALCYON_TRY(mark(&tt->down));
  }

  TensorMap combine{{"expert_out", w["expert_out"]}, {"topk_weights", w["topk_weights"]},
                    {"slot_to_row", w["slot_to_row"]}, {"out", out}};
  HALCYON_TRY(run_op(device_, stream, "moe_combine", combine, {}, options_.run_options("moe_combine")));
  HALCYON_TRY(mark(&tt->combine));

  if (times) {
    HALCYON_TRY(marks.back().synchronize());
    for (size_t i = 0; i + 1 < marks.size() && i < stage_of.size(); ++i) {
      auto ms = marks[i + 1].elapsed_since(marks[i]);
      if (!ms) return ms.error();
      *stage_of[i] += *ms;
    }
  }
  return {};
}

// The FP8 experts: quantize the up projection's input (the tokens on the gather path; the
// copy path's permuted rows came quantized from moe_permute_fp8), the block-scaled SwiGLU GEMM, quantize its output (all T*K
// rows of capacity: the row count stays on the device; or in the GEMM's epilogue where that
// pays), the block-scaled down projection.
Status MoeLayer::forward_fp8_experts(const Stream& stream, const Tensor& x, const std::function<Status(float*)>& mark,
                                     MoeStageTimes* tt) {
  const auto& c = config_;
  auto& w = ws_;
  const MoeFp8Weights& f = *weights_.fp8;
  using TensorMap = std::map<std::string, Tensor, std::less<>>;
  auto quantize = [&](const Tensor& in, const char* q, const char* scale) {
    TensorMap call{{"x", in}, {"q", w[q]}, {"scale", w[scale]}};
    return run_op(device_, stream, "moe_quantize_fp8", call, {}, options_.run_options("moe_quantize_fp8"));
  };
  quant_fused_ = false;
  if (gather_) {  // else forward() permuted quantized rows (moe_permute_fp8)
    HALCYON_TRY(quantize(x, "a_q", "a_scale"));
    HALCYON_TRY(mark(&tt->quant));
  }
  if (gather_) {
    const char* op = "moe_grouped_gemm_fp8_swiglu_gather";
    TensorMap up{{"x", w["a_q"]},          {"x_scale", w["a_scale"]},          {"w_gate_up", f.w_gate_up},
                 {"w_scale", f.w_gate_up_scale}, {"expert_offsets", w["expert_offsets"]}, {"row_to_slot", w["row_to_slot"]},
                 {"out", w["hidden"]}};
    HALCYON_TRY(run_op(device_, stream, op, up, {{"topk", std::to_string(c.topk)}}, options_.run_options(op)));
  } else {
    // Where the implementation the registry takes for this call quantizes in its epilogue and
    // beats the GEMM + moe_quantize_fp8 pair (fused_pays), h goes straight to e4m3: the up stage
    // then includes the quantization and the quant stage is empty.
    const char* fused = "moe_grouped_gemm_fp8_swiglu_quant";
    TensorMap up_q{{"a", w["a_q"]},         {"a_scale", w["a_scale"]},
                   {"w_gate_up", f.w_gate_up}, {"w_scale", f.w_gate_up_scale},
                   {"expert_offsets", w["expert_offsets"]}, {"q", w["hidden_q"]}, {"q_scale", w["hidden_scale"]}};
    // Named in the options: taken, and run_op reports it if it cannot run this call (never a
    // silent fallback from an explicit choice).
    quant_fused_ = options_.impl.count(std::string_view(fused)) > 0 ||
                   fused_pays_for_call(device_, fused, up_q, {}, options_.run_options(fused));
    if (quant_fused_) {
      HALCYON_TRY(run_op(device_, stream, fused, up_q, {}, options_.run_options(fused)));
      HALCYON_TRY(mark(&tt->up));
      HALCYON_TRY(mark(&tt->quant));
      return forward_fp8_down(stream, mark, tt);
    }
    const char* op = "moe_grouped_gemm_fp8_swiglu";
    TensorMap up{{"a", w["a_q"]},      {"a_scale", w["a_scale"]}, {"w_gate_up", f.w_gate_up}, {"w_scale", f.w_gate_up_scale},
                 {"expert_offsets", w["expert_offsets"]}, {"out", w["hidden"]}};
    HALCYON_TRY(run_op(device_, stream, op, up, {}, options_.run_options(op)));
  }
  HALCYON_TRY(mark(&tt->up));
  HALCYON_TRY(quantize(w["hidden"], "hidden_q", "hidden_scale"));
  HALCYON_TRY(mark(&tt->quant));
  return forward_fp8_down(stream, mark, tt);
}

// The block-scaled down projection of the quantized h.
Status MoeLayer::forward_fp8_down(const Stream& stream, const std::function<Status(float*)>& mark, MoeStageTimes* tt) {
  auto& w = ws_;
  const MoeFp8Weights& f = *weights_.fp8;
  using TensorMap = std::map<std::string, Tensor, std::less<>>;
  TensorMap down{{"a", w["hidden_q"]}, {"a_scale", w["hidden_scale"]}, {"w", f.w_down}, {"w_scale", f.w_down_scale},
                 {"expert_offsets", w["expert_offsets"]}, {"out", w["expert_out"]}};
  HALCYON_TRY(run_op(device_, stream, "moe_grouped_gemm_fp8", down, {}, options_.run_options("moe_grouped_gemm_fp8")));
  return mark(&tt->down);
}

}  // namespace halcyon::rt
