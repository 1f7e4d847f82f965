// Launch helpers shared by the PTX operator implementations (ops/ptx):
// find the embedded image that suits the device, load it once per device (OpContext::module
// caches modules), look its kernels up once, and launch with a packed argument struct whose
// fields mirror the kernel's .param list (every parameter is 8 bytes: addresses, i64, f64).
#pragma once

#include <halcyon/ptx_kernels.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace halcyon::ptxop {

struct DeviceFacts {
  std::string uri, arch;
  uint32_t compute_units = 0;
  uint32_t max_shared_per_block = 0;
};

// compute_units: the units the stream's work may use, its partition's (enforced or a soft
// cap) or else the device's (hal_stream_get_info); persistent grids are sized by it, so that
// a kernel on a 112-SM partition does not queue blocks for 132.
inline Result<DeviceFacts> facts(const ops::OpContext& ctx) {
  auto info = ctx.device.info();
  if (!info) return info.error();
  auto stream = ctx.stream.info();
  const uint32_t units = stream && stream->units ? stream->units : info->compute_units;
  return DeviceFacts{info->uri, info->arch, units ? units : 1,
                     info->max_shared_per_block};
}

// Where a kernel's machine code comes from. kPtx: the driver's JIT compiles the PTX (any device
// the PTX runs on). kCubinIfExact: on a device of exactly the image's target, the cubin the
// toolkit's ptxas made at build time; for kernels that take registers with setmaxnreg, which
// the driver's JIT allocated worse (docs/backends/cuda.md: on an H200 the row-tile TMA GEMM ran
// 4.8-5.6 ms as a cubin, 6.0-6.1 ms JIT-compiled). HALCYON_PTX_LOAD=ptx or =cubin overrides
// the choice for every kernel (comparisons; a driver that refuses the cubin falls back to PTX).
enum class CodeFrom { kPtx, kCubinIfExact };
inline bool load_cubin(CodeFrom from) {
  const char* v = std::getenv("HALCYON_PTX_LOAD");
  if (v && std::string_view(v) == "ptx") return false;
  if (v && std::string_view(v) == "cubin") return true;
  return from == CodeFrom::kCubinIfExact;
}

// Whether kernel() below, asked for CodeFrom::kCubinIfExact, loads image `image`'s cubin on this
// device (unless the driver refuses it): launchers whose fastest kernel is only fast as a cubin
// choose it by this.
inline bool cubin_applies(const DeviceFacts& dev, const char* image) {
  if (!load_cubin(CodeFrom::kCubinIfExact)) return false;
  const ptx::Image* img = ptx::best_for(image, dev.arch);
  return img && img->cubin_size && dev.arch == img->target;
}

// Kernel `entry` of embedded image `image`, built for the device's architecture (or the newest
// portable target it can run). Kernels are cached per device, code source and entry.
inline Result<Kernel> kernel(const ops::OpContext& ctx, const DeviceFacts& dev, const char* image, const char* entry,
                             CodeFrom from = CodeFrom::kPtx) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, Kernel>;  // lives as long as the loaded modules
  const bool cubin = load_cubin(from);
  std::string key = dev.uri + '\n' + image + '\n' + entry + (cubin ? "\ncubin" : "");
  {
    std::lock_guard lock(mu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  const ptx::Image* img = ptx::best_for(image, dev.arch);
  if (!img)
    return Error(HAL_UNSUPPORTED, fmt::format("no PTX image '{}' runs on {} ({})", image, dev.uri, dev.arch));
  // The cubin only on exactly its target; if the driver refuses it (too old), the PTX.
  Result<Module> m = Error(HAL_UNSUPPORTED, "");
  if (cubin && img->cubin_size && dev.arch == img->target)
    m = ctx.module(HAL_MODULE_CUBIN, img->target, img->cubin, img->cubin_size, (std::string(image) + ".cubin").c_str());
  if (!m) m = ctx.module(HAL_MODULE_PTX, img->target, img->text, img->size + 1, image);
  if (!m) return m.error();
  auto k = m->kernel(entry);
  if (!k) return k.error();
  std::lock_guard lock(mu);
  cache->emplace(key, *k);
  return k;
}

template <typename Args>
Status launch(const ops::OpContext& ctx, const Kernel& k, Dim3 grid, Dim3 block, const Args& args,
              uint32_t shared_bytes = 0) {
  static_assert(sizeof(Args) % 8 == 0, "PTX arguments are packed as 8-byte fields");
  return ctx.stream.launch(k, grid, block, &args, sizeof args, shared_bytes);
}

// Launches a kernel whose arguments are packed by `fill(ArgPack&)` at the offsets the backend
// reports for it: needed where parameters have larger alignment (64-byte tensor maps), whose
// layout differs between a PTX module (the parameter list's) and a cubin (the driver's).
template <typename Fill>
Status launch_packed(const ops::OpContext& ctx, const Kernel& k, Dim3 grid, Dim3 block, uint32_t shared_bytes,
                     Fill&& fill) {
  auto layout = k.args();
  if (!layout) return layout.error();
  ArgPack args(std::move(*layout));
  fill(args);
  if (!args.ok())
    return Error(HAL_INTERNAL, fmt::format("{}: the launcher's arguments do not match the kernel's parameter list",
                                           ctx.contract.op));
  return ctx.stream.launch(k, grid, block, args, shared_bytes);
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

// Launches the grouped GEMM (ops/ptx/moe_ops.cpp): on sm_90a when `hopper` and the rows
// are 16-byte aligned the wgmma kernels — the TMA one when the tensors `a` and `b` are given and
// the device makes tensor maps, else the cp.async one — otherwise the mma.sync one.
Status launch_gemm(ops::OpContext& ctx, int epilogue, const GemmArgs& g, bool hopper, const ops::Tensor* a = nullptr,
                   const ops::Tensor* b = nullptr);

// gemm_bf16 on sm_90a with few output tiles (ops/ptx/gemm_splitk.cpp): split-K over a
// thread-block cluster. *ran = false when it does not apply (then launch_gemm).
Status launch_gemm_splitk(ops::OpContext& ctx, const GemmArgs& g, const ops::Tensor& a, const ops::Tensor& b,
                          bool* ran);

}  // namespace halcyon::ptxop
