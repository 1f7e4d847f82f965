// moe_gate: hand-computed routing cases, a DeepSeek-V3-shaped comparison against an
// independent sort-based router, row ranges and argument errors.
#include "moe_test_util.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

using halcyon::ref::moe_gate;
using halcyon::ref::MoeGateParams;
using halcyon::ref::RowRange;
using halcyon::ref::ScoreFunction;
using moe_test::expect_invalid;

namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(const std::vector<float>& logits, const std::vector<float>& bias, int64_t E,
             const MoeGateParams& p) {
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  Routed r{std::vector<int32_t>(T * p.topk, -7), std::vector<float>(T * p.topk, -7.0f)};
  const auto s = moe_gate(logits.data(), bias.empty() ? nullptr : bias.data(), T, E, p,
                          r.ids.data(), r.weights.data());
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message()));
  return r;
}

MoeGateParams plain(int64_t topk, bool normalize, float scale = 1.0f,
                    ScoreFunction f = ScoreFunction::kSigmoid) {
  MoeGateParams p;
  p.score = f;
  p.topk = topk;
  p.normalize = normalize;
  p.routed_scale = scale;
  return p;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("moe_gate: plain top-k, ties go to the lower expert index") {
  // sigmoid is monotonic: experts 1 and 3 tie for first.
  const auto r = route({0.0f, 2.0f, -1.0f, 2.0f}, {}, 4, plain(3, false));
  CHECK(r.ids == std::vector<int32_t>{1, 3, 0});
  CHECK(r.weights[0] == doctest::Approx(sigmoid(2.0)).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(sigmoid(2.0)).epsilon(1e-6));
  CHECK(r.weights[2] == doctest::Approx(0.5).epsilon(1e-6));

  const auto all_equal = route(std::vector<float>(6, 0.25f), {}, 6, plain(4, false));
  CHECK(all_equal.ids == std::vector<int32_t>{0, 1, 2, 3});
}

TEST_CASE("moe_gate: normalize on and off, routed_scale") {
  const float l3 = std::log(3.0f);  // sigmoid(ln 3) = 3/4, sigmoid(0) = 1/2
  const auto off = route({0.0f, l3, -l3}, {}, 3, plain(2, false, 2.5f));
  CHECK(off.ids == std::vector<int32_t>{1, 0});
  CHECK(off.weights[0] == doctest::Approx(0.75 * 2.5).epsilon(1e-6));
  CHECK(off.weights[1] == doctest::Approx(0.5 * 2.5).epsilon(1e-6));

  const auto on = route({0.0f, l3, -l3}, {}, 3, plain(2, true, 2.5f));
  CHECK(on.ids == std::vector<int32_t>{1, 0});
  CHECK(on.weights[0] == doctest::Approx(0.75 / 1.25 * 2.5).epsilon(1e-6));  // 1.5
  CHECK(on.weights[1] == doctest::Approx(0.5 / 1.25 * 2.5).epsilon(1e-6));   // 1.0
}

TEST_CASE("moe_gate: the bias changes the selection but not the weights") {
  const float l3 = std::log(3.0f);
  // Selection scores 0.75, 0.5, 0.25 + 1 = 1.25: expert 2 first, then expert 0.
  const auto r = route({l3, 0.0f, -l3}, {0.0f, 0.0f, 1.0f}, 3, plain(2, false));
  CHECK(r.ids == std::vector<int32_t>{2, 0});
  CHECK(r.weights[0] == doctest::Approx(0.25).epsilon(1e-6));
  CHECK(r.weights[1] == doctest::Approx(0.75).epsilon(1e-6));
  // Normalised over the unbiased scores: 0.25 / 1.0 and 0.75 / 1.0.
  const auto n = route({l3, 0.0f, -l3}, {0.0f, 0.0f, 1.0f}, 3, plain(2, true));
  CHECK(n.weights[0] == doctest::Approx(0.25).epsilon(1e-6));
  CHECK(n.weights[1] == doctest::Approx(0.75).epsilon(1e-6));
}

TEST_CASE("moe_gate: softmax over all experts versus sigmoid") {
  // exp(logits) = 1, 2, 3, 1; softmax = 1/7, 2/7, 3/7, 1/7.
  const std::vector<float> logits{0.0f, std::log(2.0f), std::log(3.0f), 0.0f};
  const auto sm = route(logits, {}, 4, plain(2, false, 1.0f, ScoreFunction::kSoftmax));
  CHECK(sm.ids == std::vector<int32_t>{2, 1});
  CHECK(sm.weights[0] == doctest::Approx(3.0 / 7.0).epsilon(1e-6));
  CHECK(sm.weights[1] == doctest::Approx(2.0 / 7.0).epsilon(1e-6));
  const auto smn = route(logits, {}, 4, plain(2, true, 1.0f, ScoreFunction::kSoftmax));
  CHECK(smn.weights[0] == doctest::Approx(0.6).epsilon(1e-6));
  CHECK(smn.weights[1] == doctest::Approx(0.4).epsilon(1e-6));
  const auto sg = route(logits, {}, 4, plain(2, false));
  CHECK(sg.ids == std::vector<int32_t>{2, 1});
  CHECK(sg.weights[0] == doctest::Approx(0.75).epsilon(1e-6));
  CHECK(sg.weights[1] == doctest::Approx(2.0 / 3.0).epsilon(1e-6));

  // Softmax is over all E experts, not over the kept groups: exp = 3, 1, 2, 2 (sum 8).
  // Groups {0,1} and {2,3} both score 0.5 and tie: the lower group, 0, is kept.
  MoeGateParams p = plain(1, false, 1.0f, ScoreFunction::kSoftmax);
  p.n_groups = 2;
  p.topk_groups = 1;
  const auto g = route({std::log(3.0f), 0.0f, std::log(2.0f), std::log(2.0f)}, {}, 4, p);
  CHECK(g.ids == std::vector<int32_t>{0});
  CHECK(g.weights[0] == doctest::Approx(3.0 / 8.0).epsilon(1e-6));
}

TEST_CASE("moe_gate: group-limited selection keeps the groups with the best two-expert sums") {
  // All logits 0 (score 1/2); the bias sets the selection scores 0.5 + b:
  //   group 0: 1.4, 0.0  (sum 1.4; holds the single best expert)
  //   group 1: 0.8, 0.8  (sum 1.6)
  //   group 2: 0.7, 0.75 (sum 1.45)
  //   group 3: 0.6, 0.6  (sum 1.2)
  // Kept: groups 1 and 2. Top 3 of experts 2..5: 2 and 3 tie (lower first), then 5.
  const std::vector<float> bias{0.9f, -0.5f, 0.3f, 0.3f, 0.2f, 0.25f, 0.1f, 0.1f};
  MoeGateParams p = plain(3, true, 2.5f);
  p.n_groups = 4;
  p.topk_groups = 2;
  const auto r = route(std::vector<float>(8, 0.0f), bias, 8, p);
  CHECK(r.ids == std::vector<int32_t>{2, 3, 5});
  for (float w : r.weights) CHECK(w == doctest::Approx(2.5 / 3.0).epsilon(1e-6));

  // Without group limiting the best expert (0) wins.
  const auto flat = route(std::vector<float>(8, 0.0f), bias, 8, plain(3, true, 2.5f));
  CHECK(flat.ids == std::vector<int32_t>{0, 2, 3});

  // Group ties go to the lower group: groups 1 and 3 both sum 1.6 when group 3 is raised.
  std::vector<float> tied = bias;
  tied[6] = tied[7] = 0.3f;
  p.topk_groups = 1;
  p.topk = 2;
  const auto t = route(std::vector<float>(8, 0.0f), tied, 8, p);
  CHECK(t.ids == std::vector<int32_t>{2, 3});
}

TEST_CASE("moe_gate: groups of one expert score by that expert alone") {
  MoeGateParams p = plain(2, false);
  p.n_groups = 4;
  p.topk_groups = 2;
  const std::vector<float> logits{0.5f, -1.0f, 3.0f, 1.0f};
  const auto g = route(logits, {}, 4, p);
  const auto f = route(logits, {}, 4, plain(2, false));
  CHECK(g.ids == std::vector<int32_t>{2, 3});
  CHECK(g.ids == f.ids);
  CHECK(g.weights == f.weights);
}

TEST_CASE("moe_gate: all-zero scores give zero weights, not NaN") {
  const auto r = route({-1000.0f, -1000.0f, -1000.0f}, {}, 3, plain(2, true, 2.5f));
  CHECK(r.ids == std::vector<int32_t>{0, 1});
  CHECK(r.weights == std::vector<float>{0.0f, 0.0f});
}

namespace {

// An independent router written differently (sorts of index arrays) to cross-check the
// reference on DeepSeek-V3 shapes.
Routed route_by_sorting(const std::vector<float>& logits, const std::vector<float>& bias,
                        int64_t E, const MoeGateParams& p) {
  const int64_t T = static_cast<int64_t>(logits.size()) / E, gs = E / p.n_groups;
  Routed out;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> score(E), sel(E);
    for (int64_t e = 0; e < E; ++e) {
      score[e] = static_cast<float>(sigmoid(logits[t * E + e]));
      sel[e] = score[e] + bias[e];
    }
    auto by_sel = [&](int a, int b) { return sel[a] != sel[b] ? sel[a] > sel[b] : a < b; };
    std::vector<float> gscore(p.n_groups);
    for (int64_t g = 0; g < p.n_groups; ++g) {
      std::vector<int> members(gs);
      std::iota(members.begin(), members.end(), static_cast<int>(g * gs));
      std::sort(members.begin(), members.end(), by_sel);
      gscore[g] = sel[members[0]] + sel[members[1]];
    }
    std::vector<int> groups(p.n_groups);
    std::iota(groups.begin(), groups.end(), 0);
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int a, int b) { return gscore[a] > gscore[b]; });
    std::vector<int> cand;
    for (int64_t i = 0; i < p.topk_groups; ++i) {
      for (int64_t e = groups[i] * gs; e < (groups[i] + 1) * gs; ++e) cand.push_back(int(e));
    }
    std::sort(cand.begin(), cand.end(), by_sel);
    double sum = 0;
    for (int64_t k = 0; k < p.topk; ++k) sum += score[cand[k]];
    for (int64_t k = 0; k < p.topk; ++k) {
      out.ids.push_back(cand[k]);
      out.weights.push_back(static_cast<float>(score[cand[k]] / sum * p.routed_scale));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("moe_gate: DeepSeek-V3 settings agree with an independent router") {
  const int64_t T = 64, E = 256;
  const MoeGateParams p = MoeGateParams::deepseek_v3();
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_real_distribution<float> ud(-0.1f, 0.1f);
  std::vector<float> logits(T * E), bias(E);
  for (auto& v : logits) v = nd(rng);
  for (auto& v : bias) v = ud(rng);

  const auto r = route(logits, bias, E, p);
  const auto want = route_by_sorting(logits, bias, E, p);
  CHECK(r.ids == want.ids);
  for (size_t i = 0; i < r.weights.size(); ++i) {
    CHECK(r.weights[i] == doctest::Approx(want.weights[i]).epsilon(1e-6));
  }
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> ids(r.ids.begin() + t * 8, r.ids.begin() + (t + 1) * 8);
    double sum = 0;
    for (int64_t k = 0; k < 8; ++k) sum += r.weights[t * 8 + k];
    CHECK(sum == doctest::Approx(2.5).epsilon(1e-6));
    std::vector<int32_t> groups;
    for (int32_t id : ids) groups.push_back(id / 32);
    std::sort(groups.begin(), groups.end());
    CHECK(std::unique(groups.begin(), groups.end()) - groups.begin() <= 4);
    std::sort(ids.begin(), ids.end());
    CHECK(std::unique(ids.begin(), ids.end()) == ids.end());
  }

  // Row ranges: computing the tokens in three pieces gives the same outputs, and a range
  // writes nothing outside itself.
  std::vector<int32_t> ids(T * 8, -7);
  std::vector<float> w(T * 8, -7.0f);
  for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 5}, {5, 41}, {41, T}}) {
    REQUIRE(moe_gate(logits.data(), bias.data(), T, E, p, ids.data(), w.data(), RowRange{b, e})
                .ok());
    if (e < T) CHECK(ids[e * 8] == -7);
  }
  CHECK(ids == r.ids);
  CHECK(w == r.weights);
}

TEST_CASE("moe_gate: bad arguments are reported with the parameter and value") {
  std::vector<float> logits(2 * 10, 0.0f), w(2 * 8);
  std::vector<int32_t> ids(2 * 8, -7);
  auto gate = [&](int64_t E, MoeGateParams p, RowRange rows = {}) {
    return moe_gate(logits.data(), nullptr, 2, E, p, ids.data(), w.data(), rows);
  };
  MoeGateParams p = plain(2, true);
  p.n_groups = 4;
  expect_invalid(gate(10, p), {"E = 10", "n_groups = 4"});
  p.n_groups = 5;
  p.topk_groups = 6;
  expect_invalid(gate(10, p), {"topk_groups = 6", "n_groups = 5"});
  p.topk_groups = 2;
  p.topk = 5;  // only 2 groups x 2 experts = 4 kept
  expect_invalid(gate(10, p), {"topk = 5", "[1, 4]"});
  p.topk = 0;
  expect_invalid(gate(10, p), {"topk = 0"});
  p.topk = 2;
  p.routed_scale = std::numeric_limits<float>::infinity();
  expect_invalid(gate(10, p), {"routed_scale = inf"});
  p.routed_scale = 1.0f;
  expect_invalid(gate(0, p), {"E = 0"});
  expect_invalid(gate(10, p, RowRange{1, 3}), {"row range [1, 3)", "2 tokens"});
  expect_invalid(moe_gate(nullptr, nullptr, 2, 10, p, ids.data(), w.data()), {"logits is null"});
  CHECK(ids == std::vector<int32_t>(2 * 8, -7));  // nothing written by the failed calls
  CHECK(gate(10, p).ok());
}
