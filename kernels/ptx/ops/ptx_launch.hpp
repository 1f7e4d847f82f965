// Launch helpers shared by the PTX operator implementations (kernels/ptx/ops, kernels/ptx/moe):
// find the embedded image that suits the device, load it once per device (OpContext::module
// caches modules), look its kernels up once, and launch with a packed argument struct whose
// fields mirror the kernel's .param list (every parameter is 8 bytes: addresses, i64, f64).
#pragma once

#include <halcyon/ptx_kernels.hpp>
#include <halcyon/runtime/op.hpp>

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <string>

namespace halcyon::ptxop {

struct DeviceFacts {
  std::string uri, arch;
  uint32_t compute_units = 0;
  uint32_t max_shared_per_block = 0;
};

inline Result<DeviceFacts> facts(const rt::OpContext& ctx) {
  auto info = ctx.device.info();
  if (!info) return info.error();
  return DeviceFacts{info->uri, info->arch, info->compute_units ? info->compute_units : 1,
                     info->max_shared_per_block};
}

// Kernel `entry` of embedded image `image`, built for the device's architecture (or the newest
// portable target it can run). Kernels are cached per device and entry.
inline Result<Kernel> kernel(const rt::OpContext& ctx, const DeviceFacts& dev, const char* image, const char* entry) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, Kernel>;  // lives as long as the loaded modules
  std::string key = dev.uri + '\n' + image + '\n' + entry;
  {
    std::lock_guard lock(mu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  const ptx::Image* img = ptx::best_for(image, dev.arch);
  if (!img)
    return Error(HAL_UNSUPPORTED, fmt::format("no PTX image '{}' runs on {} ({})", image, dev.uri, dev.arch));
  auto m = ctx.module(HAL_MODULE_PTX, img->target, img->text, img->size + 1, image);
  if (!m) return m.error();
  auto k = m->kernel(entry);
  if (!k) return k.error();
  std::lock_guard lock(mu);
  cache->emplace(key, *k);
  return k;
}

template <typename Args>
Status launch(const rt::OpContext& ctx, const Kernel& k, Dim3 grid, Dim3 block, const Args& args,
              uint32_t shared_bytes = 0) {
  static_assert(sizeof(Args) % 8 == 0, "PTX arguments are packed as 8-byte fields");
  return ctx.stream.launch(k, grid, block, &args, sizeof args, shared_bytes);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The argument block of the GEMM kernels (kernels/ptx/moe/gemm_common.cuh).
struct GemmArgs {
  uint64_t a, b, offsets, out;  // offsets 0: one dense segment of R rows
  int64_t R, K, N, EL;
};
enum GemmEpilogue : int { kGemmBf16 = 0, kGemmSwiglu = 1, kGemmF32 = 2 };
// The kernels' n_tiles_of (gemm_common.cuh): n-tiles of bn weight columns over N outputs.
inline int64_t gemm_n_tiles(int epilogue, int64_t N, int64_t bn) {
  return epilogue == kGemmSwiglu ? ceil_div(N, bn / 2) : ceil_div(N, bn);
}

// Launches the grouped GEMM (kernels/ptx/moe/moe_ops.cpp): on sm_90a when `hopper` and the rows
// are 16-byte aligned the wgmma kernels — the TMA one when the tensors `a` and `b` are given and
// the device makes tensor maps, else the cp.async one — otherwise the mma.sync one.
Status launch_gemm(rt::OpContext& ctx, int epilogue, const GemmArgs& g, bool hopper, const rt::Tensor* a = nullptr,
                   const rt::Tensor* b = nullptr);

// gemm_bf16 on sm_90a with few output tiles (kernels/ptx/moe/gemm_splitk.cpp): split-K over a
// thread-block cluster. *ran = false when it does not apply (then launch_gemm).
Status launch_gemm_splitk(rt::OpContext& ctx, const GemmArgs& g, const rt::Tensor& a, const rt::Tensor& b,
                          bool* ran);

}  // namespace halcyon::ptxop
