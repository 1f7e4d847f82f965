#include <halcyon/runtime/npy.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <string_view>

namespace halcyon::rt {
namespace {

constexpr uint32_t kMaxHeader = 1u << 20;  // numpy's own limit is far lower; this is a sanity bound
constexpr size_t kMaxRank = 32;            // numpy's NPY_MAXDIMS (64 since 2.0) — more is an attack

// The three keys of the header dict, each as a Python literal. Fields past what this reader
// knows are refused rather than skipped: they could change what the data means.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : s_(text) {}
  // "" on success, else what is wrong.
  std::string parse(NpyHeader* h) {
    bool has_descr = false, has_order = false, has_shape = false;
    skip();
    if (!eat('{')) return "header is not a dict";
    for (;;) {
      skip();
      if (eat('}')) break;
      std::string key;
      if (!quoted(&key)) return "a header key is not a quoted string";
      skip();
      if (!eat(':')) return fmt::format("no ':' after key '{}'", key);
      skip();
      if (key == "descr" && !has_descr) {
        has_descr = true;
        if (!quoted(&h->descr)) return "'descr' is not a quoted string";
      } else if (key == "fortran_order" && !has_order) {
        has_order = true;
        if (word("True")) return "Fortran-order arrays are not supported; save with C order";
        if (!word("False")) return "'fortran_order' is neither True nor False";
      } else if (key == "shape" && !has_shape) {
        has_shape = true;
        if (std::string e = shape(&h->shape); !e.empty()) return e;
      } else {
        return fmt::format("unexpected or repeated key '{}'", key);
      }
      skip();
      if (eat('}')) break;
      if (!eat(',')) return "header entries are not separated by ','";
    }
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n')) ++pos_;
    if (pos_ != s_.size()) return "bytes after the header dict";
    if (!has_descr) return "header has no 'descr'";
    if (!has_order) return "header has no 'fortran_order'";
    if (!has_shape) return "header has no 'shape'";
    return "";
  }

 private:
  void skip() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  bool word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  bool quoted(std::string* out) {
    if (!eat('\'')) return false;
    size_t end = s_.find('\'', pos_);
    if (end == std::string_view::npos) return false;
    *out = std::string(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  // "()", "(N,)", "(N, M)" or "(N, M,)": non-negative decimal integers that fit in int64.
  std::string shape(std::vector<int64_t>* dims) {
    if (!eat('(')) return "'shape' is not a tuple";
    for (;;) {
      skip();
      if (eat(')')) return "";
      if (dims->size() == kMaxRank) return fmt::format("'shape' has more than {} dimensions", kMaxRank);
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_])))
        return "'shape' holds something other than a non-negative integer";
      int64_t d = 0;
      auto [p, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), d);
      if (ec != std::errc()) return fmt::format("'shape' dimension {} does not fit in 64 bits", dims->size());
      pos_ = size_t(p - s_.data());
      dims->push_back(d);
      skip();
      if (eat(')')) {
        if (dims->size() == 1) return "'shape' (N) is not a tuple; numpy writes (N,)";
        return "";
      }
      if (!eat(',')) return "'shape' entries are not separated by ','";
    }
  }
  std::string_view s_;
  size_t pos_ = 0;
};

// "<f4", "|u1", ... -> the item size; 0 if the dtype is not a little-endian scalar.
uint64_t descr_item_size(std::string& descr) {
  if (descr == "<V2" || descr == "|V2") descr = "<u2";  // bf16 written by ml_dtypes-less numpy
  if (descr == "|V1") return 1;  // NumPy's descr of ml_dtypes.float8_e4m3fn: raw bytes, kept as named
  if (descr.size() < 3 || (descr[0] != '<' && descr[0] != '|')) return 0;
  if (std::string_view("fiubc").find(descr[1]) == std::string_view::npos) return 0;
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(descr.data() + 2, descr.data() + descr.size(), n);
  if (ec != std::errc() || p != descr.data() + descr.size() || n == 0 || n > 16) return 0;
  if (descr[0] == '|' && n != 1) return 0;  // '|' is "byte order does not apply"
  return n;
}

Error bad(const std::string& name, const std::string& why) {
  return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: {}", name, why));
}

}  // namespace

size_t NpyArray::item_size() const {
  std::string d = descr;
  return size_t(descr_item_size(d));
}

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return -1;  // never for a parsed array: its size was checked
  return n;
}

Result<NpyHeader> parse_npy_header(const unsigned char* bytes, size_t size, const std::string& name) {
  if (size < 8 || std::memcmp(bytes, "\x93NUMPY", 6) != 0) return bad(name, "not a .npy file (bad magic)");
  const unsigned major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) return bad(name, fmt::format("unsupported .npy version {}.{}", major, minor));
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (size < 8 + len_bytes) return Error(HAL_OUT_OF_RANGE, fmt::format("{}: truncated header", name));
  uint32_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= uint32_t(bytes[8 + i]) << (8 * i);
  if (header_len > kMaxHeader) return bad(name, fmt::format("header length {} is over {} bytes", header_len, kMaxHeader));
  NpyHeader h;
  h.data_offset = 8 + len_bytes + header_len;
  if (size < h.data_offset) return Error(HAL_OUT_OF_RANGE, fmt::format("{}: truncated header", name));
  std::string_view text(reinterpret_cast<const char*>(bytes) + 8 + len_bytes, header_len);
  if (std::string why = HeaderParser(text).parse(&h); !why.empty()) return bad(name, why);
  h.item_size = descr_item_size(h.descr);
  if (!h.item_size) return bad(name, fmt::format("dtype '{}' is not a little-endian scalar type", h.descr));
  int64_t bytes_total = int64_t(h.item_size);
  for (int64_t d : h.shape)
    if (__builtin_mul_overflow(bytes_total, d, &bytes_total))
      return bad(name, fmt::format("shape ({}) of {} holds more than 2^63 bytes", fmt::join(h.shape, ", "), h.descr));
  h.data_bytes = uint64_t(bytes_total);
  return h;
}

namespace {
// The data must fill the rest of the file exactly: checked before anything is allocated.
Status check_data_size(const NpyHeader& h, uint64_t file_size, const std::string& name) {
  uint64_t have = file_size - h.data_offset;
  if (have != h.data_bytes)
    return bad(name, fmt::format("holds {} data bytes; its header ({} of shape ({})) says {}", have, h.descr,
                                 fmt::join(h.shape, ", "), h.data_bytes));
  return {};
}

NpyArray array_of(NpyHeader&& h) {
  NpyArray a;
  a.descr = std::move(h.descr);
  a.shape = std::move(h.shape);
  return a;
}
}  // namespace

Result<NpyArray> parse_npy(const unsigned char* bytes, size_t size, const std::string& name) {
  auto h = parse_npy_header(bytes, size, name);
  if (!h) return h.error();
  if (auto st = check_data_size(*h, size, name); !st) return st.error();
  const unsigned char* data = bytes + h->data_offset;
  const uint64_t n = h->data_bytes;
  NpyArray a = array_of(std::move(h).value());
  a.data.assign(data, data + n);
  return a;
}

Result<NpyArray> read_npy(const std::string& path) {
  // Only regular files: a directory or FIFO would fail (or block) in the middle of a read.
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return Error(HAL_NOT_FOUND, fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) return bad(path, "is not a regular file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return Error(HAL_NOT_FOUND, fmt::format("{}: cannot open", path));
  // The prefix and the header: at most 12 + kMaxHeader bytes, fewer if the file is smaller.
  std::vector<unsigned char> head(std::min<uint64_t>(uint64_t(st.st_size), 12 + kMaxHeader));
  if (!f.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()))) return bad(path, "cannot read the header");
  auto h = parse_npy_header(head.data(), head.size(), path);
  if (!h) return h.error();
  if (auto s = check_data_size(*h, uint64_t(st.st_size), path); !s) return s.error();
  const uint64_t offset = h->data_offset, n = h->data_bytes;
  NpyArray a = array_of(std::move(h).value());
  a.data.resize(n);
  f.clear();
  f.seekg(std::streamoff(offset));
  if (n && !f.read(reinterpret_cast<char*>(a.data.data()), std::streamsize(n)))
    return bad(path, fmt::format("could not read its {} data bytes", n));
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
  f.close();  // the buffered bytes reach the file here: a full disk fails at the close, not before
  if (!f) return Error(HAL_INTERNAL, fmt::format("{}: write failed", path));
  return {};
}

}  // namespace halcyon::rt
