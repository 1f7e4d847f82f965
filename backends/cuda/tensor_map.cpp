#include "tensor_map.hpp"

#include <halcyon/tensor_map.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <span>

namespace halcyon::cuda {
namespace {

constexpr uint64_t kMaxDim = uint64_t(1) << 32;
constexpr uint64_t kStrideLimit = uint64_t(1) << 40;
constexpr uint32_t kMaxBox = 256;
constexpr uint64_t kAlign = 16;

CUtensorMapDataType cu_dtype(uint32_t dtype) {
  switch (dtype) {
    case HAL_TENSOR_MAP_U8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case HAL_TENSOR_MAP_U16: return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case HAL_TENSOR_MAP_U32: return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    case HAL_TENSOR_MAP_I32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case HAL_TENSOR_MAP_U64: return CU_TENSOR_MAP_DATA_TYPE_UINT64;
    case HAL_TENSOR_MAP_I64: return CU_TENSOR_MAP_DATA_TYPE_INT64;
    case HAL_TENSOR_MAP_F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case HAL_TENSOR_MAP_BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case HAL_TENSOR_MAP_F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    default: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;  // HAL_TENSOR_MAP_F64: the core refused others
  }
}

CUtensorMapSwizzle cu_swizzle(uint32_t s) {
  switch (s) {
    case HAL_TENSOR_MAP_SWIZZLE_32B: return CU_TENSOR_MAP_SWIZZLE_32B;
    case HAL_TENSOR_MAP_SWIZZLE_64B: return CU_TENSOR_MAP_SWIZZLE_64B;
    case HAL_TENSOR_MAP_SWIZZLE_128B: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: return CU_TENSOR_MAP_SWIZZLE_NONE;
  }
}

CUtensorMapL2promotion cu_l2(uint32_t l2) {
  switch (l2) {
    case HAL_TENSOR_MAP_L2_64B: return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case HAL_TENSOR_MAP_L2_128B: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case HAL_TENSOR_MAP_L2_256B: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
    default: return CU_TENSOR_MAP_L2_PROMOTION_NONE;
  }
}

template <typename T>
std::string braces(const T* values, uint32_t n) {
  return fmt::format("{{{}}}", fmt::join(std::span(values, n), ", "));
}

const char* dtype_name(uint32_t dtype) {
  const TensorMapDtypeInfo* dt = tensor_map_dtype_info(dtype);
  return dt ? dt->name : "?";
}

}  // namespace

std::string describe_tensor_map(const hal_tensor_map_desc& d) {
  uint32_t rank = d.rank <= 5 ? d.rank : 5;
  uint32_t span = tensor_map_swizzle_span(d.swizzle);
  return fmt::format("rank {} {}, dims {}, strides {}, box {}, swizzle {}", d.rank, dtype_name(d.dtype),
                     braces(d.dims, rank), braces(d.strides, rank), braces(d.box, rank),
                     span == 0 ? std::string("none") : fmt::format("{}B", span));
}

std::string tiled_tensor_map(const hal_tensor_map_desc& d, uint64_t address, TiledTensorMap* out) {
  const TensorMapDtypeInfo* dt = tensor_map_dtype_info(d.dtype);
  if (!dt || d.rank < 1 || d.rank > 5) return fmt::format("dtype {} or rank {} is not valid", d.dtype, d.rank);
  if (address % kAlign != 0)
    return fmt::format("the tensor's address 0x{:x} (buffer address + offset {}) is not {}-byte aligned", address,
                       d.offset, kAlign);
  for (uint32_t i = 0; i < d.rank; ++i) {
    if (d.dims[i] > kMaxDim) return fmt::format("dims[{}] is {}, more than 2^32", i, d.dims[i]);
    if (d.box[i] > kMaxBox) return fmt::format("box[{}] is {}, more than {}", i, d.box[i], kMaxBox);
  }
  for (uint32_t i = 1; i < d.rank; ++i) {
    if (d.strides[i] % kAlign != 0)
      return fmt::format("strides[{}] is {} bytes, not a multiple of {}", i, d.strides[i], kAlign);
    if (d.strides[i] >= kStrideLimit) return fmt::format("strides[{}] is {} bytes, not below 2^40", i, d.strides[i]);
  }
  const uint64_t inner = uint64_t(d.box[0]) * dt->bytes;
  if (inner % kAlign != 0)
    return fmt::format("box[0] is {} {} elements = {} bytes; the box's inner extent must be a multiple of {} bytes",
                       d.box[0], dt->name, inner, kAlign);
  const uint32_t span = tensor_map_swizzle_span(d.swizzle);
  if (span != 0 && inner > span)
    return fmt::format("box[0] is {} {} elements = {} bytes, more than the {}-byte span of swizzle {}B", d.box[0],
                       dt->name, inner, span, span);
  TiledTensorMap t;
  t.dtype = cu_dtype(d.dtype);
  t.rank = d.rank;
  t.address = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  for (uint32_t i = 0; i < d.rank; ++i) {
    t.dims[i] = d.dims[i];
    t.box[i] = d.box[i];
    t.element_strides[i] = 1;
    if (i > 0) t.strides[i - 1] = d.strides[i];
  }
  t.swizzle = cu_swizzle(d.swizzle);
  t.l2_promotion = cu_l2(d.l2_promotion);
  t.oob_fill = d.oob_nan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
  *out = t;
  return {};
}

}  // namespace halcyon::cuda
