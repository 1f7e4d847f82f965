#include "hip_symbols.hpp"

#include <dlfcn.h>

#include <cstring>
#include <vector>

namespace halcyon::hip {

Library::~Library() {
  if (handle_) dlclose(handle_);
}

bool Library::open(const char* file, std::string* why) {
  std::vector<const char*> names = {"libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
  if (file && *file) names = {file};
  std::string tried;
  for (const char* n : names) {
    handle_ = dlopen(n, RTLD_NOW | RTLD_LOCAL);
    if (handle_) {
      path = n;
      break;
    }
    const char* err = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + (err ? err : n);
  }
  if (!handle_) {
    *why = (file && *file ? std::string(file) + " could not be opened: "
                          : "libamdhip64 not found (ROCm HIP runtime not installed): ") + tried;
    return false;
  }
#define HALCYON_HIP_REQ(name, type)                                                   \
  sym.name = reinterpret_cast<type>(dlsym(handle_, #name));                           \
  if (!sym.name) {                                                                    \
    *why = path + " lacks the required symbol " #name " (HIP runtime too old?)";      \
    return false;                                                                     \
  }
#define HALCYON_HIP_OPT(name, type) sym.name = reinterpret_cast<type>(dlsym(handle_, #name));
  HALCYON_HIP_REQUIRED(HALCYON_HIP_REQ)
  HALCYON_HIP_OPTIONAL(HALCYON_HIP_OPT)
#undef HALCYON_HIP_REQ
#undef HALCYON_HIP_OPT
  using PropsFn = hipError_t (*)(hipDeviceProp_t*, int);
  sym.getDevicePropertiesR0000 = reinterpret_cast<PropsFn>(dlsym(handle_, "hipGetDevicePropertiesR0000"));
  if (!sym.getDevicePropertiesR0000 && std::strstr(path.c_str(), ".so.6") == nullptr)
    sym.getDevicePropertiesR0000 = reinterpret_cast<PropsFn>(dlsym(handle_, "hipGetDeviceProperties"));
  return true;
}

int Library::runtime_major() const {
  int version = 0;
  if (sym.hipRuntimeGetVersion && sym.hipRuntimeGetVersion(&version) == hipSuccess && version > 0)
    return version / 10000000;  // HIP_VERSION: major * 10^7 + minor * 10^5 + patch
  return std::strstr(path.c_str(), ".so.6") ? 6 : 5;
}

std::string Library::arch_name(int device) const {
  if (!sym.getDevicePropertiesR0000) return "unknown";
  // Over-allocated: a runtime newer than the header may write a longer struct.
  std::vector<unsigned char> storage(sizeof(hipDeviceProp_t) + 4096, 0);
  auto* props = reinterpret_cast<hipDeviceProp_t*>(storage.data());
  if (sym.getDevicePropertiesR0000(props, device) != hipSuccess) return "unknown";
  std::string arch(props->gcnArchName, strnlen(props->gcnArchName, sizeof props->gcnArchName));
  return arch.substr(0, arch.find(':'));
}

}  // namespace halcyon::hip
