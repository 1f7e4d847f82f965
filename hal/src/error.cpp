#include "core.hpp"

#include <new>
#include <stdexcept>

namespace halcyon::core {

hal_error* make_error(hal_status status, std::string message) {
  // new(nothrow): reporting an out-of-memory condition must not itself throw.
  auto* e = new (std::nothrow) hal_error_s{status, std::move(message)};
  if (e == nullptr) {
    static hal_error_s oom{HAL_OUT_OF_MEMORY, "out of host memory while reporting an error"};
    return &oom;  // never freed: hal_error_free recognises it
  }
  return e;
}

hal_error* error_from_current_exception(const char* function) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return make_error(HAL_OUT_OF_MEMORY, std::string(function) + ": host allocation failed");
  } catch (const std::exception& ex) {
    return make_error(HAL_INTERNAL, std::string(function) + ": " + ex.what());
  } catch (...) {
    return make_error(HAL_INTERNAL, std::string(function) + ": unknown exception");
  }
}

}  // namespace halcyon::core

using namespace halcyon::core;

extern "C" {

HAL_API hal_status hal_error_status(const hal_error* e) { return e ? e->status : HAL_OK; }

HAL_API const char* hal_error_message(const hal_error* e) { return e ? e->message.c_str() : ""; }

HAL_API void hal_error_free(hal_error* e) {
  if (e == nullptr || (e->status == HAL_OUT_OF_MEMORY &&
                       e->message == "out of host memory while reporting an error"))
    return;
  delete e;
}

HAL_API hal_error* hal_error_new(hal_status status, const char* message) {
  return make_error(status, message ? message : "");
}

HAL_API const char* hal_status_name(hal_status s) {
  switch (s) {
    case HAL_OK: return "HAL_OK";
    case HAL_INVALID_ARGUMENT: return "HAL_INVALID_ARGUMENT";
    case HAL_INVALID_HANDLE: return "HAL_INVALID_HANDLE";
    case HAL_OUT_OF_RANGE: return "HAL_OUT_OF_RANGE";
    case HAL_OUT_OF_MEMORY: return "HAL_OUT_OF_MEMORY";
    case HAL_NOT_FOUND: return "HAL_NOT_FOUND";
    case HAL_UNAVAILABLE: return "HAL_UNAVAILABLE";
    case HAL_UNSUPPORTED: return "HAL_UNSUPPORTED";
    case HAL_UNIMPLEMENTED: return "HAL_UNIMPLEMENTED";
    case HAL_VERSION_MISMATCH: return "HAL_VERSION_MISMATCH";
    case HAL_ARCH_MISMATCH: return "HAL_ARCH_MISMATCH";
    case HAL_DEVICE_ERROR: return "HAL_DEVICE_ERROR";
    case HAL_FAILED_PRECONDITION: return "HAL_FAILED_PRECONDITION";
    case HAL_INTERNAL: return "HAL_INTERNAL";
  }
  return "HAL_UNKNOWN_STATUS";
}

HAL_API void hal_abi_version(uint32_t* major, uint32_t* minor) {
  if (major) *major = HAL_ABI_MAJOR;
  if (minor) *minor = HAL_ABI_MINOR;
}

}  // extern "C"
