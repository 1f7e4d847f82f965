// SPIR-V modules, kernels and launches. The module is read by spirv_reader first: a module
// for another device, or bytes that are not SPIR-V, are refused before any driver call, and
// the kernels' parameter lists give hal_kernel_get_arg's layout (Level Zero does not say which
// argument is a pointer). A module the driver cannot build is an error carrying its build log.
#include <algorithm>
#include <bit>
#include <cstring>

#include "ze_internal.hpp"

namespace halcyon::ze {

namespace {

// The driver's build log, or "" (zeModuleBuildLogGetString: size first, then the text).
std::string build_log(const Symbols& z, ze_module_build_log_handle_t log) {
  if (!log) return {};
  size_t n = 0;
  std::string text;
  if (z.zeModuleBuildLogGetString(log, &n, nullptr) == ZE_RESULT_SUCCESS && n > 0) {
    text.resize(n);
    if (z.zeModuleBuildLogGetString(log, &n, text.data()) != ZE_RESULT_SUCCESS) text.clear();
    text.resize(strnlen(text.c_str(), text.size()));
  }
  logged(z.zeModuleBuildLogDestroy(log), "zeModuleBuildLogDestroy");
  return text;
}

}  // namespace

hal_error* module_load(Device* d, const hal_module_desc* desc, Module** out) {
  HAL_BACKEND_GUARD({
    auto m = std::make_unique<Module>();
    m->device = d;
    m->name = desc->name ? desc->name : "<unnamed module>";
    if (std::strcmp(desc->target, "spirv64") != 0 && d->arch != desc->target)
      return error(HAL_ARCH_MISMATCH, fmt::format("ze: module '{}' targets {}, but '{}' is {} (SPIR-V tagged spirv64 "
                                                  "runs on every Level Zero device)",
                                                  m->name, desc->target, d->props.name, d->arch));
    std::string why;
    if (!spirv::parse(desc->data, desc->size, &m->spirv, &why))
      return error(HAL_INVALID_ARGUMENT, fmt::format("ze: module '{}' is not usable SPIR-V: {}", m->name, why));
    const Symbols& z = d->s();
    ze_module_desc_t md{ZE_STRUCTURE_TYPE_MODULE_DESC, nullptr, ZE_MODULE_FORMAT_IL_SPIRV, desc->size,
                        static_cast<const uint8_t*>(desc->data), "", nullptr};
    ze_module_build_log_handle_t log = nullptr;
    ze_result_t r = z.zeModuleCreate(d->backend->context, d->handle, &md, &m->module, &log);
    std::string text = build_log(z, log);
    if (r != ZE_RESULT_SUCCESS) {
      m->module = nullptr;
      return error(r == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY ? HAL_OUT_OF_MEMORY : HAL_DEVICE_ERROR,
                   fmt::format("ze: module '{}': zeModuleCreate failed: {}; build log: {}", m->name, result_name(r),
                               text.empty() ? "(empty)" : text));
    }
    *out = m.release();
    return nullptr;
  })
}

void module_destroy(Module* m) {
  if (m->module) logged(m->device->s().zeModuleDestroy(m->module), "zeModuleDestroy");
  delete m;
}

namespace {

// The packed blob: each parameter at the next offset aligned to its size (up to 16 bytes), as a
// C struct of the same fields lays them out; the total rounded up to the largest alignment.
// __local pointers take no bytes: the launch's shared_bytes is their size.
uint32_t lay_out(const spirv::Kernel& k, std::vector<hal_kernel_arg>* args) {
  uint32_t offset = 0, align_max = 1;
  for (const auto& p : k.params) {
    if (p.kind == spirv::ParamKind::kLocalPointer) continue;
    uint32_t align = std::clamp<uint32_t>(std::bit_floor(std::max(p.size, 1u)), 1, 16);
    offset = (offset + align - 1) / align * align;
    args->push_back({offset, p.size, p.kind == spirv::ParamKind::kGlobalPointer ? uint32_t(HAL_ARG_POINTER)
                                                                                 : uint32_t(HAL_ARG_VALUE)});
    offset += p.size;
    align_max = std::max(align_max, align);
  }
  return (offset + align_max - 1) / align_max * align_max;
}

std::string kernel_names(const spirv::Module& m) {
  std::string s;
  for (auto& k : m.kernels) s += (s.empty() ? "" : ", ") + k.name;
  return s;
}

}  // namespace

hal_error* kernel_get(Module* m, const char* name, Kernel** out, hal_kernel_info* info, hal_kernel_arg* args,
                      uint32_t cap) {
  HAL_BACKEND_GUARD({
    const spirv::Kernel* sk = m->spirv.find(name);
    if (!sk)
      return error(HAL_NOT_FOUND, fmt::format("ze: module '{}' has no kernel '{}' (it has: {})", m->name, name,
                                              kernel_names(m->spirv)));
    auto k = std::make_unique<Kernel>();
    k->module = m;
    k->spirv = sk;
    const uint32_t blob = lay_out(*sk, &k->args);
    if (k->args.size() > cap)
      return error(HAL_OUT_OF_RANGE, fmt::format("ze: kernel '{}' has {} arguments", name, k->args.size()));
    const Symbols& z = m->device->s();
    ze_kernel_desc_t kd{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, name};
    ZE_CHECK(z.zeKernelCreate(m->module, &kd, &k->kernel));
    ze_kernel_properties_t props{};
    props.stype = ZE_STRUCTURE_TYPE_KERNEL_PROPERTIES;
    if (hal_error* e = check(z.zeKernelGetProperties(k->kernel, &props), "zeKernelGetProperties")) {
      kernel_destroy(k.release());
      return e;
    }
    std::snprintf(info->name, sizeof info->name, "%s", name);
    info->arg_count = uint32_t(k->args.size());
    info->args_size = blob;
    const uint32_t* req = sk->required_group;
    info->max_threads_per_block = req[0] ? req[0] * std::max(req[1], 1u) * std::max(req[2], 1u)
                                         : m->device->compute.maxTotalGroupSize;
    info->static_shared_bytes = props.localMemSize;
    std::copy(k->args.begin(), k->args.end(), args);
    *out = k.release();
    return nullptr;
  })
}

void kernel_destroy(Kernel* k) {
  if (k->kernel) logged(k->module->device->s().zeKernelDestroy(k->kernel), "zeKernelDestroy");
  delete k;
}

hal_error* stream_launch(Stream* s, Kernel* k, const hal_launch_desc* d) {
  const Symbols& z = s->device->s();
  const auto* blob = static_cast<const unsigned char*>(d->args);
  // Arguments are state of the kernel object until the launch is appended: one launch of a
  // kernel at a time sets them. The stream's lock is held for the append (Stream::mu), after
  // the kernel's (the lock order there).
  std::lock_guard lock(k->mu);
  std::lock_guard slock(s->mu);
  ZE_CHECK(z.zeKernelSetGroupSize(k->kernel, d->block[0], d->block[1], d->block[2]));
  size_t next = 0;
  for (uint32_t i = 0; i < k->spirv->params.size(); ++i) {
    if (k->spirv->params[i].kind == spirv::ParamKind::kLocalPointer) {
      ZE_CHECK(z.zeKernelSetArgumentValue(k->kernel, i, d->shared_bytes, nullptr));
      continue;
    }
    const hal_kernel_arg& a = k->args[next++];
    ZE_CHECK(z.zeKernelSetArgumentValue(k->kernel, i, a.size, blob + a.offset));
  }
  ze_group_count_t groups{d->grid[0], d->grid[1], d->grid[2]};
  // On a list not made in order, barriers on both sides: the kernel starts once the stream's
  // earlier copies are done (they append no barrier of their own), and what follows starts once
  // it is done.
  ZE_CHECK(order_barrier(s));
  ZE_CHECK(z.zeCommandListAppendLaunchKernel(s->list, k->kernel, &groups, nullptr, 0, nullptr));
  ZE_CHECK(order_barrier(s));
  return nullptr;
}

}  // namespace halcyon::ze
