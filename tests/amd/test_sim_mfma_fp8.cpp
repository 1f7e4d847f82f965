// The simulator's FP8 MFMAs (v_mfma_f32_32x32x16_fp8_fp8, v_mfma_f32_16x16x32_fp8_fp8) against a
// computation from AMD's register layout tables (shared/reference/mfma/cdna3-*fp8*): every lane
// and register, with every e4m3fnuz code (denormals, the largest, the NaN 0x80) in the operands.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "decoder.hpp"
#include "sim_harness.hpp"

using namespace amdtest;

namespace {

// e4m3fnuz as the table's "FP8 (AMD 4-bit exponent, 3-bit mantissa)": sign, exponent e (bias 8),
// mantissa m; e = 0 is the denormal m / 8 * 2^-7; 0x80 is NaN.
double fnuz(uint8_t code) {
  if (code == 0x80) return NAN;
  const int e = (code >> 3) & 15, m = code & 7;
  const double v = e == 0 ? m / 8.0 * std::pow(2.0, -7) : (1 + m / 8.0) * std::pow(2.0, e - 8);
  return code & 0x80 ? -v : v;
}

struct Shape {
  int m;     // M = N: 32 (32x32x16) or 16 (16x16x32)
  int regs;  // C/D registers
};

// D row i of register r in lane l, from the table's "C or D i" formula.
int d_row(const Shape& s, int lane, int r) {
  return s.m == 32 ? (8 * (r / 4)) % 32 + 4 * (lane / 32) + r % 4 : 4 * (lane / 16) + r % 4;
}

// Runs the shape's kernel on per-lane operand bytes (8 a lane each) and C; returns D as 16
// floats a lane.
std::vector<float> run(Sim& sim, const halcyon::Module& mod, const Shape& s, const std::vector<uint8_t>& a,
                       const std::vector<uint8_t>& b, const std::vector<float>& c) {
  auto k = must(mod.kernel("mfma_fp8"), "kernel");
  auto da = sim.upload(a), db = sim.upload(b), dc = sim.upload(c);
  auto dd = sim.poisoned<float>(64 * 16);
  halcyon::ArgPack args;
  args.pointer(da).pointer(db).pointer(dc).pointer(dd).value(uint32_t(s.m));
  must(sim.stream.launch(k, {1}, {64}, args), "launch");
  return sim.download<float>(dd, 64 * 16);
}

// Checks D against C + A B, with A[i][k] and B[k][j] placed by the table's "A/B k" formula:
// k = 8 * (lane / M) + 4 * register + byte.
void check(const Shape& s, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const std::vector<float>& c,
           const std::vector<float>& d) {
  const int kdim = 8 * (64 / s.m);
  std::vector<double> A(size_t(s.m) * kdim), B(size_t(kdim) * s.m);
  for (int lane = 0; lane < 64; ++lane)
    for (int reg = 0; reg < 2; ++reg)
      for (int byte = 0; byte < 4; ++byte) {
        const int k = 8 * (lane / s.m) + 4 * reg + byte;
        A[size_t(lane % s.m) * kdim + k] = fnuz(a[size_t(lane) * 8 + 4 * reg + byte]);
        B[size_t(k) * s.m + lane % s.m] = fnuz(b[size_t(lane) * 8 + 4 * reg + byte]);
      }
  for (int lane = 0; lane < 64; ++lane)
    for (int r = 0; r < s.regs; ++r) {
      const int i = d_row(s, lane, r), j = lane % s.m;
      double want = c[size_t(lane) * 16 + r], mag = std::fabs(want);
      for (int k = 0; k < kdim; ++k) {
        want += A[size_t(i) * kdim + k] * B[size_t(k) * s.m + j];
        mag += std::fabs(A[size_t(i) * kdim + k] * B[size_t(k) * s.m + j]);
      }
      const float got = d[size_t(lane) * 16 + r];
      CAPTURE(lane);
      CAPTURE(r);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got));
      } else {
        REQUIRE(std::fabs(got - want) <= 4e-6 * mag);  // fp32 sums of exact products
      }
    }
}

}  // namespace

TEST_CASE("the FP8 MFMAs (e4m3fnuz, 32x32x16 and 16x16x32) match AMD's layout tables") {
  Sim sim("gfx942");
  auto co = test_object("mfma_fp8", "gfx942");
  auto mod = sim.load(co, "mfma_fp8");
  const Shape shapes[] = {{32, 16}, {16, 4}};
  std::mt19937 rng(42);
  for (const Shape& s : shapes) {
    CAPTURE(s.m);
    std::vector<uint8_t> a(64 * 8), b(64 * 8);
    std::vector<float> c(64 * 16);
    for (auto& x : c) x = float(int(rng() % 2001) - 1000) / 64.0f;
    // Every code but the NaN once in A and in B (denormals 0x01-0x07, 0x81-0x87, the largest
    // 0x7f = 240 and 0xff = -240), the rest at random.
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = uint8_t(i % 256 == 0x80 ? 0x7f : i % 256);
      b[i] = uint8_t((i * 7 + 3) % 256 == 0x80 ? 0x01 : (i * 7 + 3) % 256);
    }
    check(s, a, b, c, run(sim, mod, s, a, b, c));
    // Small values only, where fp32 holds every sum exactly: denormals must not be flushed.
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = uint8_t(rng() % 8 | (rng() % 2) << 7);        // denormals and +-0
      b[i] = uint8_t((rng() % 16) | (rng() % 2) << 7);     // denormals, the smallest normals
    }
    std::vector<float> zero(64 * 16, 0.0f);
    check(s, a, b, zero, run(sim, mod, s, a, b, zero));
    // NaN (0x80) in one A element and one B element: exactly its row and column become NaN.
    a[8 * 5 + 2] = 0x80;
    b[8 * 40 + 6] = 0x80;
    check(s, a, b, c, run(sim, mod, s, a, b, c));
  }
}

TEST_CASE("gfx90a does not decode the FP8 MFMA: CDNA2 has no FP8 matrix instructions") {
  // v_mfma_f32_32x32x16_fp8_fp8 v[24:39], v[4:5], v[6:7], v[8:23] as gfx942 encodes it.
  const uint32_t words[] = {0xD3F70018u, 0x04220D04u};
  const auto* bytes = reinterpret_cast<const unsigned char*>(words);
  halcyon::amdsim::Decoder gfx942("gfx942"), gfx90a("gfx90a");
  CHECK(gfx942.decode(bytes, sizeof words, 0).op == "v_mfma_f32_32x32x16_fp8_fp8");
  halcyon::amdsim::Inst old = gfx90a.decode(bytes, sizeof words, 0);
  CHECK(old.op != "v_mfma_f32_32x32x16_fp8_fp8");
}
