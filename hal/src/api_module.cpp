// Modules, kernels and launches.
#include "core.hpp"

#include <cstdio>
#include <string_view>

namespace halcyon::core {
ModuleObj::~ModuleObj() {
  if (be) api().module_destroy(be);
}
KernelObj::~KernelObj() {
  if (be) api().kernel_destroy(be);
}

namespace {
const char* format_name(uint32_t f) {
  switch (f) {
    case HAL_MODULE_PTX: return "ptx";
    case HAL_MODULE_CUBIN: return "cubin";
    case HAL_MODULE_HSACO: return "hsaco";
    case HAL_MODULE_SPIRV: return "spirv";
    case HAL_MODULE_HOST: return "host";
    default: return nullptr;
  }
}
constexpr uint32_t kMaxKernelArgs = 256;

// x * y * z of a launch's grid or block, or false when it does not fit in 64 bits.
bool product(const uint32_t v[3], uint64_t* out) {
  return !__builtin_mul_overflow(uint64_t(v[0]), uint64_t(v[1]), out) && !__builtin_mul_overflow(*out, uint64_t(v[2]), out);
}
}  // namespace
}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_error* hal_module_load(hal_device d, const hal_module_desc* desc, hal_module* out) {
  constexpr const char* fn = "hal_module_load";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    hal_module_desc md{};
    if ((e = read_struct(desc, HAL_MODULE_DESC_MIN_SIZE, &md, fn, "hal_module_desc"))) return e;
    const char* fmt_name = format_name(md.format);
    std::string mname = md.name ? md.name : "<unnamed module>";
    if (!fmt_name) return err(HAL_INVALID_ARGUMENT, "{}: module '{}' has unknown format {}", fn, mname, int(md.format));
    if (!md.data || md.size == 0) return err(HAL_INVALID_ARGUMENT, "{}: module '{}' has no data", fn, mname);
    if (!md.target || !*md.target)
      return err(HAL_INVALID_ARGUMENT, "{}: module '{}' has no target architecture tag", fn, mname);
    // The device advertises the formats it loads as "module.<format>" capabilities.
    std::string cap = std::string("module.") + fmt_name;
    std::string caps = std::string(" ") + dev->info.capabilities + " ";
    if (caps.find(" " + cap + " ") == std::string::npos)
      return err(HAL_ARCH_MISMATCH, "{}: module '{}' is {} for {}, but {} ({}) does not load {} modules",
                 fn, mname, fmt_name, md.target, dev->uri, dev->info.arch, fmt_name);
    auto m = std::make_shared<ModuleObj>(dev);
    m->name = mname;
    if ((e = dev->api().module_load(dev->be, &md, &m->be))) return e;
    *out = reinterpret_cast<hal_module>(handle_insert(m));
    return nullptr;
  })
}

HAL_API hal_error* hal_device_can_run(hal_device d, uint32_t format, const char* target, bool* yes, char* reason,
                                      size_t reason_capacity) {
  constexpr const char* fn = "hal_device_can_run";
  HAL_CORE_GUARD(fn, {
    if (!yes) return err(HAL_INVALID_ARGUMENT, "{}: yes is NULL", fn);
    *yes = false;
    if (reason && reason_capacity) reason[0] = 0;
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    const char* fmt_name = format_name(format);
    if (!fmt_name) return err(HAL_INVALID_ARGUMENT, "{}: unknown module format {}", fn, format);
    if (!target || !*target) return err(HAL_INVALID_ARGUMENT, "{}: target is NULL or empty", fn);
    auto say = [&](const std::string& why) {
      if (reason && reason_capacity) std::snprintf(reason, reason_capacity, "%s", why.c_str());
    };
    std::string caps = std::string(" ") + dev->info.capabilities + " ";
    if (caps.find(std::string(" module.") + fmt_name + " ") == std::string::npos) {
      say(fmt::format("{} ({}) does not load {} modules", dev->uri, dev->info.arch, fmt_name));
      return nullptr;
    }
    if (dev->backend->has_device_can_run()) {
      // The backend writes into scratch of a known size; the caller gets it cut to its own.
      char why[256] = {};
      bool ok = false;
      if ((e = dev->api().device_can_run(dev->be, format, target, &ok, why, sizeof why))) return e;
      why[sizeof why - 1] = 0;
      *yes = ok;
      if (!ok) say(why[0] ? std::string(why) : fmt::format("{} for {} does not run on {} ({})", fmt_name, target,
                                                           dev->uri, dev->info.arch));
      return nullptr;
    }
    // A backend of ABI 1.2 or older: only code built for exactly this architecture.
    *yes = std::string_view(target) == dev->info.arch;
    if (!*yes)
      say(fmt::format("{} for {} does not run on {} ({}): backend {} runs only code built for exactly its arch", fmt_name,
                      target, dev->uri, dev->info.arch, dev->backend->name));
    return nullptr;
  })
}

HAL_API hal_error* hal_module_retain(hal_module h) {
  HAL_CORE_GUARD("hal_module_retain", { return handle_retain(reinterpret_cast<uint64_t>(h), ObjType::Module, "hal_module_retain"); })
}
HAL_API hal_error* hal_module_release(hal_module h) {
  HAL_CORE_GUARD("hal_module_release", { return handle_release(reinterpret_cast<uint64_t>(h), ObjType::Module, "hal_module_release"); })
}

HAL_API hal_error* hal_module_get_kernel(hal_module h, const char* name, hal_kernel* out) {
  constexpr const char* fn = "hal_module_get_kernel";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    *out = nullptr;
    hal_error* e = nullptr;
    auto m = lookup<ModuleObj>(h, fn, "module", &e);
    if (!m) return e;
    if (!name || !*name) return err(HAL_INVALID_ARGUMENT, "{}: kernel name is NULL or empty", fn);
    auto k = std::make_shared<KernelObj>(m->device, m);
    k->info.struct_size = sizeof k->info;
    k->args.resize(kMaxKernelArgs);
    if ((e = m->api().kernel_get(m->be, name, &k->be, &k->info, k->args.data(), kMaxKernelArgs))) return e;
    if (k->info.arg_count > kMaxKernelArgs)
      return err(HAL_INTERNAL, "{}: backend reported {} arguments for '{}'", fn, k->info.arg_count, name);
    k->args.resize(k->info.arg_count);
    k->info.struct_size = sizeof k->info;
    k->info.next = nullptr;
    std::snprintf(k->info.name, sizeof k->info.name, "%s", name);
    for (auto& a : k->args)
      if (uint64_t(a.offset) + a.size > k->info.args_size)
        return err(HAL_INTERNAL, "{}: kernel '{}' argument at {}+{} lies past its {}-byte blob", fn,
                   name, a.offset, a.size, k->info.args_size);
    *out = reinterpret_cast<hal_kernel>(handle_insert(k));
    return nullptr;
  })
}

HAL_API hal_error* hal_kernel_get_info(hal_kernel h, hal_kernel_info* out) {
  constexpr const char* fn = "hal_kernel_get_info";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto k = lookup<KernelObj>(h, fn, "kernel", &e);
    if (!k) return e;
    if ((e = check_out_struct(out, HAL_KERNEL_INFO_MIN_SIZE, fn, "hal_kernel_info"))) return e;
    write_struct(k->info, out);
    return nullptr;
  })
}

HAL_API hal_error* hal_kernel_get_arg(hal_kernel h, uint32_t index, hal_kernel_arg* out) {
  constexpr const char* fn = "hal_kernel_get_arg";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto k = lookup<KernelObj>(h, fn, "kernel", &e);
    if (!k) return e;
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    if (index >= k->args.size())
      return err(HAL_OUT_OF_RANGE, "{}: kernel '{}' has {} argument(s), index {} asked for", fn,
                 k->info.name, k->args.size(), index);
    *out = k->args[index];
    return nullptr;
  })
}

HAL_API hal_error* hal_kernel_retain(hal_kernel h) {
  HAL_CORE_GUARD("hal_kernel_retain", { return handle_retain(reinterpret_cast<uint64_t>(h), ObjType::Kernel, "hal_kernel_retain"); })
}
HAL_API hal_error* hal_kernel_release(hal_kernel h) {
  HAL_CORE_GUARD("hal_kernel_release", { return handle_release(reinterpret_cast<uint64_t>(h), ObjType::Kernel, "hal_kernel_release"); })
}

HAL_API hal_error* hal_stream_launch(hal_stream st, hal_kernel kh, const hal_launch_desc* desc) {
  constexpr const char* fn = "hal_stream_launch";
  HAL_CORE_GUARD(fn, {
    hal_error* e = nullptr;
    auto s = lookup<StreamObj>(st, fn, "stream", &e);
    if (!s) return e;
    auto k = lookup<KernelObj>(kh, fn, "kernel", &e);
    if (!k) return e;
    hal_launch_desc ld{};
    if ((e = read_struct(desc, HAL_LAUNCH_DESC_MIN_SIZE, &ld, fn, "hal_launch_desc"))) return e;
    if (k->device->uri != s->device->uri)
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}' was loaded on {}, the stream is on {}", fn,
                 k->info.name, k->device->uri, s->device->uri);
    if (ld.args_size != k->info.args_size)
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}' takes a {}-byte argument blob ({} argument(s)), got {} bytes",
                 fn, k->info.name, k->info.args_size, k->info.arg_count, ld.args_size);
    if (ld.args_size > 0 && !ld.args)
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}': args is NULL", fn, k->info.name);
    for (int i = 0; i < 3; ++i)
      if (ld.grid[i] == 0 || ld.block[i] == 0)
        return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}': grid ({},{},{}) and block ({},{},{}) must be >= 1 in every dimension",
                   fn, k->info.name, ld.grid[0], ld.grid[1], ld.grid[2], ld.block[0], ld.block[1], ld.block[2]);
    uint32_t max_threads = k->info.max_threads_per_block ? k->info.max_threads_per_block
                                                         : s->device->info.max_threads_per_block;
    // Counted in 64 bits: a wrapped product (2^31 x 2^31 x 4 is 0) would pass the limit.
    uint64_t threads = 0;
    if (!product(ld.block, &threads))
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}': block ({}, {}, {}) has 2^64 or more threads", fn,
                 k->info.name, ld.block[0], ld.block[1], ld.block[2]);
    if (max_threads && threads > max_threads)
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}': block of {} threads exceeds its limit of {}", fn,
                 k->info.name, threads, max_threads);
    // Every backend numbers blocks, and kernels their threads, in at most 64 bits: a launch
    // with more would wrap to a few (or none) there. Refused here, whatever the backend's own
    // grid limits are (hal.h's grid is 3 x 32 bits: up to 2^96 blocks).
    uint64_t blocks = 0, all_threads = 0;
    if (!product(ld.grid, &blocks))
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}': grid ({}, {}, {}) has 2^64 or more blocks", fn, k->info.name,
                 ld.grid[0], ld.grid[1], ld.grid[2]);
    if (__builtin_mul_overflow(blocks, threads, &all_threads))
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}': grid ({}, {}, {}) with block ({}, {}, {}) has 2^64 or more threads ({} blocks of {} threads)",
                 fn, k->info.name, ld.grid[0], ld.grid[1], ld.grid[2], ld.block[0], ld.block[1], ld.block[2], blocks,
                 threads);
    uint32_t max_shared = s->device->info.max_shared_per_block;
    if (max_shared && uint64_t(ld.shared_bytes) + k->info.static_shared_bytes > max_shared)
      return err(HAL_INVALID_ARGUMENT, "{}: kernel '{}': {} dynamic + {} static bytes of shared memory exceed {}'s {} per block",
                 fn, k->info.name, ld.shared_bytes, k->info.static_shared_bytes, s->device->uri, max_shared);
    return s->api().stream_launch(s->be, k->be, &ld);
  })
}

}  // extern "C"
