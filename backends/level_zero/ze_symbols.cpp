#include "ze_symbols.hpp"

#include <fmt/format.h>

#include <dlfcn.h>

namespace halcyon::ze {

Library::~Library() {
  if (handle_) dlclose(handle_);
}

bool Library::open(const char* file, std::string* why) {
  path = file && *file ? file : "libze_loader.so.1";
  dlerror();
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* err = dlerror();
    *why = fmt::format("{} not found (the oneAPI Level Zero loader, Debian: libze1): {}", path, err ? err : "?");
    return false;
  }
#define HALCYON_ZE_REQ(name)                                                                    \
  sym.name = reinterpret_cast<decltype(&::name)>(dlsym(handle_, #name));                        \
  if (!sym.name) {                                                                              \
    *why = path + " lacks the required symbol " #name " (a Level Zero loader older than 1.4?)"; \
    return false;                                                                               \
  }
#define HALCYON_ZE_OPT(name) sym.name = reinterpret_cast<decltype(&::name)>(dlsym(handle_, #name));
#define HALCYON_ZE_NEW(name, result, params) sym.name = reinterpret_cast<decltype(sym.name)>(dlsym(handle_, #name));
  HALCYON_ZE_REQUIRED(HALCYON_ZE_REQ)
  HALCYON_ZE_OPTIONAL(HALCYON_ZE_OPT)
  HALCYON_ZE_NEWER(HALCYON_ZE_NEW)
#undef HALCYON_ZE_REQ
#undef HALCYON_ZE_OPT
#undef HALCYON_ZE_NEW
  return true;
}

std::string result_name(ze_result_t r) {
  switch (r) {
#define HALCYON_ZE_RESULT(n) \
  case n: return #n;
    HALCYON_ZE_RESULT(ZE_RESULT_SUCCESS)
    HALCYON_ZE_RESULT(ZE_RESULT_NOT_READY)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_DEVICE_LOST)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_MODULE_LINK_FAILURE)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_UNINITIALIZED)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_UNSUPPORTED_VERSION)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_UNSUPPORTED_FEATURE)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_ARGUMENT)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_NULL_HANDLE)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_NULL_POINTER)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_SIZE)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_UNSUPPORTED_SIZE)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_KERNEL_NAME)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY)
    HALCYON_ZE_RESULT(ZE_RESULT_ERROR_UNKNOWN)
#undef HALCYON_ZE_RESULT
    default: return fmt::format("0x{:x}", uint32_t(r));
  }
}

}  // namespace halcyon::ze
