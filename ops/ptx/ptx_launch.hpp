// Launch helpers shared by the PTX operator implementations (ops/ptx):
// find the embedded image that suits the device, load it once per device (OpContext::module
// caches modules), look its kernels up once, and launch with a packed argument struct whose
// fields mirror the kernel's .param list (every parameter is 8 bytes: addresses, i64, f64).
#pragma once

#include <halcyon/ptx_kernels.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace halcyon::ptxop {

using ops::DeviceFacts;

// The device's facts, compute_units being the units the stream's work may use: its
// partition's (enforced or a soft cap), else the device's (hal_stream_get_info). Persistent
// grids are sized by it, so that a kernel on a 112-SM partition does not queue blocks for 132.
// At least one (grid sizes divide by it).
inline Result<DeviceFacts> facts(const ops::OpContext& ctx) {
  auto f = ops::device_facts(ctx.device);
  if (!f) return f;
  auto stream = ctx.stream.info();
  if (stream && stream->units) f->compute_units = stream->units;
  if (!f->compute_units) f->compute_units = 1;
  return f;
}

// The embedded image of `image` that runs on the device: built for exactly its arch, else the
// newest the device can run (hal_device_can_run owns the rule).
inline const ptx::Image* image_for(const Device& device, std::string_view arch, const char* image) {
  return ptx::best_for(image, arch, [&](const ptx::Image& i) {
    auto yes = device.can_run(HAL_MODULE_PTX, i.target);
    return yes && *yes;
  });
}

// Where a kernel's machine code comes from. kPtx: the driver's JIT compiles the PTX (any device
// the PTX runs on). kCubinIfExact: where the device runs the cubin the toolkit's ptxas made at
// build time (a device of exactly the image's target), that cubin; for kernels that take
// registers with setmaxnreg, which the driver's JIT allocated worse (the row-tile TMA GEMM ran
// faster as a cubin: docs/backends/cuda.md). The run's
// ops::CodeSource (RunOptions::code) overrides the choice for every kernel: kIr the PTX, kBinary
// the cubin wherever it runs (comparisons; a driver that refuses the cubin falls back to PTX).
enum class CodeFrom { kPtx, kCubinIfExact };
inline bool load_cubin(ops::CodeSource code, CodeFrom from) {
  if (code == ops::CodeSource::kIr) return false;
  if (code == ops::CodeSource::kBinary) return true;
  return from == CodeFrom::kCubinIfExact;
}

// Whether image `image`'s cubin runs on the device (the predicates of implementations that are
// fast only as a cubin ask this, with the run's CodeSource).
inline bool cubin_applies(const ops::ApplyContext& ctx, const char* image) {
  if (!load_cubin(ctx.code, CodeFrom::kCubinIfExact) || !ctx.device) return false;
  const ptx::Image* img = image_for(*ctx.device, ctx.facts.arch, image);
  return img && img->cubin_size && ctx.can_run(HAL_MODULE_CUBIN, img->target);
}

// Kernel `entry` of embedded image `image`, built for the device's architecture (or the newest
// target it can run). Kernels are cached per device, code source and entry.
inline Result<Kernel> kernel(const ops::OpContext& ctx, const DeviceFacts& dev, const char* image, const char* entry,
                             CodeFrom from = CodeFrom::kPtx) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, Kernel>;  // lives as long as the loaded modules
  const bool cubin = load_cubin(ctx.code, from);
  std::string key = dev.uri + '\n' + image + '\n' + entry + (cubin ? "\ncubin" : "");
  {
    std::lock_guard lock(mu);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  const ptx::Image* img = image_for(ctx.device, dev.arch, image);
  if (!img)
    return Error(HAL_UNSUPPORTED, fmt::format("no PTX image '{}' runs on {} ({})", image, dev.uri, dev.arch));
  // The cubin only where the device runs it; if the driver refuses it (too old), the PTX.
  Result<Module> m = Error(HAL_UNSUPPORTED, "");
  if (cubin && img->cubin_size) {
    auto runs = ctx.device.can_run(HAL_MODULE_CUBIN, img->target);
    if (runs && *runs)
      m = ctx.module(HAL_MODULE_CUBIN, img->target, img->cubin, img->cubin_size, (std::string(image) + ".cubin").c_str());
  }
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

// A tensor map of a dense row-major tensor of `elem_bytes`-byte elements: dims innermost first,
// boxes of box0 x rows (x 1 beyond), 128-byte swizzle (box0 * elem_bytes = 128: the layout the
// wgmma descriptors of the grouped GEMMs expect), 256-byte L2 promotion.
inline Result<TensorMap> dense_map(const ops::OpContext& ctx, const ops::Tensor& t, hal_tensor_map_dtype dtype,
                                   uint32_t elem_bytes, std::initializer_list<uint64_t> dims, uint32_t box0,
                                   uint32_t rows) {
  hal_tensor_map_desc d{};
  d.struct_size = sizeof d;
  d.buffer = t.buffer.get();
  d.offset = t.offset;
  d.dtype = dtype;
  d.rank = uint32_t(dims.size());
  uint64_t stride = elem_bytes;
  uint32_t i = 0;
  for (uint64_t n : dims) {
    d.dims[i] = n;
    d.strides[i] = stride;
    d.box[i] = i == 0 ? box0 : i == 1 ? rows : 1;
    stride *= n;
    ++i;
  }
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = HAL_TENSOR_MAP_L2_256B;
  return ctx.device.encode_tensor_map(d);
}

// A bf16 tensor map of `rank` dimensions (innermost first; strides in bytes, strides[0] the
// element's 2), 128-byte swizzle: the attention kernels' maps below.
inline Result<TensorMap> bf16_swizzled_map(const ops::OpContext& ctx, const ops::Tensor& t, uint32_t rank,
                                           const uint64_t* dims, const uint64_t* strides, const uint32_t* box,
                                           hal_tensor_map_l2 promotion) {
  hal_tensor_map_desc d{};
  d.struct_size = sizeof d;
  d.buffer = t.buffer.get();
  d.offset = t.offset;
  d.dtype = HAL_TENSOR_MAP_BF16;
  d.rank = rank;
  for (uint32_t i = 0; i < rank; ++i) d.dims[i] = dims[i], d.strides[i] = strides[i], d.box[i] = box[i];
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = promotion;
  return ctx.device.encode_tensor_map(d);
}

// A 3-d tensor map over [T, H, D] (innermost first: D, H, T): boxes of 64 columns x 1 head x
// `rows` rows (the sm90.ws prefill's layout); L2 promotion 256 bytes unless given.
inline Result<TensorMap> head_map(const ops::OpContext& ctx, const ops::Tensor& t, int64_t T, int64_t H, int64_t D,
                                  int64_t rows, hal_tensor_map_l2 promotion = HAL_TENSOR_MAP_L2_256B) {
  const uint64_t dims[3] = {uint64_t(D), uint64_t(H), uint64_t(T)};
  const uint64_t strides[3] = {2, uint64_t(D) * 2, uint64_t(H * D) * 2};
  const uint32_t box[3] = {64, 1, uint32_t(rows)};
  return bf16_swizzled_map(ctx, t, 3, dims, strides, box, promotion);
}

// The same [T, H, D] tensor as a 4-d map whose box is rows' whole head slices: dims (64, D / 64,
// H, T), box (64, D / 64, 1, rows): one copy brings `rows` rows of D contiguous elements, laid
// out [rows][D / 64][128 bytes] in shared memory (the sm90.tma decode over a paged cache seen
// as [NB x BS, Hkv, D]).
inline Result<TensorMap> head_row_map(const ops::OpContext& ctx, const ops::Tensor& t, int64_t T, int64_t H, int64_t D,
                                      int64_t rows, hal_tensor_map_l2 promotion) {
  const uint64_t dims[4] = {64, uint64_t(D / 64), uint64_t(H), uint64_t(T)};
  const uint64_t strides[4] = {2, 128, uint64_t(D) * 2, uint64_t(H * D) * 2};
  const uint32_t box[4] = {64, uint32_t(D / 64), 1, uint32_t(rows)};
  return bf16_swizzled_map(ctx, t, 4, dims, strides, box, promotion);
}

// The device address of a call's tensor `name` (0 when absent): launchers and predicates read
// the same call through these.
inline uint64_t address_of(const ops::ApplyContext& c, std::string_view name) {
  const ops::Tensor* t = c.tensor(name);
  return t ? t->address() : 0;
}
inline uint64_t address_of(const ops::OpContext& c, std::string_view name) {
  const ops::Tensor* t = c.optional_tensor(name);
  return t ? t->address() : 0;
}

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

// The GEMM kernels, each an implementation of its own (registered in moe_ops.cpp, basic_ops.cpp):
// kSm80 the mma.sync kernel (any NVIDIA GPU from sm_80; its unaligned build where K or N is not
// a multiple of 8), kSm90Basic the cp.async wgmma kernel (sm_90a), kTma the row-tile TMA kernel,
// kSwap the 256-thread swap-AB TMA kernel, kSwapWs its warp-specialized build.
enum class GemmKernel { kSm80, kSm90Basic, kTma, kSwap, kSwapWs };

// Launches the grouped (or, offsets 0, dense) GEMM with kernel `which`; the TMA kernels need
// the tensors `a` and `b`. An error says why the kernel cannot run (its predicate says first).
Status launch_gemm(ops::OpContext& ctx, int epilogue, const GemmArgs& g, GemmKernel which,
                   const ops::Tensor* a = nullptr, const ops::Tensor* b = nullptr);
// Why the TMA kernel `which` cannot take this GEMM on this device, or "".
std::string tma_misfit(const DeviceFacts& dev, int epilogue, const GemmArgs& g, GemmKernel which);

// gemm_bf16 on sm_90a with few output tiles (ops/ptx/gemm_splitk.cpp): split-K over a
// thread-block cluster of `split` CTAs (0: the launcher's choice of 8, 4, 3 or 2).
Status launch_gemm_splitk(ops::OpContext& ctx, const GemmArgs& g, const ops::Tensor& a, const ops::Tensor& b,
                          int split);
// The split the launcher chooses (`required`: some split even where the grouped kernel is as
// good), 0 = none; and why the split-K kernel with `split` CTAs cannot run here, or "".
int splitk_choice(const DeviceFacts& dev, const GemmArgs& g, bool required);
std::string splitk_misfit(const DeviceFacts& dev, const GemmArgs& g, int split);

// moe_permute's plan on the GPU (moe_ops.cpp; kernels/ptx/moe/permute_plan.cuh), for the
// moe_permute launchers and moe_permute_fp8's: B blocks of W warps, block b planning slots
// [b * per_block, (b + 1) * per_block) with `shared` bytes of histograms. `spread`: about a
// block an SM, per_block a multiple of K (whole tokens: the fused kernels' layout); else one
// block, or with `two` the earlier many-block layout. Errors name the operator of ctx.
struct PermuteLayout {
  int64_t B, W, per_block;
  uint32_t shared;
};
Result<PermuteLayout> permute_layout(const ops::OpContext& ctx, const DeviceFacts& dev, bool spread, bool two);
// The plan kernels' leading arguments (the contract's names: topk_ids, expert_counts, ...).
struct PermutePlanArgs {
  uint64_t ids, counts, offsets, row_to_slot, slot_to_row, num_rows;
  int64_t slots, E, expert_begin, EL, per_block;
};
PermutePlanArgs permute_plan_args(const ops::OpContext& ctx, const PermuteLayout& l);

}  // namespace halcyon::ptxop
