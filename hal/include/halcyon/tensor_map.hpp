// What hal.h's tensor map enumerations mean, for the core, backends and C++ callers alike:
// element sizes, names for messages, swizzle spans. Header-only; depends on hal.h alone.
#pragma once

#include <halcyon/hal.h>

#include <cstdint>
#include <initializer_list>

namespace halcyon {

struct TensorMapDtypeInfo {
  uint32_t bytes;   // element size
  bool is_float;    // may read out-of-bounds elements as NaN
  const char* name; // "bf16"
};

// Indexed by hal_tensor_map_dtype - HAL_TENSOR_MAP_U8.
inline constexpr TensorMapDtypeInfo kTensorMapDtypes[] = {
    {1, false, "u8"},  {2, false, "u16"}, {4, false, "u32"}, {4, false, "i32"}, {8, false, "u64"},
    {8, false, "i64"}, {2, true, "f16"},  {2, true, "bf16"}, {4, true, "f32"},  {8, true, "f64"}};
static_assert(sizeof kTensorMapDtypes / sizeof kTensorMapDtypes[0] == HAL_TENSOR_MAP_F64 - HAL_TENSOR_MAP_U8 + 1);

// The hal_tensor_map_dtype `dtype`, or nullptr for a value this version does not know.
constexpr const TensorMapDtypeInfo* tensor_map_dtype_info(uint32_t dtype) {
  if (dtype < HAL_TENSOR_MAP_U8 || dtype > HAL_TENSOR_MAP_F64) return nullptr;
  return &kTensorMapDtypes[dtype - HAL_TENSOR_MAP_U8];
}

// Bytes of the span a hal_tensor_map_swizzle permutes 16-byte chunks in: 0 for NONE, 32, 64,
// 128; UINT32_MAX for a value this version does not know.
constexpr uint32_t tensor_map_swizzle_span(uint32_t swizzle) {
  return swizzle == HAL_TENSOR_MAP_SWIZZLE_NONE   ? 0
         : swizzle == HAL_TENSOR_MAP_SWIZZLE_32B  ? 32
         : swizzle == HAL_TENSOR_MAP_SWIZZLE_64B  ? 64
         : swizzle == HAL_TENSOR_MAP_SWIZZLE_128B ? 128
                                                  : UINT32_MAX;
}

// A hal_tensor_map_desc (struct_size set) of the tensor at buffer + offset: `dims` and `box`
// innermost first, their length the rank; `strides` are the bytes between indices of
// dimensions 1, 2, ... (strides[0] is always the element size); a dimension without one is
// dense (right after the previous). swizzle, l2_promotion and oob_nan are left 0 (none,
// none, zeros). Nothing is checked here: hal_device_encode_tensor_map does that, naming the
// field (a rank above 5 is passed on as it is, with the first five entries of each list).
inline hal_tensor_map_desc tensor_map_desc(hal_buffer buffer, hal_tensor_map_dtype dtype,
                                           std::initializer_list<uint64_t> dims,
                                           std::initializer_list<uint32_t> box,
                                           std::initializer_list<uint64_t> strides = {}, uint64_t offset = 0) {
  hal_tensor_map_desc d{};
  d.struct_size = sizeof d;
  d.buffer = buffer;
  d.offset = offset;
  d.dtype = dtype;
  d.rank = static_cast<uint32_t>(dims.size());
  const TensorMapDtypeInfo* dt = tensor_map_dtype_info(dtype);
  uint32_t i = 0;
  for (uint64_t n : dims)
    if (i < 5) d.dims[i++] = n;
  i = 0;
  for (uint32_t n : box)
    if (i < 5) d.box[i++] = n;
  d.strides[0] = dt ? dt->bytes : 0;
  for (i = 1; i < 5 && i < d.rank; ++i)
    d.strides[i] = i - 1 < strides.size() ? strides.begin()[i - 1] : d.strides[i - 1] * d.dims[i - 1];
  return d;
}

}  // namespace halcyon
