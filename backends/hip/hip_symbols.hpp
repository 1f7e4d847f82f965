// The HIP entry points the backend uses, as one X-macro table: the pointer types come from the
// real HIP headers, the pointers from dlopen/dlsym at run time. Required symbols must all be
// present for the backend to load; optional ones may be NULL and the feature is then reported
// unsupported.
#pragma once

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <string>

namespace halcyon::hip {

// hipMalloc and hipHostMalloc have C++ template overloads in the header, so their C
// signatures are spelled out.
using MallocFn = hipError_t (*)(void**, size_t);
using HostMallocFn = hipError_t (*)(void**, size_t, unsigned int);
// ROCm 6's hipStreamGetDevice, which HIP 5.2's header does not declare.
using StreamGetDeviceFn = hipError_t (*)(hipStream_t, hipDevice_t*);

// X(name, pointer type).
#define HALCYON_HIP_REQUIRED(X)                                              \
  X(hipInit, decltype(&::hipInit))                                           \
  X(hipGetErrorName, decltype(&::hipGetErrorName))                           \
  X(hipGetErrorString, decltype(&::hipGetErrorString))                       \
  X(hipGetDeviceCount, decltype(&::hipGetDeviceCount))                       \
  X(hipSetDevice, decltype(&::hipSetDevice))                                 \
  X(hipDeviceGetName, decltype(&::hipDeviceGetName))                         \
  X(hipDeviceGetAttribute, decltype(&::hipDeviceGetAttribute))               \
  X(hipDeviceTotalMem, decltype(&::hipDeviceTotalMem))                       \
  X(hipDeviceSynchronize, decltype(&::hipDeviceSynchronize))                 \
  X(hipMalloc, MallocFn)                                                     \
  X(hipFree, decltype(&::hipFree))                                           \
  X(hipHostMalloc, HostMallocFn)                                             \
  X(hipHostFree, decltype(&::hipHostFree))                                   \
  X(hipMemcpyAsync, decltype(&::hipMemcpyAsync))                             \
  X(hipMemsetD8Async, decltype(&::hipMemsetD8Async))                         \
  X(hipMemsetD16Async, decltype(&::hipMemsetD16Async))                       \
  X(hipMemsetD32Async, decltype(&::hipMemsetD32Async))                       \
  X(hipStreamCreateWithFlags, decltype(&::hipStreamCreateWithFlags))         \
  X(hipStreamDestroy, decltype(&::hipStreamDestroy))                         \
  X(hipStreamSynchronize, decltype(&::hipStreamSynchronize))                 \
  X(hipStreamWaitEvent, decltype(&::hipStreamWaitEvent))                     \
  X(hipEventCreateWithFlags, decltype(&::hipEventCreateWithFlags))           \
  X(hipEventDestroy, decltype(&::hipEventDestroy))                           \
  X(hipEventRecord, decltype(&::hipEventRecord))                             \
  X(hipEventQuery, decltype(&::hipEventQuery))                               \
  X(hipEventSynchronize, decltype(&::hipEventSynchronize))                   \
  X(hipEventElapsedTime, decltype(&::hipEventElapsedTime))                   \
  X(hipModuleLoadData, decltype(&::hipModuleLoadData))                       \
  X(hipModuleUnload, decltype(&::hipModuleUnload))                           \
  X(hipModuleGetFunction, decltype(&::hipModuleGetFunction))                 \
  X(hipModuleLaunchKernel, decltype(&::hipModuleLaunchKernel))

#define HALCYON_HIP_OPTIONAL(X)                                              \
  X(hipExtStreamCreateWithCUMask, decltype(&::hipExtStreamCreateWithCUMask)) \
  X(hipDriverGetVersion, decltype(&::hipDriverGetVersion))                   \
  X(hipIpcGetMemHandle, decltype(&::hipIpcGetMemHandle))                     \
  X(hipIpcOpenMemHandle, decltype(&::hipIpcOpenMemHandle))                   \
  X(hipIpcCloseMemHandle, decltype(&::hipIpcCloseMemHandle))                 \
  X(hipRuntimeGetVersion, decltype(&::hipRuntimeGetVersion))                 \
  X(hipPointerGetAttributes, decltype(&::hipPointerGetAttributes))           \
  X(hipMemGetAddressRange, decltype(&::hipMemGetAddressRange))               \
  X(hipStreamGetDevice, StreamGetDeviceFn)

struct Symbols {
#define HALCYON_HIP_FIELD(name, type) type name = nullptr;
  HALCYON_HIP_REQUIRED(HALCYON_HIP_FIELD)
  HALCYON_HIP_OPTIONAL(HALCYON_HIP_FIELD)
#undef HALCYON_HIP_FIELD
  // hipGetDeviceProperties with the HIP 5 struct layout of this header: ROCm 6 exports it as
  // hipGetDevicePropertiesR0000 and gives the plain name to the new layout.
  hipError_t (*getDevicePropertiesR0000)(hipDeviceProp_t*, int) = nullptr;
};

class Library {
 public:
  Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();
  // Opens `file` (the backend option hip.library; NULL or empty: libamdhip64 of ROCm 6, then
  // 5, then the unversioned name) and resolves the table. Returns false with the reason: every
  // file tried, or the first missing symbol.
  bool open(const char* file, std::string* why);
  // "gfx942" for a device (the gcnArchName without ":sramecc+:xnack-" features).
  std::string arch_name(int device) const;

  // The runtime's major version (hipRuntimeGetVersion, else the file's soname): ROCm 6
  // renumbered hipMemoryType, which hipPointerGetAttributes answers in.
  int runtime_major() const;

  Symbols sym;
  std::string path;

 private:
  void* handle_ = nullptr;
};

}  // namespace halcyon::hip
