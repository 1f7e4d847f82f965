// libFuzzer target: the AMD code-object reader (backends/amd_common/hsaco.cpp: ELF, notes,
// msgpack metadata, kernel descriptors), which the HIP backend and amdgpu-sim run on every
// module they are given. Any input must give a code object or an error.
#include "hsaco.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  halcyon::hsaco::CodeObject co;
  std::string error;
  if (!halcyon::hsaco::parse(data, size, &co, &error)) {
    if (error.empty()) std::abort();  // a refusal says why
    return 0;
  }
  for (const auto& k : co.kernels) (void)k.explicit_args_size();
  return 0;
}
