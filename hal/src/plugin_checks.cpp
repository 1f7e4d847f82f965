// Plugin file and function-table checks (plugin_checks.hpp).
#include "plugin_checks.hpp"

#include <fmt/format.h>

#include <cstring>
#include <elf.h>
#include <iterator>

namespace halcyon::core {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#elif defined(__riscv) && __riscv_xlen == 64
constexpr uint16_t kMachine = EM_RISCV;
#else
#error "plugin_checks.cpp: add this host's ELF machine"
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr unsigned char kData = ELFDATA2LSB;
#else
constexpr unsigned char kData = ELFDATA2MSB;
#endif

struct MachineName {
  uint16_t machine;
  const char* name;
};
constexpr MachineName kMachines[] = {{EM_X86_64, "x86-64"}, {EM_AARCH64, "aarch64"}, {EM_RISCV, "riscv"},
                                     {EM_386, "i386"},      {EM_ARM, "arm"},         {EM_PPC64, "ppc64"}};

std::string machine_name(uint16_t m) {
  for (const MachineName& r : kMachines)
    if (r.machine == m) return r.name;
  return fmt::format("ELF machine {}", m);
}

}  // namespace

std::string elf_refusal(const unsigned char* head, size_t n, uint64_t file_size) {
  if (n < SELFMAG || std::memcmp(head, ELFMAG, SELFMAG) != 0) return "not an ELF file (no \\x7fELF at its start)";
  if (n < sizeof(Elf64_Ehdr) || file_size < sizeof(Elf64_Ehdr))
    return fmt::format("a truncated ELF file ({} bytes; its header alone is {})", file_size, sizeof(Elf64_Ehdr));
  if (head[EI_CLASS] != ELFCLASS64) return fmt::format("a {}-bit ELF file; this process is 64-bit", head[EI_CLASS] == ELFCLASS32 ? 32 : 0);
  if (head[EI_DATA] != kData) return "an ELF file of the other byte order";
  Elf64_Ehdr h;
  std::memcpy(&h, head, sizeof h);
  if (h.e_machine != kMachine)
    return fmt::format("built for {}, this process is {}", machine_name(h.e_machine), machine_name(kMachine));
  if (h.e_type != ET_DYN)
    return fmt::format("an ELF {} rather than a shared object", h.e_type == ET_EXEC ? "executable" : h.e_type == ET_REL ? "object file (.o)" : "file of another type");
  if (h.e_phentsize != sizeof(Elf64_Phdr) || h.e_phnum == 0)
    return fmt::format("ELF program headers of {} bytes x {}: not a loadable shared object", h.e_phentsize, h.e_phnum);
  const uint64_t table = uint64_t(h.e_phnum) * h.e_phentsize;
  if (h.e_phoff > file_size || table > file_size - h.e_phoff)
    return fmt::format("its program headers ({} bytes at offset {}) lie past the end of the {}-byte file", table,
                       h.e_phoff, file_size);
  return "";
}

std::string table_refusal(const hal_backend_api* api, hal_status* status) {
  *status = HAL_VERSION_MISMATCH;
  if (api->struct_size < HAL_SIZE_THROUGH(hal_backend_api, abi_minor))
    return fmt::format("function table struct_size {} is too small to hold a version", api->struct_size);
  if (api->abi_major != HAL_ABI_MAJOR)
    return fmt::format("plugin was built for halcyon ABI {}.{}, this libhalcyon is ABI {}.{}", api->abi_major,
                       api->abi_minor, HAL_ABI_MAJOR, HAL_ABI_MINOR);
  if (api->struct_size < HAL_BACKEND_API_MIN_SIZE)
    return fmt::format("function table struct_size {} is smaller than ABI {}.0's {} bytes", api->struct_size,
                       HAL_ABI_MAJOR, HAL_BACKEND_API_MIN_SIZE);
  *status = HAL_INVALID_ARGUMENT;
  std::string name = api->name ? std::string(api->name, strnlen(api->name, 64)) : "";
  if (name.empty() || name.size() >= 32 || name.find_first_of(":/ ") != std::string::npos)
    return fmt::format("backend name '{}' is not a valid URI scheme", name);
  // Every ABI 1.0 entry but the optional device_resolve must be present.
  static const char* const kEntryNames[] = {
      "create", "destroy", "device_count", "device_resolve", "device_open", "device_close", "device_info",
      "buffer_create", "buffer_destroy", "stream_create", "stream_destroy", "stream_synchronize", "stream_write",
      "stream_read", "stream_copy", "stream_fill", "stream_wait_event", "stream_launch", "event_create",
      "event_destroy", "event_record", "event_query", "event_synchronize", "event_elapsed_ms", "module_load",
      "module_destroy", "kernel_get", "kernel_destroy"};
  const void* const* fns = reinterpret_cast<const void* const*>(&api->create);
  const void* const* end =
      reinterpret_cast<const void* const*>(reinterpret_cast<const char*>(api) + HAL_BACKEND_API_MIN_SIZE);
  for (const void* const* p = fns; p < end; ++p) {
    if (p == reinterpret_cast<const void* const*>(&api->device_resolve)) continue;
    if (*p == nullptr)
      return fmt::format("required entry '{}' of the function table is NULL",
                         size_t(p - fns) < std::size(kEntryNames) ? kEntryNames[p - fns] : "?");
  }
  *status = HAL_OK;
  return "";
}

}  // namespace halcyon::core
