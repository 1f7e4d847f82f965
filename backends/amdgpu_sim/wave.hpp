// The state of one wave64 and of the dispatch it belongs to, with operand access helpers that
// every execution file (exec_*.cpp) uses.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "inst.hpp"
#include "memory.hpp"
#include "strict.hpp"

namespace halcyon::amdsim {

constexpr int kLanes = 64;
constexpr int kSgprs = 106;  // s0..s105 on gfx9; VCC lives apart

struct Wave {
  uint32_t s[kSgprs] = {};
  uint64_t exec = 0, vcc = 0;
  bool scc = false;
  uint32_t m0 = 0;
  uint32_t num_v = 0, num_a = 0;  // registers the kernel descriptor allocates
  std::vector<uint32_t> v, a;     // [register * 64 + lane]
  uint64_t pc = 0;
  bool done = false, at_barrier = false;
  uint32_t index = 0;             // wave number within the workgroup
  uint32_t hwreg[64] = {};        // s_setreg/s_getreg state (MODE and friends; not interpreted)
  uint32_t dpp[64] = {};          // the permuted src0 of the DPP instruction executing now
  uint64_t dpp_written = 0;       // the lanes it wrote
  StrictState strict;

  void init(uint32_t vgprs, uint32_t agprs) {
    num_v = vgprs;
    num_a = agprs;
    v.assign(size_t(vgprs) * kLanes, 0);
    a.assign(size_t(agprs) * kLanes, 0);
    strict.init(vgprs + agprs);
  }
  uint32_t& vr(unsigned r, unsigned lane) { return v[size_t(r) * kLanes + lane]; }
  uint32_t& ar(unsigned r, unsigned lane) { return a[size_t(r) * kLanes + lane]; }
  bool active(int lane) const { return (exec >> lane) & 1; }
};

// One workgroup's view of a dispatch.
struct Dispatch {
  Memory* mem = nullptr;
  std::vector<unsigned char> lds;
  uint32_t grid[3] = {1, 1, 1};   // workgroups
  uint32_t block[3] = {1, 1, 1};  // work-items per workgroup
  uint32_t group[3] = {0, 0, 0};  // this workgroup's id
  uint64_t code_base = 0;         // host address of image offset 0 (for s_getpc_b64)
  uint64_t instructions = 0;      // executed so far in this launch
  uint64_t branch_target = 0;     // set by a taken branch (absolute image offset)
  bool branched = false;
  bool barrier = false;           // the wave just executed s_barrier
  // Strict mode: LDS races between waves (exec_mem.cpp), per dword, in barrier intervals.
  struct LdsTag {
    uint32_t write_epoch = ~0u, read_epoch = ~0u, writer = 0;
    bool atomic = false;
    uint64_t readers = 0;
    const Inst* by = nullptr;
  };
  std::vector<LdsTag> lds_tags;
  uint32_t lds_epoch = 0;         // s_barrier intervals completed
};

// ---- float helpers ----
inline float f32(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
inline double f64(uint64_t b) { return std::bit_cast<double>(b); }
inline uint64_t bits64(double d) { return std::bit_cast<uint64_t>(d); }
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even
inline float bf16_to_float(uint16_t b) { return f32(uint32_t(b) << 16); }
uint16_t float_to_bf16(float f);  // round to nearest even

[[noreturn]] void fail(const Inst& in, const std::string& why);

// ---- operand access ----
// Scalar-or-lane 32-bit read of operand `o` (register half `part` of a wider operand).
inline uint32_t read32(const Wave& w, const Operand& o, int lane, int part = 0) {
  switch (o.kind) {
    case OpKind::Sgpr: return w.s[o.index + part];
    case OpKind::Vgpr: return w.v[size_t(o.index + part) * kLanes + lane];
    case OpKind::Agpr: return w.a[size_t(o.index + part) * kLanes + lane];
    case OpKind::Vcc: return uint32_t(w.vcc >> (32 * (o.index + part)));
    case OpKind::Exec: return uint32_t(w.exec >> (32 * (o.index + part)));
    case OpKind::M0: return w.m0;
    case OpKind::Scc: return w.scc;
    case OpKind::Dpp: return w.dpp[lane];
    case OpKind::Imm: return part ? uint32_t(o.imm64() >> 32) : o.imm32();
    default: return 0;
  }
}

inline uint64_t read64(const Wave& w, const Operand& o, int lane) {
  if (o.kind == OpKind::Imm) return o.imm64();
  if (o.kind == OpKind::Vcc && o.count == 2) return w.vcc;
  if (o.kind == OpKind::Exec && o.count == 2) return w.exec;
  return uint64_t(read32(w, o, lane, 0)) | (uint64_t(read32(w, o, lane, 1)) << 32);
}

// f32 source with the neg/abs modifiers applied.
inline float readf(const Wave& w, const Operand& o, int lane) {
  float f = f32(read32(w, o, lane));
  if (o.abs) f = std::fabs(f);
  if (o.neg) f = -f;
  return f;
}

// f16 source (low half unless `hi`) as float, modifiers applied.
inline float readh(const Wave& w, const Operand& o, int lane, bool hi = false) {
  uint32_t raw = o.kind == OpKind::Imm ? o.imm16() : read32(w, o, lane);
  float f = half_to_float(uint16_t(hi ? raw >> 16 : raw));
  if (o.abs) f = std::fabs(f);
  if (o.neg) f = -f;
  return f;
}

inline void write32(Wave& w, const Operand& o, int lane, uint32_t value, int part = 0) {
  switch (o.kind) {
    case OpKind::Sgpr: w.s[o.index + part] = value; return;
    case OpKind::Vgpr: w.v[size_t(o.index + part) * kLanes + lane] = value; return;
    case OpKind::Agpr: w.a[size_t(o.index + part) * kLanes + lane] = value; return;
    case OpKind::Vcc: {
      int sh = 32 * (o.index + part);
      w.vcc = (w.vcc & ~(0xffffffffull << sh)) | (uint64_t(value) << sh);
      return;
    }
    case OpKind::Exec: {
      int sh = 32 * (o.index + part);
      w.exec = (w.exec & ~(0xffffffffull << sh)) | (uint64_t(value) << sh);
      return;
    }
    case OpKind::M0: w.m0 = value; return;
    default: return;
  }
}

inline void write64(Wave& w, const Operand& o, int lane, uint64_t value) {
  if (o.kind == OpKind::Vcc && o.count == 2) {
    w.vcc = value;
    return;
  }
  if (o.kind == OpKind::Exec && o.count == 2) {
    w.exec = value;
    return;
  }
  write32(w, o, lane, uint32_t(value), 0);
  write32(w, o, lane, uint32_t(value >> 32), 1);
}

// A 64-bit lane mask operand (vcc, exec or an SGPR pair) read as a whole.
inline uint64_t read_mask(const Wave& w, const Operand& o) { return read64(w, o, 0); }
inline void write_mask(Wave& w, const Operand& o, uint64_t m) { write64(w, o, 0, m); }

// Applies the VOP3 output modifiers (omod, clamp) to an f32 result.
inline float outmod(const Inst& in, float r) {
  if (in.mods.omod != 1.0f) r *= in.mods.omod;
  if (in.mods.clamp) r = std::fmin(std::fmax(r, 0.0f), 1.0f);
  return r;
}

// DPP: for EXEC `exec`, the lanes a DPP instruction writes and the source lanes it reads
// (src[l] = -1: lane l reads 0 under bound_ctrl). A source lane out of range or inactive is
// invalid; row_mask/bank_mask lanes are not written.
struct DppLanes {
  uint64_t write = 0, read = 0;
  int8_t src[kLanes] = {};
};
DppLanes dpp_lanes(const Mods& m, uint64_t exec);
// Runs a DPP instruction: permutes src0 into Wave::dpp, then Inst::inner over the written lanes.
void dpp_exec(Wave& w, const Inst& in, Dispatch& d);

// Handler tables, one per instruction family (exec_*.cpp).
struct HandlerEntry {
  const char* op;
  Handler fn;
  int aux = 0, aux2 = 0;
};
std::vector<HandlerEntry> salu_handlers();
std::vector<HandlerEntry> valu_handlers();
std::vector<HandlerEntry> memory_handlers();
std::vector<HandlerEntry> mfma_handlers();

}  // namespace halcyon::amdsim
