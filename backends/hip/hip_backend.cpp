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

#include "ccl_comm.hpp"
#include "group_entries.hpp"
#include "cu_mask.hpp"
#include "hip_symbols.hpp"
#include "hsaco.hpp"
#include "hsaco_hal.hpp"

using halcyon::plugin::error;
namespace hip = halcyon::hip;

namespace {

struct HipBackend {
  hip::Library lib;
  int device_count = 0;
  // Option hip.rccl, read when the backend is created (hal.h: every key then; hip.library is
  // read then too, to open the runtime).
  std::string rccl;
};

struct HipDevice {
  HipBackend* backend;
  int index;
  std::string name, arch;  // arch without feature suffix: "gfx942"
  hip::CuLayout layout;
  std::mutex mu;
  std::set<uint32_t> claimed_cus;  // CUs held by live partitions
  const hip::Symbols& s() const { return backend->lib.sym; }
};

struct HipPartition {
  HipDevice* device;
  std::vector<uint32_t> cus;
  std::vector<uint32_t> mask;
};

struct HipBuffer {
  HipDevice* device;
  void* ptr;             // the buffer's address (rounded up to its alignment)
  bool host;
  uint64_t size = 0;     // comm buffers: what was asked for (travels in the export handle)
  bool ipc_mapped = false;  // a peer's buffer, mapped by hipIpcOpenMemHandle
  bool imported = false;    // someone else's memory (hal_buffer_import): never freed here
  bool owner_ordered = false;  // HAL_BUFFER_IMPORT_OWNER_ORDERED: its release need not wait
  void* base = nullptr;        // what hipMalloc / hipHostMalloc returned, when ptr was rounded up
};

// A communicator (hal.h "Communicators"): ranks meet in shared memory; peer buffers are HIP
// IPC memory; the all-to-all runs over RCCL when every rank has its own GPU and librccl loads
// (backends/comm_common/ccl_comm), else it is staged through host memory.
struct HipComm {
  static constexpr const char* kName = "hip communicator";
  HipDevice* device;
  std::unique_ptr<halcyon::comm::ShmGroup> group;
  std::unique_ptr<halcyon::ccl::Comm> rccl;
};

struct HipStream {
  HipDevice* device;
  hipStream_t stream;
  bool imported = false;  // the owner's stream (hal_stream_import): never destroyed or waited for here
};

struct HipEvent {
  HipDevice* device;
  hipEvent_t event;
};

struct HipModule {
  HipDevice* device;
  hipModule_t module;
  halcyon::hsaco::CodeObject code;
  std::string name;
};

struct HipKernel {
  hipFunction_t function;
};

}  // namespace

HAL_BACKEND_TYPE(HipBackend, hal_be_backend)
HAL_BACKEND_TYPE(HipDevice, hal_be_device)
HAL_BACKEND_TYPE(HipPartition, hal_be_partition)
HAL_BACKEND_TYPE(HipBuffer, hal_be_buffer)
HAL_BACKEND_TYPE(HipStream, hal_be_stream)
HAL_BACKEND_TYPE(HipEvent, hal_be_event)
HAL_BACKEND_TYPE(HipModule, hal_be_module)
HAL_BACKEND_TYPE(HipKernel, hal_be_kernel)
HAL_BACKEND_TYPE(HipComm, hal_be_comm)

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
hal_error* use(HipDevice* d) { return check(d->s(), d->s().hipSetDevice(d->index), "hipSetDevice"); }

hal_error* hip_create(const hal_host_api* host, HipBackend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    auto b = std::make_unique<HipBackend>();
    if (const char* rccl = halcyon::plugin::option("hip", "rccl")) b->rccl = rccl;
    const char* library = halcyon::plugin::option("hip", "library");
    if (library && !*library) return error(HAL_INVALID_ARGUMENT, "hip: the backend option hip.library names no file");
    std::string why;
    if (!b->lib.open(library, &why)) return error(HAL_UNAVAILABLE, "hip: " + why);
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

void hip_destroy(HipBackend* b) { delete b; }

hal_error* hip_device_count(HipBackend* b, uint32_t* out) {
  *out = uint32_t(b->device_count);
  return nullptr;
}

// The attributes' numbers are the runtime's ABI: this file is built against the header Debian
// packages (HIP 5.2) and runs against any runtime from 5.x to ROCm 6.x/7.x. Since HIP 5 the enum
// keeps every number (a removed attribute leaves an "Unused" slot); these are the numbers of
// ROCm 6's header too (checked against it on 2026-12-01), so a header that moved one fails here
// instead of asking a runtime for another attribute. hipMemoryType did change in ROCm 6
// (hip_buffer_import handles both).
static_assert(hipDeviceAttributeClockRate == 5 && hipDeviceAttributeL2CacheSize == 19 &&
              hipDeviceAttributeMaxThreadsPerBlock == 56 && hipDeviceAttributeMemoryBusWidth == 59 &&
              hipDeviceAttributeMemoryClockRate == 60 && hipDeviceAttributeMultiprocessorCount == 63 &&
              hipDeviceAttributePciBusId == 67 && hipDeviceAttributePciDeviceId == 68 &&
              hipDeviceAttributePciDomainID == 69 && hipDeviceAttributeMaxSharedMemoryPerBlock == 74 &&
              hipDeviceAttributeWarpSize == 87,
              "hipDeviceAttribute_t numbers differ from HIP 5.2's and ROCm 6's");

int attribute(const hip::Symbols& s, hipDeviceAttribute_t a, int index) {
  int v = 0;
  if (s.hipDeviceGetAttribute(&v, a, index) != hipSuccess) return 0;
  return v;
}

// Communicators need the IPC entries (optional in the table).
bool has_ipc(const hip::Symbols& s) { return s.hipIpcGetMemHandle && s.hipIpcOpenMemHandle && s.hipIpcCloseMemHandle; }

hal_error* hip_device_open(HipBackend* b, uint32_t index, HipDevice** out) {
  HAL_BACKEND_GUARD({
    auto d = std::make_unique<HipDevice>();
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

void hip_device_close(HipDevice* d) { delete d; }

hal_error* hip_device_info(HipDevice* d, hal_device_info* info) {
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
  // Double data rate: two transfers per memory clock (kHz) over the bus (bits).
  info->memory_bytes_per_s = uint64_t(attribute(s, hipDeviceAttributeMemoryClockRate, d->index)) * 1000 * 2 *
                             uint64_t(attribute(s, hipDeviceAttributeMemoryBusWidth, d->index)) / 8;
  std::snprintf(info->capabilities, sizeof info->capabilities, "module.hsaco events.timing%s%s",
                s.hipExtStreamCreateWithCUMask ? " partition.cu_mask partition.enforced" : "",
                has_ipc(s) ? " comm" : "");
  return nullptr;
}

// hipMalloc returns 256-byte-aligned memory; a larger hal_buffer_desc.alignment gets slack to
// round the start up. hipHostMalloc promises no alignment: pinned memory always gets the slack.
constexpr uint64_t kHipMallocAlign = 256;

hal_error* hip_buffer_create(HipDevice* d, const hal_buffer_desc* desc, HipBuffer** out,
                             uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    if (hal_error* e = use(d)) return e;
    void* base = nullptr;
    uint64_t p = 0;
    bool pinned = desc->kind == HAL_MEMORY_HOST_PINNED;
    if (desc->size > 0) {
      const uint64_t align = std::max<uint64_t>(desc->alignment, kHipMallocAlign);
      // The slack below must not wrap: a wrapped size allocates almost nothing for a buffer
      // the core reports at its full size.
      if (desc->size > UINT64_MAX - align)
        return error(HAL_OUT_OF_MEMORY, fmt::format("hip:{}: {} bytes (alignment {}) cannot be allocated: adding the "
                                                    "alignment slack overflows", d->index, desc->size, align));
      const uint64_t bytes = desc->size + (pinned ? align - 1 : (align > kHipMallocAlign ? align : 0));
      hipError_t rc = pinned ? d->s().hipHostMalloc(&base, bytes, 0) : d->s().hipMalloc(&base, bytes);
      if (hal_error* e = check(d->s(), rc, pinned ? "hipHostMalloc" : "hipMalloc",
                               rc == hipErrorOutOfMemory ? HAL_OUT_OF_MEMORY : HAL_DEVICE_ERROR))
        return e;
      p = (reinterpret_cast<uint64_t>(base) + align - 1) / align * align;
    }
    auto b = std::make_unique<HipBuffer>(HipBuffer{d, reinterpret_cast<void*>(p), pinned});
    b->base = base;
    *address = p;
    *host = pinned ? b->ptr : nullptr;
    *out = b.release();
    return nullptr;
  })
}

// hipPointerGetAttributes checks only the start: the whole range must lie in the allocation
// that holds it, or the buffer reaches memory its owner never gave (or nobody owns).
hal_error* check_import_range(HipDevice* d, void* p, uint64_t size) {
  hipDeviceptr_t base = nullptr;
  size_t bytes = 0;
  if (d->s().hipMemGetAddressRange(&base, &bytes, p) != hipSuccess)
    return error(HAL_INVALID_ARGUMENT, fmt::format("hip:{}: importing {}: hipMemGetAddressRange finds no allocation "
                                                   "holding it", d->index, p));
  return halcyon::plugin::check_import_range(fmt::format("hip:{}", d->index), reinterpret_cast<uintptr_t>(p), size,
                                             reinterpret_cast<uintptr_t>(base), bytes);
}

// Someone else's device memory (a PyTorch tensor's, through DLPack): checked to be device
// memory of this GPU, wrapped, never freed here.
hal_error* hip_buffer_import(HipDevice* d, const hal_buffer_import_desc* desc, HipBuffer** out, void** host) {
  HAL_BACKEND_GUARD({
    const hip::Symbols& s = d->s();
    *host = nullptr;
    void* p = reinterpret_cast<void*>(uintptr_t(desc->device_address));
    if (desc->size > 0) {
      if (!s.hipPointerGetAttributes || !s.hipMemGetAddressRange)
        return error(HAL_UNSUPPORTED, fmt::format("hip: {} lacks {}, so imported memory cannot be checked",
                                                  d->backend->lib.path, s.hipPointerGetAttributes
                                                                            ? "hipMemGetAddressRange"
                                                                            : "hipPointerGetAttributes"));
      if (hal_error* e = use(d)) return e;
      hipPointerAttribute_t a{};
      if (s.hipPointerGetAttributes(&a, p) != hipSuccess)
        return error(HAL_INVALID_ARGUMENT, fmt::format("hip:{}: importing {}: not memory the HIP runtime knows",
                                                       d->index, p));
      // HIP 5: Host 0, Device 1, Array 2, Unified 3, Managed 4; ROCm 6: Unregistered 0, Host 1,
      // Device 2, Managed 3.
      const int device_type = d->backend->lib.runtime_major() >= 6 ? 2 : 1;
      if (int(a.memoryType) != device_type)
        return error(HAL_INVALID_ARGUMENT, fmt::format("hip:{}: importing {}: it is not device memory (hipMemoryType "
                                                       "{} of HIP {})", d->index, p, int(a.memoryType),
                                                       d->backend->lib.runtime_major()));
      if (a.device != d->index)
        return error(HAL_INVALID_ARGUMENT, fmt::format("hip:{}: importing {}: it is memory of hip:{}, not of this "
                                                       "device", d->index, p, a.device));
      if (hal_error* e = check_import_range(d, p, desc->size)) return e;
    }
    auto b = std::make_unique<HipBuffer>(HipBuffer{d, p, false});
    b->imported = true;
    b->owner_ordered = (desc->flags & HAL_BUFFER_IMPORT_OWNER_ORDERED) != 0;
    *out = b.release();
    return nullptr;
  })
}

void hip_buffer_destroy(HipBuffer* b) {
  // Not ours to free, but the owner may free it once this returns: queued work first, unless
  // the owner orders its reuse after that work itself.
  if (!b->ptr || (b->imported && b->owner_ordered)) {
    delete b;
    return;
  }
  const hip::Symbols& s = b->device->s();
  logged(s.hipSetDevice(b->device->index), "hipSetDevice");
  logged(s.hipDeviceSynchronize(), "hipDeviceSynchronize");  // queued work may still use it
  if (b->imported) {
    // the owner frees it
  } else if (b->ipc_mapped)
    logged(s.hipIpcCloseMemHandle(b->ptr), "hipIpcCloseMemHandle");
  else if (b->host)
    logged(s.hipHostFree(b->base), "hipHostFree");
  else
    logged(s.hipFree(b->base ? b->base : b->ptr), "hipFree");
  delete b;
}

hal_error* hip_stream_create(HipDevice* d, HipPartition* part, const hal_stream_desc*,
                             HipStream** out) {
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
    *out = new HipStream{d, st};
    return nullptr;
  })
}

// The owner's stream (PyTorch's current HIP stream). 0 is the device's null stream. Checked to
// belong to this device where the runtime can say (hipStreamGetDevice, ROCm 6).
hal_error* hip_stream_import(HipDevice* d, const hal_stream_import_desc* desc, HipStream** out) {
  HAL_BACKEND_GUARD({
    const hip::Symbols& s = d->s();
    if (!s.hipStreamGetDevice)
      return error(HAL_UNSUPPORTED, fmt::format("hip: {} lacks hipStreamGetDevice (ROCm 6), so an imported stream's "
                                                "device cannot be checked", d->backend->lib.path));
    if (hal_error* e = use(d)) return e;
    auto st = reinterpret_cast<hipStream_t>(uintptr_t(desc->native));
    hipDevice_t owner = -1;
    if (hipError_t rc = s.hipStreamGetDevice(st, &owner); rc != hipSuccess)
      return check(s, rc, fmt::format("importing stream 0x{:x}: hipStreamGetDevice", desc->native).c_str(),
                   rc == hipErrorNotSupported ? HAL_UNSUPPORTED : HAL_INVALID_ARGUMENT);
    if (owner != d->index)
      return error(HAL_INVALID_ARGUMENT, fmt::format("hip:{}: importing stream 0x{:x}: it is a stream of hip:{}, "
                                                     "not of this device", d->index, desc->native, owner));
    *out = new HipStream{d, st, true};
    return nullptr;
  })
}

// A created stream is drained and destroyed; an imported one is left to its owner (later frees
// still wait for its work: hip_buffer_destroy synchronizes the whole device).
void hip_stream_destroy(HipStream* s) {
  if (!s->imported) {
    logged(s->device->s().hipStreamSynchronize(s->stream), "hipStreamSynchronize");
    logged(s->device->s().hipStreamDestroy(s->stream), "hipStreamDestroy");
  }
  delete s;
}

// The hipStream_t itself (0 for an imported null stream), as hal_stream_import takes it.
hal_error* hip_stream_native(HipStream* s, uint64_t* out) {
  *out = reinterpret_cast<uintptr_t>(s->stream);
  return nullptr;
}

hal_error* hip_stream_synchronize(HipStream* s) {
  HIP_CHECK(s->device, hipStreamSynchronize(s->stream));
  return nullptr;
}

char* at(HipBuffer* b, uint64_t off) { return static_cast<char*>(b->ptr) + off; }

hal_error* hip_stream_write(HipStream* s, HipBuffer* dst, uint64_t off, const void* src, uint64_t size) {
  if (size == 0) return nullptr;
  HIP_CHECK(s->device, hipMemcpyAsync(at(dst, off), src, size, hipMemcpyHostToDevice, s->stream));
  return nullptr;
}

hal_error* hip_stream_read(HipStream* s, HipBuffer* src, uint64_t off, void* dst, uint64_t size) {
  if (size == 0) return nullptr;
  HIP_CHECK(s->device, hipMemcpyAsync(dst, at(src, off), size, hipMemcpyDeviceToHost, s->stream));
  return nullptr;
}

hal_error* hip_stream_copy(HipStream* s, HipBuffer* dst, uint64_t doff, HipBuffer* src,
                           uint64_t soff, uint64_t size) {
  if (size == 0) return nullptr;
  HIP_CHECK(s->device, hipMemcpyAsync(at(dst, doff), at(src, soff), size, hipMemcpyDeviceToDevice, s->stream));
  return nullptr;
}

hal_error* hip_stream_fill(HipStream* s, HipBuffer* dst, uint64_t off, uint64_t size,
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

hal_error* hip_stream_wait_event(HipStream* s, HipEvent* ev) {
  HIP_CHECK(s->device, hipStreamWaitEvent(s->stream, ev->event, 0));
  return nullptr;
}

hal_error* hip_stream_launch(HipStream* s, HipKernel* k, const hal_launch_desc* d) {
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

hal_error* hip_event_create(HipDevice* d, const hal_event_desc* desc, HipEvent** out) {
  HAL_BACKEND_GUARD({
    if (hal_error* e = use(d)) return e;
    hipEvent_t ev = nullptr;
    unsigned flags = (desc->flags & HAL_EVENT_TIMING) ? hipEventDefault : hipEventDisableTiming;
    HIP_CHECK(d, hipEventCreateWithFlags(&ev, flags));
    *out = new HipEvent{d, ev};
    return nullptr;
  })
}

void hip_event_destroy(HipEvent* ev) {
  logged(ev->device->s().hipEventDestroy(ev->event), "hipEventDestroy");
  delete ev;
}

hal_error* hip_event_record(HipEvent* ev, HipStream* s) {
  HIP_CHECK(ev->device, hipEventRecord(ev->event, s->stream));
  return nullptr;
}

hal_error* hip_event_query(HipEvent* ev, bool* complete) {
  hipError_t rc = ev->device->s().hipEventQuery(ev->event);
  if (rc == hipErrorNotReady) {
    *complete = false;
    return nullptr;
  }
  *complete = true;
  return check(ev->device->s(), rc, "hipEventQuery");
}

hal_error* hip_event_synchronize(HipEvent* ev) {
  HIP_CHECK(ev->device, hipEventSynchronize(ev->event));
  return nullptr;
}

hal_error* hip_event_elapsed_ms(HipEvent* a, HipEvent* b, float* ms) {
  HIP_CHECK(a->device, hipEventElapsedTime(ms, a->event, b->event));
  return nullptr;
}

// A code object runs only on its own gfx target (its feature flags after ':' aside).
hal_error* hip_device_can_run(HipDevice* d, uint32_t, const char* target, bool* yes, char* reason, size_t capacity) {
  std::string_view t(target);
  *yes = t.substr(0, t.find(':')) == d->arch;
  if (!*yes) std::snprintf(reason, capacity, "a code object for %s runs only on %s; %s is %s", target, target,
                           d->name.c_str(), d->arch.c_str());
  return nullptr;
}

hal_error* hip_module_load(HipDevice* d, const hal_module_desc* desc, HipModule** out) {
  HAL_BACKEND_GUARD({
    auto m = std::make_unique<HipModule>();
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

void hip_module_destroy(HipModule* m) {
  logged(m->device->s().hipModuleUnload(m->module), "hipModuleUnload");
  delete m;
}

hal_error* hip_kernel_get(HipModule* m, const char* name, HipKernel** out, hal_kernel_info* info,
                          hal_kernel_arg* args, uint32_t cap) {
  HAL_BACKEND_GUARD({
    const halcyon::hsaco::Kernel* k = nullptr;
    if (hal_error* e = halcyon::hsaco::describe_kernel(m->code, "hip", m->name, name, info, args, cap, &k)) return e;
    hipFunction_t f = nullptr;
    HIP_CHECK(m->device, hipModuleGetFunction(&f, m->module, name));
    *out = new HipKernel{f};
    return nullptr;
  })
}

void hip_kernel_destroy(HipKernel* k) { delete k; }

hal_error* hip_partition_split(HipDevice* d, const hal_partition_desc* desc, HipPartition** part,
                               hal_partition_info* pinfo, HipPartition** rem, hal_partition_info* rinfo) {
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
    auto make = [&](std::vector<uint32_t> cus, uint32_t requested, hal_partition_info* info) -> HipPartition* {
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
      return new HipPartition{d, std::move(cus), std::move(mask)};
    };
    std::vector<uint32_t> mine(free_cus.begin(), free_cus.begin() + want);
    std::vector<uint32_t> rest(free_cus.begin() + want, free_cus.end());
    *part = make(mine, desc->units, pinfo);
    if (rem) *rem = make(rest, uint32_t(rest.size()), rinfo);
    return nullptr;
  })
}

hal_error* hip_partition_caps(HipDevice* d, uint32_t, hal_partition_caps* out) {
  // CU masks in whole rounds over the XCDs, so that every XCD gives the same share (mask bit
  // i lands on XCD i mod xcds: round_units).
  out->min_units = d->layout.xcds ? d->layout.xcds : 1;
  out->step_units = out->min_units;
  out->mechanism = HAL_PARTITION_CU_MASK;
  out->enforced = d->s().hipExtStreamCreateWithCUMask ? 1 : 0;
  return nullptr;
}

void hip_partition_destroy(HipPartition* p) {
  std::lock_guard lock(p->device->mu);
  for (uint32_t c : p->cus) p->device->claimed_cus.erase(c);
  delete p;
}

// ---- communicators ----------------------------------------------------------------------------

// What an exported buffer's handle holds.
struct IpcHandle {
  uint32_t magic;
  uint32_t owner_rank;
  uint64_t size;
  hipIpcMemHandle_t ipc;
};
static_assert(sizeof(IpcHandle) <= HAL_COMM_HANDLE_BYTES);
constexpr uint32_t kIpcHandleMagic = 0x50494843;  // "CHIP"

hal_error* comm_error(hal_status status, const std::string& what) {
  return halcyon::comm::group_error(status, HipComm::kName, what);
}

// The GPU's identity for "do two ranks share one": its PCI address.
uint64_t pci_key(HipDevice* d) {
  const hip::Symbols& s = d->s();
  return uint64_t(attribute(s, hipDeviceAttributePciDomainID, d->index)) << 32 |
         uint64_t(attribute(s, hipDeviceAttributePciBusId, d->index)) << 8 |
         uint64_t(attribute(s, hipDeviceAttributePciDeviceId, d->index));
}

hal_error* hip_comm_create(HipDevice* d, const hal_comm_desc* desc, HipComm** out, hal_comm_info* info) {
  HAL_BACKEND_GUARD({
    if (!has_ipc(d->s()))
      return comm_error(HAL_UNSUPPORTED, d->backend->lib.path + " lacks hipIpcGetMemHandle/hipIpcOpenMemHandle");
    if (hal_error* e = use(d)) return e;
    auto c = std::make_unique<HipComm>();
    c->device = d;
    if (hal_error* e = halcyon::comm::group_join(desc, HipComm::kName, "shm+hipipc", &c->group, info)) return e;
    // The backend option hip.rccl names the library (default librccl.so.1).
    if (auto why = halcyon::ccl::Comm::start(halcyon::ccl::Flavor::kRccl, *c->group, pci_key(d),
                                             d->backend->rccl.empty() ? nullptr : d->backend->rccl.c_str(), &c->rccl);
        !why.empty())
      halcyon::plugin::log(HAL_LOG_INFO, fmt::format("hip communicator '{}': all-to-all staged through host memory, "
                                                     "not RCCL: {}", desc->rendezvous, why));
    if (c->rccl) std::snprintf(info->transport, sizeof info->transport, "rccl+hipipc");
    *out = c.release();
    return nullptr;
  })
}

hal_error* hip_comm_buffer_create(HipComm* c, uint64_t size, HipBuffer** out, uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    HipDevice* d = c->device;
    if (hal_error* e = use(d)) return e;
    void* p = nullptr;
    hipError_t rc = d->s().hipMalloc(&p, std::max<uint64_t>(size, 1));  // IPC needs a real allocation
    if (hal_error* e = check(d->s(), rc, "hipMalloc", rc == hipErrorOutOfMemory ? HAL_OUT_OF_MEMORY : HAL_DEVICE_ERROR))
      return e;
    *out = new HipBuffer{d, p, false, size, false};
    *address = reinterpret_cast<uint64_t>(p);
    *host = nullptr;
    return nullptr;
  })
}

hal_error* hip_comm_buffer_export(HipComm* c, HipBuffer* b, hal_comm_handle* out) {
  HAL_BACKEND_GUARD({
    IpcHandle h{kIpcHandleMagic, c->group->rank(), b->size, {}};
    HIP_CHECK(c->device, hipIpcGetMemHandle(&h.ipc, b->ptr));
    std::memcpy(out->bytes, &h, sizeof h);
    return nullptr;
  })
}

hal_error* hip_comm_buffer_import(HipComm* c, uint32_t peer, const hal_comm_handle* handle, HipBuffer** out,
                                  uint64_t* size, uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    IpcHandle h;
    if (hal_error* e = halcyon::comm::read_handle<HipComm>(handle, kIpcHandleMagic, peer, &h)) return e;
    HipDevice* d = c->device;
    if (hal_error* e = use(d)) return e;
    void* p = nullptr;
    HIP_CHECK(d, hipIpcOpenMemHandle(&p, h.ipc, hipIpcMemLazyEnablePeerAccess));
    *out = new HipBuffer{d, p, false, h.size, true};
    *size = h.size;
    *address = reinterpret_cast<uint64_t>(p);
    *host = nullptr;
    return nullptr;
  })
}

hal_error* hip_comm_all_to_all(HipComm* c, HipStream* s, HipBuffer* send, const uint64_t* send_offsets,
                               const uint64_t* send_sizes, HipBuffer* recv, const uint64_t* recv_offsets,
                               const uint64_t* recv_sizes) {
  HAL_BACKEND_GUARD({
    HipDevice* d = c->device;
    if (hal_error* e = use(d)) return e;
    const auto src = reinterpret_cast<uint64_t>(send->ptr), dst = reinterpret_cast<uint64_t>(recv->ptr);
    if (c->rccl) {  // queued on the stream, no host wait
      if (auto e = c->rccl->all_to_all(src, send_offsets, send_sizes, dst, recv_offsets, recv_sizes, s->stream);
          !e.empty())
        return comm_error(HAL_DEVICE_ERROR, e);
      return nullptr;
    }
    const hip::Symbols& f = d->s();
    auto hip_text = [&](hipError_t rc, const char* what) {
      return rc == hipSuccess ? std::string() : fmt::format("{}: {} ({})", what, f.hipGetErrorName(rc), int(rc));
    };
    halcyon::comm::StagedCopies copies{
        [&](uint32_t p, char* h) {
          return hip_text(f.hipMemcpyAsync(h, reinterpret_cast<void*>(src + send_offsets[p]), send_sizes[p],
                                           hipMemcpyDeviceToHost, s->stream), "hipMemcpyAsync to host");
        },
        [&](uint32_t p, const char* h) {
          return hip_text(f.hipMemcpyAsync(reinterpret_cast<void*>(dst + recv_offsets[p]), h, recv_sizes[p],
                                           hipMemcpyHostToDevice, s->stream), "hipMemcpyAsync to the device");
        },
        [&] { return hip_text(f.hipStreamSynchronize(s->stream), "hipStreamSynchronize"); }};
    if (auto e = halcyon::comm::staged_all_to_all(*c->group, send_sizes, recv_sizes, copies); !e.empty())
      return comm_error(HAL_DEVICE_ERROR, fmt::format("{}: all_to_all staging: {}", d->name, e));
    return nullptr;
  })
}

const hal_backend_api kApi = {
    sizeof(hal_backend_api),
    nullptr,
    HAL_ABI_MAJOR,
    HAL_ABI_MINOR,
    "hip",
    "AMD GPUs through HIP (libamdhip64, loaded at run time)",
    HAL_BACKEND_FN(hip_create),
    HAL_BACKEND_FN(hip_destroy),
    HAL_BACKEND_FN(hip_device_count),
    nullptr,
    HAL_BACKEND_FN(hip_device_open),
    HAL_BACKEND_FN(hip_device_close),
    HAL_BACKEND_FN(hip_device_info),
    HAL_BACKEND_FN(hip_buffer_create),
    HAL_BACKEND_FN(hip_buffer_destroy),
    HAL_BACKEND_FN(hip_stream_create),
    HAL_BACKEND_FN(hip_stream_destroy),
    HAL_BACKEND_FN(hip_stream_synchronize),
    HAL_BACKEND_FN(hip_stream_write),
    HAL_BACKEND_FN(hip_stream_read),
    HAL_BACKEND_FN(hip_stream_copy),
    HAL_BACKEND_FN(hip_stream_fill),
    HAL_BACKEND_FN(hip_stream_wait_event),
    HAL_BACKEND_FN(hip_stream_launch),
    HAL_BACKEND_FN(hip_event_create),
    HAL_BACKEND_FN(hip_event_destroy),
    HAL_BACKEND_FN(hip_event_record),
    HAL_BACKEND_FN(hip_event_query),
    HAL_BACKEND_FN(hip_event_synchronize),
    HAL_BACKEND_FN(hip_event_elapsed_ms),
    HAL_BACKEND_FN(hip_module_load),
    HAL_BACKEND_FN(hip_module_destroy),
    HAL_BACKEND_FN(hip_kernel_get),
    HAL_BACKEND_FN(hip_kernel_destroy),
    HAL_BACKEND_FN(hip_partition_split),
    HAL_BACKEND_FN(hip_partition_destroy),
    nullptr,  // tensor_map_encode: not offered by this backend
    HAL_BACKEND_FN(hip_device_can_run),
    HAL_BACKEND_FN(hip_partition_caps),
    HAL_BACKEND_FN(hip_buffer_import),
    HAL_BACKEND_FN(hip_comm_create),
    HAL_BACKEND_FN(halcyon::comm::group_destroy<HipComm>),
    HAL_BACKEND_FN(halcyon::comm::group_barrier<HipComm>),
    HAL_BACKEND_FN(halcyon::comm::group_all_gather<HipComm>),
    HAL_BACKEND_FN(hip_comm_buffer_create),
    HAL_BACKEND_FN(hip_comm_buffer_export),
    HAL_BACKEND_FN(hip_comm_buffer_import),
    HAL_BACKEND_FN(hip_comm_all_to_all),
    HAL_BACKEND_FN(hip_stream_import),
    HAL_BACKEND_FN(hip_stream_native),
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_hip(void) { return &kApi; }
