// The CUDA driver API, loaded at run time: libcuda.so.1 is opened with dlopen and every
// symbol is resolved through cuGetProcAddress at the ABI version named in the table below, so
// a newer cuda.h never silently raises the minimum driver. Nothing links against libcuda.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace halcyon::cuda {

// The driver this backend needs at least (CUDA 12.0): every required symbol exists there.
constexpr int kMinDriverVersion = 12000;

// X(name, abi_version): the symbol's typedef is PFN_<name>_v<abi_version> from
// cudaTypedefs.h and cuGetProcAddress is asked for exactly that ABI version.
#define HALCYON_CUDA_REQUIRED(X)                                                       \
  X(cuInit, 2000) X(cuDriverGetVersion, 2020) X(cuGetErrorName, 6000)                  \
  X(cuGetErrorString, 6000) X(cuDeviceGetCount, 2000) X(cuDeviceGet, 2000)             \
  X(cuDeviceGetName, 2000) X(cuDeviceGetAttribute, 2000) X(cuDeviceTotalMem, 3020)     \
  X(cuDevicePrimaryCtxRetain, 7000) X(cuDevicePrimaryCtxRelease, 11000)                \
  X(cuCtxGetCurrent, 4000) X(cuCtxSetCurrent, 4000) X(cuCtxPushCurrent, 4000)          \
  X(cuCtxPopCurrent, 4000) X(cuMemAlloc, 3020) X(cuMemFree, 3020)                      \
  X(cuMemHostAlloc, 2020) X(cuMemFreeHost, 2000) X(cuMemHostGetDevicePointer, 3020)    \
  X(cuMemcpyAsync, 4000) X(cuMemcpyDtoDAsync, 3020) X(cuMemsetD8Async, 3020)           \
  X(cuMemsetD16Async, 3020) X(cuMemsetD32Async, 3020) X(cuStreamCreate, 2000)          \
  X(cuStreamDestroy, 4000) X(cuStreamSynchronize, 2000) X(cuStreamWaitEvent, 3020)     \
  X(cuStreamQuery, 2000)                                                               \
  X(cuEventCreate, 2000) X(cuEventDestroy, 4000) X(cuEventRecord, 2000)                \
  X(cuEventQuery, 2000) X(cuEventSynchronize, 2000) X(cuEventElapsedTime, 2000)        \
  X(cuModuleLoadDataEx, 2010) X(cuModuleUnload, 2000) X(cuModuleGetFunction, 2000)     \
  X(cuFuncGetAttribute, 2020) X(cuFuncSetAttribute, 9000) X(cuLaunchKernel, 4000)      \
  X(cuLinkCreate, 6050) X(cuLinkAddData, 6050) X(cuLinkComplete, 5050) X(cuLinkDestroy, 5050)

// Optional: newer drivers only. A missing one turns a feature off, never the backend.
#define HALCYON_CUDA_OPTIONAL(X)                                                       \
  X(cuMemPoolCreate, 11020) X(cuMemPoolDestroy, 11020) X(cuMemPoolSetAttribute, 11020) \
  X(cuMemPoolTrimTo, 11020) X(cuMemAllocFromPoolAsync, 11020) X(cuMemFreeAsync, 11020) \
  X(cuKernelGetParamInfo, 12040) X(cuFuncGetParamInfo, 12040)                          \
  X(cuDeviceGetDevResource, 12040)                                                     \
  X(cuDevSmResourceSplitByCount, 12040) X(cuDevResourceGenerateDesc, 12040)            \
  X(cuGreenCtxCreate, 12040) X(cuGreenCtxDestroy, 12040) X(cuCtxFromGreenCtx, 12040)   \
  X(cuGreenCtxGetDevResource, 12040)                                                   \
  X(cuGreenCtxStreamCreate, 12050) X(cuLibraryLoadData, 12000) X(cuLibraryUnload, 12000) \
  X(cuLibraryGetKernel, 12000) X(cuKernelSetAttribute, 12000)                          \
  X(cuTensorMapEncodeTiled, 12000) X(cuPointerGetAttributes, 7000) X(cuStreamGetCtx, 9020) \
  X(cuMemCreate, 10020) X(cuMemRelease, 10020) X(cuMemMap, 10020) X(cuMemUnmap, 10020) \
  X(cuMemSetAccess, 10020) X(cuMemAddressReserve, 10020) X(cuMemAddressFree, 10020)    \
  X(cuMemExportToShareableHandle, 10020) X(cuMemImportFromShareableHandle, 10020)      \
  X(cuMemGetAllocationGranularity, 10020)

struct Driver {
#define HALCYON_CUDA_FIELD(name, ver) PFN_##name##_v##ver name = nullptr;
  HALCYON_CUDA_REQUIRED(HALCYON_CUDA_FIELD)
  HALCYON_CUDA_OPTIONAL(HALCYON_CUDA_FIELD)
#undef HALCYON_CUDA_FIELD
  int version = 0;          // cuDriverGetVersion, e.g. 13000
  std::string missing_optional;  // names of optional symbols this driver lacks

  bool has_memory_pools() const {
    return cuMemPoolCreate && cuMemPoolDestroy && cuMemPoolSetAttribute && cuMemPoolTrimTo &&
           cuMemAllocFromPoolAsync && cuMemFreeAsync;
  }
  // Virtual memory management with shareable handles: peer-mappable buffers (cuda_comm.cpp).
  bool has_vmm() const {
    return cuMemCreate && cuMemRelease && cuMemMap && cuMemUnmap && cuMemSetAccess && cuMemAddressReserve &&
           cuMemAddressFree && cuMemExportToShareableHandle && cuMemImportFromShareableHandle &&
           cuMemGetAllocationGranularity;
  }
  bool has_green_contexts() const {
    // Kernels launch in green contexts as CUkernels of a context-independent CUlibrary.
    return cuDeviceGetDevResource && cuDevSmResourceSplitByCount && cuDevResourceGenerateDesc &&
           cuGreenCtxCreate && cuGreenCtxDestroy && cuGreenCtxStreamCreate && cuGreenCtxGetDevResource &&
           cuLibraryLoadData &&
           cuLibraryUnload && cuLibraryGetKernel && cuKernelSetAttribute;
  }
};

// Loads the driver once per process (thread-safe). Returns null and sets *why when the
// library, a required symbol or cuInit fails. `file` (the backend option cuda.library; null =
// libcuda.so.1) names the library; the first call's choice holds for the process.
const Driver* load_driver(std::string* why, const char* file = nullptr);

// "CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)"
std::string result_string(const Driver& d, CUresult r);

// "13.0" from 13000.
std::string version_string(int v);

}  // namespace halcyon::cuda
