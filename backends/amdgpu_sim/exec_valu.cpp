// Vector ALU: integer, f32, f16 and packed (VOP3P) arithmetic, conversions, compares, lane
// moves. Every handler works lane by lane over EXEC; inactive lanes keep their values.
#include <algorithm>
#include <bit>
#include <cmath>

#include "wave.hpp"

namespace halcyon::amdsim {

bool integer_compare(int cond, int type, uint64_t a, uint64_t b);  // exec_salu.cpp

namespace {

#define H [](Wave & w, const Inst & in, Dispatch & d)
#define LANES for (int l = 0; l < kLanes; ++l) if (w.active(l))
#define U(i) read32(w, in.ops[i], l)
#define U64(i) read64(w, in.ops[i], l)
#define F(i) readf(w, in.ops[i], l)

// dst = expr over unsigned a, b (and c) per active lane.
#define VI2(name, expr) {name, H { (void)d; LANES { uint32_t a = U(1), b = U(2); write32(w, in.ops[0], l, (expr)); } }}
#define VI3(name, expr) {name, H { (void)d; LANES { uint32_t a = U(1), b = U(2), c = U(3); write32(w, in.ops[0], l, (expr)); } }}
#define VI1(name, expr) {name, H { (void)d; LANES { uint32_t a = U(1); write32(w, in.ops[0], l, (expr)); } }}
#define VX1(name, expr) {name, H { (void)d; LANES write32(w, in.ops[0], l, bits(outmod(in, (expr)))); }}
#define VF1(name, expr) {name, H { (void)d; LANES { float a = F(1); write32(w, in.ops[0], l, bits(outmod(in, (expr)))); } }}
#define VF2(name, expr) {name, H { (void)d; LANES { float a = F(1), b = F(2); write32(w, in.ops[0], l, bits(outmod(in, (expr)))); } }}
#define VF3(name, expr) {name, H { (void)d; LANES { float a = F(1), b = F(2), c = F(3); write32(w, in.ops[0], l, bits(outmod(in, (expr)))); } }}

// 16-bit results: GFX9 writes the low half and zeroes the high half, unless op_sel selects the
// high half of the destination (then the low half is kept).
void write16(Wave& w, const Inst& in, int l, uint16_t v) {
  if (in.mods.op_sel & 8)
    write32(w, in.ops[0], l, (read32(w, in.ops[0], l) & 0xffffu) | (uint32_t(v) << 16));
  else
    write32(w, in.ops[0], l, v);
}
#define HS(i) readh(w, in.ops[i], l, (in.mods.op_sel >> ((i) - 1)) & 1)
#define VH1(name, expr) {name, H { (void)d; LANES { float a = HS(1); write16(w, in, l, float_to_half(outmod(in, (expr)))); } }}
#define VH2(name, expr) {name, H { (void)d; LANES { float a = HS(1), b = HS(2); write16(w, in, l, float_to_half(outmod(in, (expr)))); } }}
#define VH3(name, expr) {name, H { (void)d; LANES { float a = HS(1), b = HS(2), c = HS(3); write16(w, in, l, float_to_half(outmod(in, (expr)))); } }}

// VOP3P: for each half h, source i comes from its high half when op_sel (h = 0) or op_sel_hi
// (h = 1) has bit i; neg_lo/neg_hi negate it.
float pk_src16(const Wave& w, const Inst& in, int i, int l, int h) {
  const Operand& o = in.ops[size_t(i + 1)];
  uint8_t sel = h ? (in.mods.has_op_sel_hi ? in.mods.op_sel_hi : 0x7) : in.mods.op_sel;
  uint32_t raw = o.kind == OpKind::Imm ? o.imm16() : read32(w, o, l);
  float f = half_to_float(uint16_t((sel >> i) & 1 ? raw >> 16 : raw));
  if (((h ? in.mods.neg_hi : in.mods.neg_lo) >> i) & 1) f = -f;
  return f;
}
float pk_src32(const Wave& w, const Inst& in, int i, int l, int h) {
  const Operand& o = in.ops[size_t(i + 1)];
  uint8_t sel = h ? (in.mods.has_op_sel_hi ? in.mods.op_sel_hi : 0x7) : in.mods.op_sel;
  float f = o.kind == OpKind::Imm ? f32(o.imm32()) : f32(read32(w, o, l, (sel >> i) & 1));
  if (((h ? in.mods.neg_hi : in.mods.neg_lo) >> i) & 1) f = -f;
  return f;
}
#define PK16(name, nsrc, expr)                                                  \
  {name, H {                                                                    \
     (void)d;                                                                   \
     LANES {                                                                    \
       uint32_t out = 0;                                                        \
       for (int h = 0; h < 2; ++h) {                                            \
         float a = pk_src16(w, in, 0, l, h);                                    \
         float b = nsrc > 1 ? pk_src16(w, in, 1, l, h) : 0.0f;                  \
         float c = nsrc > 2 ? pk_src16(w, in, 2, l, h) : 0.0f;                  \
         (void)b; (void)c;                                                      \
         float r = (expr);                                                      \
         if (in.mods.clamp) r = std::fmin(std::fmax(r, 0.0f), 1.0f);            \
         out |= uint32_t(float_to_half(r)) << (16 * h);                         \
       }                                                                        \
       write32(w, in.ops[0], l, out);                                           \
     }                                                                          \
   }}
#define PK32(name, nsrc, expr)                                                  \
  {name, H {                                                                    \
     (void)d;                                                                   \
     LANES {                                                                    \
       float r[2];                                                              \
       for (int h = 0; h < 2; ++h) {                                            \
         float a = pk_src32(w, in, 0, l, h);                                    \
         float b = nsrc > 1 ? pk_src32(w, in, 1, l, h) : 0.0f;                  \
         float c = nsrc > 2 ? pk_src32(w, in, 2, l, h) : 0.0f;                  \
         (void)b; (void)c;                                                      \
         r[h] = (expr);                                                         \
       }                                                                        \
       write32(w, in.ops[0], l, bits(r[0]), 0);                                 \
       write32(w, in.ops[0], l, bits(r[1]), 1);                                 \
     }                                                                          \
   }}

uint32_t bfe(uint32_t v, uint32_t off, uint32_t width, bool sign) {
  off &= 31;
  width &= 31;
  if (width == 0) return 0;
  uint32_t r = (v >> off) & ((1u << width) - 1);
  if (off + width > 32) r = v >> off;
  if (sign && ((r >> (width - 1)) & 1)) r |= ~0u << width;
  return r;
}

uint32_t perm(uint32_t s0, uint32_t s1, uint32_t sel) {
  uint64_t bytes = (uint64_t(s0) << 32) | s1;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    uint32_t s = (sel >> (8 * i)) & 0xff, b;
    if (s < 8) b = (bytes >> (8 * s)) & 0xff;
    else if (s < 12) b = ((bytes >> (16 * (s - 8) + 15)) & 1) ? 0xff : 0;  // sign of a 16-bit half
    else if (s == 12) b = 0;
    else b = 0xff;
    out |= b << (8 * i);
  }
  return out;
}

int32_t i24(uint32_t v) { return int32_t(v << 8) >> 8; }

float med3(float a, float b, float c) {
  return std::fmax(std::fmin(a, b), std::fmin(std::fmax(a, b), c));
}

uint32_t cvt_u32(float f) {
  if (std::isnan(f) || f <= 0) return 0;
  if (f >= 4294967295.0f) return 0xffffffffu;
  return uint32_t(f);
}
int32_t cvt_i32(float f) {
  if (std::isnan(f)) return 0;
  if (f <= -2147483648.0f) return INT32_MIN;
  if (f >= 2147483647.0f) return INT32_MAX;
  return int32_t(f);
}

bool class_test(double v, uint32_t mask) {
  int bit;
  if (std::isnan(v)) bit = 1;  // quiet NaN (signalling NaNs are not distinguished)
  else if (std::isinf(v)) bit = v < 0 ? 2 : 9;
  else if (v == 0) bit = std::signbit(v) ? 5 : 6;
  else if (std::fpclassify(v) == FP_SUBNORMAL) bit = v < 0 ? 4 : 7;
  else bit = v < 0 ? 3 : 8;
  return (mask >> bit) & 1;
}

bool float_compare(int cond, double a, double b) {
  bool un = std::isnan(a) || std::isnan(b);
  switch (cond) {
    case 0: return false;
    case 1: return a < b;
    case 2: return a == b;
    case 3: return a <= b;
    case 4: return a > b;
    case 5: return !un && a != b;
    case 6: return a >= b;
    case 7: return !un;
    case 8: return un;
    case 9: return !(a >= b);
    case 10: return !(!un && a != b);
    case 11: return !(a > b);
    case 12: return !(a <= b);
    case 13: return a != b;
    case 14: return !(a < b);
    case 15: case 17: return true;
  }
  return false;
}

// Per-lane compare of ops[1] and ops[2] (types as executor.cpp's kCmpTypes).
uint64_t compare_lanes(const Wave& w, const Inst& in) {
  uint64_t mask = 0;
  int type = in.aux2;
  LANES {
    bool r;
    if (type == 0) r = float_compare(in.aux, F(1), F(2));
    else if (type == 3) r = float_compare(in.aux, readh(w, in.ops[1], l), readh(w, in.ops[2], l));
    else if (type == 6) r = float_compare(in.aux, f64(U64(1)), f64(U64(2)));
    else if (type >= 7) r = integer_compare(in.aux, type, U64(1), U64(2));
    else if (type == 4 || type == 5) r = integer_compare(in.aux, type, U(1) & 0xffff, U(2) & 0xffff);
    else r = integer_compare(in.aux, type, U(1), U(2));
    if (r) mask |= 1ull << l;
  }
  return mask;
}

uint32_t lane_below_mask_count(uint32_t mask, int lane_offset, int l) {
  int k = l - lane_offset;
  if (k <= 0) return 0;
  if (k >= 32) return uint32_t(std::popcount(mask));
  return uint32_t(std::popcount(mask & ((1u << k) - 1)));
}

// The lane lane `l` reads under dpp_ctrl `c`, or -1 when it has none (outside its row or wave).
int dpp_source(uint16_t c, int l) {
  const int row = l & ~15, i = l & 15;
  if (c <= 0xff) return (l & ~3) + ((c >> (2 * (l & 3))) & 3);
  if (c >= 0x101 && c <= 0x10f) return i + (c & 15) < 16 ? l + (c & 15) : -1;         // row_shl
  if (c >= 0x111 && c <= 0x11f) return i >= (c & 15) ? l - (c & 15) : -1;            // row_shr
  if (c >= 0x121 && c <= 0x12f) return row + ((i - (c & 15)) & 15);                   // row_ror
  switch (c) {
    case 0x130: return l < kLanes - 1 ? l + 1 : -1;                                    // wave_shl
    case 0x134: return (l + 1) & (kLanes - 1);                                         // wave_rol
    case 0x138: return l > 0 ? l - 1 : -1;                                             // wave_shr
    case 0x13c: return (l - 1) & (kLanes - 1);                                         // wave_ror
    case 0x140: return row + 15 - i;                                                   // row_mirror
    case 0x141: return (l & ~7) + 7 - (l & 7);                                         // row_half_mirror
    case 0x142: return row ? row - 1 : -1;            // row_bcast:15: lane 15 of the row before
    case 0x143: return l >= 32 ? 31 : -1;             // row_bcast:31: lane 31 to rows 2 and 3
  }
  return -1;
}

}  // namespace

DppLanes dpp_lanes(const Mods& m, uint64_t exec) {
  DppLanes r;
  for (int l = 0; l < kLanes; ++l) {
    r.src[l] = -1;
    if (!((exec >> l) & 1) || !((m.row_mask >> (l >> 4)) & 1) || !((m.bank_mask >> ((l >> 2) & 3)) & 1)) continue;
    int s = dpp_source(m.dpp_ctrl, l);
    bool valid = s >= 0 && ((exec >> s) & 1);
    if (!valid && !m.bound_ctrl) continue;
    r.write |= 1ull << l;
    if (valid) {
      r.src[l] = int8_t(s);
      r.read |= 1ull << s;
    }
  }
  return r;
}

void dpp_exec(Wave& w, const Inst& in, Dispatch& d) {
  DppLanes lanes = dpp_lanes(in.mods, w.exec);
  Operand raw = in.dpp_src;  // the register as such: the instruction applies neg/abs to the copy
  raw.neg = raw.abs = false;
  for (int l = 0; l < kLanes; ++l) w.dpp[l] = lanes.src[l] >= 0 ? read32(w, raw, lanes.src[l]) : 0;
  const uint64_t exec = w.exec;
  w.exec = lanes.write;
  w.dpp_written = lanes.write;
  in.inner(w, in, d);
  w.exec = exec;
}

std::vector<HandlerEntry> valu_handlers() {
  return {
      // ---- moves and lane access ----
      VI1("v_mov_b32", a),
      {"v_mov_b64", H { (void)d; LANES write64(w, in.ops[0], l, U64(1)); }},
      {"v_pk_mov_b32", H {
         (void)d;
         LANES {
           uint32_t lo = read32(w, in.ops[1], l, in.mods.op_sel & 1);
           uint32_t hi = read32(w, in.ops[2], l, (in.mods.op_sel >> 1) & 1);
           write32(w, in.ops[0], l, lo, 0);
           write32(w, in.ops[0], l, hi, 1);
         }
       }},
      VI1("v_accvgpr_write_b32", a),
      VI1("v_accvgpr_write", a),
      VI1("v_accvgpr_read_b32", a),
      VI1("v_accvgpr_read", a),
      VI1("v_accvgpr_mov_b32", a),
      {"v_readfirstlane_b32", H {
         (void)d;
         int lane = w.exec ? std::countr_zero(w.exec) : 0;
         write32(w, in.ops[0], 0, read32(w, in.ops[1], lane));
       }},
      {"v_readlane_b32", H { (void)d; write32(w, in.ops[0], 0, read32(w, in.ops[1], int(read32(w, in.ops[2], 0) & 63))); }},
      {"v_writelane_b32", H { (void)d; write32(w, in.ops[0], int(read32(w, in.ops[2], 0) & 63), read32(w, in.ops[1], 0)); }},
      {"v_cndmask_b32", H {
         (void)d;
         uint64_t m = read_mask(w, in.ops[3]);
         LANES write32(w, in.ops[0], l, (m >> l) & 1 ? U(2) : U(1));
       }},
      // ---- integer ----
      VI2("v_add_u32", a + b),
      VI2("v_sub_u32", a - b),
      VI2("v_subrev_u32", b - a),
      {"v_add_co_u32", H {
         (void)d;
         uint64_t carry = 0;
         LANES {
           uint64_t s = uint64_t(U(2)) + U(3);
           write32(w, in.ops[0], l, uint32_t(s));
           if (s >> 32) carry |= 1ull << l;
         }
         write_mask(w, in.ops[1], carry);
       }},
      {"v_sub_co_u32", H {
         (void)d;
         uint64_t borrow = 0;
         LANES {
           uint32_t a = U(2), b = U(3);
           write32(w, in.ops[0], l, a - b);
           if (b > a) borrow |= 1ull << l;
         }
         write_mask(w, in.ops[1], borrow);
       }},
      {"v_subrev_co_u32", H {
         (void)d;
         uint64_t borrow = 0;
         LANES {
           uint32_t a = U(3), b = U(2);
           write32(w, in.ops[0], l, a - b);
           if (b > a) borrow |= 1ull << l;
         }
         write_mask(w, in.ops[1], borrow);
       }},
      {"v_addc_co_u32", H {
         (void)d;
         uint64_t cin = read_mask(w, in.ops[4]), carry = 0;
         LANES {
           uint64_t s = uint64_t(U(2)) + U(3) + ((cin >> l) & 1);
           write32(w, in.ops[0], l, uint32_t(s));
           if (s >> 32) carry |= 1ull << l;
         }
         write_mask(w, in.ops[1], carry);
       }},
      {"v_subb_co_u32", H {
         (void)d;
         uint64_t bin = read_mask(w, in.ops[4]), borrow = 0;
         LANES {
           uint64_t a = U(2), b = uint64_t(U(3)) + ((bin >> l) & 1);
           write32(w, in.ops[0], l, uint32_t(a - b));
           if (b > a) borrow |= 1ull << l;
         }
         write_mask(w, in.ops[1], borrow);
       }},
      {"v_subbrev_co_u32", H {
         (void)d;
         uint64_t bin = read_mask(w, in.ops[4]), borrow = 0;
         LANES {
           uint64_t a = U(3), b = uint64_t(U(2)) + ((bin >> l) & 1);
           write32(w, in.ops[0], l, uint32_t(a - b));
           if (b > a) borrow |= 1ull << l;
         }
         write_mask(w, in.ops[1], borrow);
       }},
      VI2("v_mul_lo_u32", a * b),
      VI2("v_mul_hi_u32", uint32_t((uint64_t(a) * b) >> 32)),
      VI2("v_mul_hi_i32", uint32_t(uint64_t(int64_t(int32_t(a)) * int32_t(b)) >> 32)),
      VI2("v_mul_u32_u24", (a & 0xffffff) * (b & 0xffffff)),
      VI2("v_mul_i32_i24", uint32_t(int64_t(i24(a)) * i24(b))),
      VI2("v_mul_hi_u32_u24", uint32_t((uint64_t(a & 0xffffff) * (b & 0xffffff)) >> 32)),
      VI3("v_mad_u32_u24", (a & 0xffffff) * (b & 0xffffff) + c),
      VI3("v_mad_i32_i24", uint32_t(int64_t(i24(a)) * i24(b)) + c),
      {"v_mad_u64_u32", H {
         (void)d;
         uint64_t carry = 0;
         LANES {
           unsigned __int128 r = (unsigned __int128)(uint64_t(U(2)) * U(3)) + U64(4);
           write64(w, in.ops[0], l, uint64_t(r));
           if (r >> 64) carry |= 1ull << l;
         }
         write_mask(w, in.ops[1], carry);
       }},
      {"v_mad_i64_i32", H {
         (void)d;
         LANES write64(w, in.ops[0], l, uint64_t(int64_t(int32_t(U(2))) * int32_t(U(3))) + U64(4));
         write_mask(w, in.ops[1], 0);
       }},
      {"v_lshl_add_u64", H { (void)d; LANES write64(w, in.ops[0], l, (U64(1) << (U(2) & 63)) + U64(3)); }},
      {"v_lshlrev_b64", H { (void)d; LANES write64(w, in.ops[0], l, U64(2) << (U(1) & 63)); }},
      {"v_lshrrev_b64", H { (void)d; LANES write64(w, in.ops[0], l, U64(2) >> (U(1) & 63)); }},
      {"v_ashrrev_i64", H { (void)d; LANES write64(w, in.ops[0], l, uint64_t(int64_t(U64(2)) >> (U(1) & 63))); }},
      VI2("v_and_b32", a & b),
      VI2("v_or_b32", a | b),
      VI2("v_xor_b32", a ^ b),
      VI1("v_not_b32", ~a),
      VI2("v_lshlrev_b32", b << (a & 31)),
      VI2("v_lshrrev_b32", b >> (a & 31)),
      VI2("v_ashrrev_i32", uint32_t(int32_t(b) >> (a & 31))),
      VI2("v_lshlrev_b16", (b << (a & 15)) & 0xffff),
      VI2("v_lshrrev_b16", (b & 0xffff) >> (a & 15)),
      VI3("v_bfe_u32", bfe(a, b, c, false)),
      VI3("v_bfe_i32", bfe(a, b, c, true)),
      VI2("v_bfm_b32", ((b & 31) == 0 && (a & 31) == 0) ? 0u : (((a & 31) == 0 ? 0u : ((1u << (a & 31)) - 1)) << (b & 31))),
      VI3("v_bfi_b32", (a & b) | (~a & c)),
      VI3("v_alignbit_b32", uint32_t(((uint64_t(a) << 32) | b) >> (c & 31))),
      VI3("v_alignbyte_b32", uint32_t(((uint64_t(a) << 32) | b) >> (8 * (c & 3)))),
      VI3("v_perm_b32", perm(a, b, c)),
      VI3("v_lshl_add_u32", (a << (b & 31)) + c),
      VI3("v_add_lshl_u32", (a + b) << (c & 31)),
      VI3("v_lshl_or_b32", (a << (b & 31)) | c),
      VI3("v_and_or_b32", (a & b) | c),
      VI3("v_or3_b32", a | b | c),
      VI3("v_xad_u32", (a ^ b) + c),
      VI3("v_add3_u32", a + b + c),
      VI2("v_min_u32", std::min(a, b)),
      VI2("v_max_u32", std::max(a, b)),
      VI2("v_min_i32", uint32_t(std::min(int32_t(a), int32_t(b)))),
      VI2("v_max_i32", uint32_t(std::max(int32_t(a), int32_t(b)))),
      VI3("v_min3_u32", std::min({a, b, c})),
      VI3("v_max3_u32", std::max({a, b, c})),
      VI3("v_min3_i32", uint32_t(std::min({int32_t(a), int32_t(b), int32_t(c)}))),
      VI3("v_max3_i32", uint32_t(std::max({int32_t(a), int32_t(b), int32_t(c)}))),
      VI3("v_med3_u32", std::max(std::min(a, b), std::min(std::max(a, b), c))),
      VI3("v_med3_i32", uint32_t(std::max(std::min(int32_t(a), int32_t(b)), std::min(std::max(int32_t(a), int32_t(b)), int32_t(c))))),
      VI2("v_bcnt_u32_b32", uint32_t(std::popcount(a)) + b),
      {"v_mbcnt_lo_u32_b32", H { (void)d; LANES write32(w, in.ops[0], l, lane_below_mask_count(U(1), 0, l) + U(2)); }},
      {"v_mbcnt_hi_u32_b32", H { (void)d; LANES write32(w, in.ops[0], l, lane_below_mask_count(U(1), 32, l) + U(2)); }},
      VI1("v_ffbh_u32", a ? uint32_t(std::countl_zero(a)) : ~0u),
      VI1("v_ffbl_b32", a ? uint32_t(std::countr_zero(a)) : ~0u),
      // ---- conversions ----
      VX1("v_cvt_f32_u32", float(read32(w, in.ops[1], l))),
      VX1("v_cvt_f32_i32", float(int32_t(read32(w, in.ops[1], l)))),
      {"v_cvt_u32_f32", H { (void)d; LANES write32(w, in.ops[0], l, cvt_u32(F(1))); }},
      {"v_cvt_i32_f32", H { (void)d; LANES write32(w, in.ops[0], l, uint32_t(cvt_i32(F(1)))); }},
      {"v_cvt_f16_f32", H { (void)d; LANES write16(w, in, l, float_to_half(outmod(in, F(1)))); }},
      VX1("v_cvt_f32_f16", readh(w, in.ops[1], l, in.mods.op_sel & 1)),
      {"v_cvt_pkrtz_f16_f32", H {
         (void)d;
         auto rtz = [](float f) {  // round toward zero: truncate the f32 before the even rounding
           uint16_t h = float_to_half(f);
           if (std::fabs(half_to_float(h)) > std::fabs(f) && !std::isinf(f)) h = uint16_t(h - 1);
           return h;
         };
         LANES write32(w, in.ops[0], l, uint32_t(rtz(F(1))) | (uint32_t(rtz(F(2))) << 16));
       }},
      VX1("v_cvt_f32_ubyte0", float(read32(w, in.ops[1], l) & 0xff)),
      VX1("v_cvt_f32_ubyte1", float((read32(w, in.ops[1], l) >> 8) & 0xff)),
      VX1("v_cvt_f32_ubyte2", float((read32(w, in.ops[1], l) >> 16) & 0xff)),
      VX1("v_cvt_f32_ubyte3", float(read32(w, in.ops[1], l) >> 24)),
      // ---- f32 ----
      VF2("v_add_f32", a + b),
      VF2("v_sub_f32", a - b),
      VF2("v_subrev_f32", b - a),
      VF2("v_mul_f32", a * b),
      VF2("v_mul_legacy_f32", (a == 0 || b == 0) ? 0.0f : a * b),
      VF2("v_max_f32", std::fmax(a, b)),
      VF2("v_min_f32", std::fmin(a, b)),
      VF3("v_fma_f32", std::fma(a, b, c)),
      VF3("v_mad_f32", a * b + c),
      VF3("v_fmaak_f32", std::fma(a, b, c)),
      VF3("v_fmamk_f32", std::fma(a, b, c)),
      VF3("v_madak_f32", a * b + c),
      VF3("v_madmk_f32", a * b + c),
      {"v_fmac_f32", H { (void)d; LANES write32(w, in.ops[0], l, bits(outmod(in, std::fma(F(1), F(2), f32(U(0)))))); }},
      {"v_mac_f32", H { (void)d; LANES write32(w, in.ops[0], l, bits(outmod(in, F(1) * F(2) + f32(U(0))))); }},
      VF3("v_max3_f32", std::fmax(std::fmax(a, b), c)),
      VF3("v_min3_f32", std::fmin(std::fmin(a, b), c)),
      VF3("v_med3_f32", med3(a, b, c)),
      VF1("v_exp_f32", std::exp2(a)),
      VF1("v_log_f32", std::log2(a)),
      VF1("v_rcp_f32", 1.0f / a),
      VF1("v_rcp_iflag_f32", 1.0f / a),
      VF1("v_rsq_f32", 1.0f / std::sqrt(a)),
      VF1("v_sqrt_f32", std::sqrt(a)),
      VF1("v_floor_f32", std::floor(a)),
      VF1("v_ceil_f32", std::ceil(a)),
      VF1("v_trunc_f32", std::trunc(a)),
      VF1("v_rndne_f32", std::nearbyint(a)),
      VF1("v_fract_f32", a - std::floor(a)),
      VF1("v_frexp_mant_f32", [](float x) { int e; return std::isfinite(x) ? std::frexp(x, &e) : x; }(a)),
      {"v_frexp_exp_i32_f32", H {
         (void)d;
         LANES {
           int e = 0;
           float x = F(1);
           if (std::isfinite(x)) std::frexp(x, &e);
           write32(w, in.ops[0], l, uint32_t(e));
         }
       }},
      {"v_ldexp_f32", H { (void)d; LANES write32(w, in.ops[0], l, bits(outmod(in, std::ldexp(F(1), int32_t(U(2)))))); }},
      // ---- f16 ----
      VH2("v_add_f16", a + b),
      VH2("v_sub_f16", a - b),
      VH2("v_subrev_f16", b - a),
      VH2("v_mul_f16", a * b),
      VH2("v_max_f16", std::fmax(a, b)),
      VH2("v_min_f16", std::fmin(a, b)),
      VH3("v_fma_f16", std::fma(a, b, c)),
      VH1("v_exp_f16", std::exp2(a)),
      VH1("v_rcp_f16", 1.0f / a),
      {"v_fmac_f16", H { (void)d; LANES write16(w, in, l, float_to_half(std::fma(HS(1), HS(2), half_to_float(uint16_t(U(0)))))); }},
      PK16("v_pk_add_f16", 2, a + b),
      PK16("v_pk_mul_f16", 2, a * b),
      PK16("v_pk_fma_f16", 3, std::fma(a, b, c)),
      PK16("v_pk_max_f16", 2, std::fmax(a, b)),
      PK16("v_pk_min_f16", 2, std::fmin(a, b)),
      PK32("v_pk_add_f32", 2, a + b),
      PK32("v_pk_mul_f32", 2, a * b),
      PK32("v_pk_fma_f32", 3, std::fma(a, b, c)),
      // ---- compares ----
      {"v_cmp", H { (void)d; write_mask(w, in.ops[0], compare_lanes(w, in)); }},
      {"v_cmpx", H {
         (void)d;
         uint64_t m = compare_lanes(w, in);
         write_mask(w, in.ops[0], m);
         w.exec = m;
       }},
      {"v_cmp_class_f32", H {
         (void)d;
         uint64_t m = 0;
         LANES if (class_test(F(1), U(2))) m |= 1ull << l;
         write_mask(w, in.ops[0], m);
       }},
  };
}

}  // namespace halcyon::amdsim
