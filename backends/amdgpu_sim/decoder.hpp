// Instruction decoding through LLVM's AMDGPU MC disassembler (libLLVM 19): bytes -> MCInst ->
// the canonical assembly text -> Inst operands. Only this file pair includes LLVM headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inst.hpp"

namespace halcyon::amdsim {

class Decoder {
 public:
  // cpu: "gfx942", "gfx90a". Throws SimError when LLVM lacks the AMDGPU target.
  explicit Decoder(const std::string& cpu);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Decodes one instruction at image offset `addr`. On failure the Inst has size 4 and
  // error set; it is never silently skipped (executing it raises the error).
  Inst decode(const unsigned char* bytes, size_t available, uint64_t addr) const;
  const std::string& cpu() const { return cpu_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string cpu_;
};

// Parses the operand text of one instruction ("v[0:1], s2, 1.0 offset:16") into `in`.
// Exposed for the tests. Returns "" or what it could not read.
std::string parse_operands(const std::string& text, Inst* in);

}  // namespace halcyon::amdsim
