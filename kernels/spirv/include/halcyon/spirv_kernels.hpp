// SPIR-V embedded at build time (kernels/spirv): OpenCL C sources compiled by clang and
// llvm-spirv, each module checked by spirv-val, tagged with its target. Load one with
// hal_module_load(format HAL_MODULE_SPIRV, target = image->target): "spirv64" (64-bit
// addressing) runs on every Level Zero device, since the driver compiles SPIR-V for its device.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace halcyon::spirv_kernels {

struct Image {
  const char* name;     // the kernel set: the source file's stem, "basic", "moe"
  const char* target;   // "spirv64"
  const unsigned char* data;
  size_t size;          // bytes (a whole number of 4-byte words)
};

std::span<const Image> all();

// The image of kernel set `name`, or null.
const Image* find(std::string_view name);

}  // namespace halcyon::spirv_kernels
