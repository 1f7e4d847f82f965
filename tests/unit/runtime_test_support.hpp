// Tensor helpers for the runtime tests (halcyon_runtime_tests): random bf16 data and uploads.
#pragma once

#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/ops/tensor.hpp>

#include <random>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace test {

// A .npy file from a version and a header text, padded as numpy pads it, then `data`.
inline std::vector<unsigned char> npy_bytes(const std::string& header, const std::string& data = "", unsigned char major = 1,
                                     unsigned char minor = 0) {
  std::string h = header;
  size_t prefix = major == 1 ? 10 : 12;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::vector<unsigned char> out = {0x93, 'N', 'U', 'M', 'P', 'Y', major, minor};
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(uint8_t(h.size() >> (8 * i)));
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}


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
