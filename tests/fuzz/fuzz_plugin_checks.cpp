// libFuzzer target: the checks a plugin passes before libhalcyon uses it (hal/src/plugin_checks.cpp):
// the ELF header read from the file before dlopen, then the function table's version, size,
// name and required entries. The input is the file for the first; its first bytes also set the
// table's numeric fields, which entries are NULL, and its name.
#include "plugin_checks.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {
hal_error* never(const hal_host_api*, hal_be_backend**) { return nullptr; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const size_t head = size < 64 ? size : 64;
  std::string why = halcyon::core::elf_refusal(data, head, size);
  (void)why;

  // The table: struct_size (8 bytes), abi_major/minor (4 + 4), a 64-bit mask of NULL entries,
  // then the name (up to 40 bytes, NUL-terminated here).
  hal_backend_api api{};
  uint64_t fields[3] = {};
  std::memcpy(fields, data, size < sizeof fields ? size : sizeof fields);
  api.struct_size = size_t(fields[0] % (2 * sizeof(hal_backend_api)));  // sizes a real table could claim
  api.abi_major = uint32_t(fields[1]);
  api.abi_minor = uint32_t(fields[1] >> 32);
  const uint64_t null_mask = fields[2];
  std::string name;
  if (size > sizeof fields) name.assign(reinterpret_cast<const char*>(data) + sizeof fields, std::min<size_t>(size - sizeof fields, 40));
  name = name.c_str();  // up to the first NUL
  api.name = (fields[2] >> 63) ? nullptr : name.c_str();
  // Every function slot from create on: NULL or a function (never called by the checks).
  auto* slots = reinterpret_cast<unsigned char*>(&api) + offsetof(hal_backend_api, create);
  const size_t count = (sizeof(hal_backend_api) - offsetof(hal_backend_api, create)) / sizeof(void*);
  for (size_t i = 0; i < count; ++i) {
    auto fn = (null_mask >> (i % 63)) & 1 ? nullptr : &never;
    std::memcpy(slots + i * sizeof fn, &fn, sizeof fn);
  }
  hal_status status = HAL_INTERNAL;
  std::string t = halcyon::core::table_refusal(&api, &status);
  // Accepted exactly when no reason is given; a refusal always has a status.
  if (t.empty() != (status == HAL_OK)) std::abort();
  return 0;
}
