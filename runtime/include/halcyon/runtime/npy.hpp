// NumPy .npy files (format versions 1.0, 2.0 and 3.0, C order, little-endian), the one
// reader of the project: strict (every header field parsed whole and range-checked, the data
// size matched against the file before anything is allocated), so a hostile file is an error.
// bf16 has no NumPy dtype: it is read from and written as raw 2-byte values ('<u2' or '|V2').
#pragma once

#include <halcyon/result.hpp>

#include <cstddef>
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

// What the header says: the data is `data_bytes` bytes at `data_offset`.
struct NpyHeader {
  std::string descr;
  std::vector<int64_t> shape;
  uint64_t item_size = 0;
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;
};

// Parses the header at the start of `bytes` (`size` bytes of it available). `name` names the
// file in errors. HAL_OUT_OF_RANGE when the header needs more bytes than `size`.
Result<NpyHeader> parse_npy_header(const unsigned char* bytes, size_t size, const std::string& name);
// A whole file already in memory (the fuzz target's entry).
Result<NpyArray> parse_npy(const unsigned char* bytes, size_t size, const std::string& name);
Result<NpyArray> read_npy(const std::string& path);
Status write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                 const void* data, size_t bytes);

}  // namespace halcyon::rt
