// A decoded instruction: LLVM's AMDGPU disassembler decodes the bytes and prints them in the
// documented assembly syntax; decoder.cpp turns that text into these operands once per
// instruction, so execution never parses text.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace halcyon::amdsim {

// Any fault while running a kernel: unknown instruction, out-of-bounds access, bad register.
struct SimError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class OpKind : uint8_t {
  None,
  Sgpr,    // s5, s[4:7]
  Vgpr,    // v1, v[0:1]
  Agpr,    // a0, a[0:15]
  Vcc,     // vcc (64-bit) or vcc_lo/vcc_hi (count 1, index 0/1)
  Exec,    // exec, exec_lo, exec_hi
  M0,
  Scc,
  Imm,     // integer or float literal / inline constant
  Off,     // "off": no SGPR base
  Dpp,     // src0 of a DPP instruction after its lane permutation (Wave::dpp; Inst::dpp_src)
};

struct Operand {
  OpKind kind = OpKind::None;
  uint16_t index = 0;   // first register (or 0/1 for the _lo/_hi halves)
  uint8_t count = 1;    // dwords
  bool is_float = false;
  bool neg = false, abs = false;
  int64_t ival = 0;     // integer immediates
  double fval = 0;      // float immediates as printed ("1.0", "0.5")

  // Immediate bits for an operand of the given width.
  uint32_t imm32() const;
  uint16_t imm16() const;
  uint64_t imm64() const;
};

struct Mods {
  int64_t offset = 0;     // offset:N (memory)
  uint32_t offset0 = 0, offset1 = 0;  // ds_*2 offsets
  bool offen = false, idxen = false;
  bool clamp = false;
  float omod = 1.0f;      // mul:2, mul:4, div:2
  uint8_t op_sel = 0, op_sel_hi = 0, neg_lo = 0, neg_hi = 0;  // VOP3P bit masks
  bool has_op_sel_hi = false;
  // DPP (the _dpp forms of VOP1/VOP2): dpp_ctrl as the ISA encodes it (0x000-0x0ff quad_perm,
  // 0x101-0x10f row_shl, 0x111-0x11f row_shr, 0x121-0x12f row_ror, 0x130 wave_shl, 0x134
  // wave_rol, 0x138 wave_shr, 0x13c wave_ror, 0x140 row_mirror, 0x141 row_half_mirror, 0x142
  // row_bcast:15, 0x143 row_bcast:31); bound_ctrl: an invalid source lane reads 0 (else the
  // lane is not written).
  bool dpp = false, bound_ctrl = false;
  uint16_t dpp_ctrl = 0;
  uint8_t row_mask = 0xf, bank_mask = 0xf;
  bool lds = false;       // MUBUF "lds": the load writes LDS at M0 (LDS DMA), not VGPRs
};

enum class InstClass : uint8_t { Salu, Smem, Valu, Mfma, Vmem, Ds, Control };

// What strict mode (strict.cpp) needs to know about an instruction, computed once at bind time.
struct InstInfo {
  InstClass cls = InstClass::Control;
  uint8_t ndefs = 1;          // leading destination operands
  bool reads_dst = false;     // v_fmac/v_mac: the destination is also a source
  bool returns = false;       // memory op whose destination is written when it completes
  bool writes_exec = false;   // implicitly (v_cmpx, s_*_saveexec_*)
  bool partial_dst = false;   // d16 loads, v_writelane: only part of the destination changes
  bool gfx942 = false;
  uint8_t counter = 0;        // memory ops: 0 vmcnt, 1 lgkmcnt
  uint8_t passes = 0;         // MFMA passes (4 cycles each)
  uint8_t lane_op = 0;        // 1 v_readlane, 2 v_readfirstlane, 3 v_writelane
  bool lds_dma = false;       // buffer_load_* ... lds: writes LDS at M0 + offset + lane * 4
  bool trans = false;         // transcendental VALU (v_exp, v_log, v_rcp, v_rsq, v_sqrt, v_sin, v_cos)
  bool dst_sel = false;       // VALU writing a shifted part of its VGPR (op_sel dst bit)
  int8_t wide_store_data = -1;  // operand whose VGPRs a >64-bit store reads late
  int8_t hwreg = -1;          // s_setreg/s_getreg register id
  uint32_t states = 1;        // wait states this instruction provides (s_nop N: N+1)
  uint16_t simm16 = 0;        // SOPP/SOPK immediate (s_waitcnt, s_nop, s_setreg)
};

struct Wave;
struct Inst;
struct Dispatch;
using Handler = void (*)(Wave& w, const Inst& in, Dispatch& d);

struct Inst {
  uint64_t addr = 0;      // offset in the code object image
  uint32_t size = 0;      // bytes
  std::string mnemonic;   // as printed, e.g. "v_add_f32_e32"
  std::string op;         // handler key: mnemonic without _e32/_e64
  std::string text;       // full disassembly, for messages
  std::vector<Operand> ops;
  Mods mods;
  Handler fn = nullptr;
  Handler inner = nullptr;  // DPP: the instruction's own handler (fn permutes src0 first)
  Operand dpp_src;          // DPP: src0 as encoded (ops[dpp_index] reads the permuted copy)
  int8_t dpp_index = -1;
  int aux = 0, aux2 = 0;  // per-family parameters set when the handler is bound (width, condition)
  std::string error;      // set when the bytes could not be decoded or are unsupported
  uint32_t word0 = 0;     // first dword of the encoding (SOPP/SOPK immediates)
  InstInfo info;
  mutable bool executed = false;  // for coverage reports (HALCYON_SIM_COVERAGE)
};

}  // namespace halcyon::amdsim
