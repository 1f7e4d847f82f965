// The checks a plugin file and its function table pass before libhalcyon uses them: pure
// functions of bytes and fields, so that tests/fuzz can feed them anything.
#pragma once

#include <halcyon/hal.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace halcyon::core {

// The first bytes of a plugin file (`n` of them, up to 64; `file_size` the whole file's): ""
// when they are the ELF header of a shared object this process can load (64-bit, the host's
// byte order and machine, ET_DYN, program headers inside the file), else why not. Checked
// before dlopen, so that a wrong file is refused with a reason instead of being mapped.
std::string elf_refusal(const unsigned char* head, size_t n, uint64_t file_size);

// A plugin's function table: "" when this libhalcyon can use it, else why not, with the
// status to return (HAL_VERSION_MISMATCH or HAL_INVALID_ARGUMENT). `api` is non-NULL.
std::string table_refusal(const hal_backend_api* api, hal_status* status);

}  // namespace halcyon::core
