// Tensor maps: every check that does not depend on the hardware happens here, before the
// backend's (optional) tensor_map_encode sees the request.
#include "core.hpp"

#include <halcyon/tensor_map.hpp>

#include <fmt/ranges.h>

#include <span>

namespace halcyon::core {
namespace {

constexpr uint32_t kMaxTensorMapRank = 5;

template <typename T>
std::string join(const T* values, uint32_t n) {
  return fmt::format("{{{}}}", fmt::join(std::span(values, n), ", "));
}

hal_error* check_tensor_map(const char* fn, const hal_tensor_map_desc& d, const BufferObj& b) {
  if (d.rank < 1 || d.rank > kMaxTensorMapRank)
    return err(HAL_INVALID_ARGUMENT, "{}: rank is {}; a tensor map has 1 to {} dimensions", fn, d.rank,
               kMaxTensorMapRank);
  const TensorMapDtypeInfo* dt = tensor_map_dtype_info(d.dtype);
  if (!dt)
    return err(HAL_INVALID_ARGUMENT, "{}: dtype {} is not a hal_tensor_map_dtype ({} to {})", fn, d.dtype,
               int(HAL_TENSOR_MAP_U8), int(HAL_TENSOR_MAP_F64));
  if (tensor_map_swizzle_span(d.swizzle) == UINT32_MAX)
    return err(HAL_INVALID_ARGUMENT, "{}: swizzle {} is not a hal_tensor_map_swizzle (0 to {})", fn, d.swizzle,
               int(HAL_TENSOR_MAP_SWIZZLE_128B));
  if (d.l2_promotion > HAL_TENSOR_MAP_L2_256B)
    return err(HAL_INVALID_ARGUMENT, "{}: l2_promotion {} is not a hal_tensor_map_l2 (0 to {})", fn,
               d.l2_promotion, int(HAL_TENSOR_MAP_L2_256B));
  if (d.oob_nan > 1) return err(HAL_INVALID_ARGUMENT, "{}: oob_nan is {}; it must be 0 or 1", fn, d.oob_nan);
  if (d.oob_nan && !dt->is_float)
    return err(HAL_INVALID_ARGUMENT, "{}: oob_nan is 1 but dtype {} is not a floating-point type (only "
               "f16, bf16, f32 and f64 elements can read as NaN)", fn, dt->name);
  for (uint32_t i = 0; i < d.rank; ++i) {
    if (d.dims[i] == 0) return err(HAL_INVALID_ARGUMENT, "{}: dims[{}] is 0; every dimension needs an element", fn, i);
    if (d.box[i] == 0) return err(HAL_INVALID_ARGUMENT, "{}: box[{}] is 0; a copy moves at least one element per dimension", fn, i);
  }
  if (d.strides[0] != dt->bytes)
    return err(HAL_INVALID_ARGUMENT, "{}: strides[0] is {}, but a {} element is {} bytes: the innermost "
               "dimension must be dense (strides[0] = element size)", fn, d.strides[0], dt->name, dt->bytes);
  // Bytes from the first element to the end of the last one, without overflowing.
  uint64_t extent = dt->bytes;
  bool overflow = false;
  for (uint32_t i = 0; i < d.rank && !overflow; ++i) {
    uint64_t n = d.dims[i] - 1;
    if (n != 0 && d.strides[i] > (UINT64_MAX - extent) / n) overflow = true;
    else extent += n * d.strides[i];
  }
  if (overflow || d.offset > b.size || extent > b.size - d.offset)
    return err(HAL_OUT_OF_RANGE, "{}: the tensor (dims {}, strides {}) spans {} bytes from offset {}, past the "
               "end of the {}-byte buffer on {}", fn, join(d.dims, d.rank), join(d.strides, d.rank),
               overflow ? std::string("more than 2^64") : std::to_string(extent), d.offset, b.size,
               b.device->uri);
  return nullptr;
}

}  // namespace
}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_error* hal_device_encode_tensor_map(hal_device d, const hal_tensor_map_desc* desc, void* out,
                                                size_t out_size) {
  constexpr const char* fn = "hal_device_encode_tensor_map";
  HAL_CORE_GUARD(fn, {
    if (!out) return err(HAL_INVALID_ARGUMENT, "{}: out is NULL", fn);
    if (out_size < HAL_TENSOR_MAP_BYTES)
      return err(HAL_INVALID_ARGUMENT, "{}: out_size is {}; a tensor map takes HAL_TENSOR_MAP_BYTES ({})", fn,
                 out_size, HAL_TENSOR_MAP_BYTES);
    hal_error* e = nullptr;
    auto dev = lookup<DeviceObj>(d, fn, "device", &e);
    if (!dev) return e;
    hal_tensor_map_desc td{};
    if ((e = read_struct(desc, HAL_TENSOR_MAP_DESC_MIN_SIZE, &td, fn, "hal_tensor_map_desc"))) return e;
    auto buf = lookup<BufferObj>(td.buffer, fn, "desc->buffer", &e);
    if (!buf) return e;
    if (buf->device->uri != dev->uri)
      return err(HAL_INVALID_ARGUMENT, "{}: desc->buffer belongs to {}, not {}", fn, buf->device->uri, dev->uri);
    if ((e = check_tensor_map(fn, td, *buf))) return e;
    if (!dev->backend->has_tensor_map_encode())
      return err(HAL_UNSUPPORTED, "{}: {} (backend {}) does not encode tensor maps", fn, dev->uri,
                 dev->backend->name);
    // The backend writes an aligned scratch copy; the caller's memory only sees a whole map.
    struct alignas(64) {
      unsigned char bytes[HAL_TENSOR_MAP_BYTES];
    } map{};
    if ((e = dev->api().tensor_map_encode(dev->be, buf->address + td.offset, &td, map.bytes))) return e;
    std::memcpy(out, map.bytes, sizeof map.bytes);
    return nullptr;
  })
}

}  // extern "C"
