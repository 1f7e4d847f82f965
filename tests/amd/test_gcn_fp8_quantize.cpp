// moe_quantize_fp8 on the GCN kernel (halcyon_moe_quantize_fp8, gcn_fp8.inc's integer division)
// against the reference, bit for bit, on both simulated targets, over every bf16 bit pattern:
// each value once in a group of its neighbours (the scale of every exponent, subnormals, zeros
// of both signs, infinities, NaNs), and again beside a group maximum of several sizes, so that
// every value is divided by scales of many significands (the rounding of x / scale at ties and
// into e4m3 denormals). The conformance suite covers random rows and moe_permute_fp8.
#include <halcyon/kernels/reference/moe_fp8.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "sim_harness.hpp"

using namespace amdtest;
namespace ref = halcyon::ref;
using halcyon::ops::DType;
using halcyon::ops::Tensor;

TEST_CASE("moe_quantize_fp8 on GCN: every bf16 value, bit for bit the reference") {
  // Rows of K = 160 (a whole group and a partial one): the first 128 values of a row are 128
  // consecutive bf16 patterns, the last 32 the next 32, with one value of the row's partial group
  // replaced by a maximum from `maxima` (so the partial group's scale is that maximum / 448).
  const int64_t K = 160;
  const uint16_t maxima[] = {0x3f80, 0x3fc1, 0x4040, 0x43df, 0x0001, 0x3c00};  // 1, 1.51, 3, 446, min sub, 2^-7
  std::vector<uint16_t> x;
  for (uint32_t start = 0; start < 0x10000; start += 128) {
    for (uint32_t i = 0; i < 128; ++i) x.push_back(uint16_t(start + i));
    for (uint32_t i = 0; i < 32; ++i) x.push_back(uint16_t((start + 128 + i) & 0xffff));
    x[x.size() - 1 - (start / 128) % 32] = maxima[(start / 128) % std::size(maxima)];
  }
  const int64_t R = int64_t(x.size()) / K;
  std::vector<ref::e4m3> want_q(x.size());
  std::vector<float> want_s(size_t(R * 2));
  REQUIRE(ref::moe_quantize_fp8(reinterpret_cast<const ref::bf16*>(x.data()), R, K, want_q.data(), want_s.data()).ok());
  for (const char* arch : {"gfx942", "gfx90a"}) {
    CAPTURE(arch);
    Sim sim(arch);
    std::map<std::string, Tensor, std::less<>> t{
        {"x", Tensor{sim.upload(x), 0, DType::bf16, {R, K}}},
        {"q", Tensor{sim.poisoned<uint8_t>(x.size()), 0, DType::e4m3, {R, K}}},
        {"scale", Tensor{sim.poisoned<float>(want_s.size()), 0, DType::f32, {R, 2}}}};
    must(halcyon::ops::run_op(sim.dev, sim.stream, "moe_quantize_fp8", t), "moe_quantize_fp8");
    auto q = sim.download<uint8_t>(t["q"].buffer, x.size());
    auto s = sim.download<uint32_t>(t["scale"].buffer, want_s.size());
    int64_t bad_q = 0, bad_s = 0;
    for (size_t i = 0; i < q.size(); ++i)
      if (q[i] != want_q[i].bits) {  // NaN codes too: every NaN is 0x7f (e4m3.hpp)
        if (bad_q++ < 8)
          MESSAGE(fmt::format("x 0x{:04x} (row {}, col {}): q 0x{:02x}, reference 0x{:02x}", x[i], i / K, i % K, q[i],
                              want_q[i].bits));
      }
    for (size_t i = 0; i < s.size(); ++i) {
      uint32_t w;
      std::memcpy(&w, &want_s[i], 4);
      if (s[i] != w && bad_s++ < 8) MESSAGE(fmt::format("scale {}: 0x{:08x}, reference 0x{:08x}", i, s[i], w));
    }
    CHECK(bad_q == 0);
    CHECK(bad_s == 0);
  }
}
