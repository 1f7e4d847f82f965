// A small reader and writer of NumPy .npy files (format versions 1.0 to 3.0, C order,
// little-endian or byte-sized dtypes) for `halcyon launch`. The data is kept as raw bytes with
// its descr ("<f4", "<u2", ...) and shape, and written back with the same header.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace halcyon::npy {

struct Array {
  std::string descr;           // "<f4", "|u1", ...
  std::vector<uint64_t> shape;
  std::vector<unsigned char> data;

  uint64_t item_size() const {
    size_t i = 0;
    while (i < descr.size() && !std::isdigit(static_cast<unsigned char>(descr[i]))) ++i;
    return i < descr.size() ? std::stoull(descr.substr(i)) : 0;
  }
  uint64_t count() const {
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

namespace detail {
inline std::string header_value(const std::string& h, const std::string& key) {
  auto k = h.find("'" + key + "'");
  if (k == std::string::npos) return "";
  auto colon = h.find(':', k);
  if (colon == std::string::npos) return "";
  size_t b = h.find_first_not_of(" ", colon + 1);
  if (b == std::string::npos) return "";
  if (h[b] == '\'') return h.substr(b + 1, h.find('\'', b + 1) - b - 1);
  if (h[b] == '(') return h.substr(b + 1, h.find(')', b) - b - 1);
  return h.substr(b, h.find_first_of(",}", b) - b);
}
}  // namespace detail

// Returns "" on success, otherwise what is wrong with the file.
inline std::string read(const std::string& path, Array* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) return path + " is not a .npy file";
  uint8_t major = bytes[6];
  size_t len_bytes = major == 1 ? 2 : 4, start = 8 + len_bytes;
  if (bytes.size() < start) return path + ": truncated header";
  uint64_t hlen = 0;
  for (size_t i = 0; i < len_bytes; ++i) hlen |= uint64_t(bytes[8 + i]) << (8 * i);
  if (bytes.size() < start + hlen) return path + ": truncated header";
  std::string h(bytes.begin() + long(start), bytes.begin() + long(start + hlen));
  out->descr = detail::header_value(h, "descr");
  if (detail::header_value(h, "fortran_order") == "True") return path + ": Fortran-order arrays are not supported";
  if (out->descr.empty() || out->descr[0] == '>') return path + ": dtype '" + out->descr + "' is not little-endian";
  if (out->item_size() == 0) return path + ": cannot tell the item size of dtype '" + out->descr + "'";
  out->shape.clear();
  std::stringstream ss(detail::header_value(h, "shape"));
  std::string dim;
  while (std::getline(ss, dim, ',')) {
    size_t b = dim.find_first_not_of(" ");
    if (b == std::string::npos) continue;
    out->shape.push_back(std::stoull(dim.substr(b)));
  }
  uint64_t need = out->count() * out->item_size();
  if (bytes.size() - start - hlen < need)
    return path + ": holds " + std::to_string(bytes.size() - start - hlen) + " data bytes, the header says " + std::to_string(need);
  out->data.assign(bytes.begin() + long(start + hlen), bytes.begin() + long(start + hlen + need));
  return "";
}

inline std::string write(const std::string& path, const Array& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += std::to_string(a.shape[i]) + (a.shape.size() == 1 || i + 1 < a.shape.size() ? "," : "");
  shape += ")";
  std::string h = "{'descr': '" + a.descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return "cannot write " + path;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, uint8_t(h.size() & 0xff), uint8_t(h.size() >> 8)};
  out.write(reinterpret_cast<const char*>(pre), sizeof pre);
  out.write(h.data(), std::streamsize(h.size()));
  out.write(reinterpret_cast<const char*>(a.data.data()), std::streamsize(a.data.size()));
  return out ? "" : "cannot write " + path;
}

}  // namespace halcyon::npy
