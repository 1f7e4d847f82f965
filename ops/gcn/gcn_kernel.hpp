// Shared by the GCN operator implementations (gcn_ops.cpp, moe_fp8_ops.cpp): the device's
// embedded kernel, and the refusal for shapes past the kernels' 32-bit offsets.
#pragma once

#include <halcyon/gcn/kernels.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <string>

namespace halcyon::gcnop {

// The device's embedded kernel `name`, from a module loaded once per device.
inline Result<Kernel> kernel(const ops::OpContext& ctx, const char* name) {
  auto info = ctx.device.info();
  if (!info) return info.error();
  const gcn::KernelImage* img = gcn::find(name, info->arch);
  if (!img) return Error(HAL_UNSUPPORTED, fmt::format("{} is not built for {} ({})", name, info->uri, info->arch));
  auto m = ctx.module(HAL_MODULE_HSACO, img->target.c_str(), img->data, img->size, name);
  if (!m) return m.error();
  return m->kernel(name);
}

inline Error too_large(const char* op, const std::string& what) {
  return Error(HAL_UNSUPPORTED, fmt::format("{} on GCN: {} exceeds the kernel's 32-bit indexing", op, what));
}

}  // namespace halcyon::gcnop
