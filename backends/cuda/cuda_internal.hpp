// The CUDA backend's objects and the helpers its files share. Internal to backends/cuda: one
// file per object (cuda_device, cuda_buffer, cuda_stream, cuda_event, cuda_module,
// cuda_partition, cuda_tensor_map) implements that object's hal_backend_api entries, declared
// at the end of this header; cuda_backend.cpp holds the table and the backend's create/probe.
//
// These types live in namespace halcyon::cuda, never as hal.h's hal_be_* structs: several
// backends link into one library and two definitions of one struct would break the
// one-definition rule. cuda_backend.cpp's table converts the opaque pointers.
#pragma once

#include <halcyon/hal.h>
#include <halcyon/plugin.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cuda_driver.hpp"
#include "ptx_cache.hpp"
#include "ptx_info.hpp"

namespace halcyon::cuda {

using halcyon::plugin::error;

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
  CUstream alloc_stream = nullptr; // where pool allocations are ordered (finished before use)
  CUstream free_stream = nullptr;  // where pool frees wait for the streams' queued work
                                   // (cuda_buffer.cpp)
  bool green = false;              // green contexts usable on this device
  uint32_t sm_count = 0;
  uint32_t sm_align = 0;           // default partition step (smCoscheduledAlignment)
  uint32_t sm_min = 0;             // smallest partition (minSmPartitionSize; 0: unknown)
  // Partitions draw on the SMs no live partition holds (hal.h: partitions reserve). The driver
  // splits only a device's or a (green) context's resource and cannot merge SM sets, so the
  // free SMs left by a split are held as a green context of their own, `free_sms`, and return
  // to the device when its last partition is released. Guarded by mu.
  CUgreenCtx free_sms = nullptr;   // null: no split yet (all free) unless free_none
  bool free_none = false;          // every SM is in a live partition
  uint32_t live_partitions = 0;
  std::mutex mu;
  std::set<CudaStream*> streams;
  std::atomic<uint64_t> device_syncs{0};  // synchronize_all calls, numbered in its log line
  // Serialises raising a kernel's dynamic shared memory attribute (cuda_module.cpp). Per device,
  // not per hal_kernel: every hal_kernel of one module entry shares the CUfunction/CUkernel
  // whose attribute it is.
  std::mutex shared_limit_mu;
  // Waits on the host for every stream of the device (and the allocation and free streams).
  // Logged at debug level as "device-wide synchronization #N (why)".
  void synchronize_all(const char* why);
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
  bool imported = false;      // hal_buffer_import: someone else's memory, never freed here
  bool owner_ordered = false; // HAL_BUFFER_IMPORT_OWNER_ORDERED: its release does not wait
  CUdeviceptr address = 0;    // aligned start
  // Peer-mappable memory (cuda_comm.cpp): cuMemCreate'd (or imported) and mapped at `address`.
  CUmemGenericAllocationHandle vmm = 0;
  uint64_t vmm_bytes = 0;     // mapped size (granularity-rounded)
  uint64_t vmm_asked = 0;     // the size hal_comm_buffer_create asked for: what peers import
  int export_fd = -1;         // the owner's shareable POSIX fd
  uint64_t export_id = 0;     // what peers ask the owner's socket for
  struct CudaComm* comm = nullptr;  // the owner's communicator (it outlives the buffer)
};

struct CudaStream {
  CudaDevice* device = nullptr;
  CUstream stream = nullptr;
  CUcontext ctx = nullptr;  // primary or green (converted); null if unknown
  // Recorded when a buffer is released while this stream has work queued: the buffer's free
  // waits for it (cuda_buffer.cpp). Guarded by the device's mu; null if it could not be made.
  CUevent release_mark = nullptr;
  bool imported = false;  // hal_stream_import: the owner's stream, never destroyed or waited for here
};

struct CudaEvent {
  CudaDevice* device = nullptr;
  std::mutex mu;
  CUevent event = nullptr;
  CUcontext ctx = nullptr;  // the context the CUevent was created in
  unsigned flags = 0;
  // cuda_event_synchronize waits on a copy of `event` outside mu, so an event that a record
  // replaces (remade in a partition's context) is destroyed only once no synchronize is in
  // flight: kept in `retired` meanwhile. Both guarded by mu.
  uint32_t synchronizing = 0;
  std::vector<CUevent> retired;
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
  // The dynamic shared memory this handle knows the attribute allows: a launch at or below it
  // skips the driver. Only raised, under the device's shared_limit_mu.
  std::atomic<uint32_t> dynamic_shared_limit{48 * 1024};
};

inline hal_error* cu_error(const Driver* d, CUresult r, const std::string& what) {
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

// An imported stream may be 0 or 2, the legacy and per-thread default streams, which name the
// *current* context's: calls on an imported stream run with the device's primary context
// current (the handles of created streams carry their context).
class ImportedStreamScope {
 public:
  explicit ImportedStreamScope(const CudaStream* s) {
    if (s->imported) scope_.emplace(s->device->d, s->device->ctx);
  }

 private:
  std::optional<ContextScope> scope_;
};

inline int attr(CudaDevice* dv, CUdevice_attribute a) {
  int v = 0;
  if (dv->d->cuDeviceGetAttribute(&v, a, dv->dev) != CUDA_SUCCESS) return 0;
  return v;
}

// ---- the hal_backend_api entries, by object ------------------------------------------------

// cuda_backend.cpp
hal_error* cuda_create(const hal_host_api* host, CudaBackend** out);
void cuda_destroy(CudaBackend* b);
hal_error* cuda_device_count(CudaBackend* b, uint32_t* out);

// cuda_device.cpp
hal_error* cuda_device_open(CudaBackend* b, uint32_t index, CudaDevice** out);
void cuda_device_close(CudaDevice* dv);
hal_error* cuda_device_info(CudaDevice* dv, hal_device_info* info);
bool has_tensor_maps(const CudaDevice* dv);

// cuda_buffer.cpp
hal_error* cuda_buffer_create(CudaDevice* dv, const hal_buffer_desc* desc, CudaBuffer** out, uint64_t* address,
                              void** host);
hal_error* cuda_buffer_import(CudaDevice* dv, const hal_buffer_import_desc* desc, CudaBuffer** out, void** host);
void cuda_buffer_destroy(CudaBuffer* b);

// cuda_stream.cpp
hal_error* cuda_stream_create(CudaDevice* dv, CudaPartition* part, const hal_stream_desc*, CudaStream** out);
hal_error* cuda_stream_import(CudaDevice* dv, const hal_stream_import_desc* desc, CudaStream** out);
hal_error* cuda_stream_native(CudaStream* s, uint64_t* out);
void cuda_stream_destroy(CudaStream* s);
hal_error* cuda_stream_synchronize(CudaStream* s);
hal_error* cuda_stream_write(CudaStream* s, CudaBuffer* dst, uint64_t off, const void* src, uint64_t size);
hal_error* cuda_stream_read(CudaStream* s, CudaBuffer* src, uint64_t off, void* dst, uint64_t size);
hal_error* cuda_stream_copy(CudaStream* s, CudaBuffer* dst, uint64_t doff, CudaBuffer* src, uint64_t soff,
                            uint64_t size);
hal_error* cuda_stream_fill(CudaStream* s, CudaBuffer* dst, uint64_t off, uint64_t size, uint32_t pattern,
                            uint32_t psize);
hal_error* cuda_stream_wait_event(CudaStream* s, CudaEvent* ev);

// cuda_event.cpp
hal_error* cuda_event_create(CudaDevice* dv, const hal_event_desc* desc, CudaEvent** out);
void cuda_event_destroy(CudaEvent* ev);
hal_error* cuda_event_record(CudaEvent* ev, CudaStream* s);
hal_error* cuda_event_query(CudaEvent* ev, bool* complete);
hal_error* cuda_event_synchronize(CudaEvent* ev);
hal_error* cuda_event_elapsed_ms(CudaEvent* a, CudaEvent* b, float* ms);

// cuda_module.cpp: modules, kernels and launches
hal_error* cuda_module_load(CudaDevice* dv, const hal_module_desc* desc, CudaModule** out);
void cuda_module_destroy(CudaModule* m);
hal_error* cuda_kernel_get(CudaModule* m, const char* name, CudaKernel** out, hal_kernel_info* info,
                           hal_kernel_arg* args, uint32_t cap);
void cuda_kernel_destroy(CudaKernel* k);
hal_error* cuda_stream_launch(CudaStream* s, CudaKernel* k, const hal_launch_desc* desc);

// cuda_partition.cpp
hal_error* cuda_partition_split(CudaDevice* dv, const hal_partition_desc* desc, CudaPartition** part,
                                hal_partition_info* pinfo, CudaPartition** rem, hal_partition_info* rinfo);
void cuda_partition_destroy(CudaPartition* p);
// cuda_module.cpp: hal_device_can_run (ABI 1.3), ptx_info.cpp's check_target, the one rule
hal_error* cuda_device_can_run(CudaDevice* dv, uint32_t format, const char* target, bool* yes, char* reason,
                               size_t capacity);
hal_error* cuda_partition_caps(CudaDevice* dv, uint32_t flags, hal_partition_caps* out);

// cuda_comm.cpp: communicators (ABI 1.4) over the shared-memory group, with peer memory from
// cuMemCreate exported as POSIX file descriptors passed over a unix socket
struct CudaComm;
hal_error* cuda_comm_create(CudaDevice* dv, const hal_comm_desc* desc, CudaComm** out, hal_comm_info* info);
void cuda_comm_destroy(CudaComm* c);
hal_error* cuda_comm_barrier(CudaComm* c);
hal_error* cuda_comm_all_gather(CudaComm* c, const void* send, uint64_t bytes, void* recv);
hal_error* cuda_comm_buffer_create(CudaComm* c, uint64_t size, CudaBuffer** out, uint64_t* address, void** host);
hal_error* cuda_comm_buffer_export(CudaComm* c, CudaBuffer* b, hal_comm_handle* out);
hal_error* cuda_comm_buffer_import(CudaComm* c, uint32_t peer, const hal_comm_handle* handle, CudaBuffer** out,
                                   uint64_t* size, uint64_t* address, void** host);
hal_error* cuda_comm_all_to_all(CudaComm* c, CudaStream* s, CudaBuffer* send, const uint64_t* send_offsets,
                                const uint64_t* send_sizes, CudaBuffer* recv, const uint64_t* recv_offsets,
                                const uint64_t* recv_sizes);
// Unmaps and releases a peer-mappable buffer (cuda_buffer_destroy calls it).
void cuda_vmm_release(CudaBuffer* b);

// cuda_tensor_map.cpp
hal_error* cuda_tensor_map_encode(CudaDevice* dv, uint64_t address, const hal_tensor_map_desc* desc, void* out);

}  // namespace halcyon::cuda
