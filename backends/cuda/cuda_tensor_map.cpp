// Tensor maps: hal_tensor_map_desc -> cuTensorMapEncodeTiled (arguments and limits in
// tensor_map.cpp, GPU-free).
#include "cuda_internal.hpp"

#include <cstring>

#include "tensor_map.hpp"

namespace halcyon::cuda {

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

}  // namespace halcyon::cuda
