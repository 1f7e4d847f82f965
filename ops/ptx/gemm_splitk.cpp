// Launcher of the split-K gemm_bf16 kernel for Hopper (gemm_sm90_splitk.cu): a cluster of S
// CTAs per 128 x 256 output tile, for GEMMs with too few tiles to fill the GPU (the MoE router
// GEMM: 4096 x 7168 x 256 is 32 tiles on 132 SMs). Other shapes keep the grouped kernel
// (launch_gemm in moe_ops.cpp).
#include "ptx_launch.hpp"

#include <algorithm>
#include <climits>

namespace halcyon::ptxop {

namespace {

constexpr const char* kImage = "moe_gemm_sm90_splitk";
constexpr int64_t kBm = 128, kBn = 256, kBk = 64;
constexpr uint32_t kThreads = 384;
// 1024 (alignment) + 4 stages x 48 KB + 8 mbarriers.
constexpr uint32_t kShared = 1024 + 4 * 48 * 1024 + 8 * 8;

// How many CTAs of each cluster size surely run at once: a cluster must fit in one GPC, and
// GPCs of an H100 have 14 to 18 SMs, so clusters of 3 to 8 may leave SMs idle; with a GPC of
// 14 SMs, 32 clusters of 4 (the router shape) might not all fit, and the last would run in a
// second wave at twice the time. Pairs always fit (SMs come in pairs).
int64_t resident_ctas(int s, int64_t sms) { return s == 2 ? sms : sms * 3 / 4; }

// The split: the largest S in {8, 4, 3, 2} whose tiles x S CTAs all run at once and that gives
// each CTA at least two k-tiles; 0 = the grouped kernel is as good (the tiles fill the GPU or
// K is short). `required`: any S (the kernel is correct for every shape; tests).
int split_of(int64_t tiles, int64_t k_tiles, int64_t sms, bool required) {
  for (int s : {8, 4, 3, 2})
    if (tiles * s <= resident_ctas(s, sms) && (required || k_tiles >= 2 * s)) return s;
  return required ? 2 : 0;
}

Result<TensorMap> map_2d(const ops::OpContext& ctx, const ops::Tensor& t, uint64_t inner, uint64_t outer) {
  hal_tensor_map_desc d{};
  d.struct_size = sizeof d;
  d.buffer = t.buffer.get();
  d.offset = t.offset;
  d.dtype = HAL_TENSOR_MAP_BF16;
  d.rank = 2;
  d.dims[0] = inner;
  d.dims[1] = outer;
  d.strides[0] = 2;
  d.strides[1] = inner * 2;
  d.box[0] = 64;
  d.box[1] = 64;
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = HAL_TENSOR_MAP_L2_256B;
  return ctx.device.encode_tensor_map(d);
}

}  // namespace

int splitk_choice(const DeviceFacts& dev, const GemmArgs& g, bool required) {
  const int64_t tiles = ceil_div(g.R, kBm) * ceil_div(g.N, kBn), k_tiles = ceil_div(g.K, kBk);
  return split_of(tiles, k_tiles, std::max<int64_t>(dev.compute_units, 1), required);
}

std::string splitk_misfit(const DeviceFacts& dev, const GemmArgs& g, int s) {
  const int64_t tiles = ceil_div(g.R, kBm) * ceil_div(g.N, kBn);
  if (!ptx::find(kImage, "sm_90a")) return "its PTX image was not built";
  if (!dev.has("tensor_map")) return fmt::format("{} makes no tensor maps", dev.uri);
  if (g.K % 8 || g.N % 8 || g.a % 16 || g.b % 16 || g.out % 16)
    return fmt::format("rows or addresses are not 16-byte aligned (K = {}, N = {})", g.K, g.N);
  if (g.R > INT_MAX || g.K > INT_MAX || g.N > INT_MAX || tiles * s > INT_MAX)
    return fmt::format("{} x {} x {} is too large for int coordinates", g.R, g.K, g.N);
  if (dev.max_shared_per_block && kShared > dev.max_shared_per_block)
    return fmt::format("it needs {} bytes of shared memory, {} has {}", kShared, dev.uri, dev.max_shared_per_block);
  return {};
}

Status launch_gemm_splitk(ops::OpContext& ctx, const GemmArgs& g, const ops::Tensor& a, const ops::Tensor& b,
                          int s) {
  auto dev = facts(ctx);
  if (!dev) return dev.error();
  if (!s) s = splitk_choice(*dev, g, false);  // the split the registry chose this kernel for
  if (!s) s = splitk_choice(*dev, g, true);   // named where the grouped kernel is as good
  const int64_t tiles = ceil_div(g.R, kBm) * ceil_div(g.N, kBn);
  if (std::string why = splitk_misfit(*dev, g, s); !why.empty())
    return Error(HAL_UNSUPPORTED, fmt::format("{}: the split-K kernel cannot run: {}", ctx.contract.op, why));
  auto ta = map_2d(ctx, a, uint64_t(g.K), uint64_t(g.R));
  if (!ta) return ta.error();
  auto tb = map_2d(ctx, b, uint64_t(g.N), uint64_t(g.K));
  if (!tb) return tb.error();
  static constexpr const char* kEntries[9] = {nullptr, nullptr, "hc_gemm_bf16_sm90_splitk2", "hc_gemm_bf16_sm90_splitk3",
                                              "hc_gemm_bf16_sm90_splitk4", nullptr, nullptr, nullptr,
                                              "hc_gemm_bf16_sm90_splitk8"};
  auto k = kernel(ctx, *dev, kImage, kEntries[s], CodeFrom::kCubinIfExact);  // setmaxnreg consumers
  if (!k) return k.error();
  // The kernel's cluster dimensions are compile-time (.reqnctapercluster): a plain launch,
  // grid = tiles x S, a multiple of S.
  return launch_packed(ctx, *k, {uint32_t(tiles * s)}, {kThreads}, kShared,
                       [&](ArgPack& a) { a.value(*ta).value(*tb).value(g.out).value(g.R).value(g.K).value(g.N); });
}

}  // namespace halcyon::ptxop
