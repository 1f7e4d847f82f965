// Partitions: green contexts of a number of SMs (cuDevSmResourceSplitByCount).
#include "cuda_internal.hpp"

#include <memory>

namespace halcyon::cuda {
namespace {

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

}  // namespace

void cuda_partition_destroy(CudaPartition* p) {
  if (p->green) p->device->d->cuGreenCtxDestroy(p->green);
  delete p;
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

}  // namespace halcyon::cuda
