#include <halcyon/runtime/moe_reference.hpp>

#include <halcyon/kernels/reference/basic.hpp>
#include <halcyon/kernels/reference/moe.hpp>
#include <halcyon/kernels/reference/moe_fp8.hpp>

#include <fmt/format.h>

namespace halcyon::rt {

Status moe_routing_reference(const MoeLayerConfig& c, const MoeHostWeights& w, const std::vector<uint16_t>& x,
                             int64_t T, std::vector<int32_t>* ids, std::vector<float>* weights) {
  const int64_t H = c.hidden, E = c.experts, K = c.topk;
  if (int64_t(x.size()) != T * H) return Error(HAL_INVALID_ARGUMENT, fmt::format("moe reference: x has {} values, not {}", x.size(), T * H));
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
  const int64_t H = c.hidden, I = c.inter, E = c.experts, K = c.topk, EL = c.local();
  const int64_t HG = ref::fp8_groups(H), IG = ref::fp8_groups(I);
  auto sized = [](size_t got, int64_t want, const char* name) -> Status {
    if (int64_t(got) == want) return {};
    return Error(HAL_INVALID_ARGUMENT, fmt::format("moe fp8 reference: {} has {} values, not {}", name, got, want));
  };
  HALCYON_TRY(sized(f.w_gate_up.size(), EL * 2 * I * H, "w_gate_up"));
  HALCYON_TRY(sized(f.w_gate_up_scale.size(), EL * ref::fp8_groups(2 * I) * HG, "w_gate_up_scale"));
  HALCYON_TRY(sized(f.w_down.size(), EL * H * I, "w_down"));
  HALCYON_TRY(sized(f.w_down_scale.size(), EL * ref::fp8_groups(H) * IG, "w_down_scale"));
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
