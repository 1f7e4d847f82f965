// Helpers for writing a backend in C++ behind hal.h's plugin contract.
// A backend keeps the hal_host_api it was created with and reports errors through it; no
// C++ exception may leave a table function (HAL_BACKEND_GUARD turns one into an error).
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

}  // namespace halcyon::plugin

// Wraps a table function body: exceptions become HAL_INTERNAL / HAL_OUT_OF_MEMORY errors.
#define HAL_BACKEND_GUARD(...)                                                         \
  try {                                                                                \
    __VA_ARGS__                                                                        \
  } catch (const std::bad_alloc&) {                                                    \
    return ::halcyon::plugin::error(HAL_OUT_OF_MEMORY, "host allocation failed");      \
  } catch (const std::exception& ex) {                                                 \
    return ::halcyon::plugin::error(HAL_INTERNAL, std::string("backend: ") + ex.what()); \
  }
