// Modules (PTX through the driver's JIT and the PTX cache, or cubins), their kernels and
// argument layouts, and launches.
#include "cuda_internal.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

namespace halcyon::cuda {
namespace {

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

// PTX -> cubin by the JIT, then into the cache for the next process (a cache that cannot be
// written is only logged: it is optional).
hal_error* compile_and_store(CudaDevice* dv, const std::string& ptx, const ArchTag& target, const PtxCacheKey& key,
                             const std::string& name, const std::string& what, std::vector<char>* cubin) {
  {
    ContextScope scope(dv->d, dv->ctx);
    if (hal_error* e = jit_ptx(dv, ptx, target, what, cubin)) return e;
  }
  const PtxCache& cache = dv->backend->cache;
  if (!cache.enabled()) return nullptr;
  std::string why;
  if (!cache.store(key, cubin->data(), cubin->size(), &why))
    halcyon::plugin::log(HAL_LOG_WARNING, "cuda: PTX cache: " + why);
  else
    halcyon::plugin::log(HAL_LOG_DEBUG, fmt::format("cuda: PTX cache stored '{}': {}", name, cache.path(key)));
  return nullptr;
}

// Which load of an image failed, and the driver's log of it (JitLog::text()).
struct LoadFailure {
  std::string step;
  std::string log;
};

// Loads `image` into m: the module of the primary context and, where green contexts exist, the
// library partition streams launch from. CUDA_SUCCESS, or the failing call's result with *why
// filled; m then holds neither.
CUresult load_image(CudaDevice* dv, CudaModule* m, const void* image, LoadFailure* why) {
  const Driver* d = dv->d;
  ContextScope scope(d, dv->ctx);
  JitLog log;
  CUresult r = d->cuModuleLoadDataEx(&m->module, image, log.count, log.options, log.values);
  if (r != CUDA_SUCCESS) {
    m->module = nullptr;
    *why = {"loading", log.text()};
    return r;
  }
  if (dv->green) {
    JitLog lib_log;
    r = d->cuLibraryLoadData(&m->library, image, lib_log.options, lib_log.values, lib_log.count, nullptr, nullptr, 0);
    if (r != CUDA_SUCCESS) {
      d->cuModuleUnload(m->module);
      m->module = nullptr;
      m->library = nullptr;
      *why = {"loading for partitions", lib_log.text()};
    }
  }
  return r;
}

hal_error* load_error(const Driver* d, CUresult r, const std::string& what, const LoadFailure& why) {
  return cu_error(d, r, what + ": " + why.step + why.log);
}

// Loads PTX into m from the cache's cubin, else from the JIT's (stored for the next process). An
// entry that passed the cache's checks may still be refused by the driver (a writer that stored
// a bad cubin, a driver changed without its version): with the PTX at hand that is no failure,
// so the entry is dropped, the PTX compiled and the entry written anew.
hal_error* load_ptx(CudaDevice* dv, CudaModule* m, const std::string& ptx, const ArchTag& target,
                    const std::string& what) {
  const Driver* d = dv->d;
  const PtxCache& cache = dv->backend->cache;
  const PtxCacheKey key = make_cache_key(ptx, dv->arch, d->version, kJitSettings);
  std::vector<char> cubin;
  LoadFailure why;
  if (cache.load(key, &cubin)) {
    halcyon::plugin::log(HAL_LOG_DEBUG, fmt::format("cuda: PTX cache hit for '{}': {}", m->name, cache.path(key)));
    const CUresult r = load_image(dv, m, cubin.data(), &why);
    if (r == CUDA_SUCCESS) return nullptr;
    halcyon::plugin::log(HAL_LOG_WARNING,
                         fmt::format("cuda: PTX cache entry {} for '{}' was refused by the driver ({}: {}); removing "
                                     "it and compiling the PTX{}",
                                     cache.path(key), m->name, why.step, result_string(*d, r), why.log));
    cache.remove(key);
  }
  if (hal_error* e = compile_and_store(dv, ptx, target, key, m->name, what, &cubin)) return e;
  if (CUresult r = load_image(dv, m, cubin.data(), &why); r != CUDA_SUCCESS) return load_error(d, r, what, why);
  return nullptr;
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

}  // namespace

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
    if (!is_ptx) {
      if (std::string why = check_cubin_image(desc->data, desc->size); !why.empty())
        return error(HAL_INVALID_ARGUMENT, what + ": not a loadable cubin: " + why);
      LoadFailure why;
      if (CUresult r = load_image(dv, m.get(), desc->data, &why); r != CUDA_SUCCESS) return load_error(d, r, what, why);
    } else {
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
      if (hal_error* e = load_ptx(dv, m.get(), ptx, target, what)) return e;
    }
    *out = m.release();
    return nullptr;
  })
}

void cuda_module_destroy(CudaModule* m) {
  const Driver* d = m->device->d;
  m->device->synchronize_all("unloading a module");  // its kernels may still be running
  ContextScope scope(d, m->device->ctx);
  d->cuModuleUnload(m->module);
  if (m->library) d->cuLibraryUnload(m->library);
  delete m;
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
    // What launches may ask without raising it: 48 KB less the kernel's static shared memory by
    // default (not 48 KB: such a launch would skip the raise and be refused), or what another
    // handle of this entry raised it to.
    if (d->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k->primary) == CUDA_SUCCESS)
      k->dynamic_shared_limit.store(uint32_t(v));
    else
      k->dynamic_shared_limit.store(0);  // unknown: the first launch asking any reads it (raise_dynamic_shared)
    *out = k.release();
    return nullptr;
  })
}

void cuda_kernel_destroy(CudaKernel* k) { delete k; }

namespace {

// Lets `k` launch with `bytes` of dynamic shared memory. The attribute is the CUfunction's (and
// the CUkernel's), shared by every hal_kernel of the entry and by concurrent launches: under the
// device's lock the driver's current value is read and only ever raised, so launches asking
// 100 KB and 60 KB at once cannot leave it at 60 KB while a handle believes 100 KB. The CUkernel
// is raised first: should the primary's raise then fail, the next launch retries both.
hal_error* raise_dynamic_shared(CudaDevice* dv, CudaKernel* k, uint32_t bytes) {
  if (bytes <= k->dynamic_shared_limit.load(std::memory_order_acquire)) return nullptr;
  const Driver* d = dv->d;
  std::string what = fmt::format("{}: raising the kernel's dynamic shared memory to {} bytes", dv->uri, bytes);
  std::lock_guard lock(dv->shared_limit_mu);
  int now = 0;
  CU_TRY(d, d->cuFuncGetAttribute(&now, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k->primary), what);
  if (bytes > uint32_t(now)) {
    if (k->kernel)
      CU_TRY(d, d->cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes), k->kernel, dv->dev),
             what);
    CU_TRY(d, d->cuFuncSetAttribute(k->primary, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(bytes)), what);
    now = int(bytes);
  }
  if (uint32_t(now) > k->dynamic_shared_limit.load(std::memory_order_relaxed))
    k->dynamic_shared_limit.store(uint32_t(now), std::memory_order_release);
  return nullptr;
}

}  // namespace

hal_error* cuda_stream_launch(CudaStream* s, CudaKernel* k, const hal_launch_desc* desc) {
  const Driver* d = s->device->d;
  ImportedStreamScope scope(s);
  if (hal_error* e = raise_dynamic_shared(s->device, k, desc->shared_bytes)) return e;
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

// hal_device_can_run (ABI 1.3): ptx_info.cpp's check_target, the one rule ('a' = that exact
// arch, 'f' = its family, plain PTX forward).
hal_error* cuda_device_can_run(CudaDevice* dv, uint32_t format, const char* target, bool* yes, char* reason,
                               size_t capacity) {
  HAL_BACKEND_GUARD({
    std::string why = check_target(target, format == HAL_MODULE_PTX, dv->cc_major, dv->cc_minor);
    *yes = why.empty();
    std::snprintf(reason, capacity, "%s", why.c_str());
    return nullptr;
  })
}

}  // namespace halcyon::cuda
