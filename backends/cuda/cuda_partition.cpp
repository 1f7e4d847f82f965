// Partitions: green contexts of a number of SMs (cuDevSmResourceSplitByCount), drawn from the
// SMs no live partition holds (CudaDevice::free_sms), so that two splits never overlap.
#include "cuda_internal.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

namespace halcyon::cuda {
namespace {

// Steps of smCoscheduledAlignment SMs by default (8 on Hopper); 2 with
// IGNORE_SM_COSCHEDULING, which gives up large thread-block clusters.
uint32_t step_of(const CudaDevice* dv, bool fine) {
  return fine ? 2 : (dv->sm_align ? dv->sm_align : (dv->cc_major >= 9 ? 8 : 2));
}

hal_error* make_green(CudaDevice* dv, CUdevResource& res, CUgreenCtx* out) {
  const Driver* d = dv->d;
  CUdevResourceDesc rd = nullptr;
  CU_TRY(d, d->cuDevResourceGenerateDesc(&rd, &res, 1), dv->uri + ": cuDevResourceGenerateDesc");
  CU_TRY(d, d->cuGreenCtxCreate(out, rd, dv->dev, CU_GREEN_CTX_DEFAULT_STREAM),
         fmt::format("{}: creating a green context of {} SMs", dv->uri, res.sm.smCount));
  return nullptr;
}

hal_error* make_partition(CudaDevice* dv, CUdevResource& res, uint32_t granularity, CudaPartition** out,
                          hal_partition_info* info) {
  auto p = std::make_unique<CudaPartition>();
  p->device = dv;
  if (hal_error* e = make_green(dv, res, &p->green)) return e;
  if (dv->d->cuCtxFromGreenCtx && dv->d->cuCtxFromGreenCtx(&p->ctx, p->green) != CUDA_SUCCESS) p->ctx = nullptr;
  info->units_granted = res.sm.smCount;
  info->units_requested = res.sm.smCount;
  info->mechanism = HAL_PARTITION_GREEN_CONTEXT;
  info->enforced = 1;
  info->granularity = granularity;
  info->first_unit = UINT32_MAX;  // the driver does not say which SMs
  *out = p.release();
  return nullptr;
}

// The SMs a split may draw on: the free pool's, or the whole device's before any split.
hal_error* free_resource(CudaDevice* dv, CUdevResource* out) {
  const Driver* d = dv->d;
  if (dv->free_sms) {
    CU_TRY(d, d->cuGreenCtxGetDevResource(dv->free_sms, out, CU_DEV_RESOURCE_TYPE_SM),
           dv->uri + ": cuGreenCtxGetDevResource of the free SMs");
  } else {
    CU_TRY(d, d->cuDeviceGetDevResource(dv->dev, out, CU_DEV_RESOURCE_TYPE_SM), dv->uri + ": cuDeviceGetDevResource");
  }
  return nullptr;
}

// After a split without a remainder partition, the SMs left over become the free pool.
hal_error* keep_free(CudaDevice* dv, CUdevResource& remaining) {
  CUgreenCtx next = nullptr;
  if (remaining.sm.smCount > 0)
    if (hal_error* e = make_green(dv, remaining, &next)) return e;
  if (dv->free_sms) dv->d->cuGreenCtxDestroy(dv->free_sms);
  dv->free_sms = next;
  dv->free_none = next == nullptr;
  return nullptr;
}

}  // namespace

void cuda_partition_destroy(CudaPartition* p) {
  CudaDevice* dv = p->device;
  if (p->green) dv->d->cuGreenCtxDestroy(p->green);
  delete p;
  std::lock_guard lock(dv->mu);
  if (--dv->live_partitions == 0) {  // every SM is free again: back to the device's resource
    if (dv->free_sms) dv->d->cuGreenCtxDestroy(dv->free_sms);
    dv->free_sms = nullptr;
    dv->free_none = false;
  }
}

hal_error* cuda_partition_caps(CudaDevice* dv, uint32_t flags, hal_partition_caps* out) {
  HAL_BACKEND_GUARD({
    if (!dv->green) {  // no green contexts: the core's soft partitions would not apply either
      out->min_units = out->step_units = 1;
      out->mechanism = HAL_PARTITION_WHOLE_DEVICE;
      out->enforced = 0;
      std::snprintf(out->mechanism_name, sizeof out->mechanism_name, "none (no green contexts)");
      return nullptr;
    }
    const bool fine = flags & HAL_PARTITION_FINE_GRAINED;
    out->step_units = step_of(dv, fine);
    out->min_units = fine ? 2 : std::max(dv->sm_min, out->step_units);
    out->mechanism = HAL_PARTITION_GREEN_CONTEXT;
    out->enforced = 1;
    return nullptr;
  })
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
    const uint32_t granularity = step_of(dv, fine);
    std::lock_guard lock(dv->mu);
    if (dv->free_none)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: {}: every SM is in a live partition (green contexts' SMs "
                                                 "return to the device when all its partitions are released)",
                                                 dv->uri));
    CUdevResource input{};
    if (hal_error* e = free_resource(dv, &input)) return e;
    CUdevResource result{}, remaining{};
    unsigned groups = 1;
    CUresult r = d->cuDevSmResourceSplitByCount(&result, &groups, &input, &remaining,
                                                fine ? CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING : 0, desc->units);
    if (r == CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION || r == CUDA_ERROR_INVALID_VALUE)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: {}: {} SMs cannot be split off {} free SMs in steps of {}: {}",
                                                 dv->uri, desc->units, input.sm.smCount, granularity,
                                                 result_string(*d, r)));
    if (r != CUDA_SUCCESS) return cu_error(d, r, fmt::format("{}: splitting off {} SMs", dv->uri, desc->units));
    if (groups != 1 || result.sm.smCount == 0)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: {}: {} SMs{} cannot be split off {} free SMs", dv->uri,
                                                 desc->units, fine ? " (fine-grained)" : "", input.sm.smCount));
    if (rem && remaining.sm.smCount == 0)
      return error(HAL_OUT_OF_RANGE, fmt::format("cuda: {}: asked for {} SMs plus a remainder; {} free SMs rounded to "
                                                 "steps of {} leave none", dv->uri, desc->units, input.sm.smCount,
                                                 granularity));
    CudaPartition* p = nullptr;
    if (hal_error* e = make_partition(dv, result, granularity, &p, pinfo)) return e;
    CudaPartition* rp = nullptr;
    hal_error* e = rem ? make_partition(dv, remaining, granularity, &rp, rinfo) : keep_free(dv, remaining);
    if (e) {
      d->cuGreenCtxDestroy(p->green);
      delete p;
      return e;
    }
    if (rem) {  // the remainder holds every free SM
      if (dv->free_sms) d->cuGreenCtxDestroy(dv->free_sms);
      dv->free_sms = nullptr;
      dv->free_none = true;
      *rem = rp;
      ++dv->live_partitions;
    }
    ++dv->live_partitions;
    *part = p;
    return nullptr;
  })
}

}  // namespace halcyon::cuda
