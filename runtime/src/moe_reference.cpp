#include <halcyon/runtime/moe_reference.hpp>

#include <halcyon/kernels/reference/basic.hpp>
#include <halcyon/kernels/reference/moe.hpp>

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

}  // namespace halcyon::rt
