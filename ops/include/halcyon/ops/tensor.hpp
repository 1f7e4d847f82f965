// Tensors: a buffer region with a dtype and a shape (row-major, contiguous).
#pragma once

#include <halcyon/halcyon.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::ops {

// The values match hrt_dtype (runtime.h). e4m3: OCP FP8 e4m3 ("FN": no infinities, max 448,
// NaN = 0x7f/0xff), one byte; conversions in kernels/reference e4m3.hpp. In .npy files it is
// raw bytes ('|u1'), the dtype being the contract's (docs/kernels/fp8.md).
enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, f64, e4m3 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);                       // "f32", "bf16", "e4m3", ...
std::optional<DType> parse_dtype(std::string_view s);  // accepts the names above
bool dtype_is_float(DType t);

// The element and byte counts of a shape.
struct Extent {
  int64_t elements = 0;
  int64_t bytes = 0;
};

// The one checked size computation: every size check of a shape goes through it, because an
// int64 product that wraps (undefined behaviour) can make a huge tensor look small enough for
// its buffer. An error for a negative dimension (HAL_INVALID_ARGUMENT) or a byte count past
// 2^63 - 1 (HAL_OUT_OF_RANGE), its message naming the shape and dtype ("[4, -1] of f32 ...")
// for the caller to prefix with what the shape is. A shape with a zero dimension holds 0 bytes
// whatever its other dimensions.
Result<Extent> checked_extent(DType dtype, std::span<const int64_t> shape);

struct Tensor {
  Buffer buffer;
  uint64_t offset = 0;  // bytes into the buffer
  DType dtype = DType::f32;
  std::vector<int64_t> shape;

  // Unchecked for speed where the shape is known valid: numel() is -1 and bytes() UINT64_MAX
  // (larger than any buffer, so a size comparison fails) for a shape checked_extent refuses.
  int64_t numel() const;
  uint64_t bytes() const;
  uint64_t address() const { return buffer.address() + offset; }  // for kernel arguments
  std::string shape_string() const;                                 // "[4, 256]"
};

// Whether `t` lies inside `buffer_size` bytes (its buffer's size): the shape as checked_extent
// takes it and offset + bytes <= buffer_size, compared without wrapping (an offset near 2^64
// would wrap a sum to a small number and let a kernel address memory before the buffer).
// Errors name `what` (the tensor's role: "'x'", "w_router"), its shape, offset and the size.
Status check_in_buffer(const Tensor& t, uint64_t buffer_size, std::string_view what);

// Allocates a device tensor.
Result<Tensor> make_tensor(const Device& device, DType dtype, std::vector<int64_t> shape);

}  // namespace halcyon::ops
