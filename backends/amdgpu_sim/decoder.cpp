#include "decoder.hpp"

#include <llvm/MC/MCAsmInfo.h>
#include <llvm/MC/MCContext.h>
#include <llvm/MC/MCDisassembler/MCDisassembler.h>
#include <llvm/MC/MCInst.h>
#include <llvm/MC/MCInstPrinter.h>
#include <llvm/MC/MCInstrInfo.h>
#include <llvm/MC/MCRegisterInfo.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/MCTargetOptions.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <mutex>

namespace halcyon::amdsim {

// ---- immediates ----

uint32_t Operand::imm32() const {
  if (is_float) return std::bit_cast<uint32_t>(float(fval));
  return uint32_t(ival);
}

uint16_t Operand::imm16() const {
  if (is_float) {
    // Inline constants only: 0.5, 1.0, 2.0, 4.0 and their negatives, 1/(2*pi).
    float f = float(fval);
    uint32_t b = std::bit_cast<uint32_t>(f);
    uint16_t sign = uint16_t((b >> 16) & 0x8000);
    float m = std::fabs(f);
    if (m == 0.5f) return sign | 0x3800;
    if (m == 1.0f) return sign | 0x3c00;
    if (m == 2.0f) return sign | 0x4000;
    if (m == 4.0f) return sign | 0x4400;
    return 0x3118;  // 1/(2*pi) in f16
  }
  return uint16_t(ival);
}

uint64_t Operand::imm64() const {
  if (is_float) return std::bit_cast<uint64_t>(fval);
  return uint64_t(ival);  // negative inline integers sign-extend, literals are >= 0
}

namespace {

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 0);
  if (*end != '\0') {
    unsigned long long u = std::strtoull(s.c_str(), &end, 0);
    if (*end != '\0') return false;
    v = static_cast<long long>(u);
  }
  *out = v;
  return true;
}

// "v5", "s[4:7]", "a[0:15]", "vcc", "exec_lo", "m0" ... -> operand; false if not a register.
bool parse_register(const std::string& t, Operand* o) {
  struct Named {
    const char* name;
    OpKind kind;
    uint16_t index;
    uint8_t count;
  };
  static const Named named[] = {
      {"vcc", OpKind::Vcc, 0, 2},   {"vcc_lo", OpKind::Vcc, 0, 1},   {"vcc_hi", OpKind::Vcc, 1, 1},
      {"exec", OpKind::Exec, 0, 2}, {"exec_lo", OpKind::Exec, 0, 1}, {"exec_hi", OpKind::Exec, 1, 1},
      {"m0", OpKind::M0, 0, 1},     {"scc", OpKind::Scc, 0, 1},      {"off", OpKind::Off, 0, 0},
  };
  for (auto& n : named)
    if (t == n.name) {
      o->kind = n.kind;
      o->index = n.index;
      o->count = n.count;
      return true;
    }
  if (t.size() < 2) return false;
  OpKind kind = t[0] == 's' ? OpKind::Sgpr : t[0] == 'v' ? OpKind::Vgpr : t[0] == 'a' ? OpKind::Agpr : OpKind::None;
  if (kind == OpKind::None) return false;
  int64_t lo = 0, hi = 0;
  if (t[1] == '[') {
    auto colon = t.find(':');
    if (colon == std::string::npos || t.back() != ']') return false;
    if (!parse_int(t.substr(2, colon - 2), &lo) || !parse_int(t.substr(colon + 1, t.size() - colon - 2), &hi)) return false;
  } else {
    if (!std::isdigit(static_cast<unsigned char>(t[1])) || !parse_int(t.substr(1), &lo)) return false;
    hi = lo;
  }
  if (lo < 0 || hi < lo || hi > 511) return false;
  o->kind = kind;
  o->index = uint16_t(lo);
  o->count = uint8_t(hi - lo + 1);
  return true;
}

std::string parse_operand(std::string t, Operand* o) {
  // Source modifiers: -x, |x|, -|x|, neg(x), abs(x).
  if (t.size() > 1 && t[0] == '-' && !std::isdigit(static_cast<unsigned char>(t[1]))) {
    o->neg = true;
    t = t.substr(1);
  }
  if (t.rfind("neg(", 0) == 0 && t.back() == ')') {
    o->neg = true;
    t = t.substr(4, t.size() - 5);
  }
  if (t.size() > 2 && t.front() == '|' && t.back() == '|') {
    o->abs = true;
    t = t.substr(1, t.size() - 2);
  }
  if (t.rfind("abs(", 0) == 0 && t.back() == ')') {
    o->abs = true;
    t = t.substr(4, t.size() - 5);
  }
  if (parse_register(t, o)) return "";
  int64_t v;
  if (parse_int(t, &v)) {
    o->kind = OpKind::Imm;
    o->ival = v;
    return "";
  }
  if (t.find('.') != std::string::npos) {
    char* end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (*end == '\0') {
      o->kind = OpKind::Imm;
      o->is_float = true;
      o->fval = d;
      return "";
    }
  }
  return "unsupported operand '" + t + "'";
}

uint8_t parse_bits(const std::string& list) {  // "[0,1,1]" -> bit mask
  uint8_t m = 0;
  int i = 0;
  for (char c : list) {
    if (c == '0' || c == '1') m |= uint8_t((c - '0') << i++);
  }
  return m;
}

// DPP controls as printed -> dpp_ctrl (see Mods). True if `t` is one.
bool parse_dpp_control(const std::string& key, const std::string& val, const std::string& t, Mods* m) {
  struct Shift {
    const char* key;
    uint16_t base;
    int64_t lo, hi;
  };
  static const Shift shifts[] = {{"row_shl", 0x100, 1, 15},  {"row_shr", 0x110, 1, 15}, {"row_ror", 0x120, 1, 15},
                                 {"wave_shl", 0x130 - 1, 1, 1}, {"wave_rol", 0x134 - 1, 1, 1},
                                 {"wave_shr", 0x138 - 1, 1, 1}, {"wave_ror", 0x13c - 1, 1, 1},
                                 {"row_bcast", 0x142 - 15, 15, 15}};
  int64_t v = 0;
  for (const Shift& s : shifts)
    if (key == s.key && parse_int(val, &v) && v >= s.lo && v <= s.hi) {
      m->dpp_ctrl = uint16_t(s.base + v);
      return true;
    }
  if (key == "row_bcast" && val == "31") m->dpp_ctrl = 0x143;
  else if (t == "row_mirror") m->dpp_ctrl = 0x140;
  else if (t == "row_half_mirror") m->dpp_ctrl = 0x141;
  else if (key == "quad_perm") {
    uint16_t q = 0;
    int n = 0;
    for (char c : val)
      if (c >= '0' && c <= '3') q = uint16_t(q | ((c - '0') << (2 * n++)));
    if (n != 4) return false;
    m->dpp_ctrl = q;
  } else if (key == "row_mask" && parse_int(val, &v)) m->row_mask = uint8_t(v & 0xf);
  else if (key == "bank_mask" && parse_int(val, &v)) m->bank_mask = uint8_t(v & 0xf);
  else if (key == "bound_ctrl" && parse_int(val, &v)) m->bound_ctrl = true;  // printed only when set
  else return false;
  return true;
}

std::string parse_modifier(const std::string& t, Mods* m) {
  auto colon = t.find(':');
  std::string key = t.substr(0, colon), val = colon == std::string::npos ? "" : t.substr(colon + 1);
  int64_t v = 0;
  if (m->dpp && parse_dpp_control(key, val, t, m)) {}
  else if (key == "offset" && parse_int(val, &v)) m->offset = v;
  else if (key == "offset0" && parse_int(val, &v)) m->offset0 = uint32_t(v);
  else if (key == "offset1" && parse_int(val, &v)) m->offset1 = uint32_t(v);
  else if (t == "offen") m->offen = true;
  else if (t == "idxen") m->idxen = true;
  else if (t == "clamp") m->clamp = true;
  else if (t == "lds") m->lds = true;
  else if (t == "mul:2") m->omod = 2.0f;
  else if (t == "mul:4") m->omod = 4.0f;
  else if (t == "div:2") m->omod = 0.5f;
  else if (key == "op_sel") m->op_sel = parse_bits(val);
  else if (key == "op_sel_hi") { m->op_sel_hi = parse_bits(val); m->has_op_sel_hi = true; }
  else if (key == "neg_lo") m->neg_lo = parse_bits(val);
  else if (key == "neg_hi") m->neg_hi = parse_bits(val);
  // Cache-policy bits change nothing in a functional model.
  else if (t == "glc" || t == "slc" || t == "nt" || t == "sc0" || t == "sc1" || t == "dlc") {}
  else if ((key == "cbsz" || key == "abid" || key == "blgp") && parse_int(val, &v) && v == 0) {}
  else return "unsupported modifier '" + t + "'";
  return "";
}

// Instructions whose operands do not matter to a functional model.
bool operands_ignored(const std::string& op) {
  return op == "s_waitcnt" || op == "s_nop" || op == "s_setprio" || op == "s_sleep" || op == "s_waitcnt_vscnt" ||
         op == "s_waitcnt_lgkmcnt" || op == "s_waitcnt_vmcnt" || op == "s_endpgm" || op == "s_barrier" ||
         op == "s_code_end" || op == "buffer_wbl2" || op == "buffer_inv" || op == "s_dcache_wb" ||
         op == "s_icache_inv" || op == "buffer_wbinvl1_vol" || op == "buffer_wbinvl1";
}

}  // namespace

std::string parse_operands(const std::string& text, Inst* in) {
  // Whitespace tokens; parentheses keep "hwreg(A, 0, 1)" together.
  std::vector<std::string> toks;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (std::isspace(static_cast<unsigned char>(c)) && depth <= 0) {
      if (!cur.empty()) toks.push_back(cur), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) toks.push_back(cur);
  if (toks.empty()) return "empty instruction text";
  // s_setreg/s_getreg: hwreg(...) is read from the encoding (Inst::word0), not parsed here.
  std::erase_if(toks, [](const std::string& t) { return t.rfind("hwreg(", 0) == 0; });
  in->mnemonic = toks[0];
  in->op = in->mnemonic;
  for (const char* suffix : {"_e32", "_e64"}) {
    size_t n = std::strlen(suffix);
    if (in->op.size() > n && in->op.compare(in->op.size() - n, n, suffix) == 0) in->op.resize(in->op.size() - n);
  }
  if (in->op.find("_sdwa") != std::string::npos) return "SDWA forms are not simulated";
  if (in->op.size() > 4 && in->op.compare(in->op.size() - 4, 4, "_dpp") == 0) {
    in->op.resize(in->op.size() - 4);
    in->mods.dpp = true;
  }
  if (operands_ignored(in->op)) return "";
  bool operands = true;
  for (size_t i = 1; i < toks.size(); ++i) {
    std::string t = toks[i];
    if (operands) {
      bool more = !t.empty() && t.back() == ',';
      if (more) t.pop_back();
      Operand o;
      if (std::string e = parse_operand(t, &o); !e.empty()) {
        // Not an operand: the modifiers start here (an instruction may have no operands).
        if (in->ops.empty() || !more) {
          operands = false;
          if (std::string m = parse_modifier(t, &in->mods); !m.empty()) return e;
          continue;
        }
        return e;
      }
      in->ops.push_back(o);
      operands = more;
    } else if (std::string e = parse_modifier(t, &in->mods); !e.empty()) {
      return e;
    }
  }
  return "";
}

// ---- LLVM MC ----

struct Decoder::Impl {
  std::unique_ptr<llvm::MCRegisterInfo> mri;
  std::unique_ptr<llvm::MCAsmInfo> mai;
  std::unique_ptr<llvm::MCSubtargetInfo> sti;
  std::unique_ptr<llvm::MCInstrInfo> mii;
  std::unique_ptr<llvm::MCContext> ctx;
  std::unique_ptr<llvm::MCDisassembler> dis;
  std::unique_ptr<llvm::MCInstPrinter> printer;
  std::mutex mu;
};

Decoder::Decoder(const std::string& cpu) : impl_(std::make_unique<Impl>()), cpu_(cpu) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUDisassembler();
  });
  const std::string triple_name = "amdgcn-amd-amdhsa";
  llvm::Triple triple(triple_name);
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple_name, err);
  if (!target) throw SimError("LLVM has no AMDGPU target: " + err);
  auto& m = *impl_;
  m.mri.reset(target->createMCRegInfo(triple_name));
  llvm::MCTargetOptions options;
  m.mai.reset(target->createMCAsmInfo(*m.mri, triple_name, options));
  m.sti.reset(target->createMCSubtargetInfo(triple_name, cpu, ""));
  m.mii.reset(target->createMCInstrInfo());
  if (!m.mri || !m.mai || !m.sti || !m.mii) throw SimError("LLVM could not set up the AMDGPU MC layer for " + cpu);
  m.ctx = std::make_unique<llvm::MCContext>(triple, m.mai.get(), m.mri.get(), m.sti.get());
  m.dis.reset(target->createMCDisassembler(*m.sti, *m.ctx));
  m.printer.reset(target->createMCInstPrinter(triple, 0, *m.mai, *m.mii, *m.mri));
  if (!m.dis || !m.printer) throw SimError("LLVM has no AMDGPU disassembler or printer");
}

Decoder::~Decoder() = default;

Inst Decoder::decode(const unsigned char* bytes, size_t available, uint64_t addr) const {
  Inst in;
  in.addr = addr;
  in.size = 4;
  std::lock_guard lock(impl_->mu);
  llvm::MCInst mc;
  uint64_t size = 0;
  auto status = impl_->dis->getInstruction(mc, size, llvm::ArrayRef<uint8_t>(bytes, available), addr, llvm::nulls());
  if (status != llvm::MCDisassembler::Success || size == 0) {
    uint32_t word = 0;
    std::memcpy(&word, bytes, available >= 4 ? 4 : available);
    in.text = fmt::format("<undecodable 0x{:08x}>", word);
    in.error = "the bytes do not decode as a " + std::string(impl_->sti->getCPU()) + " instruction";
    return in;
  }
  in.size = uint32_t(size);
  std::memcpy(&in.word0, bytes, 4);
  std::string text;
  llvm::raw_string_ostream os(text);
  impl_->printer->printInst(&mc, addr, "", *impl_->sti, os);
  os.flush();
  size_t b = text.find_first_not_of(" \t");
  in.text = b == std::string::npos ? text : text.substr(b);
  in.error = parse_operands(in.text, &in);
  return in;
}

}  // namespace halcyon::amdsim
