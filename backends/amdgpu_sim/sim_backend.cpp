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
#include "hsaco_hal.hpp"
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

namespace {

struct SimPartition;  // never made: a simulator has no compute units to split

struct SimBackend {
  sim::LaunchParams options;  // max_instructions and coverage_file from the backend options
  std::string coverage_file;  // what options.coverage_file points at
  std::mutex mu;
  std::map<std::string, std::shared_ptr<sim::Decoder>> decoders;  // per arch, made on first use
};

struct SimDevice {
  SimBackend* backend;
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

struct SimBuffer {
  SimDevice* device;
  void* data;
};

struct SimStream {
  SimDevice* device;
};

struct SimEvent {
  std::chrono::steady_clock::time_point when{};
  bool recorded = false;
};

struct SimModule {
  SimDevice* device;
  std::string name;
  halcyon::hsaco::CodeObject code;
  std::vector<unsigned char> image;  // the loaded image the kernels execute from
  std::mutex mu;
  std::map<std::string, std::shared_ptr<sim::Program>> programs;
};

struct SimKernel {
  SimModule* module;
  std::shared_ptr<sim::Program> program;
};

}  // namespace

HAL_BACKEND_TYPE(SimBackend, hal_be_backend)
HAL_BACKEND_TYPE(SimDevice, hal_be_device)
HAL_BACKEND_TYPE(SimPartition, hal_be_partition)
HAL_BACKEND_TYPE(SimBuffer, hal_be_buffer)
HAL_BACKEND_TYPE(SimStream, hal_be_stream)
HAL_BACKEND_TYPE(SimEvent, hal_be_event)
HAL_BACKEND_TYPE(SimModule, hal_be_module)
HAL_BACKEND_TYPE(SimKernel, hal_be_kernel)

namespace {

hal_error* sim_create(const hal_host_api* host, SimBackend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    auto b = std::make_unique<SimBackend>();
    const char* coverage = halcyon::plugin::option("amdgpu-sim", "coverage");
    if (std::string why = sim::sim_options(halcyon::plugin::option("amdgpu-sim", "max_instructions"), coverage,
                                           &b->options);
        !why.empty())
      return error(HAL_INVALID_ARGUMENT, "amdgpu-sim: " + why);
    if (coverage) b->coverage_file = coverage;
    b->options.coverage_file = coverage ? b->coverage_file.c_str() : nullptr;
    *out = b.release();
    return nullptr;
  })
}

void sim_destroy(SimBackend* b) { delete b; }

hal_error* sim_device_count(SimBackend*, uint32_t* out) {
  *out = uint32_t(std::size(kModels));
  return nullptr;
}

hal_error* sim_device_resolve(SimBackend*, const char* selector, uint32_t* index) {
  std::string s = selector;
  for (uint32_t i = 0; i < std::size(kModels); ++i)
    if (s == kModels[i].arch || s == std::to_string(i)) {
      *index = i;
      return nullptr;
    }
  return error(HAL_NOT_FOUND, fmt::format("amdgpu-sim: no device '{}' (have: 0 or gfx942, 1 or gfx90a)", s));
}

hal_error* sim_device_open(SimBackend* b, uint32_t index, SimDevice** out) {
  HAL_BACKEND_GUARD({
    auto* d = new SimDevice;
    d->backend = b;
    d->model = &kModels[index];
    *out = d;
    return nullptr;
  })
}

void sim_device_close(SimDevice* d) { delete d; }

hal_error* sim_device_info(SimDevice* d, hal_device_info* info) {
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

hal_error* sim_buffer_create(SimDevice* d, const hal_buffer_desc* desc, SimBuffer** out, uint64_t* address,
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
    *out = new SimBuffer{d, p};
    *address = reinterpret_cast<uint64_t>(p);
    // Device memory is not host-visible on a GPU; keep it that way so code written against the
    // simulator also works on hardware.
    *host = desc->kind == HAL_MEMORY_HOST_PINNED ? p : nullptr;
    return nullptr;
  })
}

void sim_buffer_destroy(SimBuffer* b) {
  if (b->data) b->device->memory.remove(reinterpret_cast<uint64_t>(b->data));
  std::free(b->data);
  delete b;
}

hal_error* sim_stream_create(SimDevice* d, SimPartition*, const hal_stream_desc*, SimStream** out) {
  HAL_BACKEND_GUARD({
    *out = new SimStream{d};
    return nullptr;
  })
}

void sim_stream_destroy(SimStream* s) { delete s; }
hal_error* sim_stream_synchronize(SimStream*) { return nullptr; }

char* at(SimBuffer* b, uint64_t off) { return static_cast<char*>(b->data) + off; }

// Transfers hold the memory lock so that they never overlap a launch on another stream.
hal_error* sim_stream_write(SimStream* s, SimBuffer* dst, uint64_t off, const void* src, uint64_t size) {
  std::lock_guard lock(s->device->memory.mutex());
  if (size) std::memcpy(at(dst, off), src, size);
  return nullptr;
}

hal_error* sim_stream_read(SimStream* s, SimBuffer* src, uint64_t off, void* dst, uint64_t size) {
  std::lock_guard lock(s->device->memory.mutex());
  if (size) std::memcpy(dst, at(src, off), size);
  return nullptr;
}

hal_error* sim_stream_copy(SimStream* s, SimBuffer* dst, uint64_t doff, SimBuffer* src, uint64_t soff,
                           uint64_t size) {
  std::lock_guard lock(s->device->memory.mutex());
  if (size) std::memmove(at(dst, doff), at(src, soff), size);
  return nullptr;
}

hal_error* sim_stream_fill(SimStream* s, SimBuffer* dst, uint64_t off, uint64_t size, uint32_t pattern,
                           uint32_t psize) {
  std::lock_guard lock(s->device->memory.mutex());
  char* p = at(dst, off);
  for (uint64_t i = 0; i < size; i += psize) std::memcpy(p + i, &pattern, psize);
  return nullptr;
}

hal_error* sim_stream_wait_event(SimStream*, SimEvent*) { return nullptr; }  // work is done at enqueue

hal_error* sim_stream_launch(SimStream* s, SimKernel* k, const hal_launch_desc* desc) {
  HAL_BACKEND_GUARD({
    sim::LaunchParams p{};
    std::memcpy(p.grid, desc->grid, sizeof p.grid);
    std::memcpy(p.block, desc->block, sizeof p.block);
    p.dynamic_lds = desc->shared_bytes;
    p.args = desc->args;
    p.args_size = desc->args_size;
    p.code_base = reinterpret_cast<uint64_t>(k->module->image.data());
    p.max_instructions = s->device->backend->options.max_instructions;
    p.coverage_file = s->device->backend->options.coverage_file;
    try {
      sim::run_kernel(*k->program, s->device->memory, p);
    } catch (const sim::SimError& e) {
      return error(HAL_DEVICE_ERROR, std::string("amdgpu-sim: ") + e.what());
    }
    return nullptr;
  })
}

hal_error* sim_event_create(SimDevice*, const hal_event_desc*, SimEvent** out) {
  HAL_BACKEND_GUARD({
    *out = new SimEvent;
    return nullptr;
  })
}

void sim_event_destroy(SimEvent* ev) { delete ev; }

hal_error* sim_event_record(SimEvent* ev, SimStream*) {
  ev->when = std::chrono::steady_clock::now();
  ev->recorded = true;
  return nullptr;
}

hal_error* sim_event_query(SimEvent*, bool* complete) {
  *complete = true;
  return nullptr;
}

hal_error* sim_event_synchronize(SimEvent*) { return nullptr; }

hal_error* sim_event_elapsed_ms(SimEvent* a, SimEvent* b, float* ms) {
  if (!a->recorded || !b->recorded)
    return error(HAL_FAILED_PRECONDITION, "amdgpu-sim: hal_event_elapsed_ms: an event was never recorded");
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return nullptr;
}

// A code object runs only on the gfx target this device simulates (feature flags aside).
hal_error* sim_device_can_run(SimDevice* d, uint32_t, const char* target, bool* yes, char* reason, size_t capacity) {
  std::string_view t(target);
  *yes = t.substr(0, t.find(':')) == d->model->arch;
  if (!*yes) std::snprintf(reason, capacity, "a code object for %s does not run on a simulated %s", target,
                           d->model->arch);
  return nullptr;
}

hal_error* sim_module_load(SimDevice* d, const hal_module_desc* desc, SimModule** out) {
  HAL_BACKEND_GUARD({
    auto m = std::make_unique<SimModule>();
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

void sim_module_destroy(SimModule* m) { delete m; }

hal_error* sim_kernel_get(SimModule* m, const char* name, SimKernel** out, hal_kernel_info* info,
                          hal_kernel_arg* args, uint32_t cap) {
  HAL_BACKEND_GUARD({
    const halcyon::hsaco::Kernel* k = nullptr;
    if (hal_error* e = halcyon::hsaco::describe_kernel(m->code, "amdgpu-sim", m->name, name, info, args, cap, &k)) return e;
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
    *out = new SimKernel{m, prog};
    return nullptr;
  })
}

void sim_kernel_destroy(SimKernel* k) { delete k; }

const hal_backend_api kApi = {
    sizeof(hal_backend_api),
    nullptr,
    HAL_ABI_MAJOR,
    HAL_ABI_MINOR,
    "amdgpu-sim",
    "functional simulator of AMD gfx942/gfx90a running HSA code objects on the host",
    HAL_BACKEND_FN(sim_create),
    HAL_BACKEND_FN(sim_destroy),
    HAL_BACKEND_FN(sim_device_count),
    HAL_BACKEND_FN(sim_device_resolve),
    HAL_BACKEND_FN(sim_device_open),
    HAL_BACKEND_FN(sim_device_close),
    HAL_BACKEND_FN(sim_device_info),
    HAL_BACKEND_FN(sim_buffer_create),
    HAL_BACKEND_FN(sim_buffer_destroy),
    HAL_BACKEND_FN(sim_stream_create),
    HAL_BACKEND_FN(sim_stream_destroy),
    HAL_BACKEND_FN(sim_stream_synchronize),
    HAL_BACKEND_FN(sim_stream_write),
    HAL_BACKEND_FN(sim_stream_read),
    HAL_BACKEND_FN(sim_stream_copy),
    HAL_BACKEND_FN(sim_stream_fill),
    HAL_BACKEND_FN(sim_stream_wait_event),
    HAL_BACKEND_FN(sim_stream_launch),
    HAL_BACKEND_FN(sim_event_create),
    HAL_BACKEND_FN(sim_event_destroy),
    HAL_BACKEND_FN(sim_event_record),
    HAL_BACKEND_FN(sim_event_query),
    HAL_BACKEND_FN(sim_event_synchronize),
    HAL_BACKEND_FN(sim_event_elapsed_ms),
    HAL_BACKEND_FN(sim_module_load),
    HAL_BACKEND_FN(sim_module_destroy),
    HAL_BACKEND_FN(sim_kernel_get),
    HAL_BACKEND_FN(sim_kernel_destroy),
    nullptr,  // partition_split: a simulator has no compute units to split
    nullptr,
    nullptr,  // tensor_map_encode: no tensor copy engine
    HAL_BACKEND_FN(sim_device_can_run),
    nullptr,  // partition_caps: no split; the core's soft partitions
    nullptr,  // buffer_import: simulated memory only
    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,  // no communicator
    nullptr,  // stream_import: simulated streams have no native handle
    nullptr,  // stream_native: likewise
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_amdgpu_sim(void) { return &kApi; }
