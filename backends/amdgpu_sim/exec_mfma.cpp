// Matrix fused multiply-add (MFMA) with the register layouts of the CDNA2/CDNA3 ISA, as given
// by AMD's matrix instruction calculator (shared/reference/mfma). For an MxM result with
// blocks of 64/M lanes, lane l holds
//   A[i = l % M][k = 4 * (l / M) + e] and B[k = 4 * (l / M) + e][j = l % M], e = 0..3 packed
//   two 16-bit values per register, low half first;
//   result register r: D[i = 4 * (64 / M) * (r / 4) + 4 * (l / M) + r % 4][j = l % M].
// The FP8 shapes of CDNA3 (v_mfma_f32_32x32x16_fp8_fp8, 16x16x32) hold 8 k-values a lane instead:
//   A[i = l % M][k = 8 * (l / M) + e], B[k = 8 * (l / M) + e][j = l % M], e = 0..7, byte e % 4
//   of register e / 4, low byte first; the result registers as above.
#include <fmt/format.h>

#include <cmath>

#include "wave.hpp"

namespace halcyon::amdsim {
namespace {

enum MfmaInput : uint8_t { kBf16 = 0, kF16 = 1, kFp8Fnuz = 2 };

// CDNA3's FP8 (e4m3fnuz): exponent bias 8, no infinities, 0x80 the only NaN (there is no -0),
// largest 0x7f = 240; exponent field 0 holds denormals m * 2^-10, kept (the products stay exact
// in fp32 either way). Not the OCP e4m3fn the operators use: kernels re-encode (docs/kernels/fp8.md).
float fp8_fnuz_to_float(uint8_t b) {
  if (b == 0x80) return std::nanf("");
  const int exp = (b >> 3) & 15, man = b & 7;
  const float mag = exp ? std::ldexp(float(8 + man), exp - 11) : std::ldexp(float(man), -10);
  return b & 0x80 ? -mag : mag;
}

// aux = M (32 or 16), aux2 = the input type (MfmaInput).
void mfma(Wave& w, const Inst& in, Dispatch& d) {
  (void)d;
  if (w.exec != ~0ull)
    fail(in, fmt::format("MFMA with a partial EXEC mask (0x{:016x}) is not modelled", w.exec));
  const bool fp8 = in.aux2 == kFp8Fnuz;
  if (fp8 && !in.info.gfx942) fail(in, "FP8 MFMA exists on CDNA3 (gfx942) only");
  const int m = in.aux, groups = kLanes / m, per_lane = fp8 ? 8 : 4, kdim = per_lane * groups, regs = m * m / kLanes;
  const Operand &dst = in.ops[0], &sa = in.ops[1], &sb = in.ops[2], &sc = in.ops[3];
  if (sa.count != 2 || sb.count != 2 || dst.count != regs || (sc.kind != OpKind::Imm && sc.count != regs))
    fail(in, "operand register counts do not match the instruction shape");
  auto elem = [&](const Operand& o, int lane, int e) {
    if (fp8) return fp8_fnuz_to_float(uint8_t(read32(w, o, lane, e / 4) >> (8 * (e % 4))));
    uint32_t reg = read32(w, o, lane, e / 2);
    uint16_t v = uint16_t(e % 2 ? reg >> 16 : reg);
    return in.aux2 == kF16 ? half_to_float(v) : bf16_to_float(v);
  };
  float A[32][32], B[32][32];
  for (int l = 0; l < kLanes; ++l)
    for (int e = 0; e < per_lane; ++e) {
      int k = per_lane * (l / m) + e;
      A[l % m][k] = elem(sa, l, e);
      B[k][l % m] = elem(sb, l, e);
    }
  // Read all of C before writing D: they may be the same registers.
  std::vector<float> c(size_t(regs) * kLanes);
  for (int l = 0; l < kLanes; ++l)
    for (int r = 0; r < regs; ++r) c[size_t(r) * kLanes + size_t(l)] = sc.kind == OpKind::Imm ? f32(sc.imm32()) : f32(read32(w, sc, l, r));
  for (int l = 0; l < kLanes; ++l)
    for (int r = 0; r < regs; ++r) {
      int i = 4 * groups * (r / 4) + 4 * (l / m) + r % 4, j = l % m;
      float acc = c[size_t(r) * kLanes + size_t(l)];
      for (int k = 0; k < kdim; ++k) acc += A[i][k] * B[k][j];  // bf16/f16/fp8 products are exact in f32
      write32(w, dst, l, bits(acc), r);
    }
}

}  // namespace

std::vector<HandlerEntry> mfma_handlers() {
  return {
      // CDNA3 (gfx942) names
      {"v_mfma_f32_32x32x8_bf16", mfma, 32, 0},
      {"v_mfma_f32_16x16x16_bf16", mfma, 16, 0},
      {"v_mfma_f32_32x32x8_f16", mfma, 32, 1},
      {"v_mfma_f32_16x16x16_f16", mfma, 16, 1},
      {"v_mfma_f32_32x32x16_fp8_fp8", mfma, 32, kFp8Fnuz},
      {"v_mfma_f32_16x16x32_fp8_fp8", mfma, 16, kFp8Fnuz},
      // CDNA2 (gfx90a) names of the same operations
      {"v_mfma_f32_32x32x8bf16_1k", mfma, 32, 0},
      {"v_mfma_f32_16x16x16bf16_1k", mfma, 16, 0},
      {"v_mfma_f32_32x32x8f16", mfma, 32, 1},
      {"v_mfma_f32_16x16x16f16", mfma, 16, 1},
  };
}

}  // namespace halcyon::amdsim
