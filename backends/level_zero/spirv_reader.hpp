// A reader of the parts of a SPIR-V module that a launch needs: its kernels (OpEntryPoint of
// the Kernel execution model) and each kernel's parameters with their sizes and address
// spaces. Level Zero does not say which kernel argument is a pointer, so the argument layout
// of hal_kernel_get_arg comes from here; the fake driver of tests/level_zero reads it too.
// Bad input (truncated words, a wrong magic number, an instruction running past the end,
// unknown parameter types, a value parameter of no bytes or more than 128, a type id defined
// twice, an OpMemoryModel after the types whose pointer size it sets, a function layout
// out of the spec's order: an entry point after a function, a function inside another or never
// ended, a parameter outside a function, a function defined twice) is a false return with the
// reason, never a crash. tests/fuzz/fuzz_spirv.cpp fuzzes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace halcyon::spirv {

enum class ParamKind : uint32_t {
  kValue,          // bytes copied as they are (integers, floats, vectors)
  kGlobalPointer,  // __global or __constant: a device address
  kLocalPointer,   // __local: no bytes; the launch gives its size (dynamic shared memory)
};

struct Param {
  ParamKind kind = ParamKind::kValue;
  uint32_t size = 0;  // bytes of the value (8 for 64-bit pointers); 0 for __local pointers
};

struct Kernel {
  std::string name;
  std::vector<Param> params;
  uint32_t required_group[3] = {0, 0, 0};  // reqd_work_group_size, else zeros
};

struct Module {
  uint32_t version = 0;  // 0x00010000 = SPIR-V 1.0
  uint32_t pointer_bytes = 8;
  std::vector<Kernel> kernels;
  const Kernel* find(const std::string& name) const;
};

inline constexpr uint32_t kMagic = 0x07230203;

bool parse(const void* data, size_t size, Module* out, std::string* why);

}  // namespace halcyon::spirv
