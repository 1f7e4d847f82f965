// bf16 conversions: round to nearest even, overflow, NaN, signed zero, denormals.
#include <halcyon/kernels/reference/bf16.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

using halcyon::ref::bf16;
using halcyon::ref::bf16_to_float;
using halcyon::ref::float_to_bf16;
using halcyon::ref::round_to_bf16;

namespace {
uint16_t bits_of(uint32_t float_bits) {
  return float_to_bf16(std::bit_cast<float>(float_bits)).bits;
}
}  // namespace

TEST_CASE("bf16: exactly representable values convert both ways unchanged") {
  CHECK(float_to_bf16(1.0f).bits == 0x3f80);
  CHECK(float_to_bf16(-2.0f).bits == 0xc000);
  CHECK(float_to_bf16(0.15625f).bits == 0x3e20);
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    const bf16 h{static_cast<uint16_t>(b)};
    const float f = bf16_to_float(h);
    if (std::isnan(f)) continue;
    CHECK(float_to_bf16(f) == h);
  }
}

TEST_CASE("bf16: round to nearest, ties to even") {
  // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): goes to even.
  CHECK(bits_of(0x3f808000) == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 0x3f81 (odd) and 0x3f82 (even): goes up to even.
  CHECK(bits_of(0x3f818000) == 0x3f82);
  // Just above and below the half.
  CHECK(bits_of(0x3f808001) == 0x3f81);
  CHECK(bits_of(0x3f807fff) == 0x3f80);
  CHECK(bits_of(0x3f81ffff) == 0x3f82);
  // Negative values round the same way in magnitude.
  CHECK(bits_of(0xbf808000) == 0xbf80);
  CHECK(bits_of(0xbf818000) == 0xbf82);
  CHECK(bits_of(0xbf808001) == 0xbf81);
  // A carry through the mantissa bumps the exponent: 1.9999999 -> 2.
  CHECK(bits_of(0x3fffffff) == 0x4000);
  CHECK(round_to_bf16(1.00390625f) == 1.0f);  // 1 + 2^-8
}

TEST_CASE("bf16: overflow and infinities") {
  CHECK(bits_of(0x7f7f7fff) == 0x7f7f);  // just below the half: largest finite bf16
  CHECK(bits_of(0x7f7f8000) == 0x7f80);  // tie from odd 0x7f7f: rounds up to +inf
  CHECK(float_to_bf16(std::numeric_limits<float>::max()).bits == 0x7f80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::max()).bits == 0xff80);
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()).bits == 0xff80);
  CHECK(std::isinf(bf16_to_float(bf16{0x7f80})));
}

TEST_CASE("bf16: NaN stays NaN, keeps its sign and high payload, becomes quiet") {
  CHECK(bits_of(0x7fc00000) == 0x7fc0);
  CHECK(bits_of(0xffc00000) == 0xffc0);
  // Payload only in the low 16 bits: truncation alone would give +inf.
  CHECK(bits_of(0x7f800001) == 0x7fc0);
  CHECK(bits_of(0xff800001) == 0xffc0);
  // A signalling NaN with a high payload bit keeps it and gains the quiet bit.
  CHECK(bits_of(0x7fa00000) == 0x7fe0);
  // A NaN whose low half is 0xffff must not carry into the sign or exponent.
  CHECK(bits_of(0x7fffffff) == 0x7fff);
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(bf16_to_float(bf16{0x7f81})));
}

TEST_CASE("bf16: zeros and denormals are kept, not flushed") {
  CHECK(float_to_bf16(0.0f).bits == 0x0000);
  CHECK(float_to_bf16(-0.0f).bits == 0x8000);
  CHECK(std::signbit(bf16_to_float(bf16{0x8000})));
  CHECK(bits_of(0x00010000) == 0x0001);  // smallest bf16 denormal, exact
  CHECK(bf16_to_float(bf16{0x0001}) == std::ldexp(1.0f, -133));
  CHECK(bits_of(0x00000001) == 0x0000);  // far below half of the smallest: to zero
  CHECK(bits_of(0x00008000) == 0x0000);  // tie, 0 is even
  CHECK(bits_of(0x00008001) == 0x0001);
  CHECK(bits_of(0x00018000) == 0x0002);  // tie from odd 0x0001: up to even
  CHECK(bits_of(0x80018000) == 0x8002);
  CHECK(bits_of(0x007fffff) == 0x0080);  // largest float denormal rounds to the smallest normal
}
