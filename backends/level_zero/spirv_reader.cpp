#include "spirv_reader.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

namespace halcyon::spirv {
namespace {

// Opcodes and operands of the SPIR-V specification (unified 1.6) that the reader looks at.
enum : uint32_t {
  kOpMemoryModel = 14,
  kOpEntryPoint = 15,
  kOpExecutionMode = 16,
  kOpTypeBool = 20,
  kOpTypeInt = 21,
  kOpTypeFloat = 22,
  kOpTypeVector = 23,
  kOpTypePointer = 32,
  kOpFunction = 54,
  kOpFunctionParameter = 55,
  kOpFunctionEnd = 56,
  kExecutionModelKernel = 6,
  kExecutionModeLocalSize = 17,
  kAddressingPhysical32 = 1,
  kStorageUniformConstant = 0,
  kStorageWorkgroup = 4,
  kStorageCrossWorkgroup = 5,
  kStorageGeneric = 8,
};

struct Type {
  enum { kScalar, kPointer } what = kScalar;
  uint64_t bytes = 0;  // 0: no whole number of bytes (a 1-bit integer); 64 bits, as vectors multiply it
  uint32_t storage = 0;
};

// The largest value a kernel argument can be: OpenCL's widest type, 16 x 64-bit (long16).
constexpr uint64_t kMaxValueBytes = 128;

// A literal string operand: NUL-terminated UTF-8 packed into words.
bool literal(const uint32_t* w, size_t n, std::string* s) {
  const char* p = reinterpret_cast<const char*>(w);
  size_t len = strnlen(p, n * 4);
  if (len == n * 4) return false;
  s->assign(p, len);
  return true;
}

}  // namespace

const Kernel* Module::find(const std::string& name) const {
  for (auto& k : kernels)
    if (k.name == name) return &k;
  return nullptr;
}

bool parse(const void* data, size_t size, Module* out, std::string* why) {
  if (!data || size < 20 || size % 4) {
    *why = "not SPIR-V: " + std::to_string(size) + " bytes (a module is a whole number of 4-byte words, at least 5)";
    return false;
  }
  std::vector<uint32_t> words(size / 4);
  std::memcpy(words.data(), data, size);
  if (words[0] != kMagic) {
    *why = "not SPIR-V: the first word is not the magic number 0x07230203";
    return false;
  }
  Module m;
  m.version = words[1];
  std::map<uint32_t, Type> types;
  std::map<uint32_t, size_t> entries;  // function id -> index in m.kernels
  std::set<uint32_t> defined;          // function ids seen in an OpFunction
  // The kernel whose parameters come next, as an index into m.kernels: a pointer would dangle
  // once a push_back reallocates the vector. kNone: not in a kernel's function.
  constexpr size_t kNone = SIZE_MAX;
  size_t current = kNone;
  bool in_function = false, seen_function = false;
  bool seen_declaration = false;  // a type or function: OpMemoryModel comes before them
  // A type's result id is defined once (SPIR-V 2.2.2: ids are unique); a second definition
  // would change the size of parameters already read.
  auto define = [&](uint32_t id, Type t, size_t at) {
    seen_declaration = true;
    if (types.emplace(id, t).second) return true;
    *why = "malformed SPIR-V: type id " + std::to_string(id) + " is defined twice (again at word " +
           std::to_string(at) + ")";
    return false;
  };
  for (size_t i = 5; i < words.size();) {
    const uint32_t count = words[i] >> 16, op = words[i] & 0xffff;
    if (count == 0 || i + count > words.size()) {
      *why = "truncated SPIR-V: instruction at word " + std::to_string(i) + " runs past the end";
      return false;
    }
    const uint32_t* a = &words[i + 1];
    const size_t n = count - 1;
    auto need = [&](size_t k) {
      if (n >= k) return true;
      *why = "malformed SPIR-V: opcode " + std::to_string(op) + " at word " + std::to_string(i) + " is too short";
      return false;
    };
    switch (op) {
      case kOpMemoryModel:
        if (!need(1)) return false;
        // Pointer types take their size from it: one after them would leave theirs stale.
        if (seen_declaration) {
          *why = "malformed SPIR-V: OpMemoryModel at word " + std::to_string(i) +
                 " comes after a type or function (the logical layout puts it before them)";
          return false;
        }
        m.pointer_bytes = a[0] == kAddressingPhysical32 ? 4 : 8;
        break;
      case kOpEntryPoint: {
        if (!need(3)) return false;
        // The logical layout (SPIR-V spec 2.4) puts every entry point before the functions.
        if (seen_function) {
          *why = "malformed SPIR-V: OpEntryPoint at word " + std::to_string(i) +
                 " comes after a function (the logical layout puts entry points before every OpFunction)";
          return false;
        }
        if (a[0] != kExecutionModelKernel) break;
        Kernel k;
        if (!literal(a + 2, n - 2, &k.name)) {
          *why = "malformed SPIR-V: an entry point name is not terminated";
          return false;
        }
        entries[a[1]] = m.kernels.size();
        m.kernels.push_back(std::move(k));
        break;
      }
      case kOpExecutionMode:
        if (!need(2)) return false;
        if (a[1] == kExecutionModeLocalSize && n >= 5 && entries.count(a[0]))
          for (int d = 0; d < 3; ++d) m.kernels[entries[a[0]]].required_group[d] = a[2 + d];
        break;
      case kOpTypeBool:
        if (!need(1) || !define(a[0], {Type::kScalar, 1, 0}, i)) return false;
        break;
      case kOpTypeInt:
      case kOpTypeFloat:
        if (!need(2) || !define(a[0], {Type::kScalar, a[1] % 8 ? 0 : a[1] / 8, 0}, i)) return false;
        break;
      case kOpTypeVector: {
        if (!need(3)) return false;
        auto it = types.find(a[1]);
        if (it == types.end()) break;
        // OpenCL: a 3-element vector takes the space of four. Saturated: a vector of vectors
        // (not valid SPIR-V) must not wrap round to a plausible size.
        const uint64_t count = a[2] == 3 ? 4 : a[2], bytes = it->second.bytes;
        const uint64_t total = count && bytes > UINT64_MAX / count ? UINT64_MAX : bytes * count;
        if (!define(a[0], {Type::kScalar, total, 0}, i)) return false;
        break;
      }
      case kOpTypePointer:
        if (!need(3) || !define(a[0], {Type::kPointer, m.pointer_bytes, a[1]}, i)) return false;
        break;
      case kOpFunction: {
        if (!need(4)) return false;
        if (in_function) {
          *why = "malformed SPIR-V: OpFunction at word " + std::to_string(i) + " (id " + std::to_string(a[1]) +
                 ") begins inside another function (no OpFunctionEnd before it)";
          return false;
        }
        if (!defined.insert(a[1]).second) {
          *why = "malformed SPIR-V: function id " + std::to_string(a[1]) + " is defined twice (again at word " +
                 std::to_string(i) + ")";
          return false;
        }
        in_function = seen_function = seen_declaration = true;
        auto it = entries.find(a[1]);
        current = it == entries.end() ? kNone : it->second;
        break;
      }
      case kOpFunctionParameter: {
        if (!in_function) {
          *why = "malformed SPIR-V: OpFunctionParameter at word " + std::to_string(i) + " is outside a function";
          return false;
        }
        if (!need(2) || current == kNone) break;
        Kernel& k = m.kernels[current];
        auto it = types.find(a[0]);
        if (it == types.end()) {
          *why = "kernel '" + k.name + "': parameter " + std::to_string(k.params.size()) +
                 " has a type this reader does not know (structs and images are not kernel arguments here)";
          return false;
        }
        Param p;
        if (it->second.what == Type::kScalar) {
          // A launch copies a value's bytes: none, or more than any OpenCL type has, cannot be packed.
          if (it->second.bytes == 0 || it->second.bytes > kMaxValueBytes) {
            *why = "kernel '" + k.name + "': parameter " + std::to_string(k.params.size()) + " is a value of " +
                   (it->second.bytes == 0           ? std::string("no whole number of bytes")
                    : it->second.bytes == UINT64_MAX ? std::string("more than 2^64 bytes")
                                                     : std::to_string(it->second.bytes) + " bytes") +
                   " (a kernel argument value is 1 to " + std::to_string(kMaxValueBytes) + " bytes)";
            return false;
          }
          p = {ParamKind::kValue, uint32_t(it->second.bytes)};
        } else if (it->second.storage == kStorageWorkgroup) {
          p = {ParamKind::kLocalPointer, 0};
        } else if (it->second.storage == kStorageCrossWorkgroup || it->second.storage == kStorageUniformConstant ||
                   it->second.storage == kStorageGeneric) {
          p = {ParamKind::kGlobalPointer, uint32_t(it->second.bytes)};
        } else {
          *why = "kernel '" + k.name + "': parameter " + std::to_string(k.params.size()) +
                 " is a pointer of storage class " + std::to_string(it->second.storage);
          return false;
        }
        k.params.push_back(p);
        break;
      }
      case kOpFunctionEnd:
        if (!in_function) {
          *why = "malformed SPIR-V: OpFunctionEnd at word " + std::to_string(i) + " ends no function";
          return false;
        }
        in_function = false;
        current = kNone;
        break;
      default:
        break;
    }
    i += count;
  }
  if (in_function) {
    *why = "truncated SPIR-V: the module ends inside a function (no OpFunctionEnd)";
    return false;
  }
  if (m.kernels.empty()) {
    *why = "the SPIR-V module has no kernel entry point";
    return false;
  }
  *out = std::move(m);
  return true;
}

}  // namespace halcyon::spirv
