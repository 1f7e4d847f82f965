// What the CUDA backend reads from PTX text and architecture tags before any driver call:
// the .target and .version directives, each .entry's parameter layout, and whether a module
// built for one architecture can run on a device of a given compute capability.
// Pure functions: unit-tested without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::cuda {

struct PtxParam {
  std::string name;
  uint32_t offset = 0;
  uint32_t size = 0;
  uint32_t align = 0;
  // True only when the PTX says so (`.ptr` attribute). A plain .u64 may hold a pointer or an
  // integer; PTX does not tell them apart.
  bool pointer = false;
};

struct PtxEntry {
  std::string name;
  std::vector<PtxParam> params;
  uint32_t args_size = 0;  // end of the last parameter
};

struct PtxInfo {
  std::string version;  // ".version 8.8" -> "8.8"
  std::string target;   // ".target sm_90a, debug" -> "sm_90a"
  std::vector<PtxEntry> entries;
  const PtxEntry* find(std::string_view name) const;
};

// Parses `text` (comments allowed). Returns false and sets *error on malformed directives.
bool parse_ptx(std::string_view text, PtxInfo* out, std::string* error);

// "sm_90a", "sm_80", "compute_90a", "sm_100f".
struct ArchTag {
  int major = 0;
  int minor = 0;
  char suffix = 0;  // 0, 'a' (this exact architecture only) or 'f' (this family)
  bool operator==(const ArchTag&) const = default;
};
std::optional<ArchTag> parse_arch(std::string_view tag);

// The device's architecture name: the arch-specific form where one exists ("sm_90a" for
// compute capability 9.0, since sm_90a code runs there), else "sm_86".
std::string device_arch_name(int major, int minor);

// Empty when a module in this format (PTX or cubin) built for `target` runs on a device of
// compute capability major.minor; otherwise why not. PTX JIT-compiles forward to newer
// devices unless it is arch-specific ('a': that exact device) or family-specific ('f': same
// major, minor at least the target's). A cubin runs only within its major version.
std::string check_target(std::string_view target, bool is_ptx, int major, int minor);

// Empty when `data` is a whole NVIDIA ELF cubin (64-bit, EM_CUDA, every header and section
// inside `size`) or a fatbin whose header and payload fit; otherwise what is wrong. The
// driver's loaders take no size, so a truncated image must be refused before them.
std::string check_cubin_image(const void* data, size_t size);

}  // namespace halcyon::cuda
