#include <halcyon/runtime/moe_reference.hpp>

#include <halcyon/kernels/reference/basic.hpp>
#include <halcyon/kernels/reference/moe.hpp>
#include <halcyon/kernels/reference/moe_fp8.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace halcyon::rt {
namespace {

// `v` holds exactly the values of `shape` (elements of `dtype`, checked for overflow): the
// reference code indexes every array by the config, never by its size.
template <typename T>
Status sized(const std::vector<T>& v, ops::DType dtype, std::vector<int64_t> shape, const char* name) {
  auto e = ops::checked_extent(dtype, shape);
  if (!e) return Error(e.error().status(), fmt::format("moe reference: {}: {}", name, e.error().message()));
  if (v.size() == uint64_t(e->elements)) return {};
  return Error(HAL_INVALID_ARGUMENT, fmt::format("moe reference: {} has {} values, not the {} of {} {}", name, v.size(),
                                                 e->elements, ops::dtype_name(dtype), fmt::join(shape, " x ")));
}

// The config, x [T, H], and the router weights and bias; what every variant reads.
Status check_routing(const MoeLayerConfig& c, const MoeHostWeights& w, const std::vector<uint16_t>& x, int64_t T) {
  if (Status valid = check_moe_config(c); !valid)
    return Error(valid.error().status(), fmt::format("moe reference: {}", valid.error().message()));
  if (T < 0) return Error(HAL_INVALID_ARGUMENT, fmt::format("moe reference: tokens {} is negative", T));
  HALCYON_TRY(sized(x, ops::DType::bf16, {T, c.hidden}, "x"));
  // The logits [T, E] are allocated from the config, not from an array's size (topk <= experts:
  // the routing's [T, K] is no larger).
  if (auto e = ops::checked_extent(ops::DType::f32, std::vector<int64_t>{T, c.experts}); !e)
    return Error(e.error().status(), fmt::format("moe reference: logits [tokens, experts]: {}", e.error().message()));
  HALCYON_TRY(sized(w.w_router, ops::DType::bf16, {c.hidden, c.experts}, "w_router"));
  if (!w.bias.empty()) HALCYON_TRY(sized(w.bias, ops::DType::f32, {c.experts}, "bias"));
  return {};
}

}  // namespace

Status moe_routing_reference(const MoeLayerConfig& c, const MoeHostWeights& w, const std::vector<uint16_t>& x,
                             int64_t T, std::vector<int32_t>* ids, std::vector<float>* weights) {
  const int64_t H = c.hidden, E = c.experts, K = c.topk;
  HALCYON_TRY(check_routing(c, w, x, T));
  std::vector<float> logits(size_t(T * E));
  ref::gemm_bf16(x.data(), w.w_router.data(), logits.data(), E, H, 0, T);
  ref::MoeGateParams p;
  p.score = c.score == "softmax" ? ref::ScoreFunction::kSoftmax : ref::ScoreFunction::kSigmoid;
  p.n_groups = c.n_groups;
  p.topk_groups = c.topk_groups;
  p.topk = K;
  p.normalize = c.normalize;
  p.routed_scale = float(c.routed_scale);
  ids->assign(size_t(T * K), 0);
  weights->assign(size_t(T * K), 0.0f);
  return ref::moe_gate(logits.data(), w.bias.empty() ? nullptr : w.bias.data(), T, E, p, ids->data(), weights->data());
}

Status moe_layer_reference(const MoeLayerConfig& c, const MoeHostWeights& w, const std::vector<uint16_t>& x,
                           int64_t T, std::vector<uint16_t>* out) {
  using ref::bf16;
  const int64_t H = c.hidden, I = c.inter, E = c.experts, K = c.topk, EL = c.local();
  std::vector<int32_t> ids;
  std::vector<float> weights;
  HALCYON_TRY(check_routing(c, w, x, T));
  HALCYON_TRY(sized(w.w_gate_up, ops::DType::bf16, {EL, H, 2 * I}, "w_gate_up"));
  HALCYON_TRY(sized(w.w_down, ops::DType::bf16, {EL, I, H}, "w_down"));
  if (auto e = ops::checked_extent(ops::DType::bf16, std::vector<int64_t>{T, K, H}); !e)  // the permuted rows
    return Error(e.error().status(), fmt::format("moe reference: permuted [tokens, topk, hidden]: {}", e.error().message()));
  HALCYON_TRY(moe_routing_reference(c, w, x, T, &ids, &weights));
  std::vector<bf16> permuted(size_t(T * K * H));
  std::vector<int32_t> counts(static_cast<size_t>(EL)), offsets(static_cast<size_t>(EL + 1));
  std::vector<int32_t> row_to_slot(static_cast<size_t>(T * K)), slot_to_row(static_cast<size_t>(T * K));
  int32_t R = 0;
  auto* xb = reinterpret_cast<const bf16*>(x.data());
  HALCYON_TRY(ref::moe_permute(xb, ids.data(), T, K, H, E, c.expert_begin, c.expert_begin + EL, permuted.data(),
                               counts.data(), offsets.data(), row_to_slot.data(), slot_to_row.data(), &R));
  std::vector<bf16> hidden(size_t(std::max<int64_t>(R, 1) * I)), expert_out(size_t(std::max<int64_t>(R, 1) * H));
  HALCYON_TRY(ref::moe_grouped_gemm_swiglu(permuted.data(), reinterpret_cast<const bf16*>(w.w_gate_up.data()), offsets.data(),
                                           EL + 1, EL, R, H, I, hidden.data()));
  HALCYON_TRY(ref::moe_grouped_gemm(hidden.data(), reinterpret_cast<const bf16*>(w.w_down.data()), offsets.data(), EL + 1, EL,
                                    R, I, H, expert_out.data()));
  out->assign(size_t(T * H), 0);
  return ref::moe_combine(expert_out.data(), R, weights.data(), slot_to_row.data(), T, K, H,
                          reinterpret_cast<bf16*>(out->data()));
}

Status moe_layer_reference_fp8(const MoeLayerConfig& c, const MoeHostWeights& w, const MoeHostFp8Weights& f,
                               const std::vector<uint16_t>& x, int64_t T, std::vector<uint16_t>* out) {
  using ref::bf16;
  using ref::e4m3;
  HALCYON_TRY(check_routing(c, w, x, T));  // the config first: the sizes below are computed from it
  const int64_t H = c.hidden, I = c.inter, E = c.experts, K = c.topk, EL = c.local();
  const int64_t HG = ref::fp8_groups(H), IG = ref::fp8_groups(I);
  const auto shapes = moe_fp8_weight_shapes(c);  // the layer's layouts, as MoeHostFp8Weights says
  HALCYON_TRY(sized(f.w_gate_up, ops::DType::e4m3, shapes[0], "fp8 w_gate_up"));
  HALCYON_TRY(sized(f.w_gate_up_scale, ops::DType::f32, shapes[1], "fp8 w_gate_up_scale"));
  HALCYON_TRY(sized(f.w_down, ops::DType::e4m3, shapes[2], "fp8 w_down"));
  HALCYON_TRY(sized(f.w_down_scale, ops::DType::f32, shapes[3], "fp8 w_down_scale"));
  std::vector<int32_t> ids;
  std::vector<float> weights;
  HALCYON_TRY(moe_routing_reference(c, w, x, T, &ids, &weights));
  std::vector<int32_t> counts(static_cast<size_t>(EL)), offsets(static_cast<size_t>(EL + 1));
  std::vector<int32_t> row_to_slot(static_cast<size_t>(T * K)), slot_to_row(static_cast<size_t>(T * K));
  int32_t R = 0;
  HALCYON_TRY(ref::moe_permute(nullptr, ids.data(), T, K, H, E, c.expert_begin, c.expert_begin + EL, nullptr,
                               counts.data(), offsets.data(), row_to_slot.data(), slot_to_row.data(), &R, false));
  std::vector<e4m3> xq(size_t(T * H));
  std::vector<float> xs(size_t(T * HG));
  HALCYON_TRY(ref::moe_quantize_fp8(reinterpret_cast<const bf16*>(x.data()), T, H, xq.data(), xs.data()));
  const size_t rows = size_t(std::max<int32_t>(R, 1));
  std::vector<bf16> hidden(rows * size_t(I)), expert_out(rows * size_t(H));
  auto e4 = [](const std::vector<uint8_t>& v) { return reinterpret_cast<const e4m3*>(v.data()); };
  HALCYON_TRY(ref::moe_grouped_gemm_fp8_swiglu_gather(xq.data(), xs.data(), T, K, row_to_slot.data(), e4(f.w_gate_up),
                                                      f.w_gate_up_scale.data(), offsets.data(), EL + 1, EL, R, H, I,
                                                      hidden.data()));
  std::vector<e4m3> hq(rows * size_t(I));
  std::vector<float> hs(rows * size_t(IG));
  HALCYON_TRY(ref::moe_quantize_fp8(hidden.data(), R, I, hq.data(), hs.data()));
  HALCYON_TRY(ref::moe_grouped_gemm_fp8(hq.data(), hs.data(), e4(f.w_down), f.w_down_scale.data(), offsets.data(),
                                        EL + 1, EL, R, I, H, expert_out.data()));
  out->assign(size_t(T * H), 0);
  return ref::moe_combine(expert_out.data(), R, weights.data(), slot_to_row.data(), T, K, H,
                          reinterpret_cast<bf16*>(out->data()));
}

}  // namespace halcyon::rt
