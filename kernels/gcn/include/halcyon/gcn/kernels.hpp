// The hand-written AMD kernels (kernels/gcn/src), assembled at build time and embedded here
// with their target. The operator framework looks a kernel up by name and target and loads
// it on a device whose arch matches (hal_module_load with HAL_MODULE_HSACO); the backend reads
// its metadata (backends/amd_common's code-object reader), so this table is data only.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::gcn {

struct KernelImage {
  std::string name;     // kernel symbol, e.g. "halcyon_vector_add_f32"
  std::string target;   // "gfx942" or "gfx90a"
  const unsigned char* data = nullptr;
  size_t size = 0;
  std::string contract;  // text of kernels/gcn/contracts/<name>.kernel (checked at build time)
};

// Every embedded kernel, for every target it was assembled for.
const std::vector<KernelImage>& kernels();
// nullptr when there is no such kernel for that target.
const KernelImage* find(std::string_view name, std::string_view target);

}  // namespace halcyon::gcn
