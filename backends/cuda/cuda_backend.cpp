// The NVIDIA backend: the CUDA driver API (loaded at run time, see cuda_driver.hpp) behind
// hal.h. Devices are primary contexts; partitions are green contexts; modules are loaded
// into the primary context and, for partitions, as context-independent libraries.
#include "cuda_internal.hpp"

#include <type_traits>

using namespace halcyon::cuda;

namespace halcyon::cuda {

hal_error* cuda_create(const hal_host_api* host, CudaBackend** out) {
  halcyon::plugin::host() = host;
  HAL_BACKEND_GUARD({
    // The options first (hal.h, hal_init_desc.backend_options): a malformed one is refused
    // whether or not this machine has a driver.
    const char* library = halcyon::plugin::option("cuda", "library");
    std::string cache_dir;
    if (std::string why = cuda_options(library, halcyon::plugin::option("cuda", "cache_dir"), &cache_dir); !why.empty())
      return error(HAL_INVALID_ARGUMENT, "cuda: " + why);
    std::string why;
    const Driver* d = load_driver(&why, library);
    if (!d) return error(HAL_UNAVAILABLE, why);
    int n = 0;
    CUresult r = d->cuDeviceGetCount(&n);
    if (r != CUDA_SUCCESS)
      return error(HAL_UNAVAILABLE, "cuDeviceGetCount failed: " + result_string(*d, r));
    auto* b = new CudaBackend;
    b->d = d;
    b->device_count = n;
    b->cache = PtxCache(cache_dir);
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

}  // namespace halcyon::cuda

namespace {

// hal.h leaves hal_be_* incomplete for each backend to define, but several backends live in
// one library: defining those structs here would break the one-definition rule (their
// inline destructors would be merged across backends). The backend's own types stay in
// namespace halcyon::cuda (cuda_internal.hpp) and the table's entries convert the opaque pointers.
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
template <> struct Opaque<CudaComm*> { using type = hal_be_comm*; };
template <> struct Opaque<CudaComm**> { using type = hal_be_comm**; };

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
    &Entry<cuda_partition_caps>::call,
    &Entry<cuda_buffer_import>::call,
    &Entry<cuda_comm_create>::call,
    &Entry<cuda_comm_destroy>::call,
    &Entry<cuda_comm_barrier>::call,
    &Entry<cuda_comm_all_gather>::call,
    &Entry<cuda_comm_buffer_create>::call,
    &Entry<cuda_comm_buffer_export>::call,
    &Entry<cuda_comm_buffer_import>::call,
    &Entry<cuda_comm_all_to_all>::call,
    &Entry<cuda_stream_import>::call,
    &Entry<cuda_stream_native>::call,
};

}  // namespace

extern "C" const hal_backend_api* halcyon_backend_api_cuda(void) { return &kApi; }

