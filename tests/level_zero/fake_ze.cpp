// A fake Level Zero driver for the tests: a shared library exporting the ze* entry points the
// backend uses (backends/level_zero/ze_symbols.hpp), handed to it through the backend option
// ze.loader. It records every call, checks what a strict driver checks (handles, pointer
// ranges against live allocations, argument sizes against the module's own parameter types),
// and runs kernels for real: the SPIR-V module is translated back to LLVM bitcode by
// llvm-spirv-15 and built by pocl (Debian's CPU OpenCL, LLVM 15) as SPIR; memory is pocl's
// fine-grained SVM, so device addresses are plain pointers both sides. Failures can be armed
// (fake_ze.hpp): a module build failure with a build log, out of device memory, a lost device.
//
// Built a second time with FAKEZE_SOURCE_DIR (halcyon_fake_ze_source), it runs each module as
// the OpenCL C source it came from instead, built by pocl itself.
//
// The default build also has the driver's default context (zeDriverGetDefaultContext, Level Zero
// 1.14), which the backend then runs in; the source build stands for an older driver without it,
// so cts.ze_fake_source runs the backend in a context of its own (zeContextCreate). Allocations
// remember their context, kind and device: zeMemGetAllocProperties answers as a driver does,
// ZE_MEMORY_TYPE_UNKNOWN for memory of another context.
//
// Command lists are tracked: appending to a destroyed or a regular (non-immediate) list is an
// error, and each list counts its commands (fakeze_list_appends), so a test sees whose list the
// backend's work went to (hal_stream_import). Two threads appending to one list at once, which
// Level Zero forbids, are caught and counted (fakeze_concurrent_appends).
//
// Lists also remember whether they were made in order (ZE_COMMAND_QUEUE_FLAG_IN_ORDER, which the
// default build has as a 1.14 driver and the source build refuses as a 1.4 one): a command that
// relies on an order the list never asked for is counted (fakeze_unordered_appends).
//
// Simplifications, said plainly: one root device with two sub-devices; every command runs when
// it is appended, so a list runs in order whatever it asked for (the count above stands in for
// a driver that would not), events are signalled at once (unless "slow_events" is armed: then an
// event is done only once the host waits for it), and a wait for an event not yet signalled
// waits (up to 2 s) for another thread's append to signal it; the global timestamp is the host's
// steady clock in ns.
#include <level_zero/ze_api.h>

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fake_ze.hpp"
#include "spirv_reader.hpp"

#define FAKE_API extern "C" __attribute__((visibility("default"))) ze_result_t

struct _ze_driver_handle_t {};
struct _ze_device_handle_t {
  int id;  // 0 the root device, 1 + i sub-device i
};
struct _ze_context_handle_t {};
struct _ze_command_list_handle_t {
  _ze_device_handle_t* device;
  ze_context_handle_t context;
  bool immediate;
  int appended = 0;   // commands appended (fakeze_list_appends)
  int appending = 0;  // appends in progress (Appending): more than one is a concurrent append
  bool in_order = false;  // made with ZE_COMMAND_QUEUE_FLAG_IN_ORDER
  int unfenced = 0;       // commands appended since the last barrier (append_to)
};
struct _ze_event_pool_handle_t {
  uint32_t count;
};
struct _ze_event_handle_t {
  bool signalled = false;
  bool pending = false;  // "slow_events": its command is done once the host waits for it
};
struct _ze_module_build_log_handle_t {
  std::string text;
};
struct _ze_module_handle_t {
  halcyon::spirv::Module spirv;
  cl_program program = nullptr;
};
struct _ze_kernel_handle_t {
  _ze_module_handle_t* module;
  const halcyon::spirv::Kernel* spirv;
  cl_kernel kernel = nullptr;
  size_t group[3] = {1, 1, 1};
  std::vector<bool> set;
};

namespace {

constexpr uint32_t kSlices = 1, kSubslices = 8, kEusPerSubslice = 8;  // 64 EUs, 32 per tile
constexpr uint64_t kMemoryBytes = 256ull << 20;
constexpr uint32_t kTiles = 2;
// The Level Zero version the driver reports: the default build has the entry points of 1.14 (the
// default context) and so the in-order lists of 1.7; the source build stands for a 1.4 driver.
// ZE_COMMAND_QUEUE_FLAG_IN_ORDER (1.7) by value: Debian's 1.4 headers lack it.
#ifdef FAKEZE_SOURCE_DIR
constexpr uint32_t kApiVersion = ZE_MAKE_VERSION(1, 4);
#else
constexpr uint32_t kApiVersion = ZE_MAKE_VERSION(1, 14);
#endif
constexpr ze_command_queue_flags_t kQueueFlagInOrder = 1u << 1;

struct State {
  std::mutex mu;
  bool initialised = false;
  cl_context cl = nullptr;
  cl_device_id device = nullptr;
  cl_command_queue queue = nullptr;
  _ze_driver_handle_t driver;
  _ze_device_handle_t root{0};
  _ze_device_handle_t tiles[kTiles] = {{1}, {2}};
  std::map<std::string, int> calls;
  struct Allocation {
    size_t size;
    ze_memory_type_t type;
    ze_device_handle_t device;  // NULL for host memory
    ze_context_handle_t context;
  };
  std::map<uintptr_t, Allocation> allocations;  // pointer handed out -> what it is
  _ze_context_handle_t default_context;     // the driver's, never destroyed
  std::map<uintptr_t, void*> bases;         // pointer handed out -> what clSVMAlloc returned
  size_t device_bytes = 0;
  bool fail_build = false, oom = false, lost = false, slow_events = false, no_list_queries = false;
  bool no_in_order = false;  // refuse ZE_COMMAND_QUEUE_FLAG_IN_ORDER, as a driver that lacks it
  bool slow_appends = false;    // each append keeps its list in use a while (Appending)
  int concurrent_appends = 0;   // appends that began while another was in progress on that list
  int unordered_appends = 0;    // commands that a driver could start before the one before completes
  int last_list_device = -1;
  std::set<ze_command_list_handle_t> lists;  // live command lists (a destroyed one is refused)
  uint32_t tiles_exposed = kTiles;
};

State& state() {
  static State* s = new State;  // never destroyed: the backend may call during exit
  return *s;
}

// Every entry point starts with this: counts the call and holds the lock (a wait for an event
// releases it meanwhile: await).
#define FAKE_ENTER(name)            \
  State& st = state();              \
  std::unique_lock lock_(st.mu);    \
  ++st.calls[name]

bool known_device(const State& st, ze_device_handle_t d) {
  if (d == &st.root) return true;
  for (auto& t : st.tiles)
    if (d == &t) return true;
  return false;
}

// Whether [p, p + n) lies in one live allocation (n = 0: p within or at its end).
bool in_allocation(const State& st, const void* p, size_t n) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = st.allocations.upper_bound(a);
  if (it == st.allocations.begin()) return false;
  --it;
  return a >= it->first && a + n <= it->first + it->second.size;
}
// A pointer no allocation contains is host memory; one an allocation contains must fit in it.
bool range_ok(const State& st, const void* p, size_t n) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = st.allocations.upper_bound(a);
  if (it == st.allocations.begin()) return true;
  --it;
  if (a >= it->first + it->second.size) return true;  // past this allocation: host memory
  return a + n <= it->first + it->second.size;
}

// Whether event e is signalled or will be once the host waits ("slow_events"). One that is
// not may still be signalled by another thread's append (a record on another stream, between
// its reset and its signal): a driver's wait blocks for that, so the fake waits too, the driver
// lock released, for up to 2 s; after that nothing will signal it and the wait would hang.
bool await(std::unique_lock<std::mutex>& lock, ze_event_handle_t e) {
  for (int ms = 0; ms < 2000 && !(e->signalled || e->pending); ++ms) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    lock.lock();
  }
  return e->signalled || e->pending;
}

ze_result_t wait_ok(State& st, std::unique_lock<std::mutex>& lock, uint32_t n, ze_event_handle_t* events) {
  if (st.lost) return ZE_RESULT_ERROR_DEVICE_LOST;
  for (uint32_t i = 0; i < n; ++i)
    if (!events || !events[i] || !await(lock, events[i])) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // would hang
  return ZE_RESULT_SUCCESS;
}

void signal(ze_event_handle_t e) {
  if (!e) return;
  if (state().slow_events) e->pending = true;
  else e->signalled = true;
}

ze_result_t alloc(State& st, size_t size, size_t alignment, ze_memory_type_t type, ze_device_handle_t dev,
                  ze_context_handle_t ctx, void** out) {
  const bool device = type != ZE_MEMORY_TYPE_HOST;
  if (!out || size == 0) return ZE_RESULT_ERROR_UNSUPPORTED_SIZE;
  if (alignment & (alignment - 1)) return ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT;
  if (device && (st.oom || st.device_bytes + size > kMemoryBytes)) return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  // pocl aligns SVM to at most 128 bytes: over-allocate and align by hand beyond that.
  const size_t align = std::max<size_t>(alignment, 128);
  void* base = clSVMAlloc(st.cl, CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, size + align - 128, 128);
  if (!base) return device ? ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY : ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  void* p = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + align - 1) / align * align);
  st.bases[reinterpret_cast<uintptr_t>(p)] = base;
  st.allocations[reinterpret_cast<uintptr_t>(p)] = {size, type, dev, ctx};
  if (device) st.device_bytes += size;
  *out = p;
  return ZE_RESULT_SUCCESS;
}

std::string cl_build_log(State& st, cl_program p) {
  size_t n = 0;
  clGetProgramBuildInfo(p, st.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
  std::string log(n, '\0');
  if (n) clGetProgramBuildInfo(p, st.device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  return log;
}

// SPIR-V -> LLVM 15 bitcode (llvm-spirv-15 -r) -> a pocl program built as SPIR. On failure
// *log says why.
[[maybe_unused]] cl_program build(State& st, const uint8_t* data, size_t size, std::string* log) {
  char dir[] = "/tmp/fake_ze.XXXXXX";
  if (!mkdtemp(dir)) {
    *log = "fake ze: cannot make a temporary folder";
    return nullptr;
  }
  std::string spv = std::string(dir) + "/m.spv", bc = std::string(dir) + "/m.bc", out = std::string(dir) + "/log";
  std::ofstream(spv, std::ios::binary).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  std::string cmd = std::string("'" FAKEZE_LLVM_SPIRV "' -r '") + spv + "' -o '" + bc + "' >'" + out + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream bin(bc, std::ios::binary);
  std::string bits((std::istreambuf_iterator<char>(bin)), std::istreambuf_iterator<char>());
  std::ifstream tlog(out);
  std::string translator((std::istreambuf_iterator<char>(tlog)), std::istreambuf_iterator<char>());
  for (const std::string& f : {spv, bc, out}) unlink(f.c_str());
  rmdir(dir);
  if (rc != 0 || bits.empty()) {
    *log = "fake ze: llvm-spirv -r refused the module: " + translator;
    return nullptr;
  }
  const size_t n = bits.size();
  const auto* p = reinterpret_cast<const unsigned char*>(bits.data());
  cl_int status = 0, err = 0;
  cl_program prog = clCreateProgramWithBinary(st.cl, 1, &st.device, &n, &p, &status, &err);
  if (err != CL_SUCCESS) {
    *log = "fake ze: pocl refused the bitcode (" + std::to_string(err) + ")";
    return nullptr;
  }
  if (clBuildProgram(prog, 1, &st.device, "-x spir -spir-std=1.2", nullptr, nullptr) != CL_SUCCESS) {
    *log = "fake ze: pocl build failed: " + cl_build_log(st, prog);
    clReleaseProgram(prog);
    return nullptr;
  }
  return prog;
}

#ifdef FAKEZE_SOURCE_DIR
// The source build of the fake (halcyon_fake_ze_source): the module is run as the OpenCL C it
// was compiled from, built by pocl's own front end: the .cl file of kernels/spirv/src whose
// program has every kernel the SPIR-V module declares. This checks the sources apart from the
// clang-15 + llvm-spirv-15 translation (which the default build runs).
cl_program build_from_source(State& st, const halcyon::spirv::Module& m, std::string* log) {
  std::vector<std::string> files;
  if (DIR* d = opendir(FAKEZE_SOURCE_DIR)) {
    while (dirent* e = readdir(d))
      if (std::string n = e->d_name; n.size() > 3 && n.ends_with(".cl")) files.push_back(n);
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    std::ifstream in(std::string(FAKEZE_SOURCE_DIR) + "/" + f);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const char* src = text.c_str();
    cl_int err = 0;
    cl_program prog = clCreateProgramWithSource(st.cl, 1, &src, nullptr, &err);
    if (err != CL_SUCCESS) continue;
    if (clBuildProgram(prog, 1, &st.device, "-cl-std=CL1.2 -I " FAKEZE_SOURCE_DIR, nullptr, nullptr) != CL_SUCCESS) {
      *log += f + ": " + cl_build_log(st, prog) + "\n";
      clReleaseProgram(prog);
      continue;
    }
    bool all = true;
    for (const auto& k : m.kernels) {
      cl_kernel kernel = clCreateKernel(prog, k.name.c_str(), &err);
      if (err != CL_SUCCESS) all = false;
      else clReleaseKernel(kernel);
    }
    if (all) return prog;
    clReleaseProgram(prog);
  }
  *log += "fake ze: no OpenCL C file of " FAKEZE_SOURCE_DIR " has every kernel of the module";
  return nullptr;
}
#endif

}  // namespace

// ---- control (fake_ze.hpp) ------------------------------------------------------------------

extern "C" __attribute__((visibility("default"))) void fakeze_reset(void) {
  State& st = state();
  std::lock_guard lock(st.mu);
  st.calls.clear();
  st.fail_build = st.oom = st.lost = st.slow_events = st.no_list_queries = st.slow_appends = false;
  st.no_in_order = false;
  st.concurrent_appends = st.unordered_appends = 0;
  st.last_list_device = -1;
  st.tiles_exposed = kTiles;
}

extern "C" __attribute__((visibility("default"))) int fakeze_inject(const char* what) {
  State& st = state();
  std::lock_guard lock(st.mu);
  std::string w = what ? what : "";
  if (w == "module_build") st.fail_build = true;
  else if (w == "oom") st.oom = true;
  else if (w == "device_lost") st.lost = true;
  else if (w == "slow_events") st.slow_events = true;
  else if (w == "no_list_queries") st.no_list_queries = true;
  else if (w == "slow_appends") st.slow_appends = true;
  else if (w == "no_in_order") st.no_in_order = true;
  else return 0;
  return 1;
}

extern "C" __attribute__((visibility("default"))) int fakeze_count(const char* name) {
  State& st = state();
  std::lock_guard lock(st.mu);
  auto it = st.calls.find(name ? name : "");
  return it == st.calls.end() ? 0 : it->second;
}

extern "C" __attribute__((visibility("default"))) int fakeze_last_list_device(void) {
  State& st = state();
  std::lock_guard lock(st.mu);
  return st.last_list_device;
}

extern "C" __attribute__((visibility("default"))) int fakeze_list_appends(void* list) {
  State& st = state();
  std::lock_guard lock(st.mu);
  auto l = static_cast<ze_command_list_handle_t>(list);
  return st.lists.count(l) ? l->appended : -1;
}

extern "C" __attribute__((visibility("default"))) int fakeze_list_in_order(void* list) {
  State& st = state();
  std::lock_guard lock(st.mu);
  auto l = static_cast<ze_command_list_handle_t>(list);
  return st.lists.count(l) ? int(l->in_order) : -1;
}

extern "C" __attribute__((visibility("default"))) int fakeze_unordered_appends(void) {
  State& st = state();
  std::lock_guard lock(st.mu);
  return st.unordered_appends;
}

extern "C" __attribute__((visibility("default"))) int fakeze_concurrent_appends(void) {
  State& st = state();
  std::lock_guard lock(st.mu);
  return st.concurrent_appends;
}

extern "C" __attribute__((visibility("default"))) void fakeze_set_tiles(int tiles) {
  State& st = state();
  std::lock_guard lock(st.mu);
  st.tiles_exposed = tiles >= int(kTiles) ? kTiles : 0;
}

extern "C" __attribute__((visibility("default"))) size_t fakeze_live_bytes(void) {
  State& st = state();
  std::lock_guard lock(st.mu);
  size_t n = 0;
  for (auto& [p, a] : st.allocations) n += a.size;
  return n;
}

// ---- driver and devices ---------------------------------------------------------------------

FAKE_API zeInit(ze_init_flags_t) {
  FAKE_ENTER("zeInit");
  if (st.initialised) return ZE_RESULT_SUCCESS;
  cl_platform_id platform = nullptr;
  cl_uint n = 0;
  if (clGetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &st.device, &n) != CL_SUCCESS || n == 0)
    return ZE_RESULT_ERROR_UNINITIALIZED;
  cl_int err = 0;
  st.cl = clCreateContext(nullptr, 1, &st.device, nullptr, nullptr, &err);
  if (err != CL_SUCCESS) return ZE_RESULT_ERROR_UNINITIALIZED;
  st.queue = clCreateCommandQueueWithProperties(st.cl, st.device, nullptr, &err);
  if (err != CL_SUCCESS) return ZE_RESULT_ERROR_UNINITIALIZED;
  st.initialised = true;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDriverGet(uint32_t* count, ze_driver_handle_t* drivers) {
  FAKE_ENTER("zeDriverGet");
  if (!st.initialised) return ZE_RESULT_ERROR_UNINITIALIZED;
  if (drivers && *count >= 1) drivers[0] = &st.driver;
  *count = 1;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDriverGetApiVersion(ze_driver_handle_t, ze_api_version_t* v) {
  FAKE_ENTER("zeDriverGetApiVersion");
  *v = ze_api_version_t(kApiVersion);
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDeviceGet(ze_driver_handle_t driver, uint32_t* count, ze_device_handle_t* devices) {
  FAKE_ENTER("zeDeviceGet");
  if (driver != &st.driver) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (devices && *count >= 1) devices[0] = &st.root;
  *count = 1;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDeviceGetSubDevices(ze_device_handle_t d, uint32_t* count, ze_device_handle_t* subs) {
  FAKE_ENTER("zeDeviceGetSubDevices");
  if (!known_device(st, d)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  uint32_t have = d == &st.root ? st.tiles_exposed : 0;
  if (subs)
    for (uint32_t i = 0; i < std::min(*count, have); ++i) subs[i] = &st.tiles[i];
  *count = have;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDeviceGetProperties(ze_device_handle_t d, ze_device_properties_t* p) {
  FAKE_ENTER("zeDeviceGetProperties");
  if (!known_device(st, d) || !p) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  const bool tile = d != &st.root;
  p->type = ZE_DEVICE_TYPE_GPU;
  p->vendorId = 0xffff;  // no real vendor: this is no Intel device
  p->deviceId = 0x0001;
  p->flags = tile ? ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE : 0;
  p->subdeviceId = tile ? uint32_t(d->id - 1) : 0;
  p->coreClockRate = 1000;
  p->maxMemAllocSize = kMemoryBytes;
  p->numThreadsPerEU = 8;
  p->physicalEUSimdWidth = 8;
  p->numEUsPerSubslice = kEusPerSubslice;
  p->numSubslicesPerSlice = tile ? kSubslices / kTiles : kSubslices;
  p->numSlices = kSlices;
  p->timerResolution = 1;  // ns per tick
  p->timestampValidBits = 64;
  p->kernelTimestampValidBits = 64;
  std::snprintf(p->name, sizeof p->name, "halcyon fake Level Zero GPU%s", tile ? " (tile)" : "");
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDeviceGetComputeProperties(ze_device_handle_t d, ze_device_compute_properties_t* p) {
  FAKE_ENTER("zeDeviceGetComputeProperties");
  if (!known_device(st, d) || !p) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  p->maxTotalGroupSize = 1024;
  p->maxGroupSizeX = p->maxGroupSizeY = p->maxGroupSizeZ = 1024;
  p->maxGroupCountX = p->maxGroupCountY = p->maxGroupCountZ = 1u << 30;
  p->maxSharedLocalMemory = 64 * 1024;
  p->numSubGroupSizes = 1;
  p->subGroupSizes[0] = 16;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDeviceGetMemoryProperties(ze_device_handle_t d, uint32_t* count, ze_device_memory_properties_t* p) {
  FAKE_ENTER("zeDeviceGetMemoryProperties");
  if (!known_device(st, d)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p && *count >= 1) {
    p->maxClockRate = 1000;  // MHz
    p->maxBusWidth = 512;    // bits: 64 GB/s
    p->totalSize = kMemoryBytes;
    std::snprintf(p->name, sizeof p->name, "HBM (fake)");
  }
  *count = 1;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDeviceGetCacheProperties(ze_device_handle_t d, uint32_t* count, ze_device_cache_properties_t* p) {
  FAKE_ENTER("zeDeviceGetCacheProperties");
  if (!known_device(st, d)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (p && *count >= 1) p->cacheSize = 4 << 20;
  *count = 1;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeDeviceGetCommandQueueGroupProperties(ze_device_handle_t d, uint32_t* count,
                                                 ze_command_queue_group_properties_t* p) {
  FAKE_ENTER("zeDeviceGetCommandQueueGroupProperties");
  if (!known_device(st, d)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  // Group 0: copy only (a blitter); group 1: compute, 4 engines (CCS).
  if (p && *count >= 2) {
    p[0].flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    p[0].numQueues = 1;
    p[1].flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE | ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
    p[1].numQueues = 4;
  }
  *count = 2;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeContextCreate(ze_driver_handle_t driver, const ze_context_desc_t*, ze_context_handle_t* out) {
  FAKE_ENTER("zeContextCreate");
  if (driver != &st.driver) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  *out = new _ze_context_handle_t;
  return ZE_RESULT_SUCCESS;
}

// ---- memory ---------------------------------------------------------------------------------

FAKE_API zeMemAllocDevice(ze_context_handle_t c, const ze_device_mem_alloc_desc_t*, size_t size, size_t alignment,
                          ze_device_handle_t d, void** out) {
  FAKE_ENTER("zeMemAllocDevice");
  if (!known_device(st, d) || !c) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return alloc(st, size, alignment, ZE_MEMORY_TYPE_DEVICE, d, c, out);
}

FAKE_API zeMemAllocHost(ze_context_handle_t c, const ze_host_mem_alloc_desc_t*, size_t size, size_t alignment,
                        void** out) {
  FAKE_ENTER("zeMemAllocHost");
  if (!c) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return alloc(st, size, alignment, ZE_MEMORY_TYPE_HOST, nullptr, c, out);
}

FAKE_API zeMemAllocShared(ze_context_handle_t c, const ze_device_mem_alloc_desc_t*, const ze_host_mem_alloc_desc_t*,
                          size_t size, size_t alignment, ze_device_handle_t d, void** out) {
  FAKE_ENTER("zeMemAllocShared");
  if (!c) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  return alloc(st, size, alignment, ZE_MEMORY_TYPE_SHARED, d, c, out);
}

// The allocation that holds p, if any, in context c (a pointer of another context is unknown
// there, as a driver says).
const State::Allocation* find_allocation(const State& st, ze_context_handle_t c, const void* p, uintptr_t* base) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = st.allocations.upper_bound(a);
  if (it == st.allocations.begin()) return nullptr;
  --it;
  if (a >= it->first + it->second.size || it->second.context != c) return nullptr;
  *base = it->first;
  return &it->second;
}

FAKE_API zeMemGetAllocProperties(ze_context_handle_t c, const void* p, ze_memory_allocation_properties_t* props,
                                 ze_device_handle_t* device) {
  FAKE_ENTER("zeMemGetAllocProperties");
  if (!c) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!props || props->stype != ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  uintptr_t base = 0;
  const State::Allocation* a = find_allocation(st, c, p, &base);
  props->type = a ? a->type : ZE_MEMORY_TYPE_UNKNOWN;
  props->id = base;
  props->pageSize = 4096;
  if (device) *device = a ? a->device : nullptr;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeMemGetAddressRange(ze_context_handle_t c, const void* p, void** base, size_t* size) {
  FAKE_ENTER("zeMemGetAddressRange");
  uintptr_t at = 0;
  const State::Allocation* a = find_allocation(st, c, p, &at);
  if (!a) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (base) *base = reinterpret_cast<void*>(at);
  if (size) *size = a->size;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeMemFree(ze_context_handle_t, void* p) {
  FAKE_ENTER("zeMemFree");
  auto it = st.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == st.allocations.end()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // a double or foreign free
  clSVMFree(st.cl, st.bases[it->first]);
  st.bases.erase(it->first);
  if (it->second.type != ZE_MEMORY_TYPE_HOST) st.device_bytes -= std::min(st.device_bytes, it->second.size);
  st.allocations.erase(it);
  return ZE_RESULT_SUCCESS;
}

// ---- command lists --------------------------------------------------------------------------

FAKE_API zeCommandListCreateImmediate(ze_context_handle_t c, ze_device_handle_t d, const ze_command_queue_desc_t* desc,
                                      ze_command_list_handle_t* out) {
  FAKE_ENTER("zeCommandListCreateImmediate");
  if (!c || !known_device(st, d) || !desc) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (desc->ordinal != 1) return ZE_RESULT_ERROR_INVALID_ARGUMENT;  // only group 1 computes
  // A flag the driver's version does not have is an unknown enumeration, as the validation
  // layer says (IN_ORDER is 1.7).
  const ze_command_queue_flags_t known =
      ZE_COMMAND_QUEUE_FLAG_EXPLICIT_ONLY |
      (kApiVersion >= ZE_MAKE_VERSION(1, 7) && !st.no_in_order ? kQueueFlagInOrder : 0);
  if (desc->flags & ~known) return ZE_RESULT_ERROR_INVALID_ENUMERATION;
  if (st.lost) return ZE_RESULT_ERROR_DEVICE_LOST;
  st.last_list_device = d->id;
  *out = new _ze_command_list_handle_t{d, c, true};
  (*out)->in_order = desc->flags & kQueueFlagInOrder;
  st.lists.insert(*out);
  return ZE_RESULT_SUCCESS;
}

// A regular list (closed and executed on a queue): the backend never makes one; a test hands one
// to hal_stream_import to see it refused. Appending to it is refused too (the fake runs commands
// as they are appended, which only an immediate list does).
FAKE_API zeCommandListCreate(ze_context_handle_t c, ze_device_handle_t d, const ze_command_list_desc_t* desc,
                             ze_command_list_handle_t* out) {
  FAKE_ENTER("zeCommandListCreate");
  if (!c || !known_device(st, d) || !desc) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  *out = new _ze_command_list_handle_t{d, c, false};
  st.lists.insert(*out);
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeCommandListDestroy(ze_command_list_handle_t l) {
  FAKE_ENTER("zeCommandListDestroy");
  if (!st.lists.count(l)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (l->appending) return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;  // another thread is appending to it
  st.lists.erase(l);
  delete l;
  return ZE_RESULT_SUCCESS;
}

// Level Zero forbids appending to one command list from two threads at once. Every append entry
// point marks its list in use for its whole call, outside the driver lock that serialises the
// fake's own work (inside it, two appends could never be seen to overlap); an append that finds
// its list already in use is counted (fakeze_concurrent_appends) and reported on stderr.
// "slow_appends" keeps the list in use 200 us longer, so that a race in the caller shows.
class Appending {
 public:
  explicit Appending(ze_command_list_handle_t l) {
    State& st = state();
    std::lock_guard lock(st.mu);
    if (!st.lists.count(l)) return;  // the append itself refuses it
    list_ = l;
    slow_ = st.slow_appends;
    if (l->appending++ > 0 && st.concurrent_appends++ == 0)
      std::fprintf(stderr, "fake ze: command list %p appended to from two threads at once\n", static_cast<void*>(l));
  }
  ~Appending() {
    if (!list_) return;
    if (slow_) std::this_thread::sleep_for(std::chrono::microseconds(200));
    State& st = state();
    std::lock_guard lock(st.mu);
    --list_->appending;
  }
  Appending(const Appending&) = delete;
  Appending& operator=(const Appending&) = delete;

 private:
  ze_command_list_handle_t list_ = nullptr;
  bool slow_ = false;
};
// FAKE_ENTER for an append to `list`: the list is in use until the entry point returns.
#define FAKE_ENTER_APPEND(name, list) \
  Appending appending_(list);         \
  FAKE_ENTER(name)

// What an append is to the list's order: work (a copy, fill, launch or timestamp) that must not
// start before the earlier work completes, a barrier that waits for all of it, or neither (an
// event reset, a wait on events: they order nothing before them).
enum class Kind { kWork, kBarrier, kOther };

// Every append names a live immediate list; it is counted. The fake runs each command as it is
// appended, so its lists are in order whatever they asked for; a driver only starts commands
// in order (Level Zero core programming guide, "Execution Barriers"), unless the list was made
// with ZE_COMMAND_QUEUE_FLAG_IN_ORDER. So work appended to a list made without it, after other
// work and no barrier between, is counted (fakeze_unordered_appends): a driver could run it
// before the work before it completes. The first is also reported on stderr.
ze_result_t append_to(State& st, ze_command_list_handle_t l, Kind kind) {
  if (!st.lists.count(l)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!l->immediate) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  ++l->appended;
  if (kind == Kind::kBarrier) l->unfenced = 0;
  if (kind != Kind::kWork) return ZE_RESULT_SUCCESS;
  if (!l->in_order && l->unfenced++ > 0 && st.unordered_appends++ == 0)
    std::fprintf(stderr, "fake ze: command list %p (not in order) got a command after another with no barrier\n",
                 static_cast<void*>(l));
  return ZE_RESULT_SUCCESS;
}
#define FAKE_APPEND_TO(list, kind) \
  if (ze_result_t r_ = append_to(st, list, Kind::kind); r_ != ZE_RESULT_SUCCESS) return r_

FAKE_API zeCommandListAppendMemoryCopy(ze_command_list_handle_t list, void* dst, const void* src, size_t size,
                                       ze_event_handle_t signal_event, uint32_t nwait, ze_event_handle_t* waits) {
  FAKE_ENTER_APPEND("zeCommandListAppendMemoryCopy", list);
  FAKE_APPEND_TO(list, kWork);
  if (ze_result_t r = wait_ok(st, lock_, nwait, waits); r != ZE_RESULT_SUCCESS) return r;
  if (!in_allocation(st, dst, size) && !in_allocation(st, src, size)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (!range_ok(st, dst, size) || !range_ok(st, src, size)) return ZE_RESULT_ERROR_INVALID_SIZE;
  std::memmove(dst, src, size);
  signal(signal_event);
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeCommandListAppendMemoryFill(ze_command_list_handle_t list, void* ptr, const void* pattern, size_t psize,
                                       size_t size, ze_event_handle_t signal_event, uint32_t nwait,
                                       ze_event_handle_t* waits) {
  FAKE_ENTER_APPEND("zeCommandListAppendMemoryFill", list);
  FAKE_APPEND_TO(list, kWork);
  if (ze_result_t r = wait_ok(st, lock_, nwait, waits); r != ZE_RESULT_SUCCESS) return r;
  if (!in_allocation(st, ptr, size)) return ZE_RESULT_ERROR_INVALID_SIZE;
  if (psize == 0 || (psize & (psize - 1)) || size % psize) return ZE_RESULT_ERROR_INVALID_SIZE;
  for (size_t i = 0; i < size; i += psize) std::memcpy(static_cast<char*>(ptr) + i, pattern, psize);
  signal(signal_event);
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeCommandListAppendBarrier(ze_command_list_handle_t list, ze_event_handle_t signal_event, uint32_t nwait,
                                    ze_event_handle_t* waits) {
  FAKE_ENTER_APPEND("zeCommandListAppendBarrier", list);
  FAKE_APPEND_TO(list, kBarrier);
  if (ze_result_t r = wait_ok(st, lock_, nwait, waits); r != ZE_RESULT_SUCCESS) return r;
  signal(signal_event);
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeCommandListAppendWaitOnEvents(ze_command_list_handle_t list, uint32_t n, ze_event_handle_t* events) {
  FAKE_ENTER_APPEND("zeCommandListAppendWaitOnEvents", list);
  FAKE_APPEND_TO(list, kOther);
  return wait_ok(st, lock_, n, events);
}

FAKE_API zeCommandListAppendEventReset(ze_command_list_handle_t list, ze_event_handle_t e) {
  FAKE_ENTER_APPEND("zeCommandListAppendEventReset", list);
  FAKE_APPEND_TO(list, kOther);
  if (!e) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (st.lost) return ZE_RESULT_ERROR_DEVICE_LOST;
  e->signalled = e->pending = false;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeCommandListAppendWriteGlobalTimestamp(ze_command_list_handle_t list, uint64_t* dst,
                                                 ze_event_handle_t signal_event, uint32_t nwait,
                                                 ze_event_handle_t* waits) {
  FAKE_ENTER_APPEND("zeCommandListAppendWriteGlobalTimestamp", list);
  FAKE_APPEND_TO(list, kWork);
  if (ze_result_t r = wait_ok(st, lock_, nwait, waits); r != ZE_RESULT_SUCCESS) return r;
  if (!in_allocation(st, dst, 8)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  *dst = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
  signal(signal_event);
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeCommandListAppendLaunchKernel(ze_command_list_handle_t list, ze_kernel_handle_t k, const ze_group_count_t* g,
                                         ze_event_handle_t signal_event, uint32_t nwait, ze_event_handle_t* waits) {
  FAKE_ENTER_APPEND("zeCommandListAppendLaunchKernel", list);
  FAKE_APPEND_TO(list, kWork);
  if (ze_result_t r = wait_ok(st, lock_, nwait, waits); r != ZE_RESULT_SUCCESS) return r;
  if (!k || !g) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (std::find(k->set.begin(), k->set.end(), false) != k->set.end()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  size_t global[3] = {g->groupCountX * k->group[0], g->groupCountY * k->group[1], g->groupCountZ * k->group[2]};
  if (global[0] * global[1] * global[2] == 0) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  cl_int err = clEnqueueNDRangeKernel(st.queue, k->kernel, 3, nullptr, global, k->group, 0, nullptr, nullptr);
  if (err == CL_INVALID_WORK_GROUP_SIZE) return ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
  if (err != CL_SUCCESS || clFinish(st.queue) != CL_SUCCESS) return ZE_RESULT_ERROR_UNKNOWN;
  signal(signal_event);
  return ZE_RESULT_SUCCESS;
}

// ---- events ---------------------------------------------------------------------------------

FAKE_API zeEventPoolCreate(ze_context_handle_t, const ze_event_pool_desc_t* desc, uint32_t, ze_device_handle_t*,
                           ze_event_pool_handle_t* out) {
  FAKE_ENTER("zeEventPoolCreate");
  if (!desc || desc->count == 0) return ZE_RESULT_ERROR_INVALID_SIZE;
  *out = new _ze_event_pool_handle_t{desc->count};
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeEventCreate(ze_event_pool_handle_t pool, const ze_event_desc_t* desc, ze_event_handle_t* out) {
  FAKE_ENTER("zeEventCreate");
  if (!pool || !desc || desc->index >= pool->count) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  *out = new _ze_event_handle_t;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeEventHostSynchronize(ze_event_handle_t e, uint64_t timeout) {
  FAKE_ENTER("zeEventHostSynchronize");
  if (st.lost) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (timeout == UINT64_MAX) await(lock_, e);  // a record on another thread may be about to signal it
  if (e->pending) e->signalled = true, e->pending = false;  // the host waited: the device got there
  return e->signalled ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

FAKE_API zeEventQueryStatus(ze_event_handle_t e) {
  FAKE_ENTER("zeEventQueryStatus");
  if (st.lost) return ZE_RESULT_ERROR_DEVICE_LOST;
  return e->signalled ? ZE_RESULT_SUCCESS : ZE_RESULT_NOT_READY;
}

FAKE_API zeEventHostReset(ze_event_handle_t e) {
  FAKE_ENTER("zeEventHostReset");
  e->signalled = e->pending = false;
  return ZE_RESULT_SUCCESS;
}

// ---- modules and kernels --------------------------------------------------------------------

FAKE_API zeModuleCreate(ze_context_handle_t, ze_device_handle_t d, const ze_module_desc_t* desc,
                        ze_module_handle_t* out, ze_module_build_log_handle_t* log_out) {
  FAKE_ENTER("zeModuleCreate");
  std::string log;
  ze_result_t r = ZE_RESULT_SUCCESS;
  auto m = std::make_unique<_ze_module_handle_t>();
  if (!known_device(st, d) || !desc) {
    r = ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  } else if (desc->format != ZE_MODULE_FORMAT_IL_SPIRV) {
    r = ZE_RESULT_ERROR_INVALID_ENUMERATION;
  } else if (st.lost) {
    r = ZE_RESULT_ERROR_DEVICE_LOST;
  } else if (st.fail_build) {
    log = "fake ze: injected build failure\nerror: undefined reference to `__hc_missing_builtin'";
    r = ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
  } else if (!halcyon::spirv::parse(desc->pInputModule, desc->inputSize, &m->spirv, &log)) {
    r = ZE_RESULT_ERROR_INVALID_NATIVE_BINARY;
#ifdef FAKEZE_SOURCE_DIR
  } else if (!(m->program = build_from_source(st, m->spirv, &log))) {
#else
  } else if (!(m->program = build(st, desc->pInputModule, desc->inputSize, &log))) {
#endif
    r = ZE_RESULT_ERROR_MODULE_BUILD_FAILURE;
  }
  if (log_out) *log_out = new _ze_module_build_log_handle_t{log};
  if (r == ZE_RESULT_SUCCESS) *out = m.release();
  return r;
}

FAKE_API zeModuleDestroy(ze_module_handle_t m) {
  FAKE_ENTER("zeModuleDestroy");
  if (m->program) clReleaseProgram(m->program);
  delete m;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeModuleBuildLogGetString(ze_module_build_log_handle_t log, size_t* size, char* text) {
  FAKE_ENTER("zeModuleBuildLogGetString");
  if (!log || !size) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (text) std::memcpy(text, log->text.c_str(), std::min(*size, log->text.size() + 1));
  *size = log->text.size() + 1;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeKernelCreate(ze_module_handle_t m, const ze_kernel_desc_t* desc, ze_kernel_handle_t* out) {
  FAKE_ENTER("zeKernelCreate");
  if (!m || !desc || !desc->pKernelName) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const halcyon::spirv::Kernel* sk = m->spirv.find(desc->pKernelName);
  if (!sk) return ZE_RESULT_ERROR_INVALID_KERNEL_NAME;
  cl_int err = 0;
  cl_kernel k = clCreateKernel(m->program, desc->pKernelName, &err);
  if (err != CL_SUCCESS) return ZE_RESULT_ERROR_INVALID_KERNEL_NAME;
  *out = new _ze_kernel_handle_t{m, sk, k, {1, 1, 1}, std::vector<bool>(sk->params.size(), false)};
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeKernelDestroy(ze_kernel_handle_t k) {
  FAKE_ENTER("zeKernelDestroy");
  clReleaseKernel(k->kernel);
  delete k;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeKernelGetProperties(ze_kernel_handle_t k, ze_kernel_properties_t* p) {
  FAKE_ENTER("zeKernelGetProperties");
  if (!k || !p) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  p->numKernelArgs = uint32_t(k->spirv->params.size());
  for (int i = 0; i < 3; ++i) (&p->requiredGroupSizeX)[i] = k->spirv->required_group[i];
  p->maxSubgroupSize = 16;
  p->localMemSize = 0;
  return ZE_RESULT_SUCCESS;
}

FAKE_API zeKernelSetGroupSize(ze_kernel_handle_t k, uint32_t x, uint32_t y, uint32_t z) {
  FAKE_ENTER("zeKernelSetGroupSize");
  if (!k || x == 0 || y == 0 || z == 0 || uint64_t(x) * y * z > 1024) return ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
  const uint32_t* req = k->spirv->required_group;
  if (req[0] && (req[0] != x || req[1] != y || req[2] != z)) return ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION;
  k->group[0] = x;
  k->group[1] = y;
  k->group[2] = z;
  return ZE_RESULT_SUCCESS;
}

// Pointer arguments must point into a live allocation (or be null): what a GPU would fault on.
FAKE_API zeKernelSetArgumentValue(ze_kernel_handle_t k, uint32_t index, size_t size, const void* value) {
  FAKE_ENTER("zeKernelSetArgumentValue");
  if (!k || index >= k->spirv->params.size()) return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
  const halcyon::spirv::Param& p = k->spirv->params[index];
  cl_int err = CL_SUCCESS;
  if (p.kind == halcyon::spirv::ParamKind::kLocalPointer) {
    if (value) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    err = clSetKernelArg(k->kernel, index, std::max<size_t>(size, 1), nullptr);
  } else if (size != p.size) {
    return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE;
  } else if (p.kind == halcyon::spirv::ParamKind::kGlobalPointer) {
    void* ptr = nullptr;
    std::memcpy(&ptr, value, sizeof ptr);
    if (!ptr) err = clSetKernelArg(k->kernel, index, sizeof(cl_mem), nullptr);
    else if (!in_allocation(st, ptr, 0)) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    else err = clSetKernelArgSVMPointer(k->kernel, index, ptr);
  } else {
    err = clSetKernelArg(k->kernel, index, size, value);
  }
  if (err != CL_SUCCESS) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  k->set[index] = true;
  return ZE_RESULT_SUCCESS;
}

// Objects whose destruction is only their deletion.
#define FAKE_DELETE(name, type)  \
  FAKE_API name(type h) {        \
    FAKE_ENTER(#name);           \
    delete h;                    \
    return ZE_RESULT_SUCCESS;    \
  }

// The default context is the driver's: destroying it is an error a strict driver reports.
FAKE_API zeContextDestroy(ze_context_handle_t c) {
  FAKE_ENTER("zeContextDestroy");
  if (c == &st.default_context) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  delete c;
  return ZE_RESULT_SUCCESS;
}

#ifndef FAKEZE_SOURCE_DIR
extern "C" __attribute__((visibility("default"))) ze_context_handle_t zeDriverGetDefaultContext(ze_driver_handle_t d) {
  FAKE_ENTER("zeDriverGetDefaultContext");
  return d == &st.driver ? &st.default_context : nullptr;
}

// A command list's introspection (Level Zero 1.9; not in Debian's 1.4 headers, so declared by
// their definitions). The source build stands for an older driver without them.
FAKE_API zeCommandListIsImmediate(ze_command_list_handle_t l, ze_bool_t* out) {
  FAKE_ENTER("zeCommandListIsImmediate");
  if (st.no_list_queries) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;  // a new loader, an old driver
  if (!st.lists.count(l) || !out) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  *out = l->immediate;
  return ZE_RESULT_SUCCESS;
}
FAKE_API zeCommandListGetDeviceHandle(ze_command_list_handle_t l, ze_device_handle_t* out) {
  FAKE_ENTER("zeCommandListGetDeviceHandle");
  if (st.no_list_queries) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;  // a new loader, an old driver
  if (!st.lists.count(l) || !out) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  *out = l->device;
  return ZE_RESULT_SUCCESS;
}
// Waits for an immediate list's commands (1.6): they ran when appended, so there is nothing to
// wait for; the call is checked and counted. It appends nothing.
FAKE_API zeCommandListHostSynchronize(ze_command_list_handle_t l, uint64_t) {
  FAKE_ENTER("zeCommandListHostSynchronize");
  if (!st.lists.count(l)) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  if (!l->immediate) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  return st.lost ? ZE_RESULT_ERROR_DEVICE_LOST : ZE_RESULT_SUCCESS;
}
FAKE_API zeCommandListGetContextHandle(ze_command_list_handle_t l, ze_context_handle_t* out) {
  FAKE_ENTER("zeCommandListGetContextHandle");
  if (st.no_list_queries) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;  // a new loader, an old driver
  if (!st.lists.count(l) || !out) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  *out = l->context;
  return ZE_RESULT_SUCCESS;
}
#endif
FAKE_DELETE(zeEventPoolDestroy, ze_event_pool_handle_t)
FAKE_DELETE(zeEventDestroy, ze_event_handle_t)
FAKE_DELETE(zeModuleBuildLogDestroy, ze_module_build_log_handle_t)
