// Host-side values for the numeric suite: random inputs in every dtype and the comparison
// of an output against the reference.
#pragma once

#include <halcyon/ops/contract.hpp>
#include <halcyon/ops/tensor.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace halcyon::cts {

// bf16 and f16 from f32 (round to nearest even) and back.
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
// e4m3 from f32 (nearest even, saturating to +-448: kernels/reference e4m3.hpp).
uint8_t f32_to_e4m3(float f);

// Element i of a tensor's bytes, as a double.
double element(ops::DType t, const uint8_t* data, size_t i);

// The value domain of inputs without a `range` line (docs/conformance.md).
std::pair<double, double> default_range(ops::DType t);

// n values: integers uniform in [lo, hi], floats uniform in [lo, hi) then rounded to the dtype.
std::vector<uint8_t> random_values(std::mt19937_64& rng, ops::DType t, size_t n, double lo, double hi);

// random_values in [lo, hi), each run of `group` elements then multiplied by one factor: 0,
// 2^-24 or 2^24 (one in eight each) or 1 (contract generator `blockscaled`). Float dtypes only.
// specials (`blockscaled <n> specials`): about one run in four then gets one +inf, -inf, +NaN
// or -NaN at a random place (drawn from the stream only then, so the other contracts' inputs
// do not change).
std::vector<uint8_t> random_blockscaled(std::mt19937_64& rng, ops::DType t, size_t n, double lo, double hi,
                                        size_t group, bool specials = false);

// random_values in [lo, hi), then `count` elements at distinct random places made NaN,
// alternately +NaN and -NaN (e4m3: 0x7f and 0xff; contract generator `nans <count>`: operators
// whose contracts say where an input's NaN goes). Float dtypes only; count <= n.
std::vector<uint8_t> random_with_nans(std::mt19937_64& rng, ops::DType t, size_t n, double lo, double hi,
                                      size_t count);

struct Comparison {
  bool ok = true;
  double error = 0;     // relative error (floats) or mismatch count (exact)
  std::string summary;  // "rel err 1.2e-07 <= 1e-05", "exact, 64 elements"
  std::string failure;  // why it failed, naming the first bad element
};

// Compares `got` with `want`: exact (integers always) bit for bit, so NaN codes and the sign
// of zero count and a NaN the reference holds must be the same bits; otherwise NaN/Inf in got
// fails, each e4m3 element within `tol.steps` codes (steps >= 0), or ||got - want|| / ||want||
// <= tol.rel.
// nan_inputs: the case's inputs hold NaNs on purpose (generator `nans` or `specials`). A NaN
// of the reference is then the contract's answer: got must hold a NaN there (any NaN code;
// the other elements are compared as above). Without it a NaN of the reference means the
// case cannot be checked (finite inputs: the reference itself went wrong), and fails.
Comparison compare_output(ops::DType t, const ops::Tolerance& tol, const std::vector<uint8_t>& got,
                          const std::vector<uint8_t>& want, bool nan_inputs = false);

}  // namespace halcyon::cts
