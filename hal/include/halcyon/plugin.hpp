// Helpers for writing a backend in C++ behind hal.h's plugin contract.
// A backend keeps the hal_host_api it was created with and reports errors through it; no
// C++ exception may leave a table function (HAL_BACKEND_GUARD turns one into an error).
//
// A backend never defines hal.h's hal_be_* structs: several backends link into one
// libhalcyon, and two definitions of one struct (with their inline destructors) would be an
// ODR violation. It uses its own types and fills its table through HAL_BACKEND_FN:
//
//   struct CpuDevice { ... };                       // in an anonymous namespace
//   HAL_BACKEND_TYPE(CpuDevice, hal_be_device)      // at global scope
//   hal_error* cpu_device_info(CpuDevice* d, hal_device_info* out);
//   ... table entry: HAL_BACKEND_FN(cpu_device_info)
#pragma once

#include <halcyon/hal.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <string_view>

namespace halcyon::plugin {

// The host table handed to create(); each backend sets it first thing in create().
inline const hal_host_api*& host() {
  static const hal_host_api* h = nullptr;
  return h;
}

// Errors are made by the core, through the host table's error_new (ABI 1.0): a backend never
// calls hal_error_new or any other hal_* function. A plugin file therefore imports nothing
// from libhalcyon and loads even when libhalcyon was opened RTLD_LOCAL (Python ctypes'
// default), where hal_* symbols are not visible to later dlopen()s; and the error lives in
// the core's heap, so hal_error_free frees it wherever it came from. tests/plugins checks
// that no plugin file has an undefined hal_* symbol.
inline hal_error* error(hal_status status, const std::string& message) {
  const hal_host_api* h = host();
  if (h && h->error_new) return h->error_new(status, message.c_str());
  // The core calls create() (which stores the table) before any other entry, so this is a
  // backend calling a table function of its own before create(): a bug in the caller, with
  // no core to hand the error to. Say so rather than report success or crash obscurely.
  std::fprintf(stderr, "halcyon backend: error (status %d) reported before create(), with no host table: %s\n",
               int(status), message.c_str());
  std::abort();
}

inline void log(hal_log_level level, const std::string& message) {
  const hal_host_api* h = host();
  if (h && h->log) h->log(level, message.c_str());
}

// The value of option `key` given to `backend` (hal_init_desc.backend_options), or null: also
// when the core is older than ABI 1.3 and has no options.
inline const char* option(const char* backend, const char* key) {
  const hal_host_api* h = host();
  if (!h || h->struct_size < HAL_SIZE_THROUGH(hal_host_api, option) || !h->option) return nullptr;
  return h->option(backend, key);
}

// Checks that memory a backend imports (hal_buffer_import) lies inside the allocation the
// driver reports for its start: the core's range checks trust the imported size, so a range
// past the allocation would let writes land in memory its owner never gave. Rules:
// - the range is [start, start + size), the allocation [alloc_base, alloc_base + alloc_bytes);
// - the range must start at or after alloc_base and end at or before the allocation's end;
// - an empty range (size 0) may start anywhere from alloc_base to the allocation's end included;
// - no sum is formed, so nothing wraps: a size near 2^64 is refused, never taken as small.
// Returns null when the range fits, else HAL_INVALID_ARGUMENT naming both ranges (one wording
// for every backend). Parameters:
//   who          what imports, first in the message ("cuda:0", "hip:1", "ze:0")
//   start        the imported range's first address (hal_buffer_import_desc.device_address)
//   size         the imported range's bytes (hal_buffer_import_desc.size)
//   alloc_base   the first address of the allocation holding `start`, as the driver reports it
//   alloc_bytes  that allocation's bytes, as the driver reports them
inline hal_error* check_import_range(std::string_view who, uint64_t start, uint64_t size, uint64_t alloc_base,
                                     uint64_t alloc_bytes) {
  // start - alloc_base is formed only once start >= alloc_base, and compared with alloc_bytes
  // before alloc_bytes - offset is: neither subtraction can wrap.
  const bool inside = start >= alloc_base && start - alloc_base <= alloc_bytes &&
                      size <= alloc_bytes - (start - alloc_base);
  if (inside) return nullptr;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                ": importing [0x%" PRIx64 ", +%" PRIu64 "): the range runs past its allocation [0x%" PRIx64
                ", +%" PRIu64 ")",
                start, size, alloc_base, alloc_bytes);
  return error(HAL_INVALID_ARGUMENT, std::string(who) + buf);
}

// Maps a backend's own object types to the opaque hal_be_* types of the table.
template <typename T>
struct abi_type {
  using type = T;
};
template <typename T>
using abi_t = typename abi_type<T>::type;

// A table function with hal_be_* parameters that calls F with the backend's own types.
template <auto F>
struct adapt;
template <typename R, typename... A, R (*F)(A...)>
struct adapt<F> {
  static R fn(abi_t<A>... a) { return F(reinterpret_cast<A>(a)...); }
};

}  // namespace halcyon::plugin

#define HAL_BACKEND_TYPE(Own, Abi)                                   \
  template <>                                                        \
  struct halcyon::plugin::abi_type<Own*> {                           \
    using type = Abi*;                                               \
  };                                                                 \
  template <>                                                        \
  struct halcyon::plugin::abi_type<Own**> {                          \
    using type = Abi**;                                              \
  };
#define HAL_BACKEND_FN(f) (&::halcyon::plugin::adapt<f>::fn)

// Wraps a table function body: exceptions become HAL_INTERNAL / HAL_OUT_OF_MEMORY errors.
#define HAL_BACKEND_GUARD(...)                                                         \
  try {                                                                                \
    __VA_ARGS__                                                                        \
  } catch (const std::bad_alloc&) {                                                    \
    return ::halcyon::plugin::error(HAL_OUT_OF_MEMORY, "host allocation failed");      \
  } catch (const std::exception& ex) {                                                 \
    return ::halcyon::plugin::error(HAL_INTERNAL, std::string("backend: ") + ex.what()); \
  }
