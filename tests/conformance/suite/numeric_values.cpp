#include "numeric_values.hpp"

#include <halcyon/kernels/reference/e4m3.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace halcyon::cts {

using ops::DType;

uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

uint8_t f32_to_e4m3(float f) { return ref::float_to_e4m3(f).bits; }

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);           // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);          // rounds to Inf
  if (abs < 0x38800000u) {                                          // subnormal or zero
    float scaled = std::bit_cast<float>(abs) * 16777216.0f;          // * 2^24: units of 2^-24
    return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
  }
  uint32_t mant = abs & 0x7fffffu;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) ++h;  // nearest even; may carry into exp
  return uint16_t(sign | h);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0) {
    float v = float(mant) / 16777216.0f;  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

double element(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::f32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::f64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case DType::f16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return f16_to_f32(v); }
    case DType::bf16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bf16_to_f32(v); }
    case DType::i32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::i64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return double(v); }
    case DType::u8: return p[i];
    case DType::e4m3: return ref::e4m3_to_float({p[i]});
  }
  return 0;
}

namespace {
// Element i of a float tensor's bytes := v rounded to the dtype.
void store_float(DType t, double v, uint8_t* p, size_t i) {
  switch (t) {
    case DType::f32: { float x = float(v); std::memcpy(p + 4 * i, &x, 4); break; }
    case DType::f64: std::memcpy(p + 8 * i, &v, 8); break;
    case DType::f16: { uint16_t x = f32_to_f16(float(v)); std::memcpy(p + 2 * i, &x, 2); break; }
    case DType::bf16: { uint16_t x = f32_to_bf16(float(v)); std::memcpy(p + 2 * i, &x, 2); break; }
    case DType::e4m3: p[i] = ref::float_to_e4m3(float(v)).bits; break;
    default: break;
  }
}
}  // namespace

std::pair<double, double> default_range(DType t) {
  switch (t) {
    case DType::u8: return {0, 255};
    case DType::i32:
    case DType::i64: return {0, 15};
    default: return {-1, 1};
  }
}

std::vector<uint8_t> random_values(std::mt19937_64& rng, DType t, size_t n, double lo, double hi) {
  std::vector<uint8_t> out(n * ops::dtype_size(t));
  uint8_t* p = out.data();
  if (!ops::dtype_is_float(t)) {
    std::uniform_int_distribution<int64_t> d(int64_t(std::ceil(lo)), int64_t(std::floor(hi)));
    for (size_t i = 0; i < n; ++i) {
      int64_t v = d(rng);
      if (t == DType::i32) { int32_t x = int32_t(v); std::memcpy(p + 4 * i, &x, 4); }
      else if (t == DType::i64) std::memcpy(p + 8 * i, &v, 8);
      else p[i] = uint8_t(v);
    }
    return out;
  }
  std::uniform_real_distribution<double> d(lo, hi);
  for (size_t i = 0; i < n; ++i) store_float(t, d(rng), p, i);
  return out;
}

std::vector<uint8_t> random_blockscaled(std::mt19937_64& rng, DType t, size_t n, double lo, double hi, size_t group,
                                        bool specials) {
  std::vector<double> v(n);
  std::uniform_real_distribution<double> d(lo, hi);
  std::uniform_int_distribution<int> pick(0, 7);
  const double factors[8] = {0.0, 0x1p-24, 0x1p24, 1, 1, 1, 1, 1};
  double f = 1;
  for (size_t i = 0; i < n; ++i) {
    if (i % group == 0) f = factors[pick(rng)];
    v[i] = d(rng) * f;
  }
  if (specials) {
    // One run in four gets one of these; in a run of zeros the NaN is the only thing left.
    const double kinds[4] = {INFINITY, -INFINITY, std::nan(""), -std::nan("")};
    std::uniform_int_distribution<int> which(0, 15);
    for (size_t start = 0; start < n; start += group) {
      const int k = which(rng);
      if (k >= 4) continue;
      const size_t len = std::min(group, n - start);
      v[start + std::uniform_int_distribution<size_t>(0, len - 1)(rng)] = kinds[k];
    }
  }
  std::vector<uint8_t> out(n * ops::dtype_size(t));
  for (size_t i = 0; i < n; ++i) store_float(t, v[i], out.data(), i);
  return out;
}

std::vector<uint8_t> random_with_nans(std::mt19937_64& rng, DType t, size_t n, double lo, double hi, size_t count) {
  std::vector<uint8_t> out = random_values(rng, t, n, lo, hi);
  std::vector<size_t> places(n);
  for (size_t i = 0; i < n; ++i) places[i] = i;
  count = std::min(count, n);
  for (size_t k = 0; k < count; ++k) {  // a partial Fisher-Yates shuffle: count distinct places
    std::swap(places[k], places[std::uniform_int_distribution<size_t>(k, n - 1)(rng)]);
    const bool negative = k % 2 == 1;
    if (t == DType::e4m3) out[places[k]] = negative ? 0xff : 0x7f;  // both NaN codes of e4m3 (FN)
    else store_float(t, negative ? -std::nan("") : std::nan(""), out.data(), places[k]);
  }
  return out;
}

namespace {
// Does element i still hold the 0xFF poison bytes?
bool is_poison(const std::vector<uint8_t>& bytes, size_t size, size_t i) {
  for (size_t k = 0; k < size; ++k)
    if (bytes[i * size + k] != 0xFF) return false;
  return true;
}
}  // namespace

namespace {
// An e4m3 code's place among the format's values in increasing order (+0 and -0 both 0).
int e4m3_rank(uint8_t code) { return code < 0x80 ? int(code) : -int(code - 0x80); }
}  // namespace

Comparison compare_output(DType t, const ops::Tolerance& tol, const std::vector<uint8_t>& got,
                          const std::vector<uint8_t>& want, bool nan_inputs) {
  const bool exact = tol.exact;
  const double rel = tol.rel;
  Comparison c;
  size_t size = ops::dtype_size(t);
  if (got.size() != want.size()) {
    c.ok = false;
    c.failure = fmt::format("{} bytes, the reference has {}", got.size(), want.size());
    return c;
  }
  size_t n = got.size() / size;
  auto describe = [&](size_t i) {
    return fmt::format("element [{}] is {}{}, expected {}", i, element(t, got.data(), i),
                       is_poison(got, size, i) ? " (the poison's bytes: never written, or written as them)" : "", element(t, want.data(), i));
  };
  auto bits = [&](const std::vector<uint8_t>& b, size_t i) {  // little-endian, as the dtype's word
    uint64_t u = 0;
    std::memcpy(&u, b.data() + i * size, size);
    return fmt::format("0x{:0{}x}", u, 2 * size);
  };
  auto describe_bits = [&](size_t i) {
    return fmt::format("element [{}] is {} (bits {}){}, expected {} (bits {})", i, element(t, got.data(), i), bits(got, i),
                       is_poison(got, size, i) ? " (the poison's bytes: never written, or written as them)" : "", element(t, want.data(), i),
                       bits(want, i));
  };
  if (exact || !ops::dtype_is_float(t)) {
    // Bit for bit: an exact float output is a copy or one defined rounding, so the sign of zero
    // and the NaN codes are part of the answer (the poison 0xFF is no code a contract writes).
    size_t mismatches = 0, poisoned = 0, first_mismatch = n;
    for (size_t i = 0; i < n; ++i) {
      poisoned += is_poison(got, size, i);
      if (std::memcmp(got.data() + i * size, want.data() + i * size, size) != 0 && mismatches++ == 0) first_mismatch = i;
    }
    c.error = double(mismatches);
    c.summary = fmt::format("exact (bit for bit), {} element(s)", n);
    if (mismatches) {
      c.ok = false;
      c.failure = fmt::format("{} of {} elements differ in their bits ({} hold the poison's bytes); first: {}", mismatches, n,
                              poisoned, describe_bits(first_mismatch));
    }
    return c;
  }
  size_t nonfinite = 0, ref_nonfinite = 0, first_bad = n, first_ref_bad = n;
  size_t poisoned = 0, inf_mismatches = 0, first_inf_mismatch = n, nan_mismatches = 0, first_nan_mismatch = n;
  double diff2 = 0, ref2 = 0, worst = -1;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; ++i) {
    double g = element(t, got.data(), i), w = element(t, want.data(), i);
    poisoned += is_poison(got, size, i);
    if (std::isinf(w) && g == w) continue;  // an infinity the contract defines (lse = -inf of a row with no keys)
    if (std::isinf(w)) {
      if (inf_mismatches++ == 0) first_inf_mismatch = i;
      continue;
    }
    if (std::isnan(w) && nan_inputs) {  // the contract's NaN, carried from an input's
      if (!std::isnan(g) && nan_mismatches++ == 0) first_nan_mismatch = i;
      continue;
    }
    if (!std::isfinite(w)) {
      if (ref_nonfinite++ == 0) first_ref_bad = i;
      continue;
    }
    if (!std::isfinite(g)) {
      if (nonfinite++ == 0) first_bad = i;
      continue;
    }
    double d = g - w;
    diff2 += d * d;
    ref2 += w * w;
    if (std::fabs(d) > worst) worst = std::fabs(d), worst_i = i;
  }
  if (ref_nonfinite) {
    c.ok = false;
    c.failure = fmt::format("the reference output holds {} NaN/Inf element(s), first [{}]; the case cannot be checked",
                            ref_nonfinite, first_ref_bad);
    return c;
  }
  if (inf_mismatches) {
    c.ok = false;
    c.failure = fmt::format("{} of {} elements differ where the reference is infinite; first: {}", inf_mismatches, n,
                            describe(first_inf_mismatch));
    return c;
  }
  if (nan_mismatches) {
    c.ok = false;
    c.failure = fmt::format("{} of {} elements are not NaN where the reference is (a NaN input lost); first: {}",
                            nan_mismatches, n, describe(first_nan_mismatch));
    return c;
  }
  if (nonfinite) {
    c.ok = false;
    c.failure = fmt::format("{} of {} elements are NaN or Inf ({} still poisoned); first: {}", nonfinite, n, poisoned,
                            describe(first_bad));
    return c;
  }
  if (tol.steps >= 0 && t == DType::e4m3) {
    size_t far = 0, first_far = n;
    int most = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(element(t, want.data(), i))) continue;  // a NaN both hold (checked above)
      const int d = std::abs(e4m3_rank(got[i]) - e4m3_rank(want[i]));
      most = std::max(most, d);
      const bool near = tol.abs >= 0 && std::fabs(element(t, got.data(), i) - element(t, want.data(), i)) <= tol.abs;
      if (d > tol.steps && !near && far++ == 0) first_far = i;
    }
    const std::string allowed =
        fmt::format("{} e4m3 step(s){}", tol.steps, tol.abs >= 0 ? fmt::format(" or {} apart", tol.abs) : "");
    c.error = double(far);
    c.summary = fmt::format("each within {} (at most {} steps off)", allowed, most);
    if (far) {
      c.ok = false;
      c.summary = fmt::format("{} element(s) beyond {}", far, allowed);
      c.failure = fmt::format("{} of {} elements differ by more than {}: exceeds the tolerance; first: {}", far, n,
                              allowed, describe(first_far));
    }
    return c;
  }
  c.error = ref2 > 0 ? std::sqrt(diff2) / std::sqrt(ref2) : std::sqrt(diff2);
  c.summary = fmt::format("rel err {:.3g} <= {:.3g}", c.error, rel);
  if (!(c.error <= rel)) {
    c.ok = false;
    c.summary = fmt::format("rel err {:.3g} > {:.3g}", c.error, rel);
    c.failure = fmt::format("||out - ref|| / ||ref|| = {:.3g} exceeds the tolerance {:.3g} over {} elements; "
                            "largest difference: {}",
                            c.error, rel, n, describe(worst_i));
  }
  return c;
}

}  // namespace halcyon::cts
