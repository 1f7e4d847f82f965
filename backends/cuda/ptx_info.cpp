#include "ptx_info.hpp"

#include <cctype>
#include <charconv>
#include <cstring>

namespace halcyon::cuda {
namespace {

// Removes // and /* */ comments, keeping line structure.
std::string strip_comments(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '/' && i + 1 < in.size() && in[i + 1] == '/') {
      while (i < in.size() && in[i] != '\n') ++i;
      if (i < in.size()) out += '\n';
    } else if (in[i] == '/' && i + 1 < in.size() && in[i + 1] == '*') {
      size_t end = in.find("*/", i + 2);
      i = end == std::string_view::npos ? in.size() : end + 1;
      out += ' ';
    } else if (in[i] == '"') {  // string literals (.file) may hold slashes
      size_t end = in.find('"', i + 1);
      if (end == std::string_view::npos) end = in.size() - 1;
      out.append(in.substr(i, end - i + 1));
      i = end;
    } else {
      out += in[i];
    }
  }
  return out;
}

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

// Finds directive `word` (e.g. ".entry") as a whole token at or after `from`.
size_t find_directive(const std::string& s, std::string_view word, size_t from) {
  for (size_t p = s.find(word, from); p != std::string::npos; p = s.find(word, p + 1)) {
    bool left_ok = p == 0 || std::isspace(static_cast<unsigned char>(s[p - 1]));
    size_t e = p + word.size();
    bool right_ok = e >= s.size() || !is_ident_char(s[e]);
    if (left_ok && right_ok) return p;
  }
  return std::string::npos;
}

std::string_view trim(std::string_view v) {
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
  return v;
}

// The rest of the line after a directive, up to ';' or newline.
std::string_view directive_value(const std::string& s, size_t at, size_t word_len) {
  size_t b = at + word_len;
  size_t e = s.find_first_of(";\n", b);
  if (e == std::string::npos) e = s.size();
  return trim(std::string_view(s).substr(b, e - b));
}

uint32_t type_size(std::string_view t) {
  if (t == "b8" || t == "u8" || t == "s8") return 1;
  if (t == "b16" || t == "u16" || t == "s16" || t == "f16" || t == "bf16") return 2;
  if (t == "b32" || t == "u32" || t == "s32" || t == "f32" || t == "f16x2" || t == "bf16x2") return 4;
  if (t == "b64" || t == "u64" || t == "s64" || t == "f64") return 8;
  if (t == "b128") return 16;
  return 0;
}

// One parameter declaration: ".param .u64 .ptr.global .align 16 name[4]".
bool parse_param(std::string_view decl, PtxParam* p, std::string* error) {
  uint32_t elem = 0, align = 0, count = 1;
  bool saw_param = false, after_align = false, pointee_align = false;
  size_t i = 0;
  auto fail = [&](const std::string& why) {
    *error = "parameter '" + std::string(trim(decl)) + "': " + why;
    return false;
  };
  while (i < decl.size()) {
    char c = decl[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '.') {
      size_t b = ++i;
      while (i < decl.size() && is_ident_char(decl[i])) ++i;
      std::string_view w = decl.substr(b, i - b);
      if (w == "param") saw_param = true;
      else if (w == "ptr") p->pointer = true;
      // After .ptr, .align N is the alignment of what the pointer points to.
      else if (w == "align") after_align = true, pointee_align = p->pointer;
      else if (uint32_t sz = type_size(w)) elem = sz;
      // state spaces after .ptr (.global, .const, .shared, .local) need nothing here
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = i;
      while (i < decl.size() && std::isdigit(static_cast<unsigned char>(decl[i]))) ++i;
      uint32_t v = 0;
      std::from_chars(decl.data() + b, decl.data() + i, v);
      if (!after_align) return fail("unexpected number");
      if (!pointee_align) align = v;
      after_align = false;
    } else if (is_ident_char(c) || c == '%') {
      size_t b = i++;
      while (i < decl.size() && is_ident_char(decl[i])) ++i;
      p->name = std::string(decl.substr(b, i - b));
    } else if (c == '[') {
      size_t e = decl.find(']', i);
      if (e == std::string_view::npos) return fail("unclosed '['");
      std::string_view n = trim(decl.substr(i + 1, e - i - 1));
      auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), count);
      if (ec != std::errc() || ptr != n.data() + n.size() || count == 0) return fail("bad array size");
      i = e + 1;
    } else {
      return fail(std::string("unexpected character '") + c + "'");
    }
  }
  if (!saw_param) return fail("not a .param declaration");
  if (elem == 0) return fail("no known type");
  if (p->name.empty()) return fail("no name");
  if (align == 0) align = elem;
  if (align & (align - 1)) return fail("alignment is not a power of two");
  p->size = elem * count;
  p->align = align;
  return true;
}

}  // namespace

const PtxEntry* PtxInfo::find(std::string_view name) const {
  for (auto& e : entries)
    if (e.name == name) return &e;
  return nullptr;
}

bool parse_ptx(std::string_view text, PtxInfo* out, std::string* error) {
  *out = PtxInfo{};
  std::string s = strip_comments(text);
  if (size_t p = find_directive(s, ".version", 0); p != std::string::npos)
    out->version = std::string(directive_value(s, p, 8));
  if (size_t p = find_directive(s, ".target", 0); p != std::string::npos) {
    std::string_view v = directive_value(s, p, 7);
    out->target = std::string(trim(v.substr(0, v.find(','))));
  }
  for (size_t p = find_directive(s, ".entry", 0); p != std::string::npos;
       p = find_directive(s, ".entry", p + 6)) {
    size_t i = p + 6;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t b = i;
    while (i < s.size() && (is_ident_char(s[i]) || s[i] == '%')) ++i;
    PtxEntry e;
    e.name = s.substr(b, i - b);
    if (e.name.empty()) {
      *error = "an .entry directive has no name";
      return false;
    }
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i < s.size() && s[i] == '(') {
      size_t close = s.find(')', i);
      if (close == std::string::npos) {
        *error = "entry '" + e.name + "': parameter list is not closed";
        return false;
      }
      std::string_view list = std::string_view(s).substr(i + 1, close - i - 1);
      uint32_t offset = 0;
      while (!trim(list).empty()) {
        size_t comma = list.find(',');
        std::string_view decl = list.substr(0, comma);
        PtxParam prm;
        std::string why;
        if (!parse_param(decl, &prm, &why)) {
          *error = "entry '" + e.name + "': " + why;
          return false;
        }
        offset = (offset + prm.align - 1) / prm.align * prm.align;
        prm.offset = offset;
        offset += prm.size;
        e.params.push_back(std::move(prm));
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
      e.args_size = offset;
    }
    out->entries.push_back(std::move(e));
  }
  return true;
}

std::optional<ArchTag> parse_arch(std::string_view tag) {
  if (tag.starts_with("sm_")) tag.remove_prefix(3);
  else if (tag.starts_with("compute_")) tag.remove_prefix(8);
  else return std::nullopt;
  ArchTag a;
  if (!tag.empty() && (tag.back() == 'a' || tag.back() == 'f')) {
    a.suffix = tag.back();
    tag.remove_suffix(1);
  }
  if (tag.size() < 2 || tag.size() > 3) return std::nullopt;
  for (char c : tag)
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  int v = 0;
  std::from_chars(tag.data(), tag.data() + tag.size(), v);
  a.major = v / 10;
  a.minor = v % 10;
  return a;
}

std::string device_arch_name(int major, int minor) {
  // Arch-specific ('a') targets exist from Hopper on.
  return "sm_" + std::to_string(major) + std::to_string(minor) + (major >= 9 ? "a" : "");
}

std::string check_target(std::string_view target, bool is_ptx, int major, int minor) {
  std::string dev = device_arch_name(major, minor) + " (compute capability " +
                    std::to_string(major) + "." + std::to_string(minor) + ")";
  auto a = parse_arch(target);
  if (!a)
    return "target '" + std::string(target) + "' is not an NVIDIA architecture tag (sm_XY, sm_XYa, sm_XYf)";
  std::string what = std::string(is_ptx ? "PTX" : "a cubin") + " for " + std::string(target);
  int t = a->major * 10 + a->minor, d = major * 10 + minor;
  if (a->suffix == 'a') {
    if (t != d) return what + " runs only on that exact architecture; this device is " + dev;
    return {};
  }
  if (a->suffix == 'f') {
    if (a->major != major || minor < a->minor)
      return what + " runs only on its family (" + std::to_string(a->major) + ".x, x >= " +
             std::to_string(a->minor) + "); this device is " + dev;
    return {};
  }
  if (is_ptx) {
    if (t > d) return what + " needs a newer device; this device is " + dev;
    return {};
  }
  if (a->major != major || minor < a->minor)
    return what + " runs only on compute capability " + std::to_string(a->major) + ".x with x >= " +
           std::to_string(a->minor) + "; this device is " + dev;
  return {};
}

namespace {
template <typename T>
T read_le(const unsigned char* p, size_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof v);
  return v;
}
}  // namespace

std::string check_cubin_image(const void* data, size_t size) {
  auto* p = static_cast<const unsigned char*>(data);
  constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
  if (size >= 16 && read_le<uint32_t>(p, 0) == kFatbinMagic) {
    uint64_t header = read_le<uint16_t>(p, 6), payload = read_le<uint64_t>(p, 8);
    // payload is read from the file: compared against what is left, so that no sum wraps.
    if (header < 16 || header > size || payload > size - header)
      return "fatbin of " + std::to_string(size) + " bytes declares a header of " + std::to_string(header) +
             " and a payload of " + std::to_string(payload) + " bytes";
    return {};
  }
  if (size < 64 || std::memcmp(p, "\x7f" "ELF", 4) != 0)
    return size < 64 ? "only " + std::to_string(size) + " bytes: too short for an ELF header" : "not an ELF file or a fatbin";
  if (p[4] != 2 || p[5] != 1) return "not a 64-bit little-endian ELF file";
  constexpr uint16_t kEmCuda = 190;
  if (read_le<uint16_t>(p, 18) != kEmCuda) return "an ELF file for another machine (not EM_CUDA)";
  uint64_t phoff = read_le<uint64_t>(p, 32), shoff = read_le<uint64_t>(p, 40);
  uint64_t phent = read_le<uint16_t>(p, 54), phnum = read_le<uint16_t>(p, 56);
  uint64_t shent = read_le<uint16_t>(p, 58), shnum = read_le<uint16_t>(p, 60);
  if ((phnum && (phent < 56 || phoff > size || phent * phnum > size - phoff)) ||
      (shnum && (shent < 64 || shoff > size || shent * shnum > size - shoff)))
    return "ELF headers lie past the end of the " + std::to_string(size) + "-byte image";
  for (uint64_t i = 0; i < shnum; ++i) {
    const size_t at = size_t(shoff + i * shent);
    constexpr uint32_t kNoBits = 8;
    if (read_le<uint32_t>(p, at + 4) == kNoBits) continue;
    uint64_t off = read_le<uint64_t>(p, at + 24), len = read_le<uint64_t>(p, at + 32);
    if (off > size || len > size - off)
      return "ELF section " + std::to_string(i) + " lies past the end of the " + std::to_string(size) + "-byte image";
  }
  return {};
}

}  // namespace halcyon::cuda
