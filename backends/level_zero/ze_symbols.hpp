// The Level Zero entry points the backend uses, as one X-macro table: the pointer types come
// from the real Level Zero headers (Debian: libze-dev), the pointers from dlopen/dlsym at run
// time. Required symbols must all be present for the backend to load; optional ones may be
// NULL and the feature they serve is then reported unsupported.
#pragma once

#include <level_zero/ze_api.h>

#include <string>

namespace halcyon::ze {

// X(name): the type is decltype(&::name).
#define HALCYON_ZE_REQUIRED(X)                \
  X(zeInit)                                   \
  X(zeDriverGet)                              \
  X(zeDeviceGet)                              \
  X(zeDeviceGetProperties)                    \
  X(zeDeviceGetComputeProperties)             \
  X(zeDeviceGetMemoryProperties)              \
  X(zeDeviceGetCommandQueueGroupProperties)   \
  X(zeDeviceGetSubDevices)                    \
  X(zeContextCreate)                          \
  X(zeContextDestroy)                         \
  X(zeCommandListCreateImmediate)             \
  X(zeCommandListDestroy)                     \
  X(zeCommandListAppendMemoryCopy)            \
  X(zeCommandListAppendMemoryFill)            \
  X(zeCommandListAppendBarrier)               \
  X(zeCommandListAppendWaitOnEvents)          \
  X(zeCommandListAppendEventReset)            \
  X(zeCommandListAppendLaunchKernel)          \
  X(zeCommandListAppendWriteGlobalTimestamp)  \
  X(zeEventPoolCreate)                        \
  X(zeEventPoolDestroy)                       \
  X(zeEventCreate)                            \
  X(zeEventDestroy)                           \
  X(zeEventHostSynchronize)                   \
  X(zeEventQueryStatus)                       \
  X(zeEventHostReset)                         \
  X(zeMemAllocDevice)                         \
  X(zeMemAllocHost)                           \
  X(zeMemFree)                                \
  X(zeModuleCreate)                           \
  X(zeModuleDestroy)                          \
  X(zeModuleBuildLogGetString)                \
  X(zeModuleBuildLogDestroy)                  \
  X(zeKernelCreate)                           \
  X(zeKernelDestroy)                          \
  X(zeKernelSetGroupSize)                     \
  X(zeKernelSetArgumentValue)                 \
  X(zeKernelGetProperties)

// Shared memory is not used by the backend's own paths (device and host allocations are), but
// resolved so that a driver without it is seen at load; cache properties feed device info; the
// allocation queries check imported memory (hal_buffer_import).
#define HALCYON_ZE_OPTIONAL(X)    \
  X(zeMemAllocShared)             \
  X(zeDeviceGetCacheProperties)   \
  X(zeDriverGetApiVersion)        \
  X(zeMemGetAllocProperties)      \
  X(zeMemGetAddressRange)

// Entry points newer than Debian 12's headers (1.4), declared here as the specification gives
// them, as X(name, result, parameters); each NULL when the loader lacks it:
// - zeDriverGetDefaultContext (1.14): the driver's one context of all its devices, which SYCL's
//   full-platform contexts and so PyTorch's XPU tensors use too;
// - zeCommandListGetDeviceHandle / GetContextHandle / IsImmediate (1.9): what an imported command
//   list is (hal_stream_import), checked before the backend appends to it;
// - zeCommandListHostSynchronize (1.6): a buffer free waits for an imported list with it, which
//   appends nothing (the owner may be appending on its own thread; the spec allows this call
//   from any thread at any time).
#define HALCYON_ZE_NEWER(X)                                                                       \
  X(zeDriverGetDefaultContext, ze_context_handle_t, (ze_driver_handle_t))                         \
  X(zeCommandListGetDeviceHandle, ze_result_t, (ze_command_list_handle_t, ze_device_handle_t*))   \
  X(zeCommandListGetContextHandle, ze_result_t, (ze_command_list_handle_t, ze_context_handle_t*)) \
  X(zeCommandListIsImmediate, ze_result_t, (ze_command_list_handle_t, ze_bool_t*))                \
  X(zeCommandListHostSynchronize, ze_result_t, (ze_command_list_handle_t, uint64_t))

struct Symbols {
#define HALCYON_ZE_FIELD(name) decltype(&::name) name = nullptr;
  HALCYON_ZE_REQUIRED(HALCYON_ZE_FIELD)
  HALCYON_ZE_OPTIONAL(HALCYON_ZE_FIELD)
#undef HALCYON_ZE_FIELD
#define HALCYON_ZE_NEWER_FIELD(name, result, params) result(ZE_APICALL* name) params = nullptr;
  HALCYON_ZE_NEWER(HALCYON_ZE_NEWER_FIELD)
#undef HALCYON_ZE_NEWER_FIELD
};

class Library {
 public:
  Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();
  // Opens `path` (the backend option ze.loader), else libze_loader.so.1, and resolves the
  // table. Returns false with the reason: the file and dlerror, or the first missing symbol.
  bool open(const char* path, std::string* why);

  Symbols sym;
  std::string path;

 private:
  void* handle_ = nullptr;
};

// "ZE_RESULT_ERROR_DEVICE_LOST" for the results a driver commonly returns, else "0x...".
std::string result_name(ze_result_t r);

}  // namespace halcyon::ze
