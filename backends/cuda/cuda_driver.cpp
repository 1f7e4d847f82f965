// Opens libcuda.so.1 and resolves the symbol table of cuda_driver.hpp.
#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace halcyon::cuda {
namespace {

struct Loaded {
  Driver driver;
  const Driver* ok = nullptr;
  std::string why;
};

void load(Loaded& out, const char* library) {
  std::string file = library && *library ? library : "libcuda.so.1";
  dlerror();
  void* dl = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char* e = dlerror();
    out.why = file + " not found: " + (e ? e : "dlopen failed") +
              " (the NVIDIA driver is not installed or not visible to this process)";
    return;
  }
  // cuGetProcAddress_v2 (CUDA 12.0) reports whether a symbol is missing or too new.
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(dl, "cuGetProcAddress_v2"));
  if (!gpa) {
    out.why = file + " has no cuGetProcAddress_v2: the driver is older than CUDA " +
              version_string(kMinDriverVersion) + ", which halcyon needs";
    dlclose(dl);
    return;
  }
  Driver& d = out.driver;
  std::string missing;
  auto resolve = [&](const char* name, int ver, void** slot) {
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = gpa(name, slot, ver, CU_GET_PROC_ADDRESS_DEFAULT, &found);
    if (r != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS) *slot = nullptr;
    return *slot != nullptr;
  };
#define HALCYON_CUDA_REQ(name, ver) \
  if (!resolve(#name, ver, reinterpret_cast<void**>(&d.name))) missing += (missing.empty() ? "" : ", ") + std::string(#name);
#define HALCYON_CUDA_OPT(name, ver) \
  if (!resolve(#name, ver, reinterpret_cast<void**>(&d.name)))  \
    d.missing_optional += (d.missing_optional.empty() ? "" : " ") + std::string(#name);
  HALCYON_CUDA_REQUIRED(HALCYON_CUDA_REQ)
  HALCYON_CUDA_OPTIONAL(HALCYON_CUDA_OPT)
#undef HALCYON_CUDA_REQ
#undef HALCYON_CUDA_OPT
  int version = 0;
  if (d.cuDriverGetVersion) d.cuDriverGetVersion(&version);
  d.version = version;
  if (!missing.empty()) {
    out.why = file + " (driver for CUDA " + version_string(version) + ") lacks required symbol(s): " +
              missing + "; halcyon needs a driver for CUDA " + version_string(kMinDriverVersion) +
              " or newer";
    return;  // the library stays open: symbols may still be referenced by nothing, harmless
  }
  if (version < kMinDriverVersion) {
    out.why = "the driver supports CUDA " + version_string(version) + "; halcyon needs CUDA " +
              version_string(kMinDriverVersion) + " or newer";
    return;
  }
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    out.why = "cuInit failed: " + result_string(d, r);
    return;
  }
  out.ok = &d;
}

}  // namespace

const Driver* load_driver(std::string* why, const char* file) {
  static Loaded* loaded = [file] {
    auto* l = new Loaded;  // lives for the process, like the library it describes
    load(*l, file);
    return l;
  }();
  if (!loaded->ok && why) *why = loaded->why;
  return loaded->ok;
}

std::string result_string(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  std::string s = name ? name : "CUDA error " + std::to_string(int(r));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

std::string version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

}  // namespace halcyon::cuda
