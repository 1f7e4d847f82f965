// Tensor helpers for the runtime tests (halcyon_runtime_tests): random bf16 data and uploads.
#pragma once

#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/ops/tensor.hpp>

#include <random>
#include <vector>

#include "test_support.hpp"

namespace test {

// n bf16 values (as bits), uniform in [-scale, scale).
inline std::vector<uint16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = halcyon::ref::float_to_bf16(u(rng)).bits;
  return v;
}

// A new tensor holding `v` (Stream::write is done with `v` when it returns: callers pass
// temporaries).
template <typename T>
halcyon::ops::Tensor upload(const halcyon::Device& d, const halcyon::Stream& s, halcyon::ops::DType dt,
                           std::vector<int64_t> shape, const std::vector<T>& v) {
  auto t = unwrap(halcyon::ops::make_tensor(d, dt, std::move(shape)));
  REQUIRE(t.bytes() == v.size() * sizeof(T));
  unwrap(s.write(t.buffer, 0, v.data(), v.size() * sizeof(T)));
  return t;
}

// A tensor's contents (synchronizes).
template <typename T>
std::vector<T> download(const halcyon::Stream& s, const halcyon::ops::Tensor& t) {
  std::vector<T> v(t.bytes() / sizeof(T));
  unwrap(s.read(t.buffer, t.offset, v.data(), t.bytes()));
  unwrap(s.synchronize());
  return v;
}

}  // namespace test
