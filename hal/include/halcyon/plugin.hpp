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

#include <exception>
#include <new>
#include <string>

namespace halcyon::plugin {

// The host table handed to create(); each backend sets it once.
inline const hal_host_api*& host() {
  static const hal_host_api* h = nullptr;
  return h;
}

inline hal_error* error(hal_status status, const std::string& message) {
  const hal_host_api* h = host();
  if (h && h->error_new) return h->error_new(status, message.c_str());
  return hal_error_new(status, message.c_str());  // built-in backend: same library
}

inline void log(hal_log_level level, const std::string& message) {
  const hal_host_api* h = host();
  if (h && h->log) h->log(level, message.c_str());
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
