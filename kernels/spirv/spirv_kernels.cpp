#include <halcyon/spirv_kernels.hpp>

namespace halcyon::spirv_kernels {

const Image* find(std::string_view name) {
  for (const Image& i : all())
    if (name == i.name) return &i;
  return nullptr;
}

}  // namespace halcyon::spirv_kernels
