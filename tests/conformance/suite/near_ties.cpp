// Near-ties the contracts allow (near_ties.hpp): moe_gate's selection.
#include "near_ties.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace halcyon::cts {
namespace {

bool close(double a, double b) {
  const double scale = std::max({std::fabs(a), std::fabs(b), 0x1p-20});
  return std::fabs(a - b) <= kTieUlps * 0x1p-23 * scale;
}
// a ranks clearly above b (not within a tie).
bool above(double a, double b) { return a > b && !close(a, b); }

// The contract's scores in fp64: sigmoid(logit), or softmax over the E experts.
std::vector<double> gate_scores(const float* logits, int64_t E, bool softmax) {
  std::vector<double> s(static_cast<size_t>(E));
  if (!softmax) {
    for (int64_t e = 0; e < E; ++e) s[size_t(e)] = 1.0 / (1.0 + std::exp(-double(logits[e])));
    return s;
  }
  double mx = -INFINITY, sum = 0;
  for (int64_t e = 0; e < E; ++e) mx = std::max(mx, double(logits[e]));
  for (int64_t e = 0; e < E; ++e) sum += s[size_t(e)] = std::exp(double(logits[e]) - mx);
  for (double& v : s) v /= sum;
  return s;
}

std::vector<double> selection(const float* logits, const float* bias, int64_t E, bool softmax) {
  std::vector<double> sel = gate_scores(logits, E, softmax);
  if (bias)
    for (int64_t e = 0; e < E; ++e) sel[size_t(e)] += double(bias[e]);
  return sel;
}

template <typename T>
const T* data_of(const HostTensors& h, const char* name) {
  auto it = h.find(name);
  return it == h.end() ? nullptr : reinterpret_cast<const T*>(it->second.data());
}

int64_t gate_near_ties(const ops::Binding& b, const HostTensors& inputs, const HostTensors& got, HostTensors& want) {
  const auto* logits = data_of<float>(inputs, "logits");
  const auto* bias = data_of<float>(inputs, "bias");
  const auto* ids = data_of<int32_t>(got, "topk_ids");
  if (!logits || !ids || !want.count("topk_ids") || !want.count("topk_weights")) return 0;
  const int64_t E = b.dim("E"), K = b.dim("K");
  const int64_t T = E > 0 ? int64_t(inputs.at("logits").size() / sizeof(float)) / E : 0;
  const bool softmax = b.params.s("score") == "softmax", normalize = b.params.b("normalize");
  const double routed_scale = b.params.f("routed_scale");
  auto* want_ids = reinterpret_cast<int32_t*>(want.at("topk_ids").data());
  auto* want_w = reinterpret_cast<float*>(want.at("topk_weights").data());
  int64_t accepted = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t* d = ids + t * K;
    if (std::equal(d, d + K, want_ids + t * K)) continue;
    if (!gate_ids_valid_within_ties(logits + t * E, bias, E, softmax, b.params.i("n_groups"),
                                    b.params.i("topk_groups"), d, K))
      continue;
    // The weights that answer implies, as the contract defines them (unbiased scores).
    const std::vector<double> score = gate_scores(logits + t * E, E, softmax);
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += score[size_t(d[k])];
    const double denom = normalize && sum != 0 ? sum : 1.0;
    for (int64_t k = 0; k < K; ++k) {
      want_ids[t * K + k] = d[k];
      want_w[t * K + k] = float(score[size_t(d[k])] / denom * routed_scale);
    }
    ++accepted;
  }
  return accepted;
}

// Contracts with a near-tie rule, by operator.
struct NearTieRule {
  const char* op;
  int64_t (*accept)(const ops::Binding&, const HostTensors&, const HostTensors&, HostTensors&);
};
constexpr NearTieRule kRules[] = {{"moe_gate", gate_near_ties}};

}  // namespace

bool gate_ids_valid_within_ties(const float* logits, const float* bias, int64_t E, bool softmax, int64_t n_groups,
                                int64_t topk_groups, const int32_t* ids, int64_t topk) {
  if (E <= 0 || n_groups <= 0 || E % n_groups != 0 || topk <= 0 || topk_groups <= 0) return false;
  const std::vector<double> sel = selection(logits, bias, E, softmax);
  const int64_t size = E / n_groups;
  std::vector<char> chosen(static_cast<size_t>(E), 0);
  for (int64_t k = 0; k < topk; ++k) {
    if (ids[k] < 0 || ids[k] >= E || chosen[size_t(ids[k])]) return false;
    chosen[size_t(ids[k])] = 1;
  }
  // Group scores: the sum of a group's two best selection scores (its one score at size 1).
  std::vector<double> gs(static_cast<size_t>(n_groups));
  for (int64_t g = 0; g < n_groups; ++g) {
    std::vector<double> v(sel.begin() + g * size, sel.begin() + (g + 1) * size);
    std::partial_sort(v.begin(), v.begin() + std::min<int64_t>(2, size), v.end(), std::greater<>());
    gs[size_t(g)] = v[0] + (size >= 2 ? v[1] : 0.0);
  }
  std::vector<double> sorted = gs;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  const double threshold = sorted[size_t(std::min(topk_groups, n_groups) - 1)];
  // The groups the answer keeps: the ones it took experts from, and every group that ranks
  // clearly above the last kept one (any correct answer keeps those); no more than topk_groups,
  // none clearly below the threshold.
  std::vector<char> kept(static_cast<size_t>(n_groups), 0);
  for (int64_t k = 0; k < topk; ++k) kept[size_t(ids[k] / size)] = 1;
  int64_t n_kept = 0;
  for (int64_t g = 0; g < n_groups; ++g) {
    if (kept[size_t(g)] && above(threshold, gs[size_t(g)])) return false;
    if (above(gs[size_t(g)], threshold)) kept[size_t(g)] = 1;
    n_kept += kept[size_t(g)];
  }
  if (n_kept > topk_groups) return false;
  // Descending, within ties; and no expert of a kept group left out that ranks clearly above
  // the last one taken.
  for (int64_t k = 1; k < topk; ++k)
    if (above(sel[size_t(ids[k])], sel[size_t(ids[k - 1])])) return false;
  const double last = sel[size_t(ids[topk - 1])];
  for (int64_t e = 0; e < E; ++e)
    if (!chosen[size_t(e)] && kept[size_t(e / size)] && above(sel[size_t(e)], last)) return false;
  return true;
}

int64_t accept_near_ties(const ops::Contract& c, const ops::Binding& b, const HostTensors& inputs,
                         const HostTensors& got, HostTensors& want) {
  for (const NearTieRule& r : kRules)
    if (c.op == r.op) return r.accept(b, inputs, got, want);
  return 0;
}

}  // namespace halcyon::cts
