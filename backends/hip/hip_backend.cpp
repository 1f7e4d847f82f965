// The HIP backend: AMD GPUs through libamdhip64, opened with dlopen at run time so that one
// binary runs on machines with and without ROCm. Signatures come from the real HIP headers
// (Debian's libamdhip64-dev); every symbol is resolved through the table in hip_symbols.hpp.
// Code objects are read with halcyon::hsaco before the driver sees them: the kernel argument
// layout comes from their metadata and a module for another architecture is refused first.
#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cu_mask.hpp"
#include "hip_symbols.hpp"
#include "hsaco.hpp"

using halcyon::plugin::error;
namespace hip = halcyon::hip;

struct hal_be_backend {
  hip::Library lib;
  int device_count = 0;
};

struct hal_be_device {
  hal_be_backend* backend;
  int index;
  std::string name, arch;  // arch without feature suffix: "gfx942"
  hip::CuLayout layout;
  std::mutex mu;
  std::set<uint32_t> claimed_cus;  // CUs held by live partitions
  const hip::Symbols& s() const { return backend->lib.sym; }
};

struct hal_be_partition {
  hal_be_device* device;
  std::vector<uint32_t> cus;
  std::vector<uint32_t> mask;
};

struct hal_be_buffer {
  hal_be_device* device;
  void* ptr;
  bool host;
};

struct hal_be_stream {
  hal_be_device* device;
  hipStream_t stream;
};

struct hal_be_event {
  hal_be_device* device;
  hipEvent_t event;
};

struct hal_be_module {
  hal_be_device* device;
  hipModule_t module;
  halcyon::hsaco::CodeObject code;
  std::string name;
};

struct hal_be_kernel {
  hipFunction_t function;
};

namespace {

// Turns a failed HIP call into an error naming the call, the HIP error and its text.
hal_error* check(const hip::Symbols& s, hipError_t rc, const char* what, hal_status status = HAL_DEVICE_ERROR) {
  if (rc == hipSuccess) return nullptr;
  const char* name = s.hipGetErrorName ? s.hipGetErrorName(rc) : "?";
  const char* text = s.hipGetErrorString ? s.hipGetErrorString(rc) : "";
  return error(status, fmt::format("hip: {} failed: {} ({}): {}", what, name ? name : "?", int(rc), text ? text : ""));
}
#define HIP_CHECK(dev, call) \
  if (hal_error* e_ = check((dev)->s(), (dev)->s().call, #call)) return e_

// Teardown cannot return an error; a failure there is logged.
void logged(hipError_t rc, const char* what) {
  if (rc != hipSuccess) halcyon::plugin::log(HAL_LOG_WARNING, fmt::format("hip: {} failed during teardown ({})", what, int(rc)));
}

// HIP's current device is per thread: every entry point that creates something selects it.
hal_error* use(hal_be_device* d) { return check(d->s(), d->s().hipSetDevice(d->index), "hipSetDevice"); }

hal_error* hip_create(const hal_host_api* host, hal_be_backend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    auto b = std::make_unique<hal_be_backend>();
    std::string why;
    if (!b->lib.open(&why)) return error(HAL_UNAVAILABLE, "hip: " + why);
    const hip::Symbols& s = b->lib.sym;
    hipError_t rc = s.hipInit(0);
    if (rc != hipSuccess) {
      // The usual cause: no amdgpu kernel driver, so no /dev/kfd to open.
      std::string kfd = access("/dev/kfd", R_OK | W_OK) == 0 ? "/dev/kfd is accessible"
                                                             : fmt::format("/dev/kfd: {}", std::strerror(errno));
      return error(HAL_UNAVAILABLE, fmt::format("hip: {} loaded, but hipInit failed: {} ({}); no usable AMD GPU ({})",
                                                b->lib.path, s.hipGetErrorName(rc), int(rc), kfd));
    }
    rc = s.hipGetDeviceCount(&b->device_count);
    if (rc != hipSuccess || b->device_count <= 0)
      return error(HAL_UNAVAILABLE, fmt::format("hip: {} loaded, but it sees no AMD GPU ({})", b->lib.path,
                                                rc == hipSuccess ? "0 devices" : s.hipGetErrorName(rc)));
    *out = b.release();
    return nullptr;
  })
}

void hip_destroy(hal_be_backend* b) { delete b; }

hal_error* hip_device_count(hal_be_backend* b, uint32_t* out) {
  *out = uint32_t(b->device_count);
  return nullptr;
}

int attribute(const hip::Symbols& s, hipDeviceAttribute_t a, int index) {
  int v = 0;
  if (s.hipDeviceGetAttribute(&v, a, index) != hipSuccess) return 0;
  return v;
}

hal_error* hip_device_open(hal_be_backend* b, uint32_t index, hal_be_device** out) {
  HAL_BACKEND_GUARD({
    auto d = std::make_unique<hal_be_device>();
    d->backend = b;
    d->index = int(index);
    const hip::Symbols& s = b->lib.sym;
    if (hal_error* e = use(d.get())) return e;
    char name[256] = {};
    HIP_CHECK(d, hipDeviceGetName(name, sizeof name - 1, d->index));
    d->name = name;
    d->arch = b->lib.arch_name(d->index);
    d->layout = hip::cu_layout(d->arch, uint32_t(attribute(s, hipDeviceAttributeMultiprocessorCount, d->index)));
    *out = d.release();
    return nullptr;
  })
}

void hip_device_close(hal_be_device* d) { delete d; }

hal_error* hip_device_info(hal_be_device* d, hal_device_info* info) {
  const hip::Symbols& s = d->s();
  std::snprintf(info->name, sizeof info->name, "%s", d->name.c_str());
  std::snprintf(info->vendor, sizeof info->vendor, "AMD");
  std::snprintf(info->arch, sizeof info->arch, "%s", d->arch.c_str());
  info->compute_units = d->layout.cu_count;
  info->simd_width = uint32_t(attribute(s, hipDeviceAttributeWarpSize, d->index));
  size_t total = 0;
  if (s.hipDeviceTotalMem(&total, d->index) == hipSuccess) info->memory_bytes = total;
  info->max_shared_per_block = uint32_t(attribute(s, hipDeviceAttributeMaxSharedMemoryPerBlock, d->index));
  info->max_threads_per_block = uint32_t(attribute(s, hipDeviceAttributeMaxThreadsPerBlock, d->index));
  info->clock_khz = uint32_t(attribute(s, hipDeviceAttributeClockRate, d->index));
  info->l2_cache_bytes = uint64_t(attribute(s, hipDeviceAttributeL2CacheSize, d->index));
  std::snprintf(info->capabilities, sizeof info->capabilities, "module.hsaco events.timing%s",
                s.hipExtStreamCreateWithCUMask ? " partition.cu_mask partition.enforced" : "");
  return nullptr;
}

hal_error* hip_buffer_create(hal_be_device* d, const hal_buffer_desc* desc, hal_be_buffer** out,
                             uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    if (hal_error* e = use(d)) return e;
    void* p = nullptr;
    bool pinned = desc->kind == HAL_MEMORY_HOST_PINNED;
    if (desc->size > 0) {
      hipError_t rc = pinned ? d->s().hipHostMalloc(&p, desc->size, 0) : d->s().hipMalloc(&p, desc->size);
      if (hal_error* e = check(d->s(), rc, pinned ? "hipHostMalloc" : "hipMalloc",
                               rc == hipErrorOutOfMemory ? HAL_OUT_OF_MEMORY : HAL_DEVICE_ERROR))
        return e;
    }
    *out = new hal_be_buffer{d, p, pinned};
    *address = reinterpret_cast<uint64_t>(p);
    *host = pinned ? p : nullptr;
    return nullptr;
  })
}

void hip_buffer_destroy(hal_be_buffer* b) {
  if (!b->ptr) {
    delete b;
    return;
  }
  const hip::Symbols& s = b->device->s();
  logged(s.hipSetDevice(b->device->index), "hipSetDevice");
  logged(s.hipDeviceSynchronize(), "hipDeviceSynchronize");  // queued work may still use it
  if (b->host)
    logged(s.hipHostFree(b->ptr), "hipHostFree");
  else
    logged(s.hipFree(b->ptr), "hipFree");
  delete b;
}

hal_error* hip_stream_create(hal_be_device* d, hal_be_partition* part, const hal_stream_desc*,
                             hal_be_stream** out) {
  HAL_BACKEND_GUARD({
    if (hal_error* e = use(d)) return e;
    hipStream_t st = nullptr;
    if (part) {
      std::string why = hip::validate_cu_mask(part->mask, d->layout.cu_count);
      if (!why.empty()) return error(HAL_INTERNAL, "hip: refusing partition stream: " + why);
      HIP_CHECK(d, hipExtStreamCreateWithCUMask(&st, uint32_t(part->mask.size()), part->mask.data()));
    } else {
      HIP_CHECK(d, hipStreamCreateWithFlags(&st, hipStreamNonBlocking));
    }
    *out = new hal_be_stream{d, st};
    return nullptr;
  })
}

void hip_stream_destroy(hal_be_stream* s) {
  logged(s->device->s().hipStreamSynchronize(s->stream), "hipStreamSynchronize");
  logged(s->device->s().hipStreamDestroy(s->stream), "hipStreamDestroy");
  delete s;
}

hal_error* hip_stream_synchronize(hal_be_stream* s) {
  HIP_CHECK(s->device, hipStreamSynchronize(s->stream));
  return nullptr;
}

char* at(hal_be_buffer* b, uint64_t off) { return static_cast<char*>(b->ptr) + off; }

hal_error* hip_stream_write(hal_be_stream* s, hal_be_buffer* dst, uint64_t off, const void* src, uint64_t size) {
  if (size == 0) return nullptr;
  HIP_CHECK(s->device, hipMemcpyAsync(at(dst, off), src, size, hipMemcpyHostToDevice, s->stream));
  return nullptr;
}

hal_error* hip_stream_read(hal_be_stream* s, hal_be_buffer* src, uint64_t off, void* dst, uint64_t size) {
  if (size == 0) return nullptr;
  HIP_CHECK(s->device, hipMemcpyAsync(dst, at(src, off), size, hipMemcpyDeviceToHost, s->stream));
  return nullptr;
}

hal_error* hip_stream_copy(hal_be_stream* s, hal_be_buffer* dst, uint64_t doff, hal_be_buffer* src,
                           uint64_t soff, uint64_t size) {
  if (size == 0) return nullptr;
  HIP_CHECK(s->device, hipMemcpyAsync(at(dst, doff), at(src, soff), size, hipMemcpyDeviceToDevice, s->stream));
  return nullptr;
}

hal_error* hip_stream_fill(hal_be_stream* s, hal_be_buffer* dst, uint64_t off, uint64_t size,
                           uint32_t pattern, uint32_t psize) {
  if (size == 0) return nullptr;
  auto p = reinterpret_cast<hipDeviceptr_t>(at(dst, off));
  if (psize == 1) {
    HIP_CHECK(s->device, hipMemsetD8Async(p, uint8_t(pattern), size, s->stream));
  } else if (psize == 2) {
    HIP_CHECK(s->device, hipMemsetD16Async(p, uint16_t(pattern), size / 2, s->stream));
  } else {
    HIP_CHECK(s->device, hipMemsetD32Async(p, int(pattern), size / 4, s->stream));
  }
  return nullptr;
}

hal_error* hip_stream_wait_event(hal_be_stream* s, hal_be_event* ev) {
  HIP_CHECK(s->device, hipStreamWaitEvent(s->stream, ev->event, 0));
  return nullptr;
}

hal_error* hip_stream_launch(hal_be_stream* s, hal_be_kernel* k, const hal_launch_desc* d) {
  // HIP copies the explicit-argument buffer at launch and appends the hidden arguments.
  size_t size = d->args_size;
  std::vector<unsigned char> blob(static_cast<const unsigned char*>(d->args),
                                  static_cast<const unsigned char*>(d->args) + size);
  void* extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, blob.data(), HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   HIP_LAUNCH_PARAM_END};
  HIP_CHECK(s->device, hipModuleLaunchKernel(k->function, d->grid[0], d->grid[1], d->grid[2], d->block[0],
                                             d->block[1], d->block[2], d->shared_bytes, s->stream, nullptr,
                                             size ? extra : nullptr));
  return nullptr;
}

hal_error* hip_event_create(hal_be_device* d, const hal_event_desc* desc, hal_be_event** out) {
  HAL_BACKEND_GUARD({
    if (hal_error* e = use(d)) return e;
    hipEvent_t ev = nullptr;
    unsigned flags = (desc->flags & HAL_EVENT_TIMING) ? hipEventDefault : hipEventDisableTiming;
    HIP_CHECK(d, hipEventCreateWithFlags(&ev, flags));
    *out = new hal_be_event{d, ev};
    return nullptr;
  })
}

void hip_event_destroy(hal_be_event* ev) {
  logged(ev->device->s().hipEventDestroy(ev->event), "hipEventDestroy");
  delete ev;
}

hal_error* hip_event_record(hal_be_event* ev, hal_be_stream* s) {
  HIP_CHECK(ev->device, hipEventRecord(ev->event, s->stream));
  return nullptr;
}

hal_error* hip_event_query(hal_be_event* ev, bool* complete) {
  hipError_t rc = ev->device->s().hipEventQuery(ev->event);
  if (rc == hipErrorNotReady) {
    *complete = false;
    return nullptr;
  }
  *complete = true;
  return check(ev->device->s(), rc, "hipEventQuery");
}

hal_error* hip_event_synchronize(hal_be_event* ev) {
  HIP_CHECK(ev->device, hipEventSynchronize(ev->event));
  return nullptr;
}

hal_error* hip_event_elapsed_ms(hal_be_event* a, hal_be_event* b, float* ms) {
  HIP_CHECK(a->device, hipEventElapsedTime(ms, a->event, b->event));
  return nullptr;
}

hal_error* hip_module_load(hal_be_device* d, const hal_module_desc* desc, hal_be_module** out) {
  HAL_BACKEND_GUARD({
    auto m = std::make_unique<hal_be_module>();
    m->device = d;
    m->name = desc->name ? desc->name : "<unnamed module>";
    std::string target = desc->target;
    std::string want = target.substr(0, target.find(':'));
    if (want != d->arch)
      return error(HAL_ARCH_MISMATCH, fmt::format("hip: module '{}' targets {}, but {} is {}", m->name, target,
                                                  d->name, d->arch));
    std::string why;
    if (!halcyon::hsaco::parse(desc->data, desc->size, &m->code, &why))
      return error(HAL_INVALID_ARGUMENT, fmt::format("hip: module '{}' is not a usable code object: {}", m->name, why));
    if (m->code.arch != d->arch)
      return error(HAL_ARCH_MISMATCH, fmt::format("hip: module '{}' was tagged {} but its code object is for {}; "
                                                  "{} is {}", m->name, target, m->code.arch, d->name, d->arch));
    if (hal_error* e = use(d)) return e;
    HIP_CHECK(d, hipModuleLoadData(&m->module, desc->data));
    *out = m.release();
    return nullptr;
  })
}

void hip_module_destroy(hal_be_module* m) {
  logged(m->device->s().hipModuleUnload(m->module), "hipModuleUnload");
  delete m;
}

hal_error* hip_kernel_get(hal_be_module* m, const char* name, hal_be_kernel** out, hal_kernel_info* info,
                          hal_kernel_arg* args, uint32_t cap) {
  HAL_BACKEND_GUARD({
    const halcyon::hsaco::Kernel* k = m->code.find(name);
    if (!k) {
      std::string names;
      for (auto& kk : m->code.kernels) names += (names.empty() ? "" : ", ") + kk.name;
      return error(HAL_NOT_FOUND, fmt::format("hip: no kernel '{}' in module '{}' (it has: {})", name, m->name, names));
    }
    uint32_t n = 0;
    for (auto& a : k->args)
      if (!a.hidden()) {
        if (n >= cap)
          return error(HAL_OUT_OF_RANGE, fmt::format("hip: kernel '{}' has more than {} arguments", name, cap));
        args[n++] = {a.offset, a.size, a.value_kind == "global_buffer" ? HAL_ARG_POINTER : HAL_ARG_VALUE};
      }
    info->arg_count = n;
    info->args_size = k->explicit_args_size();
    info->max_threads_per_block = k->max_flat_workgroup_size;
    info->static_shared_bytes = k->group_segment_fixed_size;
    info->registers = k->vgpr_count;
    hipFunction_t f = nullptr;
    HIP_CHECK(m->device, hipModuleGetFunction(&f, m->module, name));
    *out = new hal_be_kernel{f};
    return nullptr;
  })
}

void hip_kernel_destroy(hal_be_kernel* k) { delete k; }

hal_error* hip_partition_split(hal_be_device* d, const hal_partition_desc* desc, hal_be_partition** part,
                               hal_partition_info* pinfo, hal_be_partition** rem, hal_partition_info* rinfo) {
  HAL_BACKEND_GUARD({
    if (!d->s().hipExtStreamCreateWithCUMask)
      return error(HAL_UNSUPPORTED, fmt::format("hip: {} does not export hipExtStreamCreateWithCUMask", d->backend->lib.path));
    std::lock_guard lock(d->mu);
    std::vector<uint32_t> free_cus;
    for (uint32_t c = 0; c < d->layout.cu_count; ++c)
      if (!d->claimed_cus.count(c)) free_cus.push_back(c);
    uint32_t want = hip::round_units(d->layout, desc->units);
    if (desc->units == 0 || want > free_cus.size() || (rem && want == free_cus.size()))
      return error(HAL_OUT_OF_RANGE,
                   fmt::format("hip: asked for {} CUs (rounded to {}, steps of {} for {} XCDs){}; {} of {} are free",
                               desc->units, want, d->layout.xcds, d->layout.xcds, rem ? " plus a non-empty remainder" : "",
                               free_cus.size(), d->layout.cu_count));
    auto make = [&](std::vector<uint32_t> cus, uint32_t requested, hal_partition_info* info) -> hal_be_partition* {
      auto mask = hip::make_cu_mask(d->layout, cus);
      std::string why = hip::validate_cu_mask(mask, d->layout.cu_count);
      if (!why.empty()) throw std::runtime_error(why);
      for (uint32_t c : cus) d->claimed_cus.insert(c);
      info->units_requested = requested;
      info->units_granted = uint32_t(cus.size());
      info->mechanism = HAL_PARTITION_CU_MASK;
      info->enforced = 1;
      info->granularity = d->layout.xcds;
      info->first_unit = cus.front();
      return new hal_be_partition{d, std::move(cus), std::move(mask)};
    };
    std::vector<uint32_t> mine(free_cus.begin(), free_cus.begin() + want);
    std::vector<uint32_t> rest(free_cus.begin() + want, free_cus.end());
    *part = make(mine, desc->units, pinfo);
    if (rem) *rem = make(rest, uint32_t(rest.size()), rinfo);
    return nullptr;
  })
}

void hip_partition_destroy(hal_be_partition* p) {
  std::lock_guard lock(p->device->mu);
  for (uint32_t c : p->cus) p->device->claimed_cus.erase(c);
  delete p;
}

const hal_backend_api kApi = {
    sizeof(hal_backend_api),
    nullptr,
    HAL_ABI_MAJOR,
    HAL_ABI_MINOR,
    "hip",
    "AMD GPUs through HIP (libamdhip64, loaded at run time)",
    hip_create,
    hip_destroy,
    hip_device_count,
    nullptr,
    hip_device_open,
    hip_device_close,
    hip_device_info,
    hip_buffer_create,
    hip_buffer_destroy,
    hip_stream_create,
    hip_stream_destroy,
    hip_stream_synchronize,
    hip_stream_write,
    hip_stream_read,
    hip_stream_copy,
    hip_stream_fill,
    hip_stream_wait_event,
    hip_stream_launch,
    hip_event_create,
    hip_event_destroy,
    hip_event_record,
    hip_event_query,
    hip_event_synchronize,
    hip_event_elapsed_ms,
    hip_module_load,
    hip_module_destroy,
    hip_kernel_get,
    hip_kernel_destroy,
    hip_partition_split,
    hip_partition_destroy,
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_hip(void) { return &kApi; }
