#include "ccl_library.hpp"

#include <dlfcn.h>

#include <iterator>

namespace halcyon::ccl {

namespace {
#define HALCYON_CCL_NAME(name, ret, params) #name,
const char* const kRequired[] = {HALCYON_CCL_REQUIRED(HALCYON_CCL_NAME)};
const char* const kOptional[] = {HALCYON_CCL_OPTIONAL(HALCYON_CCL_NAME)};
#undef HALCYON_CCL_NAME

const FlavorInfo kFlavors[] = {
    {"NCCL", "libnccl.so.2", "NVIDIA"},
    {"RCCL", "librccl.so.1", "AMD"},
};
}  // namespace

const FlavorInfo& flavor_info(Flavor flavor) { return kFlavors[flavor == Flavor::kNccl ? 0 : 1]; }

const char* const* required_symbol_names(size_t* count) {
  *count = std::size(kRequired);
  return kRequired;
}
const char* const* optional_symbol_names(size_t* count) {
  *count = std::size(kOptional);
  return kOptional;
}

Library::~Library() {
  if (dl_) dlclose(dl_);
}

std::string Library::open(Flavor flavor, std::unique_ptr<Library>* out, const char* path) {
  const FlavorInfo& f = flavor_info(flavor);
  const char* file = path ? path : f.soname;
  void* dl = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char* why = dlerror();
    return std::string(file) + " not found (" + (why ? why : "dlopen failed") + "): " + f.name + " is needed for " +
           f.vendor + " GPU communicators; install it or use another transport";
  }
  const std::string lacks = std::string(file) + " lacks required symbol ";
  const std::string which = std::string(" (is it ") + f.name + "?)";
  std::unique_ptr<Library> lib(new Library);
  lib->dl_ = dl;
  lib->flavor_ = flavor;
#define HALCYON_CCL_LOAD_REQUIRED(name, ret, params)                                              \
  lib->sym_.name = reinterpret_cast<decltype(lib->sym_.name)>(dlsym(dl, #name));                 \
  if (!lib->sym_.name) return lacks + #name + which;
#define HALCYON_CCL_LOAD_OPTIONAL(name, ret, params) \
  lib->sym_.name = reinterpret_cast<decltype(lib->sym_.name)>(dlsym(dl, #name));
  HALCYON_CCL_REQUIRED(HALCYON_CCL_LOAD_REQUIRED)
  HALCYON_CCL_OPTIONAL(HALCYON_CCL_LOAD_OPTIONAL)
#undef HALCYON_CCL_LOAD_REQUIRED
#undef HALCYON_CCL_LOAD_OPTIONAL
  *out = std::move(lib);
  return {};
}

std::string Library::version() const {
  int v = 0;
  if (sym_.ncclGetVersion(&v) != kSuccess) return std::string(flavor_info(flavor_).name) + " (version unknown)";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older, major*1000 + minor*100 + patch.
  int major = v >= 10000 ? v / 10000 : v / 1000, minor = v >= 10000 ? v / 100 % 100 : v / 100 % 10;
  return std::string(flavor_info(flavor_).name) + " " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(v % 100);
}

std::string Library::error_text(const char* call, Result r) const {
  const char* s = sym_.ncclGetErrorString ? sym_.ncclGetErrorString(r) : nullptr;
  return std::string(call) + ": " + (s ? s : "error") + " (" + std::to_string(r) + ")";
}

}  // namespace halcyon::ccl
