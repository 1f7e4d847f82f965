#include <halcyon/runtime/npy.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <string_view>

namespace halcyon::rt {

size_t NpyArray::item_size() const {
  if (descr.size() < 3) return 0;
  return size_t(std::strtoul(descr.c_str() + 2, nullptr, 10));
}

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<NpyArray> read_npy(const std::string& path) {
  auto bad = [&](const std::string& why) { return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: {}", path, why)); };
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error(HAL_NOT_FOUND, fmt::format("{}: cannot open", path));
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return bad("not a .npy file (bad magic)");
  uint8_t major = uint8_t(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!f.read(reinterpret_cast<char*>(b), 2)) return bad("truncated header");
    header_len = b[0] | (uint32_t(b[1]) << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!f.read(reinterpret_cast<char*>(b), 4)) return bad("truncated header");
    header_len = b[0] | (uint32_t(b[1]) << 8) | (uint32_t(b[2]) << 16) | (uint32_t(b[3]) << 24);
  } else {
    return bad(fmt::format("unsupported .npy version {}", major));
  }
  if (header_len > (1u << 20)) return bad("header too large");
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) return bad("truncated header");
  // The header is a Python dict literal; only three keys matter and their syntax is fixed.
  auto value_of = [&](std::string_view key) -> std::string_view {
    std::string quoted;
    quoted.reserve(key.size() + 2);
    quoted.append(1, '\'').append(key).append(1, '\'');
    size_t k = header.find(quoted);
    if (k == std::string::npos) return {};
    size_t colon = header.find(':', k);
    if (colon == std::string::npos) return {};
    size_t v = header.find_first_not_of(" ", colon + 1);
    return v == std::string::npos ? std::string_view() : std::string_view(header).substr(v);
  };
  NpyArray a;
  std::string_view descr = value_of("descr");
  if (descr.size() < 2 || descr[0] != '\'' || descr.find('\'', 1) == std::string_view::npos) return bad("header has no 'descr'");
  a.descr = std::string(descr.substr(1, descr.find('\'', 1) - 1));
  if (a.descr == "<V2" || a.descr == "|V2") a.descr = "<u2";
  if (a.descr.size() < 3 || (a.descr[0] != '<' && a.descr[0] != '|') || !std::isalpha(static_cast<unsigned char>(a.descr[1])) ||
      !std::isdigit(static_cast<unsigned char>(a.descr[2])))
    return bad(fmt::format("dtype '{}' is not a little-endian scalar type", a.descr));
  if (value_of("fortran_order").starts_with("True")) return bad("Fortran-order arrays are not supported; save with C order");
  std::string_view shape = value_of("shape");
  if (shape.empty() || shape[0] != '(' || shape.find(')') == std::string_view::npos) return bad("header has no 'shape'");
  shape = shape.substr(1, shape.find(')') - 1);
  int64_t cur = -1;
  for (char ch : shape) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      cur = (cur < 0 ? 0 : cur) * 10 + (ch - '0');
    } else if (ch == ',') {
      if (cur < 0) return bad("malformed shape");
      a.shape.push_back(cur);
      cur = -1;
    } else if (ch != ' ' && ch != 'L') {
      return bad("malformed shape");
    }
  }
  if (cur >= 0) a.shape.push_back(cur);
  size_t bytes = size_t(a.numel()) * a.item_size();
  a.data.resize(bytes);
  if (bytes && !f.read(reinterpret_cast<char*>(a.data.data()), std::streamsize(bytes)))
    return bad(fmt::format("data is shorter than the {} bytes its header announces", bytes));
  return a;
}

Status write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
                 size_t bytes) {
  std::string dims = fmt::format("{}", fmt::join(shape, ", "));
  if (shape.size() == 1) dims += ",";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  if (!f) return Error(HAL_NOT_FOUND, fmt::format("{}: cannot create", path));
  uint16_t len = uint16_t(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  char lb[2] = {char(len & 0xFF), char(len >> 8)};
  f.write(lb, 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!f) return Error(HAL_INTERNAL, fmt::format("{}: write failed", path));
  return {};
}

}  // namespace halcyon::rt
