// Matrix fused multiply-add (MFMA) with the register layouts of the CDNA2/CDNA3 ISA, as given
// by AMD's matrix instruction calculator (shared/reference/mfma). For an MxM result with
// blocks of 64/M lanes, lane l holds
//   A[i = l % M][k = 4 * (l / M) + e] and B[k = 4 * (l / M) + e][j = l % M], e = 0..3 packed
//   two 16-bit values per register, low half first;
//   result register r: D[i = 4 * (64 / M) * (r / 4) + 4 * (l / M) + r % 4][j = l % M].
#include <fmt/format.h>

#include "wave.hpp"

namespace halcyon::amdsim {
namespace {

// aux = M (32 or 16), aux2 = 0 for bf16 inputs, 1 for f16.
void mfma(Wave& w, const Inst& in, Dispatch& d) {
  (void)d;
  if (w.exec != ~0ull)
    fail(in, fmt::format("MFMA with a partial EXEC mask (0x{:016x}) is not modelled", w.exec));
  const int m = in.aux, groups = kLanes / m, kdim = 4 * groups, regs = m * m / kLanes;
  const Operand &dst = in.ops[0], &sa = in.ops[1], &sb = in.ops[2], &sc = in.ops[3];
  if (sa.count != 2 || sb.count != 2 || dst.count != regs || (sc.kind != OpKind::Imm && sc.count != regs))
    fail(in, "operand register counts do not match the instruction shape");
  auto elem = [&](const Operand& o, int lane, int e) {
    uint32_t reg = read32(w, o, lane, e / 2);
    uint16_t v = uint16_t(e % 2 ? reg >> 16 : reg);
    return in.aux2 ? half_to_float(v) : bf16_to_float(v);
  };
  float A[32][16], B[16][32];
  for (int l = 0; l < kLanes; ++l)
    for (int e = 0; e < 4; ++e) {
      int k = 4 * (l / m) + e;
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
      for (int k = 0; k < kdim; ++k) acc += A[i][k] * B[k][j];  // bf16/f16 products are exact in f32
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
      // CDNA2 (gfx90a) names of the same operations
      {"v_mfma_f32_32x32x8bf16_1k", mfma, 32, 0},
      {"v_mfma_f32_16x16x16bf16_1k", mfma, 16, 0},
      {"v_mfma_f32_32x32x8f16", mfma, 32, 1},
      {"v_mfma_f32_16x16x16f16", mfma, 16, 1},
  };
}

}  // namespace halcyon::amdsim
