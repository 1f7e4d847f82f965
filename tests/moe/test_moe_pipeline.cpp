// The whole MoE layer through the reference operators (gate -> permute -> SwiGLU GEMM ->
// down GEMM -> combine), against a loop over tokens and their experts that never permutes;
// and the same split over two expert-parallel ranks.
#include "moe_test_util.hpp"

#include <cmath>

using namespace halcyon::ref;
using moe_test::bf16_to_float;

namespace {

constexpr int64_t T = 13, H = 24, I = 10, E = 8, K = 3;

struct Model {
  std::vector<bf16> x, w_gate_up, w_down;  // [T, H], [E, H, 2I], [E, I, H]
  std::vector<int32_t> ids;                // [T, K]
  std::vector<float> weights;              // [T, K]
};

Model make_model() {
  std::mt19937 rng(42);
  Model m;
  m.x = moe_test::random_bf16(T * H, rng);
  m.w_gate_up = moe_test::random_bf16(E * H * 2 * I, rng);
  m.w_down = moe_test::random_bf16(E * I * H, rng);
  std::normal_distribution<float> nd;
  std::vector<float> logits(T * E);
  for (auto& v : logits) v = nd(rng);
  logits[5 * E + 6] = 50.0f;  // token 5 surely goes to expert 6
  MoeGateParams p;
  p.n_groups = 4;
  p.topk_groups = 2;
  p.topk = K;
  p.routed_scale = 2.5f;
  m.ids.resize(T * K);
  m.weights.resize(T * K);
  REQUIRE(moe_gate(logits.data(), nullptr, T, E, p, m.ids.data(), m.weights.data()).ok());
  return m;
}

// out[t] (fp32) = sum_k w[t,k] * bf16(bf16(swiglu(x[t] @ Wgu[id])) @ Wd[id]), computed
// column by column, for the experts in [e0, e1).
std::vector<float> per_token(const Model& m, int64_t e0, int64_t e1) {
  std::vector<float> out(T * H, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> acc(H, 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = m.ids[t * K + k];
      if (e < e0 || e >= e1) continue;
      std::vector<float> hidden(I);
      for (int64_t j = 0; j < I; ++j) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < H; ++c) {
          const double xv = bf16_to_float(m.x[t * H + c]);
          g += xv * bf16_to_float(m.w_gate_up[(e * H + c) * 2 * I + j]);
          u += xv * bf16_to_float(m.w_gate_up[(e * H + c) * 2 * I + I + j]);
        }
        hidden[j] = round_to_bf16(static_cast<float>(g / (1.0 + std::exp(-g)) * u));
      }
      for (int64_t n = 0; n < H; ++n) {
        double y = 0;
        for (int64_t j = 0; j < I; ++j) y += hidden[j] * bf16_to_float(m.w_down[(e * I + j) * H + n]);
        acc[n] += m.weights[t * K + k] * static_cast<double>(round_to_bf16(static_cast<float>(y)));
      }
    }
    for (int64_t n = 0; n < H; ++n) out[t * H + n] = static_cast<float>(acc[n]);
  }
  return out;
}

// The operators, as one rank holding experts [e0, e1) runs them.
std::vector<bf16> through_operators(const Model& m, int64_t e0, int64_t e1) {
  const int64_t EL = e1 - e0;
  std::vector<bf16> permuted(T * K * H);
  std::vector<int32_t> counts(EL), offsets(EL + 1), r2s(T * K), s2r(T * K);
  int32_t R = 0;
  REQUIRE(moe_permute(m.x.data(), m.ids.data(), T, K, H, E, e0, e1, permuted.data(),
                      counts.data(), offsets.data(), r2s.data(), s2r.data(), &R)
              .ok());
  std::vector<bf16> hidden(R * I), y(R * H), out(T * H);
  REQUIRE(moe_grouped_gemm_swiglu(permuted.data(), m.w_gate_up.data() + e0 * H * 2 * I,
                                  offsets.data(), EL + 1, EL, R, H, I, hidden.data())
              .ok());
  REQUIRE(moe_grouped_gemm(hidden.data(), m.w_down.data() + e0 * I * H, offsets.data(), EL + 1,
                           EL, R, I, H, y.data())
              .ok());
  REQUIRE(moe_combine(y.data(), R, m.weights.data(), s2r.data(), T, K, H, out.data()).ok());
  return out;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("MoE pipeline: permute + grouped GEMMs + combine equal a per-token loop") {
  const Model m = make_model();
  const auto want = per_token(m, 0, E);
  const auto got = moe_test::to_float(through_operators(m, 0, E));
  // Only the final rounding of the combine separates the two.
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == round_to_bf16(want[i]));
}

TEST_CASE("MoE pipeline: two expert-parallel ranks add up to the whole layer") {
  const Model m = make_model();
  const auto lo = moe_test::to_float(through_operators(m, 0, 3));
  const auto hi = moe_test::to_float(through_operators(m, 3, E));
  CHECK(lo == [&] {
    std::vector<float> r;
    for (float v : per_token(m, 0, 3)) r.push_back(round_to_bf16(v));
    return r;
  }());
  std::vector<float> sum(T * H);
  for (int64_t i = 0; i < T * H; ++i) sum[i] = lo[i] + hi[i];
  // Each rank's partial sum is rounded to bf16 once: a few bf16 ulps of difference at most.
  CHECK(rel_error(sum, per_token(m, 0, E)) < 1e-2);
  CHECK(rel_error(sum, per_token(m, 0, E)) > 0.0);  // they are partial sums, not copies
}
