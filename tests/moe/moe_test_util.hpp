// Helpers shared by the MoE reference tests.
#pragma once

#include <halcyon/kernels/reference/moe.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace moe_test {

using halcyon::ref::bf16;
using halcyon::ref::bf16_to_float;
using halcyon::ref::float_to_bf16;

// bf16 buffer from floats (each rounded to nearest even).
inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out;
  for (float f : v) out.push_back(float_to_bf16(f));
  return out;
}

inline std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out;
  for (bf16 h : v) out.push_back(bf16_to_float(h));
  return out;
}

// Random bf16 values uniform in [-1, 1), from a fixed seed.
inline std::vector<bf16> random_bf16(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<bf16> out(n);
  for (auto& h : out) h = float_to_bf16(d(rng));
  return out;
}

// Poison value for "must not be written" checks.
inline constexpr bf16 kPoison{0x7fc1};

// Checks that a Status failed with HAL_INVALID_ARGUMENT and that its message contains every
// one of `parts`.
inline void expect_invalid(const halcyon::Status& s, std::initializer_list<std::string> parts) {
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().status() == HAL_INVALID_ARGUMENT);
  for (const auto& p : parts) {
    INFO("message: ", s.error().message(), "; expected to contain: ", p);
    CHECK(s.error().message().find(p) != std::string::npos);
  }
}

}  // namespace moe_test

// Failed checks print bf16 values as their float value and bits.
template <>
struct doctest::StringMaker<halcyon::ref::bf16> {
  static doctest::String convert(halcyon::ref::bf16 h) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g (0x%04x)", halcyon::ref::bf16_to_float(h), h.bits);
    return buf;
  }
};
