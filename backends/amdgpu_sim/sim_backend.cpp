// amdgpu-sim: a functional simulator of gfx942 (MI300X, CDNA3) and gfx90a (MI250, CDNA2)
// behind hal.h. It loads the same HSA code objects the HIP backend loads, decodes them with
// LLVM's AMDGPU disassembler and interprets them wave by wave on the host. Device memory is
// host memory; every allocation is registered so that a kernel's out-of-bounds access is an
// error naming the address and the buffer. Streams execute synchronously, so a fault in a
// kernel is returned by the launch call itself.
#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "decoder.hpp"
#include "executor.hpp"
#include "hsaco.hpp"
#include "memory.hpp"

using halcyon::plugin::error;
namespace sim = halcyon::amdsim;

namespace {

struct Model {
  const char* arch;
  const char* name;
  uint32_t compute_units;
  uint64_t memory_bytes;  // what the modelled part has (capped at the host's memory)
};
const Model kModels[] = {
    {"gfx942", "AMD Instinct MI300X (amdgpu-sim functional model)", 304, 192ull << 30},
    {"gfx90a", "AMD Instinct MI250X GCD (amdgpu-sim functional model)", 110, 64ull << 30},
};
constexpr uint32_t kLdsPerWorkgroup = 64 * 1024;

}  // namespace

struct hal_be_backend {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<sim::Decoder>> decoders;  // per arch, made on first use
};

struct hal_be_device {
  hal_be_backend* backend;
  const Model* model;
  sim::Memory memory;
  std::mutex mu;
  uint64_t next_buffer = 0;

  std::shared_ptr<sim::Decoder> decoder() {
    std::lock_guard lock(backend->mu);
    auto& d = backend->decoders[model->arch];
    if (!d) d = std::make_shared<sim::Decoder>(model->arch);
    return d;
  }
};

struct hal_be_buffer {
  hal_be_device* device;
  void* data;
};

struct hal_be_stream {
  hal_be_device* device;
};

struct hal_be_event {
  std::chrono::steady_clock::time_point when{};
  bool recorded = false;
};

struct hal_be_module {
  hal_be_device* device;
  std::string name;
  halcyon::hsaco::CodeObject code;
  std::vector<unsigned char> image;  // the loaded image the kernels execute from
  std::mutex mu;
  std::map<std::string, std::shared_ptr<sim::Program>> programs;
};

struct hal_be_kernel {
  hal_be_module* module;
  std::shared_ptr<sim::Program> program;
};

namespace {

hal_error* sim_create(const hal_host_api* host, hal_be_backend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    *out = new hal_be_backend;
    return nullptr;
  })
}

void sim_destroy(hal_be_backend* b) { delete b; }

hal_error* sim_device_count(hal_be_backend*, uint32_t* out) {
  *out = uint32_t(std::size(kModels));
  return nullptr;
}

hal_error* sim_device_resolve(hal_be_backend*, const char* selector, uint32_t* index) {
  std::string s = selector;
  for (uint32_t i = 0; i < std::size(kModels); ++i)
    if (s == kModels[i].arch || s == std::to_string(i)) {
      *index = i;
      return nullptr;
    }
  return error(HAL_NOT_FOUND, fmt::format("amdgpu-sim: no device '{}' (have: 0 or gfx942, 1 or gfx90a)", s));
}

hal_error* sim_device_open(hal_be_backend* b, uint32_t index, hal_be_device** out) {
  HAL_BACKEND_GUARD({
    auto* d = new hal_be_device;
    d->backend = b;
    d->model = &kModels[index];
    *out = d;
    return nullptr;
  })
}

void sim_device_close(hal_be_device* d) { delete d; }

hal_error* sim_device_info(hal_be_device* d, hal_device_info* info) {
  std::snprintf(info->name, sizeof info->name, "%s", d->model->name);
  std::snprintf(info->vendor, sizeof info->vendor, "AMD");
  std::snprintf(info->arch, sizeof info->arch, "%s", d->model->arch);
  info->compute_units = d->model->compute_units;
  info->simd_width = 64;
  // Device memory is host memory: never report more than the host has.
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  uint64_t host = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : d->model->memory_bytes;
  info->memory_bytes = std::min(d->model->memory_bytes, host);
  info->max_shared_per_block = kLdsPerWorkgroup;
  info->max_threads_per_block = 1024;
  std::snprintf(info->capabilities, sizeof info->capabilities,
                "module.hsaco events.timing simulator wave64 mfma.bf16 mfma.f16");
  return nullptr;
}

hal_error* sim_buffer_create(hal_be_device* d, const hal_buffer_desc* desc, hal_be_buffer** out, uint64_t* address,
                             void** host) {
  HAL_BACKEND_GUARD({
    void* p = nullptr;
    uint64_t id;
    {
      std::lock_guard lock(d->mu);
      id = d->next_buffer++;
    }
    if (desc->size > 0) {
      size_t align = desc->alignment > 256 ? size_t(desc->alignment) : 256;
      p = std::aligned_alloc(align, (size_t(desc->size) + align - 1) / align * align);
      if (!p) return error(HAL_OUT_OF_MEMORY, fmt::format("amdgpu-sim: could not allocate {} bytes", desc->size));
      d->memory.add(reinterpret_cast<uint64_t>(p), desc->size,
                    fmt::format("buffer #{} ({} bytes)", id, desc->size));
    }
    *out = new hal_be_buffer{d, p};
    *address = reinterpret_cast<uint64_t>(p);
    // Device memory is not host-visible on a GPU; keep it that way so code written against the
    // simulator also works on hardware.
    *host = desc->kind == HAL_MEMORY_HOST_PINNED ? p : nullptr;
    return nullptr;
  })
}

void sim_buffer_destroy(hal_be_buffer* b) {
  if (b->data) b->device->memory.remove(reinterpret_cast<uint64_t>(b->data));
  std::free(b->data);
  delete b;
}

hal_error* sim_stream_create(hal_be_device* d, hal_be_partition*, const hal_stream_desc*, hal_be_stream** out) {
  HAL_BACKEND_GUARD({
    *out = new hal_be_stream{d};
    return nullptr;
  })
}

void sim_stream_destroy(hal_be_stream* s) { delete s; }
hal_error* sim_stream_synchronize(hal_be_stream*) { return nullptr; }

char* at(hal_be_buffer* b, uint64_t off) { return static_cast<char*>(b->data) + off; }

// Transfers hold the memory lock so that they never overlap a launch on another stream.
hal_error* sim_stream_write(hal_be_stream* s, hal_be_buffer* dst, uint64_t off, const void* src, uint64_t size) {
  std::lock_guard lock(s->device->memory.mutex());
  if (size) std::memcpy(at(dst, off), src, size);
  return nullptr;
}

hal_error* sim_stream_read(hal_be_stream* s, hal_be_buffer* src, uint64_t off, void* dst, uint64_t size) {
  std::lock_guard lock(s->device->memory.mutex());
  if (size) std::memcpy(dst, at(src, off), size);
  return nullptr;
}

hal_error* sim_stream_copy(hal_be_stream* s, hal_be_buffer* dst, uint64_t doff, hal_be_buffer* src, uint64_t soff,
                           uint64_t size) {
  std::lock_guard lock(s->device->memory.mutex());
  if (size) std::memmove(at(dst, doff), at(src, soff), size);
  return nullptr;
}

hal_error* sim_stream_fill(hal_be_stream* s, hal_be_buffer* dst, uint64_t off, uint64_t size, uint32_t pattern,
                           uint32_t psize) {
  std::lock_guard lock(s->device->memory.mutex());
  char* p = at(dst, off);
  for (uint64_t i = 0; i < size; i += psize) std::memcpy(p + i, &pattern, psize);
  return nullptr;
}

hal_error* sim_stream_wait_event(hal_be_stream*, hal_be_event*) { return nullptr; }  // work is done at enqueue

hal_error* sim_stream_launch(hal_be_stream* s, hal_be_kernel* k, const hal_launch_desc* desc) {
  HAL_BACKEND_GUARD({
    sim::LaunchParams p{};
    std::memcpy(p.grid, desc->grid, sizeof p.grid);
    std::memcpy(p.block, desc->block, sizeof p.block);
    p.dynamic_lds = desc->shared_bytes;
    p.args = desc->args;
    p.args_size = desc->args_size;
    p.code_base = reinterpret_cast<uint64_t>(k->module->image.data());
    if (const char* env = std::getenv("HALCYON_SIM_MAX_INSTRUCTIONS")) p.max_instructions = std::strtoull(env, nullptr, 10);
    try {
      sim::run_kernel(*k->program, s->device->memory, p);
    } catch (const sim::SimError& e) {
      return error(HAL_DEVICE_ERROR, std::string("amdgpu-sim: ") + e.what());
    }
    return nullptr;
  })
}

hal_error* sim_event_create(hal_be_device*, const hal_event_desc*, hal_be_event** out) {
  HAL_BACKEND_GUARD({
    *out = new hal_be_event;
    return nullptr;
  })
}

void sim_event_destroy(hal_be_event* ev) { delete ev; }

hal_error* sim_event_record(hal_be_event* ev, hal_be_stream*) {
  ev->when = std::chrono::steady_clock::now();
  ev->recorded = true;
  return nullptr;
}

hal_error* sim_event_query(hal_be_event*, bool* complete) {
  *complete = true;
  return nullptr;
}

hal_error* sim_event_synchronize(hal_be_event*) { return nullptr; }

hal_error* sim_event_elapsed_ms(hal_be_event* a, hal_be_event* b, float* ms) {
  if (!a->recorded || !b->recorded)
    return error(HAL_FAILED_PRECONDITION, "amdgpu-sim: hal_event_elapsed_ms: an event was never recorded");
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return nullptr;
}

hal_error* sim_module_load(hal_be_device* d, const hal_module_desc* desc, hal_be_module** out) {
  HAL_BACKEND_GUARD({
    auto m = std::make_unique<hal_be_module>();
    m->device = d;
    m->name = desc->name ? desc->name : "<unnamed module>";
    std::string target = desc->target;
    if (target.substr(0, target.find(':')) != d->model->arch)
      return error(HAL_ARCH_MISMATCH, fmt::format("amdgpu-sim: module '{}' targets {}, but this device simulates {}",
                                                  m->name, target, d->model->arch));
    std::string why;
    if (!halcyon::hsaco::parse(desc->data, desc->size, &m->code, &why))
      return error(HAL_INVALID_ARGUMENT, fmt::format("amdgpu-sim: module '{}' is not a usable code object: {}", m->name, why));
    if (m->code.arch != d->model->arch)
      return error(HAL_ARCH_MISMATCH, fmt::format("amdgpu-sim: module '{}' is tagged {} but its code object is for {}; "
                                                  "this device simulates {}",
                                                  m->name, target, m->code.arch, d->model->arch));
    m->image = m->code.load_image();
    *out = m.release();
    return nullptr;
  })
}

void sim_module_destroy(hal_be_module* m) { delete m; }

hal_error* sim_kernel_get(hal_be_module* m, const char* name, hal_be_kernel** out, hal_kernel_info* info,
                          hal_kernel_arg* args, uint32_t cap) {
  HAL_BACKEND_GUARD({
    const halcyon::hsaco::Kernel* k = m->code.find(name);
    if (!k) {
      std::string names;
      for (auto& kk : m->code.kernels) names += (names.empty() ? "" : ", ") + kk.name;
      return error(HAL_NOT_FOUND, fmt::format("amdgpu-sim: no kernel '{}' in module '{}' (it has: {})", name, m->name, names));
    }
    uint32_t n = 0;
    for (auto& a : k->args)
      if (!a.hidden()) {
        if (n >= cap) return error(HAL_OUT_OF_RANGE, fmt::format("amdgpu-sim: kernel '{}' has more than {} arguments", name, cap));
        args[n++] = {a.offset, a.size, a.value_kind == "global_buffer" ? HAL_ARG_POINTER : HAL_ARG_VALUE};
      }
    info->arg_count = n;
    info->args_size = k->explicit_args_size();
    info->max_threads_per_block = k->max_flat_workgroup_size ? k->max_flat_workgroup_size : 1024;
    info->static_shared_bytes = k->group_segment_fixed_size;
    info->registers = k->vgpr_count;
    std::shared_ptr<sim::Program> prog;
    {
      std::lock_guard lock(m->mu);
      auto& p = m->programs[name];
      if (!p) {
        try {
          p = std::make_shared<sim::Program>(*m->device->decoder(), m->image, *k);
        } catch (const sim::SimError& e) {
          m->programs.erase(name);
          return error(HAL_INTERNAL, std::string("amdgpu-sim: ") + e.what());
        }
      }
      prog = p;
    }
    *out = new hal_be_kernel{m, prog};
    return nullptr;
  })
}

void sim_kernel_destroy(hal_be_kernel* k) { delete k; }

const hal_backend_api kApi = {
    sizeof(hal_backend_api),
    nullptr,
    HAL_ABI_MAJOR,
    HAL_ABI_MINOR,
    "amdgpu-sim",
    "functional simulator of AMD gfx942/gfx90a running HSA code objects on the host",
    sim_create,
    sim_destroy,
    sim_device_count,
    sim_device_resolve,
    sim_device_open,
    sim_device_close,
    sim_device_info,
    sim_buffer_create,
    sim_buffer_destroy,
    sim_stream_create,
    sim_stream_destroy,
    sim_stream_synchronize,
    sim_stream_write,
    sim_stream_read,
    sim_stream_copy,
    sim_stream_fill,
    sim_stream_wait_event,
    sim_stream_launch,
    sim_event_create,
    sim_event_destroy,
    sim_event_record,
    sim_event_query,
    sim_event_synchronize,
    sim_event_elapsed_ms,
    sim_module_load,
    sim_module_destroy,
    sim_kernel_get,
    sim_kernel_destroy,
    nullptr,  // partition_split: a simulator has no compute units to split
    nullptr,
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_amdgpu_sim(void) { return &kApi; }
