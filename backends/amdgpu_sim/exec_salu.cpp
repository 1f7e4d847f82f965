// Scalar ALU, scalar compares, EXEC manipulation and program flow (SOP1/SOP2/SOPC/SOPK/SOPP).
#include <bit>

#include "wave.hpp"

namespace halcyon::amdsim {
namespace {

// Operand shorthands inside handlers: in.ops[i] read as 32 or 64 bits (scalar: lane 0).
#define S32(i) read32(w, in.ops[i], 0)
#define S64(i) read64(w, in.ops[i], 0)
#define H [](Wave & w, const Inst & in, Dispatch & d)

// dst = f(a, b) over 32 bits; SCC set to `scc` (an expression over r, a, b) when given.
#define SOP2(name, result, scc_expr)        \
  {name, H {                                \
     (void)d;                               \
     uint32_t a = S32(1), b = S32(2);       \
     uint32_t r = (result);                 \
     w.scc = (scc_expr);                    \
     write32(w, in.ops[0], 0, r);           \
   }}
#define SOP2_64(name, result, scc_expr)     \
  {name, H {                                \
     (void)d;                               \
     uint64_t a = S64(1), b = S64(2);       \
     uint64_t r = (result);                 \
     w.scc = (scc_expr);                    \
     write64(w, in.ops[0], 0, r);           \
   }}
#define SOP1(name, result, scc_expr)        \
  {name, H {                                \
     (void)d;                               \
     uint32_t a = S32(1);                   \
     uint32_t r = (result);                 \
     w.scc = (scc_expr);                    \
     write32(w, in.ops[0], 0, r);           \
   }}
#define SOP1_64(name, result, scc_expr)     \
  {name, H {                                \
     (void)d;                               \
     uint64_t a = S64(1);                   \
     uint64_t r = (result);                 \
     w.scc = (scc_expr);                    \
     write64(w, in.ops[0], 0, r);           \
   }}
// s_<op>_saveexec_b64: dst = exec; exec = f(src, exec); SCC = exec != 0.
#define SAVEEXEC(name, expr)                \
  {name, H {                                \
     (void)d;                               \
     uint64_t s = S64(1), e = w.exec;       \
     write64(w, in.ops[0], 0, e);           \
     w.exec = (expr);                       \
     w.scc = w.exec != 0;                   \
   }}
#define BRANCH(name, cond)                                                  \
  {name, H {                                                                \
     if (cond) {                                                            \
       d.branched = true;                                                   \
       d.branch_target = in.addr + 4 + uint64_t(int64_t(int16_t(in.ops[0].ival)) * 4); \
     }                                                                      \
   }}

uint32_t bfe(uint32_t v, uint32_t ctl, bool sign) {
  uint32_t off = ctl & 31, width = (ctl >> 16) & 0x7f;
  if (width == 0) return 0;
  if (width + off >= 32 || width >= 32) width = 32 - off;
  uint32_t r = (v >> off) & (width >= 32 ? ~0u : ((1u << width) - 1));
  if (sign && width < 32 && (r >> (width - 1)) & 1) r |= ~0u << width;
  return r;
}

uint32_t brev32(uint32_t x) {
  uint32_t o = 0;
  for (int i = 0; i < 32; ++i) o |= ((x >> i) & 1u) << (31 - i);
  return o;
}

// Signed overflow of r = a + b and r = a - b, from the sign bits (no signed arithmetic).
bool add_overflows(uint32_t a, uint32_t b, uint32_t r) { return ((a ^ r) & (b ^ r)) >> 31; }
bool sub_overflows(uint32_t a, uint32_t b, uint32_t r) { return ((a ^ b) & (a ^ r)) >> 31; }

// s_cmp_<cond>_<type>: aux = condition, aux2 = type (executor.cpp's tables).
bool compare_u64(int cond, uint64_t a, uint64_t b, bool is_signed) {
  auto sa = int64_t(a), sb = int64_t(b);
  switch (cond) {
    case 1: return is_signed ? sa < sb : a < b;
    case 2: return a == b;
    case 3: return is_signed ? sa <= sb : a <= b;
    case 4: return is_signed ? sa > sb : a > b;
    case 5: case 16: return a != b;  // lg, ne
    case 6: return is_signed ? sa >= sb : a >= b;
    case 0: return false;
    case 15: case 17: return true;
  }
  return false;
}

void set_hwreg(Wave& w, const Inst& in, uint32_t v) {
  uint32_t id = in.word0 & 0x3f, off = (in.word0 >> 6) & 0x1f, size = ((in.word0 >> 11) & 0x1f) + 1;
  uint32_t mask = (size >= 32 ? ~0u : ((1u << size) - 1)) << off;
  w.hwreg[id] = (w.hwreg[id] & ~mask) | ((v << off) & mask);
}

}  // namespace

bool integer_compare(int cond, int type, uint64_t a, uint64_t b) {
  bool is_signed = type == 1 || type == 4 || type == 7;
  if (type == 1) return compare_u64(cond, uint64_t(int64_t(int32_t(a))), uint64_t(int64_t(int32_t(b))), true);
  if (type == 4) return compare_u64(cond, uint64_t(int64_t(int16_t(a))), uint64_t(int64_t(int16_t(b))), true);
  return compare_u64(cond, a, b, is_signed);
}

std::vector<HandlerEntry> salu_handlers() {
  return {
      {"s_mov_b32", H { (void)d; write32(w, in.ops[0], 0, S32(1)); }},
      {"s_mov_b64", H { (void)d; write64(w, in.ops[0], 0, S64(1)); }},
      {"s_movk_i32", H { (void)d; write32(w, in.ops[0], 0, uint32_t(int32_t(int16_t(in.ops[1].ival)))); }},
      {"s_cmov_b32", H { (void)d; if (w.scc) write32(w, in.ops[0], 0, S32(1)); }},
      {"s_cmov_b64", H { (void)d; if (w.scc) write64(w, in.ops[0], 0, S64(1)); }},
      {"s_cselect_b32", H { (void)d; write32(w, in.ops[0], 0, w.scc ? S32(1) : S32(2)); }},
      {"s_cselect_b64", H { (void)d; write64(w, in.ops[0], 0, w.scc ? S64(1) : S64(2)); }},
      {"s_sext_i32_i8", H { (void)d; write32(w, in.ops[0], 0, uint32_t(int32_t(int8_t(S32(1))))); }},
      {"s_sext_i32_i16", H { (void)d; write32(w, in.ops[0], 0, uint32_t(int32_t(int16_t(S32(1))))); }},
      {"s_mul_i32", H { (void)d; write32(w, in.ops[0], 0, S32(1) * S32(2)); }},
      {"s_mul_hi_u32", H { (void)d; write32(w, in.ops[0], 0, uint32_t((uint64_t(S32(1)) * S32(2)) >> 32)); }},
      {"s_mul_hi_i32", H {
         (void)d;
         write32(w, in.ops[0], 0, uint32_t(uint64_t(int64_t(int32_t(S32(1))) * int64_t(int32_t(S32(2)))) >> 32));  // |product| < 2^62
       }},
      {"s_mulk_i32", H { (void)d; write32(w, in.ops[0], 0, S32(0) * uint32_t(int32_t(int16_t(in.ops[1].ival)))); }},
      {"s_addk_i32", H {
         (void)d;
         uint32_t a = S32(0), b = uint32_t(int32_t(int16_t(in.ops[1].ival)));
         uint32_t r = a + b;
         w.scc = add_overflows(a, b, r);
         write32(w, in.ops[0], 0, r);
       }},
      {"s_bfm_b32", H { (void)d; write32(w, in.ops[0], 0, ((S32(1) & 31) == 0 ? 0u : ((1u << (S32(1) & 31)) - 1)) << (S32(2) & 31)); }},
      {"s_getpc_b64", H { write64(w, in.ops[0], 0, d.code_base + in.addr + in.size); }},
      {"s_pack_ll_b32_b16", H { (void)d; write32(w, in.ops[0], 0, (S32(1) & 0xffff) | (S32(2) << 16)); }},
      {"s_pack_lh_b32_b16", H { (void)d; write32(w, in.ops[0], 0, (S32(1) & 0xffff) | (S32(2) & 0xffff0000u)); }},
      {"s_pack_hh_b32_b16", H { (void)d; write32(w, in.ops[0], 0, (S32(1) >> 16) | (S32(2) & 0xffff0000u)); }},
      SOP2("s_add_u32", a + b, r < a),
      SOP2("s_sub_u32", a - b, b > a),
      SOP2("s_addc_u32", a + b + uint32_t(w.scc), (uint64_t(a) + b + uint64_t(w.scc)) >> 32 != 0),
      SOP2("s_subb_u32", a - b - uint32_t(w.scc), uint64_t(b) + uint64_t(w.scc) > a),
      SOP2("s_add_i32", a + b, add_overflows(a, b, r)),
      SOP2("s_sub_i32", a - b, sub_overflows(a, b, r)),
      SOP2("s_min_u32", a < b ? a : b, a < b),
      SOP2("s_max_u32", a > b ? a : b, a > b),
      SOP2("s_min_i32", int32_t(a) < int32_t(b) ? a : b, int32_t(a) < int32_t(b)),
      SOP2("s_max_i32", int32_t(a) > int32_t(b) ? a : b, int32_t(a) > int32_t(b)),
      SOP2("s_and_b32", a & b, r != 0),
      SOP2("s_or_b32", a | b, r != 0),
      SOP2("s_xor_b32", a ^ b, r != 0),
      SOP2("s_andn2_b32", a & ~b, r != 0),
      SOP2("s_orn2_b32", a | ~b, r != 0),
      SOP2("s_nand_b32", ~(a & b), r != 0),
      SOP2("s_nor_b32", ~(a | b), r != 0),
      SOP2("s_xnor_b32", ~(a ^ b), r != 0),
      SOP2("s_lshl_b32", a << (b & 31), r != 0),
      SOP2("s_lshr_b32", a >> (b & 31), r != 0),
      SOP2("s_ashr_i32", uint32_t(int32_t(a) >> (b & 31)), r != 0),
      SOP2("s_lshl1_add_u32", (a << 1) + b, (uint64_t(a) << 1) + b > 0xffffffffull),
      SOP2("s_lshl2_add_u32", (a << 2) + b, (uint64_t(a) << 2) + b > 0xffffffffull),
      SOP2("s_lshl3_add_u32", (a << 3) + b, (uint64_t(a) << 3) + b > 0xffffffffull),
      SOP2("s_lshl4_add_u32", (a << 4) + b, (uint64_t(a) << 4) + b > 0xffffffffull),
      SOP2("s_bfe_u32", bfe(a, b, false), r != 0),
      SOP2("s_bfe_i32", bfe(a, b, true), r != 0),
      SOP2_64("s_and_b64", a & b, r != 0),
      SOP2_64("s_or_b64", a | b, r != 0),
      SOP2_64("s_xor_b64", a ^ b, r != 0),
      SOP2_64("s_andn2_b64", a & ~b, r != 0),
      SOP2_64("s_orn2_b64", a | ~b, r != 0),
      SOP2_64("s_nand_b64", ~(a & b), r != 0),
      SOP2_64("s_nor_b64", ~(a | b), r != 0),
      SOP2_64("s_xnor_b64", ~(a ^ b), r != 0),
      {"s_lshl_b64", H { (void)d; uint64_t r = S64(1) << (S32(2) & 63); w.scc = r != 0; write64(w, in.ops[0], 0, r); }},
      {"s_lshr_b64", H { (void)d; uint64_t r = S64(1) >> (S32(2) & 63); w.scc = r != 0; write64(w, in.ops[0], 0, r); }},
      {"s_ashr_i64", H { (void)d; uint64_t r = uint64_t(int64_t(S64(1)) >> (S32(2) & 63)); w.scc = r != 0; write64(w, in.ops[0], 0, r); }},
      SOP1("s_not_b32", ~a, r != 0),
      SOP1("s_abs_i32", int32_t(a) < 0 ? uint32_t(-int64_t(int32_t(a))) : a, r != 0),
      SOP1("s_brev_b32", brev32(a), w.scc),
      SOP1("s_bcnt1_i32_b32", uint32_t(std::popcount(a)), r != 0),
      SOP1("s_ff1_i32_b32", a ? uint32_t(std::countr_zero(a)) : ~0u, w.scc),
      SOP1("s_flbit_i32_b32", a ? uint32_t(std::countl_zero(a)) : ~0u, w.scc),
      SOP1_64("s_not_b64", ~a, r != 0),
      {"s_bcnt1_i32_b64", H { (void)d; uint32_t r = uint32_t(std::popcount(S64(1))); w.scc = r != 0; write32(w, in.ops[0], 0, r); }},
      {"s_ff1_i32_b64", H { (void)d; uint64_t a = S64(1); write32(w, in.ops[0], 0, a ? uint32_t(std::countr_zero(a)) : ~0u); }},
      {"s_flbit_i32_b64", H { (void)d; uint64_t a = S64(1); write32(w, in.ops[0], 0, a ? uint32_t(std::countl_zero(a)) : ~0u); }},
      SAVEEXEC("s_and_saveexec_b64", s & e),
      SAVEEXEC("s_or_saveexec_b64", s | e),
      SAVEEXEC("s_xor_saveexec_b64", s ^ e),
      SAVEEXEC("s_andn2_saveexec_b64", s & ~e),
      SAVEEXEC("s_orn2_saveexec_b64", s | ~e),
      SAVEEXEC("s_nand_saveexec_b64", ~(s & e)),
      SAVEEXEC("s_nor_saveexec_b64", ~(s | e)),
      SAVEEXEC("s_xnor_saveexec_b64", ~(s ^ e)),
      SAVEEXEC("s_andn1_saveexec_b64", ~s & e),
      SAVEEXEC("s_orn1_saveexec_b64", ~s | e),
      {"s_andn1_wrexec_b64", H { (void)d; w.exec = ~S64(1) & w.exec; w.scc = w.exec != 0; write64(w, in.ops[0], 0, w.exec); }},
      {"s_andn2_wrexec_b64", H { (void)d; w.exec = S64(1) & ~w.exec; w.scc = w.exec != 0; write64(w, in.ops[0], 0, w.exec); }},
      {"s_cmp", H {
         (void)d;
         int type = in.aux2;
         uint64_t a = type >= 7 ? S64(0) : S32(0), b = type >= 7 ? S64(1) : S32(1);
         w.scc = integer_compare(in.aux, type, a, b);
       }},
      {"s_bitcmp0_b32", H { (void)d; w.scc = ((S32(0) >> (S32(1) & 31)) & 1) == 0; }},
      {"s_bitcmp1_b32", H { (void)d; w.scc = ((S32(0) >> (S32(1) & 31)) & 1) == 1; }},
      BRANCH("s_branch", true),
      BRANCH("s_cbranch_scc0", !w.scc),
      BRANCH("s_cbranch_scc1", w.scc),
      BRANCH("s_cbranch_vccz", w.vcc == 0),
      BRANCH("s_cbranch_vccnz", w.vcc != 0),
      BRANCH("s_cbranch_execz", w.exec == 0),
      BRANCH("s_cbranch_execnz", w.exec != 0),
      // Hardware registers are stored, not interpreted (no float mode is modelled).
      {"s_setreg_b32", H { (void)d; set_hwreg(w, in, read32(w, in.ops[0], 0)); }},
      {"s_setreg_imm32_b32", H { (void)d; set_hwreg(w, in, read32(w, in.ops[0], 0)); }},
      {"s_getreg_b32", H {
         (void)d;
         uint32_t id = in.word0 & 0x3f, off = (in.word0 >> 6) & 0x1f, size = ((in.word0 >> 11) & 0x1f) + 1;
         uint32_t mask = size >= 32 ? ~0u : ((1u << size) - 1);
         write32(w, in.ops[0], 0, (w.hwreg[id] >> off) & mask);
       }},
      {"s_endpgm", H { (void)d; (void)in; w.done = true; }},
      {"s_barrier", H { (void)w; (void)in; d.barrier = true; }},
      // Memory operations complete at once in a functional model, so waits and hints are no-ops.
      {"s_waitcnt", H { (void)w; (void)in; (void)d; }},
      {"s_nop", H { (void)w; (void)in; (void)d; }},
      {"s_setprio", H { (void)w; (void)in; (void)d; }},
      {"s_sleep", H { (void)w; (void)in; (void)d; }},
      {"s_code_end", H { (void)w; (void)d; fail(in, "executed s_code_end padding: the kernel ran past its end"); }},
      {"buffer_wbl2", H { (void)w; (void)in; (void)d; }},
      {"buffer_inv", H { (void)w; (void)in; (void)d; }},
      {"buffer_wbinvl1_vol", H { (void)w; (void)in; (void)d; }},
      {"buffer_wbinvl1", H { (void)w; (void)in; (void)d; }},
  };
}

}  // namespace halcyon::amdsim
