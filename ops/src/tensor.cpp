#include <halcyon/ops/tensor.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace halcyon::ops {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::f64: return 8;
    case DType::e4m3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::f64: return "f64";
    case DType::e4m3: return "e4m3";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::f64, DType::e4m3})
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64 || t == DType::e4m3;
}

Result<Extent> checked_extent(DType dtype, std::span<const int64_t> shape) {
  // Negative dimensions first: with a zero among them the product alone would hide one.
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  for (int64_t d : shape)
    if (d < 0)
      return Error(HAL_INVALID_ARGUMENT,
                   fmt::format("[{}] of {} has a negative dimension ({})", fmt::join(shape, ", "), dtype_name(dtype), d));
  if (empty) return Extent{0, 0};
  Extent e{1, int64_t(dtype_size(dtype))};
  for (int64_t d : shape)
    if (__builtin_mul_overflow(e.elements, d, &e.elements) || __builtin_mul_overflow(e.bytes, d, &e.bytes))
      return Error(HAL_OUT_OF_RANGE,
                   fmt::format("[{}] of {} holds more than 2^63 bytes", fmt::join(shape, ", "), dtype_name(dtype)));
  return e;
}

int64_t Tensor::numel() const {
  auto e = checked_extent(dtype, shape);
  return e ? e->elements : -1;
}

uint64_t Tensor::bytes() const {
  auto e = checked_extent(dtype, shape);
  return e ? uint64_t(e->bytes) : UINT64_MAX;
}

Status check_in_buffer(const Tensor& t, uint64_t buffer_size, std::string_view what) {
  auto e = checked_extent(t.dtype, t.shape);
  if (!e) return Error(e.error().status(), fmt::format("{}: {}", what, e.error().message()));
  const uint64_t bytes = uint64_t(e->bytes);
  if (t.offset > buffer_size || bytes > buffer_size - t.offset)
    return Error(HAL_OUT_OF_RANGE, fmt::format("{}: {} {} needs {} bytes at offset {}, its buffer has {}", what,
                                               dtype_name(t.dtype), t.shape_string(), bytes, t.offset, buffer_size));
  return {};
}

std::string Tensor::shape_string() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Result<Tensor> make_tensor(const Device& device, DType dtype, std::vector<int64_t> shape) {
  auto extent = checked_extent(dtype, shape);  // a wrapped size would allocate too little
  if (!extent) return Error(extent.error().status(), fmt::format("make_tensor: {}", extent.error().message()));
  auto buf = device.allocate(uint64_t(extent->bytes));
  if (!buf) return buf.error();
  Tensor t;
  t.buffer = std::move(buf).value();
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

}  // namespace halcyon::ops
