// The NVIDIA backend: the CUDA driver API (loaded at run time, see cuda_driver.hpp) behind
// hal.h. Devices are primary contexts; partitions are green contexts; modules are loaded
// into the primary context and, for partitions, as context-independent libraries.
#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <type_traits>
#include <string>
#include <vector>

#include "cuda_driver.hpp"
#include "ptx_cache.hpp"
#include "ptx_info.hpp"
#include "tensor_map.hpp"

using halcyon::plugin::error;
using namespace halcyon::cuda;

namespace {

// Alignment every device allocation gets without asking (hal.h: >= 256 on GPUs).
constexpr uint64_t kDeviceAlign = 256;
constexpr uint64_t kHostAlign = 4096;
// Changes whenever the JIT settings below change, so old cache entries stop matching.
constexpr const char* kJitSettings = "halcyon-jit-1;O4;cuLink";

struct CudaBackend {
  const Driver* d = nullptr;
  int device_count = 0;
  PtxCache cache{""};
};

struct CudaStream;

struct CudaDevice {
  const Driver* d = nullptr;
  CudaBackend* backend = nullptr;
  int ordinal = 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  int cc_major = 0, cc_minor = 0;
  std::string arch;
  std::string uri;
  CUmemoryPool pool = nullptr;     // stream-ordered allocation, when the driver has it
  CUstream alloc_stream = nullptr; // where pool allocations and frees are ordered
  bool green = false;              // green contexts usable on this device
  uint32_t sm_count = 0;
  uint32_t sm_align = 0;           // default partition step (smCoscheduledAlignment)
  std::mutex mu;
  std::set<CudaStream*> streams;
  void synchronize_all();
};

struct CudaPartition {
  CudaDevice* device = nullptr;
  CUgreenCtx green = nullptr;
  CUcontext ctx = nullptr;  // the green context as a CUcontext, when the driver converts it
};

struct CudaBuffer {
  CudaDevice* device = nullptr;
  hal_memory_kind kind = HAL_MEMORY_DEVICE;
  CUdeviceptr base = 0;       // what was allocated
  void* host_base = nullptr;  // pinned allocations
  bool from_pool = false;
  CUdeviceptr address = 0;    // aligned start
};

struct CudaStream {
  CudaDevice* device = nullptr;
  CUstream stream = nullptr;
  CUcontext ctx = nullptr;  // primary or green (converted); null if unknown
};

struct CudaEvent {
  CudaDevice* device = nullptr;
  std::mutex mu;
  CUevent event = nullptr;
  CUcontext ctx = nullptr;  // the context the CUevent was created in
  unsigned flags = 0;
};

// One image, loaded twice: a CUmodule in the primary context (streams on the whole device)
// and, where green contexts exist, a context-independent CUlibrary whose CUkernels run in
// whichever (green) context a partition's stream belongs to. The library loads lazily, so a
// context that never launches it costs nothing.
struct CudaModule {
  CudaDevice* device = nullptr;
  CUmodule module = nullptr;
  CUlibrary library = nullptr;
  std::string name;
  bool have_ptx = false;
  PtxInfo ptx;  // entries and their parameter layouts, for PTX modules
};

struct CudaKernel {
  CUfunction primary = nullptr;  // from the CUmodule: the primary context's streams
  CUkernel kernel = nullptr;     // from the CUlibrary: partition streams (null without one)
  std::vector<uint32_t> offsets;  // where each parameter starts in the hal argument blob
  std::atomic<uint32_t> dynamic_shared_limit{48 * 1024};
};


hal_error* cu_error(const Driver* d, CUresult r, const std::string& what) {
  hal_status st = HAL_DEVICE_ERROR;
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: st = HAL_OUT_OF_MEMORY; break;
    case CUDA_ERROR_NOT_FOUND: st = HAL_NOT_FOUND; break;
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION: st = HAL_ARCH_MISMATCH; break;
    case CUDA_ERROR_INVALID_VALUE: st = HAL_INVALID_ARGUMENT; break;
    default: break;
  }
  return error(st, fmt::format("cuda: {}: {}", what, result_string(*d, r)));
}

#define CU_TRY(d, call, what)                                   \
  do {                                                          \
    CUresult cu_try_r_ = (call);                                \
    if (cu_try_r_ != CUDA_SUCCESS) return cu_error(d, cu_try_r_, what); \
  } while (0)

// Makes `ctx` current for a scope and restores what was current before.
class ContextScope {
 public:
  ContextScope(const Driver* d, CUcontext ctx) : d_(d) {
    CUcontext cur = nullptr;
    d_->cuCtxGetCurrent(&cur);
    if (cur != ctx) pushed_ = d_->cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
  }
  ~ContextScope() {
    if (pushed_) {
      CUcontext popped = nullptr;
      d_->cuCtxPopCurrent(&popped);
    }
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Driver* d_;
  bool pushed_ = false;
};

int attr(CudaDevice* dv, CUdevice_attribute a) {
  int v = 0;
  if (dv->d->cuDeviceGetAttribute(&v, a, dv->dev) != CUDA_SUCCESS) return 0;
  return v;
}

void CudaDevice::synchronize_all() {
  std::vector<CudaStream*> copy;
  {
    std::lock_guard lock(mu);
    copy.assign(streams.begin(), streams.end());
  }
  for (auto* s : copy) d->cuStreamSynchronize(s->stream);
  if (alloc_stream) d->cuStreamSynchronize(alloc_stream);
}

// ---- backend and devices ------------------------------------------------------------------

hal_error* cuda_create(const hal_host_api* host, CudaBackend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    std::string why;
    const Driver* d = load_driver(&why);
    if (!d) return error(HAL_UNAVAILABLE, why);
    int n = 0;
    CUresult r = d->cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS)
      return error(HAL_UNAVAILABLE, "cuDeviceGetCount failed: " + result_string(*d, r));
    auto* b = new CudaBackend;
    b->d = d;
    b->device_count = n;
    b->cache = PtxCache(ptx_cache_dir([](const char* name) { return std::getenv(name); }));
    halcyon::plugin::log(HAL_LOG_INFO,
                         fmt::format("cuda: driver for CUDA {}, {} device(s), PTX cache {}{}{}",
                                     version_string(d->version), n,
                                     b->cache.enabled() ? b->cache.dir() : "off",
                                     d->missing_optional.empty() ? "" : "; driver lacks: ",
                                     d->missing_optional));
    *out = b;
    return nullptr;
  })
}

void cuda_destroy(CudaBackend* b) { delete b; }

hal_error* cuda_device_count(CudaBackend* b, uint32_t* out) {
  *out = uint32_t(b->device_count);
  return nullptr;
}

void cuda_device_close(CudaDevice* dv);

hal_error* cuda_device_open(CudaBackend* b, uint32_t index, CudaDevice** out) {
  HAL_BACKEND_GUARD({
    const Driver* d = b->d;
    auto dv = std::make_unique<CudaDevice>();
    dv->d = d;
    dv->backend = b;
    dv->ordinal = int(index);
    dv->uri = fmt::format("cuda:{}", index);
    CU_TRY(d, d->cuDeviceGet(&dv->dev, int(index)), fmt::format("cuDeviceGet({})", index));
    CU_TRY(d, d->cuDevicePrimaryCtxRetain(&dv->ctx, dv->dev), dv->uri + ": retaining the primary context");
    dv->cc_major = attr(dv.get(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    dv->cc_minor = attr(dv.get(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    dv->arch = device_arch_name(dv->cc_major, dv->cc_minor);
    dv->sm_count = uint32_t(attr(dv.get(), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
    auto* raw = dv.release();
    std::unique_ptr<CudaDevice, void (*)(CudaDevice*)> guard(raw, cuda_device_close);
    ContextScope scope(d, raw->ctx);
    CU_TRY(d, d->cuStreamCreate(&raw->alloc_stream, CU_STREAM_NON_BLOCKING), raw->uri + ": creating the allocation stream");
    if (d->has_memory_pools() && attr(raw, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)) {
      CUmemPoolProps props{};
      props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
      props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      props.location.id = raw->ordinal;
      if (d->cuMemPoolCreate(&raw->pool, &props) == CUDA_SUCCESS) {
        // Keep freed memory in the pool: buffers come and go often; trimmed on OOM.
        cuuint64_t keep = ~cuuint64_t(0);
        d->cuMemPoolSetAttribute(raw->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
      } else {
        raw->pool = nullptr;
      }
    }
    if (d->has_green_contexts()) {
      CUdevResource sm{};
      if (d->cuDeviceGetDevResource(raw->dev, &sm, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS &&
          sm.sm.smCount > 0) {
        raw->green = true;
        raw->sm_align = sm.sm.smCoscheduledAlignment;  // 0 from drivers before CUDA 13
      }
    }
    *out = guard.release();
    return nullptr;
  })
}

void cuda_device_close(CudaDevice* dv) {
  const Driver* d = dv->d;
  if (dv->ctx) {
    ContextScope scope(d, dv->ctx);
    dv->synchronize_all();
    if (dv->pool) d->cuMemPoolDestroy(dv->pool);
    if (dv->alloc_stream) d->cuStreamDestroy(dv->alloc_stream);
  }
  if (dv->ctx) d->cuDevicePrimaryCtxRelease(dv->dev);
  delete dv;
}

// The tensor memory accelerator (cp.async.bulk.tensor) exists from compute capability 9.0.
bool has_tensor_maps(const CudaDevice* dv) { return dv->cc_major >= 9 && dv->d->cuTensorMapEncodeTiled; }

hal_error* cuda_device_info(CudaDevice* dv, hal_device_info* info) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    CU_TRY(d, d->cuDeviceGetName(info->name, int(sizeof info->name), dv->dev), dv->uri + ": cuDeviceGetName");
    std::snprintf(info->vendor, sizeof info->vendor, "NVIDIA");
    std::snprintf(info->arch, sizeof info->arch, "%s", dv->arch.c_str());
    info->compute_units = dv->sm_count;
    info->simd_width = uint32_t(attr(dv, CU_DEVICE_ATTRIBUTE_WARP_SIZE));
    size_t mem = 0;
    CU_TRY(d, d->cuDeviceTotalMem(&mem, dv->dev), dv->uri + ": cuDeviceTotalMem");
    info->memory_bytes = mem;
    info->max_shared_per_block = uint32_t(attr(dv, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
    info->max_threads_per_block = uint32_t(attr(dv, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
    info->clock_khz = uint32_t(attr(dv, CU_DEVICE_ATTRIBUTE_CLOCK_RATE));
    info->l2_cache_bytes = uint64_t(attr(dv, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
    // Double data rate: two transfers per memory clock over the bus.
    info->memory_bytes_per_s = uint64_t(attr(dv, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)) * 1000 * 2 *
                               uint64_t(attr(dv, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)) / 8;
    std::string caps = "module.ptx module.cubin events.timing memory.host_pinned";
    if (dv->pool) caps += " memory.stream_ordered";
    if (dv->backend->cache.enabled()) caps += " ptx.jit_cache";
    if (dv->green) caps += " partition.green_context partition.enforced";
    if (has_tensor_maps(dv)) caps += " tensor_map";
    std::snprintf(info->capabilities, sizeof info->capabilities, "%s", caps.c_str());
    return nullptr;
  })
}

// ---- memory -------------------------------------------------------------------------------

hal_error* cuda_buffer_create(CudaDevice* dv, const hal_buffer_desc* desc, CudaBuffer** out,
                              uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    auto b = std::make_unique<CudaBuffer>();
    b->device = dv;
    b->kind = static_cast<hal_memory_kind>(desc->kind);
    *address = 0;
    *host = nullptr;
    if (desc->size == 0) {
      *out = b.release();
      return nullptr;
    }
    ContextScope scope(d, dv->ctx);
    const uint64_t natural = desc->kind == HAL_MEMORY_DEVICE ? kDeviceAlign : kHostAlign;
    const uint64_t align = desc->alignment > natural ? desc->alignment : natural;
    const uint64_t bytes = desc->size + (align > natural ? align : 0);
    std::string what = fmt::format("{}: allocating {} bytes of {} memory", dv->uri, desc->size,
                                   desc->kind == HAL_MEMORY_DEVICE ? "device" : "pinned host");
    if (desc->kind == HAL_MEMORY_DEVICE) {
      CUresult r;
      if (dv->pool) {
        r = d->cuMemAllocFromPoolAsync(&b->base, bytes, dv->pool, dv->alloc_stream);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // give cached blocks back and try once more
          d->cuStreamSynchronize(dv->alloc_stream);
          d->cuMemPoolTrimTo(dv->pool, 0);
          r = d->cuMemAllocFromPoolAsync(&b->base, bytes, dv->pool, dv->alloc_stream);
        }
        // Every stream may use the buffer next: finish the allocation first.
        if (r == CUDA_SUCCESS) r = d->cuStreamSynchronize(dv->alloc_stream);
        b->from_pool = r == CUDA_SUCCESS;
      } else {
        r = d->cuMemAlloc(&b->base, bytes);
      }
      if (r != CUDA_SUCCESS) return cu_error(d, r, what);
      b->address = (b->base + align - 1) / align * align;
    } else {
      CU_TRY(d, d->cuMemHostAlloc(&b->host_base, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP), what);
      CUdeviceptr p = 0;
      CUresult r = d->cuMemHostGetDevicePointer(&p, b->host_base, 0);
      if (r != CUDA_SUCCESS) {
        d->cuMemFreeHost(b->host_base);
        return cu_error(d, r, what + " (device pointer)");
      }
      uint64_t shift = (p + align - 1) / align * align - p;
      b->base = p;
      b->address = p + shift;
      *host = static_cast<char*>(b->host_base) + shift;
    }
    *address = b->address;
    *out = b.release();
    return nullptr;
  })
}

void cuda_buffer_destroy(CudaBuffer* b) {
  CudaDevice* dv = b->device;
  const Driver* d = dv->d;
  if (b->base || b->host_base) {
    dv->synchronize_all();  // queued work on any stream may still use it
    ContextScope scope(d, dv->ctx);
    if (b->host_base) d->cuMemFreeHost(b->host_base);
    else if (b->from_pool) d->cuMemFreeAsync(b->base, dv->alloc_stream);
    else d->cuMemFree(b->base);
  }
  delete b;
}

// ---- streams ------------------------------------------------------------------------------

hal_error* cuda_stream_create(CudaDevice* dv, CudaPartition* part, const hal_stream_desc*,
                              CudaStream** out) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    auto s = std::make_unique<CudaStream>();
    s->device = dv;
    if (part) {
      CU_TRY(d, d->cuGreenCtxStreamCreate(&s->stream, part->green, CU_STREAM_NON_BLOCKING, 0),
             dv->uri + ": creating a stream in a green-context partition");
      s->ctx = part->ctx;
    } else {
      ContextScope scope(d, dv->ctx);
      CU_TRY(d, d->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING), dv->uri + ": cuStreamCreate");
      s->ctx = dv->ctx;
    }
    {
      std::lock_guard lock(dv->mu);
      dv->streams.insert(s.get());
    }
    *out = s.release();
    return nullptr;
  })
}

void cuda_stream_destroy(CudaStream* s) {
  const Driver* d = s->device->d;
  d->cuStreamSynchronize(s->stream);
  d->cuStreamDestroy(s->stream);
  {
    std::lock_guard lock(s->device->mu);
    s->device->streams.erase(s);
  }
  delete s;
}

hal_error* cuda_stream_synchronize(CudaStream* s) {
  CU_TRY(s->device->d, s->device->d->cuStreamSynchronize(s->stream), s->device->uri + ": cuStreamSynchronize");
  return nullptr;
}

// Host pointers and device addresses share one space (unified addressing), so cuMemcpyAsync
// takes either; pageable host memory is staged by the driver.
hal_error* copy_async(CudaStream* s, CUdeviceptr dst, CUdeviceptr src, uint64_t size, const char* what) {
  const Driver* d = s->device->d;
  ContextScope scope(d, s->device->ctx);
  CU_TRY(d, d->cuMemcpyAsync(dst, src, size, s->stream), fmt::format("{}: {} of {} bytes", s->device->uri, what, size));
  return nullptr;
}

hal_error* cuda_stream_write(CudaStream* s, CudaBuffer* dst, uint64_t off, const void* src, uint64_t size) {
  return copy_async(s, dst->address + off, reinterpret_cast<CUdeviceptr>(src), size, "write");
}

hal_error* cuda_stream_read(CudaStream* s, CudaBuffer* src, uint64_t off, void* dst, uint64_t size) {
  return copy_async(s, reinterpret_cast<CUdeviceptr>(dst), src->address + off, size, "read");
}

hal_error* cuda_stream_copy(CudaStream* s, CudaBuffer* dst, uint64_t doff, CudaBuffer* src,
                            uint64_t soff, uint64_t size) {
  const Driver* d = s->device->d;
  ContextScope scope(d, s->device->ctx);
  CU_TRY(d, d->cuMemcpyDtoDAsync(dst->address + doff, src->address + soff, size, s->stream),
         fmt::format("{}: copy of {} bytes", s->device->uri, size));
  return nullptr;
}

hal_error* cuda_stream_fill(CudaStream* s, CudaBuffer* dst, uint64_t off, uint64_t size,
                            uint32_t pattern, uint32_t psize) {
  const Driver* d = s->device->d;
  ContextScope scope(d, s->device->ctx);
  CUdeviceptr p = dst->address + off;
  CUresult r = psize == 1   ? d->cuMemsetD8Async(p, static_cast<unsigned char>(pattern), size, s->stream)
               : psize == 2 ? d->cuMemsetD16Async(p, static_cast<unsigned short>(pattern), size / 2, s->stream)
                            : d->cuMemsetD32Async(p, pattern, size / 4, s->stream);
  if (r != CUDA_SUCCESS) return cu_error(d, r, fmt::format("{}: fill of {} bytes", s->device->uri, size));
  return nullptr;
}

hal_error* cuda_stream_wait_event(CudaStream* s, CudaEvent* ev) {
  std::lock_guard lock(ev->mu);
  CU_TRY(s->device->d, s->device->d->cuStreamWaitEvent(s->stream, ev->event, 0), s->device->uri + ": cuStreamWaitEvent");
  return nullptr;
}

hal_error* cuda_stream_launch(CudaStream* s, CudaKernel* k, const hal_launch_desc* desc) {
  const Driver* d = s->device->d;
  if (desc->shared_bytes > k->dynamic_shared_limit.load(std::memory_order_relaxed)) {
    std::string what = fmt::format("{}: raising the kernel's dynamic shared memory to {} bytes", s->device->uri,
                                   desc->shared_bytes);
    CU_TRY(d, d->cuFuncSetAttribute(k->primary, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(desc->shared_bytes)), what);
    if (k->kernel)
      CU_TRY(d, d->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(desc->shared_bytes),
                                        k->kernel, s->device->dev), what);
    k->dynamic_shared_limit.store(desc->shared_bytes, std::memory_order_relaxed);
  }
  // The driver copies each parameter from where kernelParams points: into the caller's blob.
  constexpr size_t kInline = 32;
  void* inline_params[kInline];
  std::vector<void*> heap_params;
  void** params = inline_params;
  const size_t n = k->offsets.size();
  if (n > kInline) {
    heap_params.resize(n);
    params = heap_params.data();
  }
  auto* blob = static_cast<char*>(const_cast<void*>(desc->args));
  for (size_t i = 0; i < n; ++i) params[i] = blob + k->offsets[i];
  // A partition's stream runs the library's CUkernel, which launches in the stream's context.
  CUfunction f = s->ctx == s->device->ctx || !k->kernel ? k->primary : reinterpret_cast<CUfunction>(k->kernel);
  CUresult r = d->cuLaunchKernel(f, desc->grid[0], desc->grid[1],
                                 desc->grid[2], desc->block[0], desc->block[1], desc->block[2],
                                 desc->shared_bytes, s->stream, n ? params : nullptr, nullptr);
  if (r != CUDA_SUCCESS)
    return cu_error(d, r, fmt::format("{}: launching grid ({},{},{}) block ({},{},{})", s->device->uri,
                                      desc->grid[0], desc->grid[1], desc->grid[2], desc->block[0],
                                      desc->block[1], desc->block[2]));
  return nullptr;
}

// ---- events -------------------------------------------------------------------------------

hal_error* cuda_event_create(CudaDevice* dv, const hal_event_desc* desc, CudaEvent** out) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    auto ev = std::make_unique<CudaEvent>();
    ev->device = dv;
    ev->flags = (desc->flags & HAL_EVENT_TIMING) ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
    ev->ctx = dv->ctx;
    ContextScope scope(d, dv->ctx);
    CU_TRY(d, d->cuEventCreate(&ev->event, ev->flags), dv->uri + ": cuEventCreate");
    *out = ev.release();
    return nullptr;
  })
}

void cuda_event_destroy(CudaEvent* ev) {
  ev->device->d->cuEventDestroy(ev->event);
  delete ev;
}

hal_error* cuda_event_record(CudaEvent* ev, CudaStream* s) {
  const Driver* d = s->device->d;
  std::lock_guard lock(ev->mu);
  CUresult r = d->cuEventRecord(ev->event, s->stream);
  if (r != CUDA_SUCCESS && s->ctx && s->ctx != ev->ctx) {
    // An event records only streams of its own context: remake it in the stream's (green)
    // context. Waits already queued on the old event keep their captured state.
    CUevent fresh = nullptr;
    {
      ContextScope scope(d, s->ctx);
      CU_TRY(d, d->cuEventCreate(&fresh, ev->flags), s->device->uri + ": cuEventCreate in a partition's context");
    }
    d->cuEventDestroy(ev->event);
    ev->event = fresh;
    ev->ctx = s->ctx;
    r = d->cuEventRecord(ev->event, s->stream);
  }
  if (r != CUDA_SUCCESS) return cu_error(d, r, s->device->uri + ": cuEventRecord");
  return nullptr;
}

hal_error* cuda_event_query(CudaEvent* ev, bool* complete) {
  const Driver* d = ev->device->d;
  std::lock_guard lock(ev->mu);
  CUresult r = d->cuEventQuery(ev->event);
  if (r == CUDA_ERROR_NOT_READY) {
    *complete = false;
    return nullptr;
  }
  if (r != CUDA_SUCCESS) return cu_error(d, r, ev->device->uri + ": cuEventQuery");
  *complete = true;
  return nullptr;
}

hal_error* cuda_event_synchronize(CudaEvent* ev) {
  const Driver* d = ev->device->d;
  CUevent e;
  {
    std::lock_guard lock(ev->mu);
    e = ev->event;
  }
  CU_TRY(d, d->cuEventSynchronize(e), ev->device->uri + ": cuEventSynchronize");
  return nullptr;
}

hal_error* cuda_event_elapsed_ms(CudaEvent* a, CudaEvent* b, float* ms) {
  const Driver* d = a->device->d;
  std::scoped_lock lock(a->mu, b->mu);
  CUresult r = d->cuEventElapsedTime(ms, a->event, b->event);
  if (r == CUDA_ERROR_NOT_READY)
    return error(HAL_FAILED_PRECONDITION, "cuda: hal_event_elapsed_ms: an event has not completed yet");
  if (r != CUDA_SUCCESS) return cu_error(d, r, a->device->uri + ": cuEventElapsedTime");
  return nullptr;
}

// ---- modules ------------------------------------------------------------------------------

// JIT options that carry the compiler's error log back into the message.
struct JitLog {
  char error_log[16384] = {};
  CUjit_option options[3] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_TARGET};
  void* values[3] = {};
  unsigned count = 2;
  explicit JitLog(const ArchTag* target = nullptr) {
    values[0] = error_log;
    values[1] = reinterpret_cast<void*>(uintptr_t(sizeof error_log));
    if (target && target->suffix == 'a') {  // arch-specific PTX must be compiled as such
      values[2] = reinterpret_cast<void*>(uintptr_t(CU_COMPUTE_ACCELERATED_TARGET_BASE + target->major * 10 + target->minor));
      count = 3;
    }
  }
  std::string text() const {
    std::string s(error_log, strnlen(error_log, sizeof error_log));
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
    return s.empty() ? "" : "\n" + s;
  }
};

// PTX -> cubin through the driver's linker, which hands the cubin back for the cache.
hal_error* jit_ptx(CudaDevice* dv, const std::string& ptx, const ArchTag& target,
                   const std::string& what, std::vector<char>* cubin) {
  const Driver* d = dv->d;
  JitLog log(&target);
  CUlinkState link = nullptr;
  CU_TRY(d, d->cuLinkCreate(log.count, log.options, log.values, &link), what + ": cuLinkCreate");
  struct Destroy {
    const Driver* d;
    CUlinkState l;
    ~Destroy() { d->cuLinkDestroy(l); }
  } destroy{d, link};
  CUresult r = d->cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(ptx.c_str()), ptx.size() + 1,
                                what.c_str(), 0, nullptr, nullptr);
  if (r == CUDA_SUCCESS) {
    void* out = nullptr;
    size_t size = 0;
    r = d->cuLinkComplete(link, &out, &size);
    if (r == CUDA_SUCCESS) cubin->assign(static_cast<char*>(out), static_cast<char*>(out) + size);
  }
  if (r != CUDA_SUCCESS) return cu_error(d, r, what + ": PTX JIT compilation failed" + log.text());
  return nullptr;
}

hal_error* cuda_module_load(CudaDevice* dv, const hal_module_desc* desc, CudaModule** out) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    const bool is_ptx = desc->format == HAL_MODULE_PTX;
    std::string name = desc->name ? desc->name : "<unnamed module>";
    std::string what = fmt::format("{}: module '{}' ({} for {})", dv->uri, name, is_ptx ? "PTX" : "cubin", desc->target);
    if (!is_ptx && desc->format != HAL_MODULE_CUBIN)
      return error(HAL_ARCH_MISMATCH, what + ": this backend loads PTX and cubin modules only");
    // The architecture check comes before any driver call.
    if (std::string why = check_target(desc->target, is_ptx, dv->cc_major, dv->cc_minor); !why.empty())
      return error(HAL_ARCH_MISMATCH, fmt::format("cuda: module '{}' cannot run on {}: {}", name, dv->uri, why));
    const ArchTag target = *parse_arch(desc->target);
    auto m = std::make_unique<CudaModule>();
    m->device = dv;
    m->name = name;
    std::vector<char> cubin;
    const void* image = desc->data;
    if (!is_ptx) {
      if (std::string why = check_cubin_image(desc->data, desc->size); !why.empty())
        return error(HAL_INVALID_ARGUMENT, what + ": not a loadable cubin: " + why);
    }
    if (is_ptx) {
      const char* text = static_cast<const char*>(desc->data);
      std::string ptx(text, strnlen(text, desc->size));
      std::string why;
      if (!parse_ptx(ptx, &m->ptx, &why)) return error(HAL_INVALID_ARGUMENT, what + ": " + why);
      if (m->ptx.target.empty())
        return error(HAL_INVALID_ARGUMENT, what + ": the PTX has no .target directive");
      if (parse_arch(m->ptx.target) != target)
        return error(HAL_INVALID_ARGUMENT, fmt::format("{}: the module is tagged {} but its PTX says .target {}",
                                                       what, desc->target, m->ptx.target));
      m->have_ptx = true;
      PtxCacheKey key = make_cache_key(ptx, dv->arch, d->version, kJitSettings);
      const PtxCache& cache = dv->backend->cache;
      if (cache.load(key, &cubin)) {
        halcyon::plugin::log(HAL_LOG_DEBUG, fmt::format("cuda: PTX cache hit for '{}': {}", name, cache.path(key)));
      } else {
        ContextScope scope(d, dv->ctx);
        if (hal_error* e = jit_ptx(dv, ptx, target, what, &cubin)) return e;
        std::string store_why;
        if (cache.enabled() && !cache.store(key, cubin.data(), cubin.size(), &store_why))
          halcyon::plugin::log(HAL_LOG_WARNING, "cuda: PTX cache: " + store_why);
        else if (cache.enabled())
          halcyon::plugin::log(HAL_LOG_DEBUG, fmt::format("cuda: PTX cache stored '{}': {}", name, cache.path(key)));
      }
      image = cubin.data();
    }
    ContextScope scope(d, dv->ctx);
    JitLog log;
    CUresult r = d->cuModuleLoadDataEx(&m->module, image, log.count, log.options, log.values);
    if (r != CUDA_SUCCESS) return cu_error(d, r, what + ": loading" + log.text());
    if (dv->green) {
      JitLog lib_log;
      r = d->cuLibraryLoadData(&m->library, image, lib_log.options, lib_log.values, lib_log.count, nullptr, nullptr, 0);
      if (r != CUDA_SUCCESS) {
        d->cuModuleUnload(m->module);
        return cu_error(d, r, what + ": loading for partitions" + lib_log.text());
      }
    }
    *out = m.release();
    return nullptr;
  })
}

void cuda_module_destroy(CudaModule* m) {
  const Driver* d = m->device->d;
  m->device->synchronize_all();  // its kernels may still be running
  ContextScope scope(d, m->device->ctx);
  d->cuModuleUnload(m->module);
  if (m->library) d->cuLibraryUnload(m->library);
  delete m;
}

// The parameter layout the driver reports (CUDA 12.4+), or false and *why when it cannot.
bool driver_params(const Driver* d, CUkernel k, CUfunction f, std::vector<PtxParam>* out, std::string* why) {
  auto query = [&](auto fn, auto handle, const char* name) {
    out->clear();
    for (size_t i = 0;; ++i) {
      size_t off = 0, size = 0;
      CUresult r = fn(handle, i, &off, &size);
      if (r == CUDA_ERROR_INVALID_VALUE && i > 0) return true;  // past the last parameter
      if (r != CUDA_SUCCESS) {
        // Index 0 of a kernel without parameters is also INVALID_VALUE: indistinguishable
        // from a failure here, so it counts as "no parameters" only if the other query agrees.
        if (r == CUDA_ERROR_INVALID_VALUE) return true;
        *why += std::string(*why == "" ? "" : "; ") + name + ": " + result_string(*d, r);
        return false;
      }
      PtxParam p;
      p.offset = uint32_t(off);
      p.size = uint32_t(size);
      out->push_back(p);
    }
  };
  if (d->cuFuncGetParamInfo && query(d->cuFuncGetParamInfo, f, "cuFuncGetParamInfo")) return true;
  if (d->cuKernelGetParamInfo && k && query(d->cuKernelGetParamInfo, k, "cuKernelGetParamInfo")) return true;
  if (!d->cuKernelGetParamInfo && !d->cuFuncGetParamInfo) *why = "the driver has neither cuKernelGetParamInfo nor cuFuncGetParamInfo (CUDA 12.4)";
  return false;
}

hal_error* cuda_kernel_get(CudaModule* m, const char* name, CudaKernel** out, hal_kernel_info* info,
                           hal_kernel_arg* args, uint32_t cap) {
  HAL_BACKEND_GUARD({
    CudaDevice* dv = m->device;
    const Driver* d = dv->d;
    const PtxEntry* entry = m->have_ptx ? m->ptx.find(name) : nullptr;
    if (m->have_ptx && !entry) {
      std::string names;
      for (auto& e : m->ptx.entries) names += (names.empty() ? "" : ", ") + e.name;
      return error(HAL_NOT_FOUND, fmt::format("cuda: no kernel '{}' in module '{}' (it has: {})", name, m->name,
                                              names.empty() ? "no .entry" : names));
    }
    auto k = std::make_unique<CudaKernel>();
    std::string what = fmt::format("{}: kernel '{}' in module '{}'", dv->uri, name, m->name);
    ContextScope scope(d, dv->ctx);
    CU_TRY(d, d->cuModuleGetFunction(&k->primary, m->module, name), what);
    if (m->library) CU_TRY(d, d->cuLibraryGetKernel(&k->kernel, m->library, name), what + " (for partitions)");
    std::vector<PtxParam> params;
    std::vector<PtxParam> reported;
    std::string no_report;
    bool have_reported = driver_params(d, k->kernel, k->primary, &reported, &no_report);
    if (entry) {
      params = entry->params;
      if (have_reported && reported.size() == params.size()) {
        // The blob's layout is ours to choose: the launch hands the driver one pointer per
        // parameter, so only sizes must agree. The PTX's natural layout (from offset 0) is kept,
        // as C structs and ArgPack produce it; the driver's offsets may legitimately differ for
        // parameters aligned beyond 16 bytes (a 64-aligned tensor map after a pointer: the
        // driver says 48, relative to its parameter bank, not 64).
        bool same = true;
        for (size_t i = 0; i < params.size(); ++i) same = same && reported[i].size == params[i].size;
        if (!same) {  // the driver is the authority on sizes; PTX keeps its pointer marks
          halcyon::plugin::log(HAL_LOG_WARNING, fmt::format("cuda: kernel '{}': the PTX parameter sizes differ from "
                                                            "the driver's; using the driver's layout", name));
          for (size_t i = 0; i < params.size(); ++i) reported[i].pointer = params[i].pointer;
          params = reported;
        }
      } else if (have_reported) {  // a count that disagrees is the query failing, not the PTX
        halcyon::plugin::log(HAL_LOG_WARNING, fmt::format("cuda: kernel '{}': the driver reports {} parameters, the PTX "
                                                          "{}; using the PTX's", name, reported.size(), params.size()));
      }
    } else if (have_reported) {
      params = reported;  // cubin: sizes and offsets from the driver; kinds unknown
    } else {
      return error(HAL_UNSUPPORTED, fmt::format("cuda: kernel '{}' of cubin module '{}': the driver does not report its "
                                                "argument layout ({}); load PTX instead",
                                                name, m->name, no_report));
    }
    if (params.size() > cap)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: kernel '{}' has {} parameters, more than {}", name, params.size(), cap));
    uint32_t end = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      args[i].offset = params[i].offset;
      args[i].size = params[i].size;
      args[i].kind = params[i].pointer ? HAL_ARG_POINTER : HAL_ARG_VALUE;
      k->offsets.push_back(params[i].offset);
      end = std::max(end, params[i].offset + params[i].size);
    }
    info->arg_count = uint32_t(params.size());
    info->args_size = end;
    int v = 0;
    if (d->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k->primary) == CUDA_SUCCESS)
      info->max_threads_per_block = uint32_t(v);
    if (d->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->primary) == CUDA_SUCCESS)
      info->static_shared_bytes = uint32_t(v);
    if (d->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k->primary) == CUDA_SUCCESS)
      info->registers = uint32_t(v);
    *out = k.release();
    return nullptr;
  })
}

void cuda_kernel_destroy(CudaKernel* k) { delete k; }

// ---- partitions ---------------------------------------------------------------------------

void cuda_partition_destroy(CudaPartition* p) {
  if (p->green) p->device->d->cuGreenCtxDestroy(p->green);
  delete p;
}

hal_error* make_partition(CudaDevice* dv, CUdevResource& res, uint32_t granularity,
                          CudaPartition** out, hal_partition_info* info) {
  const Driver* d = dv->d;
  CUdevResourceDesc rd = nullptr;
  CU_TRY(d, d->cuDevResourceGenerateDesc(&rd, &res, 1), dv->uri + ": cuDevResourceGenerateDesc");
  auto p = std::make_unique<CudaPartition>();
  p->device = dv;
  CU_TRY(d, d->cuGreenCtxCreate(&p->green, rd, dv->dev, CU_GREEN_CTX_DEFAULT_STREAM),
         fmt::format("{}: creating a green context of {} SMs", dv->uri, res.sm.smCount));
  if (d->cuCtxFromGreenCtx && d->cuCtxFromGreenCtx(&p->ctx, p->green) != CUDA_SUCCESS) p->ctx = nullptr;
  info->units_granted = res.sm.smCount;
  info->units_requested = res.sm.smCount;
  info->mechanism = HAL_PARTITION_GREEN_CONTEXT;
  info->enforced = 1;
  info->granularity = granularity;
  info->first_unit = UINT32_MAX;  // the driver does not say which SMs
  *out = p.release();
  return nullptr;
}

hal_error* cuda_partition_split(CudaDevice* dv, const hal_partition_desc* desc, CudaPartition** part,
                                hal_partition_info* pinfo, CudaPartition** rem, hal_partition_info* rinfo) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    if (!dv->green)
      return error(HAL_UNSUPPORTED, fmt::format("cuda: {} cannot be split: green contexts need a CUDA 12.5 driver "
                                                "and device support (driver lacks: {})",
                                                dv->uri, d->missing_optional.empty() ? "nothing" : d->missing_optional));
    const bool fine = desc->flags & HAL_PARTITION_FINE_GRAINED;
    // Steps of smCoscheduledAlignment SMs by default (8 on Hopper); 2 with
    // IGNORE_SM_COSCHEDULING, which gives up large thread-block clusters.
    uint32_t granularity = fine ? 2 : (dv->sm_align ? dv->sm_align : (dv->cc_major >= 9 ? 8 : 2));
    CUdevResource input{};
    CU_TRY(d, d->cuDeviceGetDevResource(dv->dev, &input, CU_DEV_RESOURCE_TYPE_SM), dv->uri + ": cuDeviceGetDevResource");
    CUdevResource result{}, remaining{};
    unsigned groups = 1;
    CUresult r = d->cuDevSmResourceSplitByCount(&result, &groups, &input, &remaining,
                                                fine ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0, desc->units);
    if (r == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION || r == CUDA_ERROR_INVALID_VALUE)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: {}: {} SMs cannot be split off {} SMs in steps of {}: {}", dv->uri,
                                                 desc->units, input.sm.smCount, granularity, result_string(*d, r)));
    if (r != CUDA_SUCCESS) return cu_error(d, r, fmt::format("{}: splitting off {} SMs", dv->uri, desc->units));
    if (groups != 1 || result.sm.smCount == 0)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: {}: {} SMs{} cannot be split off {} SMs", dv->uri,
                                                 desc->units, fine ? " (fine-grained)" : "", input.sm.smCount));
    if (rem && remaining.sm.smCount == 0)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: {}: asked for {} SMs plus a remainder; {} SMs rounded to steps of {} "
                                                 "leave none", dv->uri, desc->units, input.sm.smCount, granularity));
    CudaPartition* p = nullptr;
    if (hal_error* e = make_partition(dv, result, granularity, &p, pinfo)) return e;
    if (rem) {
      if (hal_error* e = make_partition(dv, remaining, granularity, rem, rinfo)) {
        cuda_partition_destroy(p);
        return e;
      }
    }
    *part = p;
    return nullptr;
  })
}

// ---- hal_device_can_run (ABI 1.3): ptx_info.cpp's check_target, the one rule -------------

hal_error* cuda_device_can_run(CudaDevice* dv, uint32_t format, const char* target, bool* yes, char* reason,
                               size_t capacity) {
  HAL_BACKEND_GUARD({
    std::string why = check_target(target, format == HAL_MODULE_PTX, dv->cc_major, dv->cc_minor);
    *yes = why.empty();
    std::snprintf(reason, capacity, "%s", why.c_str());
    return nullptr;
  })
}

// ---- tensor maps --------------------------------------------------------------------------

hal_error* cuda_tensor_map_encode(CudaDevice* dv, uint64_t address, const hal_tensor_map_desc* desc, void* out) {
  HAL_BACKEND_GUARD({
    const Driver* d = dv->d;
    if (!d->cuTensorMapEncodeTiled)
      return error(HAL_UNSUPPORTED, fmt::format("cuda: {}: the driver (CUDA {}) has no cuTensorMapEncodeTiled", dv->uri,
                                                version_string(d->version)));
    if (!has_tensor_maps(dv))
      return error(HAL_UNSUPPORTED, fmt::format("cuda: {} is {} (compute capability {}.{}): tensor maps need the tensor "
                                                "memory accelerator of compute capability 9.0 or newer",
                                                dv->uri, dv->arch, dv->cc_major, dv->cc_minor));
    TiledTensorMap t;
    if (std::string why = tiled_tensor_map(*desc, address, &t); !why.empty())
      return error(HAL_INVALID_ARGUMENT, fmt::format("cuda: {}: tensor map ({}): {}", dv->uri, describe_tensor_map(*desc), why));
    static_assert(sizeof(CUtensorMap) == HAL_TENSOR_MAP_BYTES);
    CUtensorMap map;  // cuda.h aligns it to 64 (CUDA 12) or 128 (CUDA 13) bytes; the driver needs 64
    ContextScope scope(d, dv->ctx);
    CU_TRY(d, d->cuTensorMapEncodeTiled(&map, t.dtype, t.rank, t.address, t.dims, t.strides, t.box, t.element_strides,
                                        t.interleave, t.swizzle, t.l2_promotion, t.oob_fill),
           fmt::format("{}: cuTensorMapEncodeTiled ({})", dv->uri, describe_tensor_map(*desc)));
    std::memcpy(out, &map, sizeof map);
    return nullptr;
  })
}

// hal.h leaves hal_be_* incomplete for each backend to define, but several backends live in
// one library: defining those structs here would break the one-definition rule (their
// inline destructors would be merged across backends). The backend's own types stay in this
// file's anonymous namespace and the table's entries convert the opaque pointers.
template <typename T> struct Opaque { using type = T; };
template <> struct Opaque<CudaBackend*> { using type = hal_be_backend*; };
template <> struct Opaque<CudaBackend**> { using type = hal_be_backend**; };
template <> struct Opaque<CudaDevice*> { using type = hal_be_device*; };
template <> struct Opaque<CudaDevice**> { using type = hal_be_device**; };
template <> struct Opaque<CudaBuffer*> { using type = hal_be_buffer*; };
template <> struct Opaque<CudaBuffer**> { using type = hal_be_buffer**; };
template <> struct Opaque<CudaStream*> { using type = hal_be_stream*; };
template <> struct Opaque<CudaStream**> { using type = hal_be_stream**; };
template <> struct Opaque<CudaEvent*> { using type = hal_be_event*; };
template <> struct Opaque<CudaEvent**> { using type = hal_be_event**; };
template <> struct Opaque<CudaModule*> { using type = hal_be_module*; };
template <> struct Opaque<CudaModule**> { using type = hal_be_module**; };
template <> struct Opaque<CudaKernel*> { using type = hal_be_kernel*; };
template <> struct Opaque<CudaKernel**> { using type = hal_be_kernel**; };
template <> struct Opaque<CudaPartition*> { using type = hal_be_partition*; };
template <> struct Opaque<CudaPartition**> { using type = hal_be_partition**; };

template <typename To, typename From>
To from_opaque(From v) {
  if constexpr (std::is_same_v<To, From>) return v;
  else return reinterpret_cast<To>(v);
}

template <auto F> struct Entry;
template <typename R, typename... A, R (*F)(A...)>
struct Entry<F> {
  static R call(typename Opaque<A>::type... a) { return F(from_opaque<A>(a)...); }
};

const hal_backend_api kApi = {
    sizeof(hal_backend_api),
    nullptr,
    HAL_ABI_MAJOR,
    HAL_ABI_MINOR,
    "cuda",
    "NVIDIA GPUs through the CUDA driver API (libcuda.so.1, loaded at run time)",
    &Entry<cuda_create>::call,
    &Entry<cuda_destroy>::call,
    &Entry<cuda_device_count>::call,
    nullptr,  // device_resolve: "cuda:0"
    &Entry<cuda_device_open>::call,
    &Entry<cuda_device_close>::call,
    &Entry<cuda_device_info>::call,
    &Entry<cuda_buffer_create>::call,
    &Entry<cuda_buffer_destroy>::call,
    &Entry<cuda_stream_create>::call,
    &Entry<cuda_stream_destroy>::call,
    &Entry<cuda_stream_synchronize>::call,
    &Entry<cuda_stream_write>::call,
    &Entry<cuda_stream_read>::call,
    &Entry<cuda_stream_copy>::call,
    &Entry<cuda_stream_fill>::call,
    &Entry<cuda_stream_wait_event>::call,
    &Entry<cuda_stream_launch>::call,
    &Entry<cuda_event_create>::call,
    &Entry<cuda_event_destroy>::call,
    &Entry<cuda_event_record>::call,
    &Entry<cuda_event_query>::call,
    &Entry<cuda_event_synchronize>::call,
    &Entry<cuda_event_elapsed_ms>::call,
    &Entry<cuda_module_load>::call,
    &Entry<cuda_module_destroy>::call,
    &Entry<cuda_kernel_get>::call,
    &Entry<cuda_kernel_destroy>::call,
    &Entry<cuda_partition_split>::call,
    &Entry<cuda_partition_destroy>::call,
    &Entry<cuda_tensor_map_encode>::call,
    &Entry<cuda_device_can_run>::call,
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_cuda(void) { return &kApi; }
