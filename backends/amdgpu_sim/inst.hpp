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
  int aux = 0, aux2 = 0;  // per-family parameters set when the handler is bound (width, condition)
  std::string error;      // set when the bytes could not be decoded or are unsupported
};

}  // namespace halcyon::amdsim
