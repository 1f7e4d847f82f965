// The one piece of arithmetic every attention reference shares: one query row against a
// list of key/value rows, in fp64.
#pragma once

#include <halcyon/kernels/reference/attention.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace halcyon::ref::detail {

// out[0, Dv) = sum_j softmax_j(scale * q . k_j) v_j and lse = log sum_j exp(scale * q . k_j),
// over the n rows kv(j) -> {k_j (Dqk values), v_j (Dv values)}. n = 0 writes zeros and -inf.
template <typename KvRows>
void attend_row(const bf16* q, int64_t Dqk, int64_t Dv, int64_t n, KvRows kv, double scale, bf16* out,
                float* lse, std::vector<double>& scores, std::vector<double>& acc) {
  if (n == 0) {
    std::fill(out, out + Dv, bf16{});
    *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  scores.resize(size_t(n));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const bf16* k = kv(j).first;
    double dot = 0;
    for (int64_t d = 0; d < Dqk; ++d) dot += double(bf16_to_float(q[d])) * double(bf16_to_float(k[d]));
    scores[size_t(j)] = scale * dot;
    m = std::max(m, scores[size_t(j)]);
  }
  acc.assign(size_t(Dv), 0.0);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double p = std::exp(scores[size_t(j)] - m);
    sum += p;
    const bf16* v = kv(j).second;
    for (int64_t d = 0; d < Dv; ++d) acc[size_t(d)] += p * double(bf16_to_float(v[d]));
  }
  for (int64_t d = 0; d < Dv; ++d) out[d] = float_to_bf16(float(acc[size_t(d)] / sum));
  *lse = float(m + std::log(sum));
}

}  // namespace halcyon::ref::detail
