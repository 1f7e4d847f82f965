// libFuzzer target: the SPIR-V reader (backends/level_zero/spirv_reader.cpp), which the Level
// Zero backend runs on every module it is given before any driver call, and whose parameter
// lists become hal_kernel_get_arg's layout. Any input must give a module or an error; a module's
// parameters must be ones a launch can pack.
#include "spirv_reader.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

// What every parameter the reader accepts must look like: a value of 1 to 128 bytes (the
// largest OpenCL kernel argument, a 16-element vector of 64-bit scalars), a global pointer of
// the module's pointer width, a __local pointer of no bytes.
bool param_ok(const halcyon::spirv::Param& p, uint32_t pointer_bytes) {
  using halcyon::spirv::ParamKind;
  switch (p.kind) {
    case ParamKind::kValue: return p.size >= 1 && p.size <= 128;
    case ParamKind::kGlobalPointer: return p.size == pointer_bytes;
    case ParamKind::kLocalPointer: return p.size == 0;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halcyon::spirv::Module m;
  std::string why;
  if (!halcyon::spirv::parse(data, size, &m, &why)) {
    if (why.empty()) std::abort();  // a refusal says why
    return 0;
  }
  if (m.kernels.empty() || (m.pointer_bytes != 4 && m.pointer_bytes != 8)) std::abort();
  for (const auto& k : m.kernels) {
    if (m.find(k.name) == nullptr) std::abort();
    for (const auto& p : k.params)
      if (!param_ok(p, m.pointer_bytes)) std::abort();
  }
  return 0;
}
