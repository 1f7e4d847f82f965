#include <halcyon/ops/tensor.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::shape_string() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Result<Tensor> make_tensor(const Device& device, DType dtype, std::vector<int64_t> shape) {
  int64_t bytes = int64_t(dtype_size(dtype));
  for (int64_t d : shape) {
    if (d < 0) return Error(HAL_INVALID_ARGUMENT, fmt::format("make_tensor: negative dimension in [{}]", fmt::join(shape, ", ")));
    if (__builtin_mul_overflow(bytes, d, &bytes))  // a wrapped size would allocate too little
      return Error(HAL_OUT_OF_RANGE, fmt::format("make_tensor: [{}] of {} holds more than 2^63 bytes", fmt::join(shape, ", "),
                                                 dtype_name(dtype)));
  }
  auto buf = device.allocate(uint64_t(bytes));
  if (!buf) return buf.error();
  Tensor t;
  t.buffer = std::move(buf).value();
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

}  // namespace halcyon::ops
