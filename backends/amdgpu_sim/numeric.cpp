// Half and bfloat16 conversions (IEEE round to nearest even), shared by the ALU and MFMA.
#include <cmath>

#include "wave.hpp"

namespace halcyon::amdsim {

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0x1f) return f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float f = std::ldexp(float(mant), -24);
    return sign ? -f : f;
  }
  return f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t float_to_half(float f) {
  uint32_t b = bits(f);
  uint16_t sign = uint16_t((b >> 16) & 0x8000);
  if (std::isnan(f)) return sign | 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {          // subnormal half: units of 2^-24
    float q = std::nearbyint(a * 16777216.0f);
    return sign | uint16_t(q);
  }
  uint32_t exp = ((b >> 23) & 0xff) - 112, mant = b & 0x7fffff;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return sign | uint16_t(h);
}

uint16_t float_to_bf16(float f) {
  uint32_t b = bits(f);
  if (std::isnan(f)) return uint16_t((b >> 16) | 0x40);
  b += 0x7fff + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}

}  // namespace halcyon::amdsim
