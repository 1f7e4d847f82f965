// examples/moe_common.hpp — what the two MoE examples share: a small DeepSeek-style layer
// config, random bf16 weights on the host, their upload to a device, and the comparison of
// the device's output with the host reference (halcyon::rt::moe_layer_reference).
#pragma once

#include <halcyon/runtime/moe_layer.hpp>
#include <halcyon/runtime/moe_reference.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace example {

using namespace halcyon;
using namespace halcyon::rt;

inline uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
inline float from_bf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::vector<uint16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_bf16(u(rng));
  return v;
}

// 16 experts in 4 groups, top-2 groups, top-4 experts: DeepSeek-V3's routing, scaled down.
inline MoeLayerConfig small_config() {
  MoeLayerConfig c;
  c.hidden = 256;
  c.inter = 64;
  c.experts = 16;
  c.topk = 4;
  c.n_groups = 4;
  c.topk_groups = 2;
  return c;
}

inline MoeHostWeights random_weights(const MoeLayerConfig& c, std::mt19937& rng) {
  MoeHostWeights w;
  w.w_router = random_bf16(size_t(c.hidden * c.experts), 0.05f, rng);
  w.bias.resize(size_t(c.experts));
  for (auto& b : w.bias) b = std::uniform_real_distribution<float>(-0.02f, 0.02f)(rng);
  w.w_gate_up = random_bf16(size_t(c.experts * c.hidden * 2 * c.inter), 0.05f, rng);
  w.w_down = random_bf16(size_t(c.experts * c.inter * c.hidden), 0.05f, rng);
  return w;
}

template <typename T>
Result<Tensor> upload(const Device& dev, const Stream& s, ops::DType dt, std::vector<int64_t> shape,
                      const std::vector<T>& host) {
  auto t = ops::make_tensor(dev, dt, std::move(shape));
  if (!t) return t.error();
  if (auto st = s.write(t->buffer, 0, host.data(), host.size() * sizeof(T)); !st) return st.error();
  return t;
}

inline Result<MoeLayerWeights> upload_weights(const Device& dev, const Stream& s, const MoeLayerConfig& c,
                                              const MoeHostWeights& h) {
  using ops::DType;
  MoeLayerWeights w;
  auto r = upload(dev, s, DType::bf16, {c.hidden, c.experts}, h.w_router);
  auto b = upload(dev, s, DType::f32, {c.experts}, h.bias);
  auto gu = upload(dev, s, DType::bf16, {c.experts, c.hidden, 2 * c.inter}, h.w_gate_up);
  auto d = upload(dev, s, DType::bf16, {c.experts, c.inter, c.hidden}, h.w_down);
  for (auto* t : {&r, &b, &gu, &d})
    if (!*t) return t->error();
  w.w_router = *r;
  w.bias = *b;
  w.w_gate_up = *gu;
  w.w_down = *d;
  return w;
}

// ||got - want|| / ||want|| over the first `n` values.
inline double rel_error(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double g = from_bf16(got[i]), w = from_bf16(want[i]);
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// bf16 outputs: a few ulps of rounding, and on a GPU the odd token whose top-k differs at a
// near tie. 2% of the output's norm is far below what a wrong layer gives (about 100%).
constexpr double kTolerance = 2e-2;

}  // namespace example
