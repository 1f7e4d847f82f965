// moe_gate reference: scores, group-limited top-k selection, weights. See docs/kernels/moe.md.
#include <halcyon/kernels/reference/moe.hpp>

#include "check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace halcyon::ref {
namespace {

constexpr const char* kOp = "moe_gate";

// Scores of one token, computed in fp64 and rounded once to fp32.
void token_scores(const float* logit, int64_t E, ScoreFunction f, float* score) {
  if (f == ScoreFunction::kSigmoid) {
    for (int64_t e = 0; e < E; ++e) {
      score[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logit[e]))));
    }
    return;
  }
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t e = 0; e < E; ++e) max = std::fmax(max, static_cast<double>(logit[e]));
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logit[e]) - max);
  for (int64_t e = 0; e < E; ++e) {
    score[e] = static_cast<float>(std::exp(static_cast<double>(logit[e]) - max) / sum);
  }
}

// The ranking order of selection: higher value first, ties to the lower index. A NaN ranks
// below every number (it compares as -inf), so the order stays total and deterministic.
bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  const float ka = std::isnan(a) ? -std::numeric_limits<float>::infinity() : a;
  const float kb = std::isnan(b) ? -std::numeric_limits<float>::infinity() : b;
  return ka > kb || (ka == kb && ia < ib);
}

// Picks the n best of the eligible items [0, count) of `value`, best first, into `out`
// (repeated scans: O(n * count), no sorting subtleties). `eligible` is updated: picked items
// become ineligible.
void pick_best(const float* value, std::vector<char>& eligible, int64_t first, int64_t count,
               int64_t n, int32_t* out) {
  for (int64_t j = 0; j < n; ++j) {
    int64_t best = -1;
    for (int64_t i = first; i < first + count; ++i) {
      if (eligible[i] && (best < 0 || ranks_before(value[i], i, value[best], best))) best = i;
    }
    out[j] = static_cast<int32_t>(best);
    eligible[best] = 0;
  }
}

}  // namespace

Status moe_gate_check(int64_t T, int64_t E, const MoeGateParams& p) {
  HALCYON_TRY(detail::check_size(kOp, "T", T, 0));
  HALCYON_TRY(detail::check_size(kOp, "E", E, 1));
  if (E > detail::kMaxI32) return detail::invalid("{}: E = {} does not fit int32 ids", kOp, E);
  if (p.score != ScoreFunction::kSigmoid && p.score != ScoreFunction::kSoftmax) {
    return detail::invalid("{}: score = {} is neither sigmoid nor softmax", kOp,
                           static_cast<int>(p.score));
  }
  if (p.n_groups < 1 || E % p.n_groups != 0) {
    return detail::invalid("{}: E = {} is not divisible into n_groups = {} equal groups", kOp, E,
                           p.n_groups);
  }
  if (p.topk_groups < 1 || p.topk_groups > p.n_groups) {
    return detail::invalid("{}: topk_groups = {} is not in [1, n_groups = {}]", kOp,
                           p.topk_groups, p.n_groups);
  }
  const int64_t kept = p.topk_groups * (E / p.n_groups);
  if (p.topk < 1 || p.topk > kept) {
    return detail::invalid("{}: topk = {} is not in [1, {}] (the experts in topk_groups = {} "
                           "kept groups of {})",
                           kOp, p.topk, kept, p.topk_groups, E / p.n_groups);
  }
  if (!std::isfinite(p.routed_scale)) {
    return detail::invalid("{}: routed_scale = {} is not finite", kOp, p.routed_scale);
  }
  return {};
}

Status moe_gate(const float* logits, const float* bias, int64_t T, int64_t E,
                const MoeGateParams& p, int32_t* topk_ids, float* topk_weights,
                RowRange rows) {
  HALCYON_TRY(moe_gate_check(T, E, p));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "tokens", rows, T));
  const bool any = r.end > r.begin;
  HALCYON_TRY(detail::check_ptr(kOp, "logits", logits, any));
  HALCYON_TRY(detail::check_ptr(kOp, "topk_ids", topk_ids, any));
  HALCYON_TRY(detail::check_ptr(kOp, "topk_weights", topk_weights, any));

  const int64_t group_size = E / p.n_groups;
  std::vector<float> score(E), select(E), group_score(p.n_groups);
  std::vector<char> eligible(E), group_eligible(p.n_groups);
  std::vector<int32_t> two(2), groups(p.topk_groups);

  for (int64_t t = r.begin; t < r.end; ++t) {
    token_scores(logits + t * E, E, p.score, score.data());
    for (int64_t e = 0; e < E; ++e) select[e] = score[e] + (bias ? bias[e] : 0.0f);

    // Group score: the sum of the group's two best selection scores (its only score when the
    // group has one expert).
    std::fill(eligible.begin(), eligible.end(), 1);
    const int64_t per_group_best = std::min<int64_t>(2, group_size);
    for (int64_t g = 0; g < p.n_groups; ++g) {
      pick_best(select.data(), eligible, g * group_size, group_size, per_group_best, two.data());
      group_score[g] = select[two[0]] + (per_group_best == 2 ? select[two[1]] : 0.0f);
    }
    std::fill(group_eligible.begin(), group_eligible.end(), 1);
    pick_best(group_score.data(), group_eligible, 0, p.n_groups, p.topk_groups, groups.data());

    // Experts of the kept groups compete for the topk slots.
    std::fill(eligible.begin(), eligible.end(), 0);
    for (int32_t g : groups) {
      std::fill(eligible.begin() + g * group_size, eligible.begin() + (g + 1) * group_size, 1);
    }
    int32_t* ids = topk_ids + t * p.topk;
    pick_best(select.data(), eligible, 0, E, p.topk, ids);

    double sum = 0.0;
    for (int64_t k = 0; k < p.topk; ++k) sum += score[ids[k]];
    // All-zero scores (underflowed sigmoids) stay zero rather than becoming 0/0.
    const double denom = p.normalize && sum != 0.0 ? sum : 1.0;
    float* w = topk_weights + t * p.topk;
    for (int64_t k = 0; k < p.topk; ++k) {
      w[k] = static_cast<float>(static_cast<double>(score[ids[k]]) / denom * p.routed_scale);
    }
  }
  return {};
}

}  // namespace halcyon::ref
