// A fake HIP runtime for the tests: a shared library exporting the hip* entry points the HIP
// backend uses (backends/hip/hip_symbols.hpp), handed to it through the backend option
// hip.library. It runs the backend's whole call sequence without an AMD GPU: devices and their
// attributes, memory (every device address checked against the live allocations), streams,
// CU-masked streams (the mask recorded for the tests), events, code objects, and launches,
// which execute the HSA code object on amdgpu-sim's core (backends/amdgpu_sim), so the HIP
// backend's argument blobs and grids meet the same checks the simulator backend's do. A kernel
// fault returns hipErrorLaunchFailure, and hipGetErrorString then gives the simulator's report.
//
// Device memory is a memfd mapped shared, so that another process can map it: the IPC entry
// points (hipIpcGetMemHandle / OpenMemHandle / CloseMemHandle) carry the owner's pid and fd,
// and the importer maps /proc/<pid>/fd/<fd>, as the HIP communicator's ranks do with real IPC.
//
// Simplifications, said plainly: two devices (an MI300X model, gfx942, and an MI250X GCD,
// gfx90a, with the attributes below); every command runs when it is queued, so events are
// complete at once and stream waits never wait; timestamps are the host's steady clock. It
// speaks the HIP 5 ABI of Debian's headers (hipMemoryType numbering, hipDeviceProp_t layout),
// or ROCm 6's pointer-attribute numbering when armed with "rocm6".
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#include <hip/hip_version.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "executor.hpp"
#include "fake_hip.hpp"
#include "hsaco.hpp"

namespace sim = halcyon::amdsim;

#define FAKE_API extern "C" __attribute__((visibility("default")))

struct ihipStream_t {
  int device;
  std::vector<uint32_t> cu_mask;  // empty: the whole device
};
struct ihipEvent_t {
  int device;
  bool timing = true;
  bool recorded = false;
  std::chrono::steady_clock::time_point when{};
};
struct ihipModuleSymbol_t;
struct ihipModule_t {
  int device;
  halcyon::hsaco::CodeObject code;
  std::vector<unsigned char> image;  // the loaded image the kernels execute from
  std::map<std::string, std::unique_ptr<ihipModuleSymbol_t>> functions;
};
struct ihipModuleSymbol_t {
  ihipModule_t* module;
  std::unique_ptr<sim::Program> program;
};

namespace {

struct Model {
  const char* arch;
  const char* gcn_arch_name;
  const char* name;
  int compute_units;
  uint64_t memory_bytes;
  int clock_khz, memory_clock_khz, bus_bits, l2_bytes;
};
// Memory clock x 2 x bus width gives each part's stated peak (MI300X 5.3 TB/s; an MI250X GCD 1.6).
const Model kModels[] = {
    {"gfx942", "gfx942:sramecc+:xnack-", "AMD Instinct MI300X (fake HIP runtime on amdgpu-sim)", 304, 192ull << 30,
     2100000, 2600000, 8192, 4 << 20},
    {"gfx90a", "gfx90a:sramecc+:xnack-", "AMD Instinct MI250X (fake HIP runtime on amdgpu-sim)", 110, 64ull << 30,
     1700000, 1600000, 4096, 8 << 20},
};
constexpr int kDevices = int(std::size(kModels));
constexpr int kLds = 64 * 1024;

struct Alloc {
  size_t size;
  int device;         // -1: pinned host memory
  size_t mapped = 0;  // device memory: the bytes mapped (a memfd's, or a peer's through IPC)
  int fd = -1;        // device memory of this process: its memfd (what IPC handles name)
  bool ipc = false;   // a peer's memory, mapped by hipIpcOpenMemHandle
};

// What an IPC handle holds.
struct IpcHandle {
  uint32_t magic;
  int32_t pid, fd;
  uint64_t size;
};
static_assert(sizeof(IpcHandle) <= HIP_IPC_HANDLE_SIZE);
constexpr uint32_t kIpcMagic = 0x50494846;  // "FHIP"

struct Device {
  sim::Memory memory;
  std::unique_ptr<sim::Decoder> decoder;  // made on the first module
  ihipStream_t null_stream;
};

struct State {
  std::mutex mu;
  bool initialised = false;
  Device devices[kDevices];
  std::map<uintptr_t, Alloc> allocs;  // by base
  std::vector<std::unique_ptr<ihipStream_t>> streams;
  std::vector<std::unique_ptr<ihipEvent_t>> events;
  std::vector<std::unique_ptr<ihipModule_t>> modules;
  std::map<std::string, int> counts;
  std::vector<uint32_t> last_cu_mask;
  unsigned last_grid_x = 0;
  hipStream_t last_launch_stream = nullptr;
  bool oom = false, no_stream_device = false, rocm6 = false;
  size_t live = 0;
  State() {
    for (int i = 0; i < kDevices; ++i) devices[i].null_stream.device = i;
  }
};

State& st() {
  static State s;
  return s;
}

thread_local int t_device = 0;
thread_local std::string t_launch_failure;  // what the last failed launch on this thread said

void count(const char* name) {
  std::lock_guard lock(st().mu);
  ++st().counts[name];
}

// The allocation holding [p, p + size), or nullptr.
const Alloc* find(const void* p, size_t size, uintptr_t* base = nullptr) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto& m = st().allocs;
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  if (a + size > it->first + it->second.size) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

// The device whose queue `s` is (0: the current device's null stream), or -1.
int stream_device(hipStream_t s) {
  if (!s) return t_device;
  for (auto& p : st().streams)
    if (p.get() == s) return s->device;
  return -1;
}

bool known_event(hipEvent_t e) {
  for (auto& p : st().events)
    if (p.get() == e) return true;
  return false;
}

// Registers [p, p + size) as memory of `device` (-1: pinned, every device's).
void track(void* p, Alloc a) {
  std::string name = a.ipc ? "a peer's memory (hipIpcOpenMemHandle)" : a.device < 0 ? "pinned host memory" : "hipMalloc memory";
  for (int d = 0; d < kDevices; ++d)
    if (a.device < 0 || d == a.device) st().devices[d].memory.add(reinterpret_cast<uint64_t>(p), std::max<size_t>(a.size, 1), name);
  if (!a.ipc) st().live += a.size;
  st().allocs[reinterpret_cast<uintptr_t>(p)] = a;
}

hipError_t allocate(void** out, size_t size, int device) {
  if (!out) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  if (device >= 0 && st().oom) return hipErrorOutOfMemory;
  size_t bytes = (std::max<size_t>(size, 1) + 4095) / 4096 * 4096;
  Alloc a{size, device};
  void* p = nullptr;
  if (device >= 0) {  // a memfd, mapped shared: exportable to another process
    a.fd = memfd_create("fake-hip", MFD_CLOEXEC);
    if (a.fd < 0 || ftruncate(a.fd, off_t(bytes)) != 0) {
      if (a.fd >= 0) close(a.fd);
      return hipErrorOutOfMemory;
    }
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
    if (p == MAP_FAILED) {
      close(a.fd);
      return hipErrorOutOfMemory;
    }
    a.mapped = bytes;
  } else {
    p = std::aligned_alloc(256, bytes);
    if (!p) return hipErrorOutOfMemory;
  }
  track(p, a);
  *out = p;
  return hipSuccess;
}

void untrack(std::map<uintptr_t, Alloc>::iterator it) {
  void* p = reinterpret_cast<void*>(it->first);
  const Alloc& a = it->second;
  for (int d = 0; d < kDevices; ++d)
    if (a.device < 0 || d == a.device) st().devices[d].memory.remove(it->first);
  if (!a.ipc) st().live -= a.size;
  if (a.mapped) munmap(p, a.mapped);
  else std::free(p);
  if (a.fd >= 0) close(a.fd);
  st().allocs.erase(it);
}

hipError_t release(void* p, bool host) {
  if (!p) return hipSuccess;
  std::lock_guard lock(st().mu);
  auto it = st().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st().allocs.end() || it->second.ipc || (it->second.device < 0) != host) return hipErrorInvalidValue;
  untrack(it);
  return hipSuccess;
}

// Bytes an HSA code object occupies: hipModuleLoadData is given no size, so it is read from
// the ELF header (the section headers and the program headers' file ranges).
size_t elf_size(const void* image) {
  const auto* b = static_cast<const unsigned char*>(image);
  if (std::memcmp(b, "\x7f" "ELF", 4) != 0 || b[4] != 2) return 0;
  auto u16 = [&](size_t o) { uint16_t v; std::memcpy(&v, b + o, 2); return size_t(v); };
  auto u64 = [&](size_t o) { uint64_t v; std::memcpy(&v, b + o, 8); return size_t(v); };
  size_t end = u64(0x28) + u16(0x3c) * u16(0x3a);  // e_shoff + e_shnum * e_shentsize
  size_t phoff = u64(0x20), phnum = u16(0x38), phentsize = u16(0x36);
  end = std::max(end, phoff + phnum * phentsize);
  for (size_t i = 0; i < phnum; ++i) {
    size_t ph = phoff + i * phentsize;
    end = std::max(end, u64(ph + 0x08) + u64(ph + 0x20));  // p_offset + p_filesz
  }
  return end;
}

}  // namespace

// ---- control interface (fake_hip.hpp) ------------------------------------------------------

FAKE_API void fakehip_reset(void) {
  std::lock_guard lock(st().mu);
  st().counts.clear();
  st().last_cu_mask.clear();
  st().last_grid_x = 0;
  st().last_launch_stream = nullptr;
  st().oom = st().no_stream_device = st().rocm6 = false;
}

FAKE_API int fakehip_inject(const char* what) {
  std::lock_guard lock(st().mu);
  std::string w = what ? what : "";
  if (w == "oom") st().oom = true;
  else if (w == "no_stream_device") st().no_stream_device = true;
  else if (w == "rocm6") st().rocm6 = true;
  else return 0;
  return 1;
}

FAKE_API int fakehip_count(const char* name) {
  std::lock_guard lock(st().mu);
  auto it = st().counts.find(name ? name : "");
  return it == st().counts.end() ? 0 : it->second;
}

FAKE_API int fakehip_last_cu_mask(uint32_t* out, int cap) {
  std::lock_guard lock(st().mu);
  int n = int(st().last_cu_mask.size());
  for (int i = 0; i < std::min(n, cap); ++i) out[i] = st().last_cu_mask[size_t(i)];
  return n;
}

FAKE_API unsigned fakehip_last_grid_x(void) {
  std::lock_guard lock(st().mu);
  return st().last_grid_x;
}

FAKE_API void* fakehip_last_launch_stream(void) {
  std::lock_guard lock(st().mu);
  return st().last_launch_stream;
}

FAKE_API size_t fakehip_live_bytes(void) {
  std::lock_guard lock(st().mu);
  return st().live;
}

// ---- errors, devices ----------------------------------------------------------------------

FAKE_API const char* hipGetErrorName(hipError_t e) {
  switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorNotInitialized: return "hipErrorNotInitialized";
    case hipErrorInvalidDevicePointer: return "hipErrorInvalidDevicePointer";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidImage: return "hipErrorInvalidImage";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorNotSupported: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
  }
}

FAKE_API const char* hipGetErrorString(hipError_t e) {
  if (e == hipErrorLaunchFailure && !t_launch_failure.empty()) return t_launch_failure.c_str();
  return e == hipSuccess ? "no error" : "fake HIP runtime error";
}

FAKE_API hipError_t hipInit(unsigned int flags) {
  count("hipInit");
  if (flags != 0) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  st().initialised = true;
  return hipSuccess;
}

FAKE_API hipError_t hipDriverGetVersion(int* v) {
  if (!v) return hipErrorInvalidValue;
  *v = HIP_VERSION;
  return hipSuccess;
}

FAKE_API hipError_t hipRuntimeGetVersion(int* v) {
  if (!v) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  *v = st().rocm6 ? 60000000 : HIP_VERSION;
  return hipSuccess;
}

FAKE_API hipError_t hipGetDeviceCount(int* n) {
  if (!n) return hipErrorInvalidValue;
  if (!st().initialised) return hipErrorNotInitialized;
  *n = kDevices;
  return hipSuccess;
}

FAKE_API hipError_t hipSetDevice(int d) {
  if (d < 0 || d >= kDevices) return hipErrorInvalidDevice;
  t_device = d;
  return hipSuccess;
}

FAKE_API hipError_t hipDeviceGetName(char* name, int len, hipDevice_t d) {
  if (!name || len <= 0) return hipErrorInvalidValue;
  if (d < 0 || d >= kDevices) return hipErrorInvalidDevice;
  std::snprintf(name, size_t(len), "%s", kModels[d].name);
  return hipSuccess;
}

FAKE_API hipError_t hipDeviceGetAttribute(int* v, hipDeviceAttribute_t a, int d) {
  if (!v) return hipErrorInvalidValue;
  if (d < 0 || d >= kDevices) return hipErrorInvalidDevice;
  const Model& m = kModels[d];
  switch (a) {
    case hipDeviceAttributeMultiprocessorCount: *v = m.compute_units; break;
    case hipDeviceAttributeWarpSize: *v = 64; break;
    case hipDeviceAttributeMaxSharedMemoryPerBlock: *v = kLds; break;
    case hipDeviceAttributeMaxThreadsPerBlock: *v = 1024; break;
    case hipDeviceAttributeClockRate: *v = m.clock_khz; break;
    case hipDeviceAttributeMemoryClockRate: *v = m.memory_clock_khz; break;
    case hipDeviceAttributeMemoryBusWidth: *v = m.bus_bits; break;
    case hipDeviceAttributeL2CacheSize: *v = m.l2_bytes; break;
    case hipDeviceAttributePciDomainID: *v = 0; break;
    case hipDeviceAttributePciBusId: *v = 0x10 + d; break;
    case hipDeviceAttributePciDeviceId: *v = 0; break;
    default: return hipErrorInvalidValue;
  }
  return hipSuccess;
}

FAKE_API hipError_t hipDeviceTotalMem(size_t* bytes, hipDevice_t d) {
  if (!bytes) return hipErrorInvalidValue;
  if (d < 0 || d >= kDevices) return hipErrorInvalidDevice;
  *bytes = size_t(kModels[d].memory_bytes);
  return hipSuccess;
}

// ROCm 6 exports the HIP 5 layout of hipDeviceProp_t under this name (hip_symbols.cpp).
FAKE_API hipError_t hipGetDevicePropertiesR0000(hipDeviceProp_t* p, int d) {
  if (!p) return hipErrorInvalidValue;
  if (d < 0 || d >= kDevices) return hipErrorInvalidDevice;
  std::memset(p, 0, sizeof *p);
  const Model& m = kModels[d];
  std::snprintf(p->name, sizeof p->name, "%s", m.name);
  std::snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", m.gcn_arch_name);
  p->totalGlobalMem = size_t(m.memory_bytes);
  p->warpSize = 64;
  p->multiProcessorCount = m.compute_units;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = kLds;
  return hipSuccess;
}

FAKE_API hipError_t hipDeviceSynchronize(void) { return hipSuccess; }  // work runs when queued

// ---- memory -------------------------------------------------------------------------------

FAKE_API hipError_t hipMalloc(void** p, size_t size) {
  count("hipMalloc");
  return allocate(p, size, t_device);
}

FAKE_API hipError_t hipFree(void* p) {
  count("hipFree");
  return release(p, false);
}

FAKE_API hipError_t hipHostMalloc(void** p, size_t size, unsigned int) { return allocate(p, size, -1); }

FAKE_API hipError_t hipHostFree(void* p) { return release(p, true); }

// The allocation holding dptr, as HIP answers it (hipErrorInvalidValue for memory it does not
// know); imports check that their whole range lies in it.
FAKE_API hipError_t hipMemGetAddressRange(hipDeviceptr_t* pbase, size_t* psize, hipDeviceptr_t dptr) {
  count("hipMemGetAddressRange");
  if (!pbase || !psize) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  uintptr_t base = 0;
  const Alloc* al = find(dptr, 1, &base);
  if (!al) return hipErrorInvalidValue;
  *pbase = reinterpret_cast<hipDeviceptr_t>(base);
  *psize = al->size;
  return hipSuccess;
}

FAKE_API hipError_t hipPointerGetAttributes(hipPointerAttribute_t* a, const void* p) {
  count("hipPointerGetAttributes");
  if (!a) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  uintptr_t base = 0;
  const Alloc* al = find(p, 1, &base);
  if (!al) return hipErrorInvalidValue;  // as HIP 5 answers for memory it does not know
  std::memset(a, 0, sizeof *a);
  // HIP 5: Host 0, Device 1. ROCm 6: Unregistered 0, Host 1, Device 2.
  int type = al->device < 0 ? 0 : 1;
  if (st().rocm6) type += 1;
  a->memoryType = static_cast<hipMemoryType>(type);
  a->device = al->device < 0 ? t_device : al->device;
  a->devicePointer = const_cast<void*>(p);
  a->hostPointer = al->device < 0 ? const_cast<void*>(p) : nullptr;
  return hipSuccess;
}

// IPC: the handle names the owner's pid and memfd; the importer maps /proc/<pid>/fd/<fd>.
FAKE_API hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t* h, void* p) {
  count("hipIpcGetMemHandle");
  if (!h) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  auto it = st().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st().allocs.end() || it->second.fd < 0) return hipErrorInvalidValue;  // not a hipMalloc base
  IpcHandle x{kIpcMagic, int32_t(getpid()), it->second.fd, it->second.size};
  std::memset(h, 0, sizeof *h);
  std::memcpy(h->reserved, &x, sizeof x);
  return hipSuccess;
}

FAKE_API hipError_t hipIpcOpenMemHandle(void** out, hipIpcMemHandle_t h, unsigned int) {
  count("hipIpcOpenMemHandle");
  if (!out) return hipErrorInvalidValue;
  IpcHandle x;
  std::memcpy(&x, h.reserved, sizeof x);
  if (x.magic != kIpcMagic) return hipErrorInvalidValue;
  if (x.pid == int32_t(getpid())) return hipErrorInvalidContext;  // HIP, like CUDA, maps no handle of its own
  std::string path = "/proc/" + std::to_string(x.pid) + "/fd/" + std::to_string(x.fd);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return hipErrorInvalidValue;  // the owner has freed it, or has gone
  struct stat sb {};
  size_t bytes = (std::max<size_t>(x.size, 1) + 4095) / 4096 * 4096;
  void* p = fstat(fd, &sb) == 0 && size_t(sb.st_size) == bytes
                ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);  // the mapping keeps the memory
  if (p == MAP_FAILED) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  Alloc a{size_t(x.size), t_device, bytes};
  a.ipc = true;
  track(p, a);
  *out = p;
  return hipSuccess;
}

FAKE_API hipError_t hipIpcCloseMemHandle(void* p) {
  count("hipIpcCloseMemHandle");
  std::lock_guard lock(st().mu);
  auto it = st().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == st().allocs.end() || !it->second.ipc) return hipErrorInvalidValue;
  untrack(it);
  return hipSuccess;
}

FAKE_API hipError_t hipMemcpyAsync(void* dst, const void* src, size_t size, hipMemcpyKind kind, hipStream_t s) {
  count("hipMemcpyAsync");
  if (size == 0) return hipSuccess;
  std::lock_guard lock(st().mu);
  int dev = stream_device(s);
  if (dev < 0) return hipErrorInvalidHandle;
  // A strict driver: the device side of a copy must lie in one live allocation.
  bool from_device = kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice;
  bool to_device = kind == hipMemcpyHostToDevice || kind == hipMemcpyDeviceToDevice;
  if ((from_device && !find(src, size)) || (to_device && !find(dst, size))) return hipErrorInvalidValue;
  std::lock_guard mem(st().devices[dev].memory.mutex());
  std::memmove(dst, src, size);
  return hipSuccess;
}

namespace {
template <typename T>
hipError_t fill(hipDeviceptr_t dst, T value, size_t count_, hipStream_t s) {
  std::lock_guard lock(st().mu);
  int dev = stream_device(s);
  if (dev < 0) return hipErrorInvalidHandle;
  if (count_ == 0) return hipSuccess;
  if (!find(dst, count_ * sizeof(T))) return hipErrorInvalidValue;
  std::lock_guard mem(st().devices[dev].memory.mutex());
  auto* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < count_; ++i) std::memcpy(p + i * sizeof(T), &value, sizeof(T));
  return hipSuccess;
}
}  // namespace

FAKE_API hipError_t hipMemsetD8Async(hipDeviceptr_t d, unsigned char v, size_t n, hipStream_t s) { return fill(d, v, n, s); }
FAKE_API hipError_t hipMemsetD16Async(hipDeviceptr_t d, unsigned short v, size_t n, hipStream_t s) { return fill(d, v, n, s); }
FAKE_API hipError_t hipMemsetD32Async(hipDeviceptr_t d, int v, size_t n, hipStream_t s) { return fill(d, v, n, s); }

// ---- streams and events -------------------------------------------------------------------

namespace {
hipError_t new_stream(hipStream_t* out, std::vector<uint32_t> mask) {
  if (!out) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  st().streams.push_back(std::make_unique<ihipStream_t>(ihipStream_t{t_device, std::move(mask)}));
  *out = st().streams.back().get();
  return hipSuccess;
}
}  // namespace

FAKE_API hipError_t hipStreamCreateWithFlags(hipStream_t* out, unsigned int) {
  count("hipStreamCreateWithFlags");
  return new_stream(out, {});
}

// A mask must name at least one CU and none past the device's count (as ROCm refuses).
FAKE_API hipError_t hipExtStreamCreateWithCUMask(hipStream_t* out, uint32_t words, const uint32_t* mask) {
  count("hipExtStreamCreateWithCUMask");
  if (!mask || words == 0) return hipErrorInvalidValue;
  int cus = kModels[t_device].compute_units, set = 0;
  for (uint32_t w = 0; w < words; ++w)
    for (int b = 0; b < 32; ++b)
      if (mask[w] >> b & 1u) {
        if (int(w) * 32 + b >= cus) return hipErrorInvalidValue;
        ++set;
      }
  if (set == 0) return hipErrorInvalidValue;
  {
    std::lock_guard lock(st().mu);
    st().last_cu_mask.assign(mask, mask + words);
  }
  return new_stream(out, std::vector<uint32_t>(mask, mask + words));
}

FAKE_API hipError_t hipStreamDestroy(hipStream_t s) {
  count("hipStreamDestroy");
  std::lock_guard lock(st().mu);
  auto& v = st().streams;
  auto it = std::find_if(v.begin(), v.end(), [&](auto& p) { return p.get() == s; });
  if (it == v.end()) return hipErrorInvalidHandle;
  v.erase(it);
  return hipSuccess;
}

namespace {
// Launches run when they are made, so a known stream has no pending work.
hipError_t stream_done(hipStream_t s) {
  std::lock_guard lock(st().mu);
  return stream_device(s) < 0 ? hipErrorInvalidHandle : hipSuccess;
}
}  // namespace

FAKE_API hipError_t hipStreamSynchronize(hipStream_t s) {
  count("hipStreamSynchronize");  // a host wait: the Python test checks that a queued call makes none
  return stream_done(s);
}

FAKE_API hipError_t hipStreamQuery(hipStream_t s) { return stream_done(s); }

// ROCm 6's entry point (not in HIP 5.2's header): the device a stream belongs to.
FAKE_API hipError_t hipStreamGetDevice(hipStream_t s, hipDevice_t* device) {
  count("hipStreamGetDevice");
  std::lock_guard lock(st().mu);
  if (st().no_stream_device) return hipErrorNotSupported;
  if (!device) return hipErrorInvalidValue;
  int d = stream_device(s);
  if (d < 0) return hipErrorInvalidHandle;
  *device = d;
  return hipSuccess;
}

FAKE_API hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned int flags) {
  std::lock_guard lock(st().mu);
  if (stream_device(s) < 0 || !known_event(e) || flags != 0) return hipErrorInvalidHandle;
  return hipSuccess;  // the event's work is done already
}

FAKE_API hipError_t hipEventCreateWithFlags(hipEvent_t* out, unsigned int flags) {
  if (!out) return hipErrorInvalidValue;
  std::lock_guard lock(st().mu);
  auto e = std::make_unique<ihipEvent_t>();
  e->device = t_device;
  e->timing = (flags & hipEventDisableTiming) == 0;
  st().events.push_back(std::move(e));
  *out = st().events.back().get();
  return hipSuccess;
}

FAKE_API hipError_t hipEventDestroy(hipEvent_t e) {
  std::lock_guard lock(st().mu);
  auto& v = st().events;
  auto it = std::find_if(v.begin(), v.end(), [&](auto& p) { return p.get() == e; });
  if (it == v.end()) return hipErrorInvalidHandle;
  v.erase(it);
  return hipSuccess;
}

FAKE_API hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
  std::lock_guard lock(st().mu);
  if (!known_event(e) || stream_device(s) < 0) return hipErrorInvalidHandle;
  e->recorded = true;
  e->when = std::chrono::steady_clock::now();
  return hipSuccess;
}

FAKE_API hipError_t hipEventQuery(hipEvent_t e) {
  std::lock_guard lock(st().mu);
  return known_event(e) ? hipSuccess : hipErrorInvalidHandle;
}

FAKE_API hipError_t hipEventSynchronize(hipEvent_t e) { return hipEventQuery(e); }

FAKE_API hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) {
  std::lock_guard lock(st().mu);
  if (!ms || !known_event(a) || !known_event(b)) return hipErrorInvalidHandle;
  if (!a->timing || !b->timing || !a->recorded || !b->recorded) return hipErrorInvalidHandle;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return hipSuccess;
}

// ---- modules and launches -----------------------------------------------------------------

FAKE_API hipError_t hipModuleLoadData(hipModule_t* out, const void* image) {
  count("hipModuleLoadData");
  if (!out || !image) return hipErrorInvalidValue;
  size_t size = elf_size(image);
  if (size == 0) return hipErrorInvalidImage;
  auto m = std::make_unique<ihipModule_t>();
  m->device = t_device;
  std::string why;
  if (!halcyon::hsaco::parse(image, size, &m->code, &why)) return hipErrorInvalidImage;
  if (m->code.arch != kModels[t_device].arch) return hipErrorInvalidImage;  // HIP: no kernel image for the device
  m->image = m->code.load_image();
  std::lock_guard lock(st().mu);
  st().modules.push_back(std::move(m));
  *out = st().modules.back().get();
  return hipSuccess;
}

FAKE_API hipError_t hipModuleUnload(hipModule_t m) {
  std::lock_guard lock(st().mu);
  auto& v = st().modules;
  auto it = std::find_if(v.begin(), v.end(), [&](auto& p) { return p.get() == m; });
  if (it == v.end()) return hipErrorInvalidHandle;
  v.erase(it);
  return hipSuccess;
}

FAKE_API hipError_t hipModuleGetFunction(hipFunction_t* out, hipModule_t m, const char* name) {
  if (!out || !m || !name) return hipErrorInvalidValue;
  const halcyon::hsaco::Kernel* k = m->code.find(name);
  if (!k) return hipErrorNotFound;
  std::lock_guard lock(st().mu);
  auto& f = m->functions[name];
  if (!f) {
    Device& d = st().devices[m->device];
    try {
      if (!d.decoder) d.decoder = std::make_unique<sim::Decoder>(kModels[m->device].arch);
      f = std::make_unique<ihipModuleSymbol_t>(ihipModuleSymbol_t{m, std::make_unique<sim::Program>(*d.decoder, m->image, *k)});
    } catch (const sim::SimError&) {
      m->functions.erase(name);
      return hipErrorInvalidImage;
    }
  }
  *out = f.get();
  return hipSuccess;
}

// Only the `extra` form the backend uses (one argument buffer); kernelParams is not supported.
FAKE_API hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                          unsigned by, unsigned bz, unsigned lds, hipStream_t s, void** params,
                                          void** extra) {
  count("hipModuleLaunchKernel");
  if (!f || params) return hipErrorInvalidValue;
  if (uint64_t(bx) * by * bz == 0 || uint64_t(bx) * by * bz > 1024 || lds > unsigned(kLds)) return hipErrorInvalidValue;
  sim::LaunchParams p{};
  p.grid[0] = gx, p.grid[1] = gy, p.grid[2] = gz;
  p.block[0] = bx, p.block[1] = by, p.block[2] = bz;
  p.dynamic_lds = lds;
  p.code_base = reinterpret_cast<uint64_t>(f->module->image.data());
  for (int i = 0; extra && extra[i] != HIP_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_POINTER) p.args = extra[i + 1];
    else if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_SIZE) p.args_size = *static_cast<size_t*>(extra[i + 1]);
    else return hipErrorInvalidValue;
  }
  int dev;
  {
    std::lock_guard lock(st().mu);
    dev = stream_device(s);
    st().last_grid_x = gx;
    st().last_launch_stream = s;
  }
  if (dev < 0) return hipErrorInvalidHandle;
  if (dev != f->module->device) return hipErrorInvalidDevice;  // a module of another device
  try {
    sim::run_kernel(*f->program, st().devices[dev].memory, p);
  } catch (const sim::SimError& e) {
    t_launch_failure = std::string("the kernel faulted in amdgpu-sim: ") + e.what();
    return hipErrorLaunchFailure;
  }
  return hipSuccess;
}
