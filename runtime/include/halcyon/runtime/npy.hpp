// NumPy .npy files (format versions 1.0, 2.0 and 3.0, C order, little-endian).
// bf16 has no NumPy dtype: it is read from and written as raw 2-byte values ('<u2' or '|V2').
#pragma once

#include <halcyon/result.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace halcyon::rt {

struct NpyArray {
  std::string descr;           // NumPy dtype string as in the file: "<f4", "<i4", "<u2", ...
  std::vector<int64_t> shape;  // () is a scalar: one element
  std::vector<unsigned char> data;
  size_t item_size() const;
  int64_t numel() const;
};

Result<NpyArray> read_npy(const std::string& path);
Status write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                 const void* data, size_t bytes);

}  // namespace halcyon::rt
