// What a backend that loads HSA code objects (hip, amdgpu-sim) tells hal about a kernel:
// its explicit arguments and limits, read from the code object's metadata.
#pragma once

#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <fmt/format.h>

#include <string>

#include "hsaco.hpp"

namespace halcyon::hsaco {

// Looks `name` up in `code` and fills `info` and `args` (capacity `cap`). `backend` and
// `module_name` only word the errors. On success *kernel is the metadata entry.
inline hal_error* describe_kernel(const CodeObject& code, const char* backend, const std::string& module_name,
                                  const char* name, hal_kernel_info* info, hal_kernel_arg* args, uint32_t cap,
                                  const Kernel** kernel) {
  const Kernel* k = code.find(name);
  if (!k) {
    std::string names;
    for (auto& kk : code.kernels) names += (names.empty() ? "" : ", ") + kk.name;
    return plugin::error(HAL_NOT_FOUND,
                         fmt::format("{}: no kernel '{}' in module '{}' (it has: {})", backend, name, module_name, names));
  }
  uint32_t n = 0;
  for (auto& a : k->args)
    if (!a.hidden()) {
      if (n >= cap)
        return plugin::error(HAL_OUT_OF_RANGE, fmt::format("{}: kernel '{}' has more than {} arguments", backend, name, cap));
      args[n++] = {a.offset, a.size, a.value_kind == "global_buffer" ? uint32_t(HAL_ARG_POINTER) : uint32_t(HAL_ARG_VALUE)};
    }
  info->arg_count = n;
  info->args_size = k->explicit_args_size();
  info->max_threads_per_block = k->max_flat_workgroup_size;  // 0: the device's limit applies
  info->static_shared_bytes = k->group_segment_fixed_size;
  info->registers = k->vgpr_count;
  *kernel = k;
  return nullptr;
}

}  // namespace halcyon::hsaco
