// bfloat16 storage type and exact conversions, shared by every reference kernel.
//
// float -> bf16 rounds to nearest, ties to even (the rounding GPUs use for cvt.rn.bf16.f32),
// keeps the sign of zeros, lets values past the largest bf16 overflow to infinity, keeps
// denormals (no flush to zero), and maps a NaN to a quiet NaN with the same sign and the top
// payload bits. bf16 -> float is exact.
#pragma once

#include <bit>
#include <cstdint>

namespace halcyon::ref {

// A bf16 value by its bits. A struct, not a bare uint16_t, so that a float or an int cannot
// be passed where bf16 storage is meant; it has the size and layout of uint16_t, so device
// buffers of bf16 can be viewed as arrays of it.
struct bf16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(bf16, bf16) = default;
};
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2);

constexpr float bf16_to_float(bf16 h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h.bits) << 16);
}

constexpr bf16 float_to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncating could clear every payload bit left and make it an infinity, so set
    // the quiet bit (bit 6 of the bf16 mantissa).
    return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  }
  // Add just under half an ulp of bf16, plus one when the kept part is odd, so that an exact
  // tie rounds to the even neighbour. A carry out of the mantissa bumps the exponent, which
  // is the correct result (up to infinity for the largest finite values).
  const std::uint32_t lsb = (u >> 16) & 1u;
  return bf16{static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16)};
}

// The float nearest to f that a bf16 can hold (float -> bf16 -> float).
constexpr float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

}  // namespace halcyon::ref
