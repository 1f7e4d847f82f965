// Devices: a primary context each, the allocation stream and memory pool, and what the
// device reports (hal_device_info).
#include "cuda_internal.hpp"

#include <cstdio>
#include <memory>

namespace halcyon::cuda {

void CudaDevice::synchronize_all(const char* why) {
  const uint64_t n = ++device_syncs;
  halcyon::plugin::log(HAL_LOG_DEBUG, fmt::format("cuda: {}: device-wide synchronization #{} ({})", uri, n, why));
  {
    std::lock_guard lock(mu);  // held: a stream being destroyed stays valid until erased
    for (auto* s : streams) {
      ImportedStreamScope scope(s);
      d->cuStreamSynchronize(s->stream);
    }
  }
  if (alloc_stream) d->cuStreamSynchronize(alloc_stream);
  if (free_stream) d->cuStreamSynchronize(free_stream);
}

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
        // An allocation may reuse a freed block only once its free has run. Otherwise the driver
        // would make the allocation stream wait for the free stream, whose frees wait for the
        // streams' queued work, and buffer_create's wait for its allocation would become a wait
        // for the whole device.
        int no = 0;
        d->cuMemPoolSetAttribute(raw->pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &no);
        if (d->cuStreamCreate(&raw->free_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
          d->cuMemPoolDestroy(raw->pool);
          raw->pool = nullptr;
          raw->free_stream = nullptr;
        }
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
        raw->sm_min = sm.sm.minSmPartitionSize;
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
    dv->synchronize_all("closing the device");
    if (dv->pool) d->cuMemPoolDestroy(dv->pool);
    if (dv->alloc_stream) d->cuStreamDestroy(dv->alloc_stream);
    if (dv->free_stream) d->cuStreamDestroy(dv->free_stream);
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
    if (d->has_vmm()) caps += " comm";
    std::snprintf(info->capabilities, sizeof info->capabilities, "%s", caps.c_str());
    return nullptr;
  })
}

}  // namespace halcyon::cuda
