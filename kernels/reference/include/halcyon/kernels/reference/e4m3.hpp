// FP8 e4m3 storage type (OCP 8-bit floating point, the "FN" variant that NVIDIA's
// cvt.*.e4m3x2 and DeepSeek-V3's weights use) and its conversions: the one place in the
// project that defines them. Device code (kernels/ptx) uses the hardware conversion, which
// rounds the same way (cvt.rn.satfinite.e4m3x2.f32).
//
// Format: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits. No infinities; exponent 15
// with mantissa 7 (0x7f / 0xff) is NaN, so the largest finite value is 448 (0x7e), the smallest
// normal 2^-6, the smallest denormal 2^-9.
//
// float -> e4m3 rounds to nearest, ties to even, and SATURATES: a finite value (or an
// infinity) past ±448 gives ±448, never NaN, so no NaN comes from a finite input; every NaN
// gives 0x7f, whatever its sign: which NaN a division yields differs between processors (x86's
// default NaN has the sign set, a GPU's not), so halcyon writes one NaN code everywhere, and the
// conformance suite compares e4m3 outputs bit for bit. Denormals are kept (no flush to zero);
// the sign of zero is kept.
// e4m3 -> float is exact.
#pragma once

#include <bit>
#include <cstdint>

namespace halcyon::ref {

// An e4m3 value by its bits (a struct so that a uint8_t count cannot be passed by mistake).
struct e4m3 {
  std::uint8_t bits = 0;
  friend constexpr bool operator==(e4m3, e4m3) = default;
};
static_assert(sizeof(e4m3) == 1 && alignof(e4m3) == 1);

inline constexpr float kE4m3Max = 448.0f;

constexpr float e4m3_to_float(e4m3 v) {
  const std::uint32_t sign = std::uint32_t(v.bits & 0x80u) << 24;
  const std::uint32_t exp = (v.bits >> 3) & 0xfu, man = v.bits & 0x7u;
  if (exp == 0xfu && man == 0x7u) return std::bit_cast<float>(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {                                         // zero or denormal: man * 2^-9
    const float mag = float(man) * (1.0f / 512.0f);
    return sign ? -mag : mag;
  }
  return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (man << 20));
}

constexpr e4m3 float_to_e4m3(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint8_t sign = std::uint8_t((u >> 24) & 0x80u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return e4m3{0x7fu};                        // NaN: the one code
  if (abs >= 0x43e00000u) return e4m3{std::uint8_t(sign | 0x7eu)};  // >= 448 (and inf): saturate
  if (abs < 0x3c800000u) {
    // Below 2^-6: a denormal, units of 2^-9. The scaling by 2^9 is exact, so nearest-even on
    // the scaled value is the rounding (0.5 ulps = 2^-10 and below -> 0 or the tie to even).
    const float scaled = std::bit_cast<float>(abs) * 512.0f;
    std::uint32_t q = std::uint32_t(scaled);  // truncation of a value in [0, 8)
    const float rest = scaled - float(q);
    if (rest > 0.5f || (rest == 0.5f && (q & 1u))) ++q;  // q == 8 is the smallest normal: right
    return e4m3{std::uint8_t(sign | q)};
  }
  // Normal: keep 3 of 23 mantissa bits, nearest even; a carry moves into the exponent, and
  // the largest carry (447.99 -> 448) stays finite because 448 itself is 0x7e.
  const std::uint32_t exp = (abs >> 23) - 120u;  // 1..15
  std::uint32_t q = (exp << 3) | ((abs >> 20) & 0x7u);
  const std::uint32_t rest = abs & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (q & 1u))) ++q;
  if (q > 0x7eu) q = 0x7eu;  // 464 rounds past 448: saturate (cannot happen below 0x43e00000)
  return e4m3{std::uint8_t(sign | q)};
}

// The float nearest to f that an e4m3 can hold (saturated to ±448).
constexpr float round_to_e4m3(float f) { return e4m3_to_float(float_to_e4m3(f)); }

}  // namespace halcyon::ref
