// Tensors: a buffer region with a dtype and a shape (row-major, contiguous).
#pragma once

#include <halcyon/halcyon.hpp>

#include <cstdint>
#include <optional>
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

struct Tensor {
  Buffer buffer;
  uint64_t offset = 0;  // bytes into the buffer
  DType dtype = DType::f32;
  std::vector<int64_t> shape;

  int64_t numel() const;
  uint64_t bytes() const { return uint64_t(numel()) * dtype_size(dtype); }
  uint64_t address() const { return buffer.address() + offset; }  // for kernel arguments
  std::string shape_string() const;                                 // "[4, 256]"
};

// Allocates a device tensor.
Result<Tensor> make_tensor(const Device& device, DType dtype, std::vector<int64_t> shape);

}  // namespace halcyon::ops
