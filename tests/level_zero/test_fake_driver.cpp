// The Level Zero backend against the fake driver (fake_ze.cpp): device discovery and
// properties, memory and its bounds, streams, events and timestamps, SPIR-V modules and
// launches, sub-device partitions, memory of another user of the driver imported (hal_buffer_import,
// DLPack's kDLOneAPI) and its immediate command lists as streams (hal_stream_import), and the failure paths a real driver has (a module that does not build,
// with its build log; out of device memory; a lost device).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <halcyon/dlpack.h>
#include <halcyon/halcyon.hpp>
#include <level_zero/ze_api.h>
#include <halcyon/spirv_kernels.hpp>

#include "spirv_reader.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <thread>
#include <string>
#include <vector>

namespace {

// The fake's control functions, from the same file the backend opened.
struct Fake {
  void* dl = dlopen(FAKE_ZE, RTLD_NOW | RTLD_LOCAL);
  template <typename F>
  F fn(const char* name) const {
    F f = reinterpret_cast<F>(dlsym(dl, name));
    REQUIRE_MESSAGE(bool(f), name);
    return f;
  }
  void reset() const { fn<void (*)()>("fakeze_reset")(); }
  void inject(const char* what) const { REQUIRE(fn<int (*)(const char*)>("fakeze_inject")(what) == 1); }
  int count(const char* name) const { return fn<int (*)(const char*)>("fakeze_count")(name); }
  int last_list_device() const { return fn<int (*)()>("fakeze_last_list_device")(); }
  void set_tiles(int n) const { fn<void (*)(int)>("fakeze_set_tiles")(n); }
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

const Fake& fake() {
  static Fake f;
  return f;
}

halcyon::Device open_ze() {
  static const bool once = [] {
    // A malformed option fails hal_init, naming the entry, and discovers nothing: the next
    // hal_init may still run.
    auto bad = halcyon::init(0, nullptr, "ze.loader=/x;loader_without_backend=/y");
    REQUIRE(!bad.ok());
    CHECK(bad.error().status() == HAL_INVALID_ARGUMENT);
    CHECK(contains(bad.error().message(), "loader_without_backend=/y"));
    std::string options = std::string("ze.loader=") + FAKE_ZE;
    auto st = halcyon::init(0, nullptr, options.c_str());
    REQUIRE_MESSAGE(st.ok(), st.error().to_string());
    return true;
  }();
  (void)once;
  auto d = halcyon::Device::open("ze:0");
  REQUIRE_MESSAGE(d.ok(), d.error().to_string());
  fake().reset();
  return *d;
}

template <typename T>
T unwrap(halcyon::Result<T> r) {
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  return std::move(*r);
}

const halcyon::spirv_kernels::Image& basic() {
  const auto* img = halcyon::spirv_kernels::find("basic");
  REQUIRE(img != nullptr);
  return *img;
}

}  // namespace

TEST_CASE("device discovery reads the driver's properties") {
  auto d = open_ze();
  auto info = unwrap(d.info());
  CHECK(std::string(info.name) == "halcyon fake Level Zero GPU");
  CHECK(std::string(info.arch) == "ze_ffff_0001");
  CHECK(info.compute_units == 64);  // 1 slice x 8 sub-slices x 8 EUs
  CHECK(info.simd_width == 8);
  CHECK(info.memory_bytes == (256ull << 20));
  CHECK(info.max_shared_per_block == 64 * 1024);
  CHECK(info.max_threads_per_block == 1024);
  CHECK(info.memory_bytes_per_s == 64000000000ull);
  CHECK(contains(info.capabilities, "module.spirv"));
  CHECK(contains(info.capabilities, "partition.sub_device"));
}

TEST_CASE("memory round trips, fills and refuses ranges past the end") {
  auto d = open_ze();
  auto s = unwrap(d.create_stream());
  auto b = unwrap(d.allocate(1000));
  std::vector<uint8_t> in(1000), out(1000, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(i * 7);
  REQUIRE(s.write(b, 0, in.data(), in.size()).ok());
  REQUIRE(s.read(b, 0, out.data(), out.size()).ok());
  CHECK(out == in);
  REQUIRE(s.fill<uint16_t>(b, 10, 20, uint16_t(0xABCD)).ok());
  REQUIRE(s.read(b, 10, out.data(), 20).ok());
  for (int i = 0; i < 20; i += 2) CHECK((out[i] | out[i + 1] << 8) == 0xABCD);
  auto past = s.write(b, 990, in.data(), 11);
  REQUIRE(!past.ok());
  CHECK(past.error().status() == HAL_OUT_OF_RANGE);
  CHECK(fake().count("zeMemAllocDevice") == 1);
  CHECK(fake().count("zeCommandListAppendMemoryCopy") == 3);  // the refused write never reached the driver
}

TEST_CASE("out of device memory is HAL_OUT_OF_MEMORY naming the size") {
  auto d = open_ze();
  auto big = d.allocate(1ull << 30);  // more than the fake's 256 MiB
  REQUIRE(!big.ok());
  CHECK(big.error().status() == HAL_OUT_OF_MEMORY);
  CHECK(contains(big.error().message(), "1073741824 bytes"));
  fake().inject("oom");
  auto small = d.allocate(64);
  REQUIRE(!small.ok());
  CHECK(small.error().status() == HAL_OUT_OF_MEMORY);
}

TEST_CASE("a SPIR-V kernel runs, its arguments laid out from the module") {
  auto d = open_ze();
  auto m = unwrap(d.load_module(HAL_MODULE_SPIRV, basic().target, basic().data, basic().size, "basic.spv"));
  auto k = unwrap(m.kernel("hc_vector_add"));
  auto info = unwrap(k.info());
  CHECK(info.arg_count == 4);
  CHECK(info.args_size == 32);
  auto args = unwrap(k.args());
  CHECK(args[0].kind == HAL_ARG_POINTER);
  CHECK(args[3].kind == HAL_ARG_VALUE);
  CHECK(args[3].offset == 24);
  auto s = unwrap(d.create_stream());
  const int n = 1000;
  auto a = unwrap(d.allocate(n * 4)), b = unwrap(d.allocate(n * 4)), c = unwrap(d.allocate(n * 4));
  std::vector<float> x(n), y(n), z(n, -1);
  for (int i = 0; i < n; ++i) x[i] = float(i), y[i] = 0.5f * float(i);
  REQUIRE(s.write(a, 0, x.data(), n * 4).ok());
  REQUIRE(s.write(b, 0, y.data(), n * 4).ok());
  struct {
    uint64_t a, b, c;
    int64_t n;
  } blob{unwrap(a.info()).device_address, unwrap(b.info()).device_address, unwrap(c.info()).device_address, n};
  REQUIRE(s.launch(k, {(n + 255) / 256}, {256}, &blob, sizeof blob).ok());
  REQUIRE(s.read(c, 0, z.data(), n * 4).ok());
  for (int i = 0; i < n; ++i) REQUIRE(z[i] == 1.5f * float(i));
  CHECK(fake().count("zeKernelSetArgumentValue") == 4);
  CHECK(fake().count("zeCommandListAppendLaunchKernel") == 1);
  // The fake faults as a GPU would on an address outside every allocation.
  auto wild = blob;
  wild.c = 0x1000;
  auto fault = s.launch(k, {1}, {256}, &wild, sizeof wild);
  REQUIRE(!fault.ok());
  CHECK(fault.error().status() == HAL_DEVICE_ERROR);
  CHECK(contains(fault.error().message(), "zeKernelSetArgumentValue"));
  auto missing = m.kernel("hc_no_such_kernel");
  REQUIRE(!missing.ok());
  CHECK(missing.error().status() == HAL_NOT_FOUND);
  CHECK(contains(missing.error().message(), "hc_vector_add"));  // it lists what the module has
}

namespace {

// Another user of the driver (SYCL, so PyTorch's XPU tensors): its device memory in the driver's
// default context, allocated through the fake's own entry points.
struct OtherUser {
  ze_driver_handle_t driver = nullptr;
  ze_device_handle_t root = nullptr, tiles[2] = {};
  ze_context_handle_t context = nullptr;
  OtherUser() {
    uint32_t n = 1;
    REQUIRE(fake().fn<decltype(&zeDriverGet)>("zeDriverGet")(&n, &driver) == ZE_RESULT_SUCCESS);
    n = 1;
    REQUIRE(fake().fn<decltype(&zeDeviceGet)>("zeDeviceGet")(driver, &n, &root) == ZE_RESULT_SUCCESS);
    n = 2;
    REQUIRE(fake().fn<decltype(&zeDeviceGetSubDevices)>("zeDeviceGetSubDevices")(root, &n, tiles) == ZE_RESULT_SUCCESS);
    context = fake().fn<ze_context_handle_t (*)(ze_driver_handle_t)>("zeDriverGetDefaultContext")(driver);
    REQUIRE(context != nullptr);
  }
  void* device(size_t bytes, ze_device_handle_t on = nullptr, ze_context_handle_t in = nullptr) const {
    ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
    void* p = nullptr;
    REQUIRE(fake().fn<decltype(&zeMemAllocDevice)>("zeMemAllocDevice")(in ? in : context, &desc, bytes, 256,
                                                                        on ? on : root, &p) == ZE_RESULT_SUCCESS);
    return p;
  }
  void* host(size_t bytes) const {
    ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
    void* p = nullptr;
    REQUIRE(fake().fn<decltype(&zeMemAllocHost)>("zeMemAllocHost")(context, &desc, bytes, 256, &p) == ZE_RESULT_SUCCESS);
    return p;
  }
  void free(void* p, ze_context_handle_t in = nullptr) const {
    CHECK(fake().fn<decltype(&zeMemFree)>("zeMemFree")(in ? in : context, p) == ZE_RESULT_SUCCESS);
  }
};

int g_released = 0;
void count_release(void*) { ++g_released; }

halcyon::Result<halcyon::Buffer> import(const halcyon::Device& d, const void* p, uint64_t size, uint32_t flags = 0) {
  return d.import_memory(reinterpret_cast<uint64_t>(p), size, count_release, nullptr, flags);
}

void refused(const halcyon::Result<halcyon::Buffer>& r, const char* why) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(contains(r.error().message(), why), r.error().message());
}

}  // namespace

TEST_CASE("the backend runs in the driver's default context, so another user's device memory imports in place") {
  auto d = open_ze();
  const OtherUser other;
  // The backend's own buffers are memory of the default context.
  auto mine = unwrap(d.allocate(256));
  ze_memory_allocation_properties_t props{ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES, nullptr,
                                          ZE_MEMORY_TYPE_UNKNOWN, 0, 0};
  const auto alloc_properties = fake().fn<decltype(&zeMemGetAllocProperties)>("zeMemGetAllocProperties");
  REQUIRE(alloc_properties(other.context, reinterpret_cast<void*>(unwrap(mine.info()).device_address), &props,
                           nullptr) == ZE_RESULT_SUCCESS);
  CHECK(props.type == ZE_MEMORY_TYPE_DEVICE);

  // vector_add on three imported buffers (one of a tile, one owner-ordered): in place, each
  // release once, never freed by the backend.
  const int n = 1000;
  void* raw[3] = {other.device(n * 4), other.device(n * 4, other.tiles[1]), other.device(n * 4)};
  const int frees = fake().count("zeMemFree");
  g_released = 0;
  {
    auto a = unwrap(import(d, raw[0], n * 4)), b = unwrap(import(d, raw[1], n * 4));
    auto c = unwrap(import(d, raw[2], n * 4, HAL_BUFFER_IMPORT_OWNER_ORDERED));
    CHECK(unwrap(a.info()).device_address == reinterpret_cast<uint64_t>(raw[0]));
    auto s = unwrap(d.create_stream());
    std::vector<float> x(n), y(n), z(n, -1);
    for (int i = 0; i < n; ++i) x[i] = float(i), y[i] = 0.25f * float(i);
    REQUIRE(s.write(a, 0, x.data(), n * 4).ok());
    REQUIRE(s.write(b, 0, y.data(), n * 4).ok());
    auto m = unwrap(d.load_module(HAL_MODULE_SPIRV, basic().target, basic().data, basic().size, "basic.spv"));
    auto k = unwrap(m.kernel("hc_vector_add"));
    struct {
      uint64_t a, b, c;
      int64_t n;
    } blob{unwrap(a.info()).device_address, unwrap(b.info()).device_address, unwrap(c.info()).device_address, n};
    REQUIRE(s.launch(k, {(n + 255) / 256}, {256}, &blob, sizeof blob).ok());
    REQUIRE(s.synchronize().ok());
    std::memcpy(z.data(), raw[2], n * 4);  // the fake's device memory is host-visible: the owner's view
    for (int i = 0; i < n; ++i) REQUIRE(z[i] == 1.25f * float(i));
    CHECK(g_released == 0);
  }
  CHECK(g_released == 3);
  CHECK(fake().count("zeMemFree") == frees);  // the owner's to free

  // Refused, by name, without calling release: host memory, memory of another context, a range
  // past its allocation, memory the driver does not know.
  void* pinned = other.host(1024);
  refused(import(d, pinned, 1024), "host memory (zeMemAllocHost), not device memory");
  ze_context_handle_t theirs = nullptr;
  ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  REQUIRE(fake().fn<decltype(&zeContextCreate)>("zeContextCreate")(other.driver, &cd, &theirs) == ZE_RESULT_SUCCESS);
  void* elsewhere = other.device(1024, nullptr, theirs);
  refused(import(d, elsewhere, 1024), "not memory of this backend's Level Zero context");
  refused(import(d, static_cast<char*>(raw[0]) + 64, n * 4), "runs past its allocation");
  std::vector<char> plain(64);
  refused(import(d, plain.data(), 64), "default context");
  CHECK(g_released == 3);
  // An empty range needs no memory behind it.
  CHECK(import(d, nullptr, 0).ok());

  for (void* p : raw) other.free(p);
  other.free(pinned);
  other.free(elsewhere, theirs);
  CHECK(fake().fn<decltype(&zeContextDestroy)>("zeContextDestroy")(theirs) == ZE_RESULT_SUCCESS);
  // The default context is the driver's: nobody may destroy it (the backend never does).
  CHECK(fake().fn<decltype(&zeContextDestroy)>("zeContextDestroy")(other.context) == ZE_RESULT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("a oneAPI DLPack tensor (kDLOneAPI, as PyTorch's XPU tensors) is imported into its ze device") {
  auto d = open_ze();
  const OtherUser other;
  void* p = other.device(1024);
  struct Owner {
    DLManagedTensor m{};
    int64_t shape[1] = {256};
    bool deleted = false;
  } owner, wrong;
  const auto kOneApi = DLDeviceType(14);  // kDLOneAPI (DLPack 0.7; Debian's header is 0.6)
  owner.m.dl_tensor = DLTensor{p, DLDevice{kOneApi, 0}, 1, DLDataType{kDLFloat, 32, 1}, owner.shape, nullptr, 0};
  owner.m.manager_ctx = &owner;
  owner.m.deleter = [](DLManagedTensor* m) { static_cast<Owner*>(m->manager_ctx)->deleted = true; };
  hrt_tensor t{};
  t.struct_size = sizeof t;
  if (hal_error* e = hrt_dlpack_import(d.get(), &owner.m, "x", HRT_DTYPE_FROM_DLPACK, &t)) {
    halcyon::Error err = halcyon::Error::adopt(e);
    FAIL(err.to_string());
  }
  CHECK(halcyon::Buffer(t.buffer).address() == reinterpret_cast<uint64_t>(p));  // adopts the reference
  CHECK(owner.deleted);  // its last reference is gone: the deleter ran
  // The same memory said to be a CUDA tensor is refused before the driver is asked.
  wrong.m.dl_tensor = DLTensor{p, DLDevice{kDLCUDA, 0}, 1, DLDataType{kDLFloat, 32, 1}, wrong.shape, nullptr, 0};
  hrt_tensor t2{};
  t2.struct_size = sizeof t2;
  hal_error* e = hrt_dlpack_import(d.get(), &wrong.m, "x", HRT_DTYPE_FROM_DLPACK, &t2);
  REQUIRE(e != nullptr);
  halcyon::Error err = halcyon::Error::adopt(e);
  CHECK(err.status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(contains(err.message(), "the device is ze:0"), err.message());
  CHECK_FALSE(wrong.deleted);
  other.free(p);
}

TEST_CASE("another user's immediate command list is a stream (hal_stream_import): in order, never destroyed or waited for") {
  auto d = open_ze();
  const OtherUser other;
  const auto create_immediate = fake().fn<decltype(&zeCommandListCreateImmediate)>("zeCommandListCreateImmediate");
  const auto destroy_list = fake().fn<decltype(&zeCommandListDestroy)>("zeCommandListDestroy");
  const auto appends = [](ze_command_list_handle_t l) { return fake().fn<int (*)(void*)>("fakeze_list_appends")(l); };
  const ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 1, 0, 0,
                                   ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t list = nullptr;  // the owner's (a SYCL queue's), on a tile
  REQUIRE(create_immediate(other.context, other.tiles[1], &qd, &list) == ZE_RESULT_SUCCESS);

  // vector_add on the backend's buffers, every command appended to the owner's list.
  const int n = 1000;
  auto a = unwrap(d.allocate(n * 4)), b = unwrap(d.allocate(n * 4));
  std::optional<halcyon::Buffer> c = unwrap(d.allocate(n * 4));
  auto m = unwrap(d.load_module(HAL_MODULE_SPIRV, basic().target, basic().data, basic().size, "basic.spv"));
  auto k = unwrap(m.kernel("hc_vector_add"));
  struct {
    uint64_t a, b, c;
    int64_t n;
  } blob{a.address(), b.address(), c->address(), n};
  int barriers = 0, host_waits = 0, lists_destroyed = 0, events_destroyed = 0;
  {
    auto s = unwrap(d.import_stream(reinterpret_cast<uint64_t>(list)));
    CHECK(unwrap(s.info()).native == reinterpret_cast<uint64_t>(list));  // its handle, as imported
    std::vector<float> x(n), y(n), z(n, -1);
    for (int i = 0; i < n; ++i) x[i] = float(i), y[i] = 0.5f * float(i);
    const int before = appends(list);
    REQUIRE(s.write(a, 0, x.data(), n * 4).ok());
    REQUIRE(s.write(b, 0, y.data(), n * 4).ok());
    REQUIRE(s.launch(k, {(n + 255) / 256}, {256}, &blob, sizeof blob).ok());
    REQUIRE(s.read(c.value(), 0, z.data(), n * 4).ok());
    for (int i = 0; i < n; ++i) REQUIRE(z[i] == 1.5f * float(i));
    CHECK(appends(list) >= before + 4);  // two writes, the launch, the read (and the waits' barriers)
    // Work still running on the device when the stream is released: the release appends one
    // barrier and neither waits for the list nor destroys it.
    fake().inject("slow_events");
    REQUIRE(s.launch(k, {(n + 255) / 256}, {256}, &blob, sizeof blob).ok());
    barriers = fake().count("zeCommandListAppendBarrier"), host_waits = fake().count("zeEventHostSynchronize");
    lists_destroyed = fake().count("zeCommandListDestroy"), events_destroyed = fake().count("zeEventDestroy");
  }
  CHECK(fake().count("zeCommandListAppendBarrier") == barriers + 1);
  CHECK(fake().count("zeEventHostSynchronize") == host_waits);
  CHECK(fake().count("zeCommandListDestroy") == lists_destroyed);
  CHECK(fake().count("zeEventDestroy") == events_destroyed);  // its event kept: not yet signalled
  // The owner goes on with its list.
  const auto owner_barrier = fake().fn<decltype(&zeCommandListAppendBarrier)>("zeCommandListAppendBarrier");
  CHECK(owner_barrier(list, nullptr, 0, nullptr) == ZE_RESULT_SUCCESS);
  // A buffer the released stream's work used is freed only after that work: the free waits for
  // the release's barrier, then destroys its event.
  c.reset();
  CHECK(fake().count("zeEventHostSynchronize") == host_waits + 1);
  CHECK(fake().count("zeEventDestroy") == events_destroyed + 1);
  fake().reset();  // events signalled at once again

  // Refused, by name: handle 0, a regular list, a list of another context, a destroyed list.
  const auto refused = [&](uint64_t native, const char* why) {
    auto r = d.import_stream(native);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(contains(r.error().message(), why), r.error().message());
  };
  refused(0, "the handle is 0");
  const ze_command_list_desc_t ld{ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC, nullptr, 1, 0};
  ze_command_list_handle_t regular = nullptr, elsewhere = nullptr;
  REQUIRE(fake().fn<decltype(&zeCommandListCreate)>("zeCommandListCreate")(other.context, other.root, &ld, &regular) ==
          ZE_RESULT_SUCCESS);
  refused(reinterpret_cast<uint64_t>(regular), "it is a regular command list");
  ze_context_handle_t own = nullptr;
  const ze_context_desc_t cd{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  REQUIRE(fake().fn<decltype(&zeContextCreate)>("zeContextCreate")(other.driver, &cd, &own) == ZE_RESULT_SUCCESS);
  REQUIRE(create_immediate(own, other.root, &qd, &elsewhere) == ZE_RESULT_SUCCESS);
  refused(reinterpret_cast<uint64_t>(elsewhere), "a list of another context; the backend runs in the driver's default");
  // A driver without the list queries (under a loader that has them): unsupported, saying so.
  fake().inject("no_list_queries");
  auto old = d.import_stream(reinterpret_cast<uint64_t>(list));
  REQUIRE_FALSE(old.ok());
  CHECK(old.error().status() == HAL_UNSUPPORTED);
  CHECK_MESSAGE(contains(old.error().message(), "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE"), old.error().message());
  fake().reset();
  for (ze_command_list_handle_t l : {regular, elsewhere, list}) CHECK(destroy_list(l) == ZE_RESULT_SUCCESS);
  refused(reinterpret_cast<uint64_t>(list), "zeCommandListIsImmediate returned ZE_RESULT_ERROR_INVALID_NULL_HANDLE");
  CHECK(fake().fn<decltype(&zeContextDestroy)>("zeContextDestroy")(own) == ZE_RESULT_SUCCESS);
}

TEST_CASE("no two threads append to one command list at once: buffers freed while streams queue work") {
  auto d = open_ze();
  const OtherUser other;
  const auto concurrent = [] { return fake().fn<int (*)()>("fakeze_concurrent_appends")(); };
  const ze_command_queue_desc_t qd{ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, 1, 0, 0,
                                   ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS, ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
  ze_command_list_handle_t list = nullptr;  // the owner's, appended to by the owner on the queuing thread
  REQUIRE(fake().fn<decltype(&zeCommandListCreateImmediate)>("zeCommandListCreateImmediate")(
              other.context, other.root, &qd, &list) == ZE_RESULT_SUCCESS);
  const auto owner_barrier = fake().fn<decltype(&zeCommandListAppendBarrier)>("zeCommandListAppendBarrier");
  {
    auto created = unwrap(d.create_stream());
    auto imported = unwrap(d.import_stream(reinterpret_cast<uint64_t>(list)));
    auto m = unwrap(d.load_module(HAL_MODULE_SPIRV, basic().target, basic().data, basic().size, "basic.spv"));
    auto k = unwrap(m.kernel("hc_vector_add"));
    const int n = 64;
    auto a = unwrap(d.allocate(n * 4)), b = unwrap(d.allocate(n * 4)), c = unwrap(d.allocate(n * 4));
    auto ev = unwrap(d.create_event());
    struct {
      uint64_t a, b, c;
      int64_t n;
    } blob{a.address(), b.address(), c.address(), n};
    std::vector<float> x(n, 1.0f);
    // Every append path of a stream (write, fill, an event's record, a launch, a wait, the
    // synchronize of write) on one thread, for both streams, the owner appending to its list
    // there too (hal.h lets it: not from another thread); buffers freed on the test's thread
    // meanwhile, each free waiting for every live stream. The fake keeps each list in use a
    // while per append, so an append racing a free's wait is caught.
    fake().inject("slow_appends");
    std::atomic<bool> done{false};
    std::atomic<int> failures{0};
    std::thread queuer([&] {
      for (int i = 0; i < 40; ++i) {
        for (const halcyon::Stream* s : {&created, &imported}) {
          failures += !s->write(a, 0, x.data(), n * 4).ok();
          failures += !s->fill<uint32_t>(b, 0, n * 4, 0x3f800000u).ok();
          failures += !s->record(ev).ok();
          failures += !s->wait(ev).ok();
          failures += !s->launch(k, {1}, {n}, &blob, sizeof blob).ok();
        }
        failures += owner_barrier(list, nullptr, 0, nullptr) != ZE_RESULT_SUCCESS;
      }
      done = true;
    });
    int frees = 0;
    while (!done) {
      auto t = unwrap(d.allocate(256));
      ++frees;  // t is freed here, while the queuer appends
    }
    queuer.join();
    CHECK(failures == 0);
    CHECK(frees > 0);
    CHECK_MESSAGE(concurrent() == 0, "appends that overlapped another on the same list: ", concurrent());
    // The frees waited for the imported list without appending to it.
    CHECK(fake().count("zeCommandListHostSynchronize") >= frees);
  }
  fake().reset();
  CHECK(fake().fn<decltype(&zeCommandListDestroy)>("zeCommandListDestroy")(list) == ZE_RESULT_SUCCESS);
}

TEST_CASE("modules: wrong target and bad bytes are refused before the driver, a build failure carries its log") {
  auto d = open_ze();
  auto foreign = d.load_module(HAL_MODULE_SPIRV, "intel_0bd5", basic().data, basic().size, "foreign.spv");
  REQUIRE(!foreign.ok());
  CHECK(foreign.error().status() == HAL_ARCH_MISMATCH);
  CHECK(contains(foreign.error().message(), "intel_0bd5"));
  CHECK(contains(foreign.error().message(), "ze_ffff_0001"));
  std::vector<uint32_t> junk = {0x07230203, 0x00010000, 0, 10, 0, 0xffff0001};
  auto corrupt = d.load_module(HAL_MODULE_SPIRV, "spirv64", junk.data(), junk.size() * 4, "junk.spv");
  REQUIRE(!corrupt.ok());
  CHECK(corrupt.error().status() == HAL_INVALID_ARGUMENT);
  CHECK(contains(corrupt.error().message(), "junk.spv"));
  // What the SPIR-V reader refuses, each with its reason, none reaching the driver.
  const std::vector<std::pair<std::vector<uint8_t>, const char*>> bad = {
      {{0x03, 0x02, 0x23, 0x07, 0, 0, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1}, "whole number of 4-byte words"},
      {std::vector<uint8_t>(20, 0), "magic number"},
      {{0x03, 0x02, 0x23, 0x07, 0, 0, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0}, "no kernel entry point"},
  };
  for (const auto& [bytes, why] : bad) {
    auto r = d.load_module(HAL_MODULE_SPIRV, "spirv64", bytes.data(), bytes.size(), "bad.spv");
    REQUIRE(!r.ok());
    CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(contains(r.error().message(), why), r.error().message());
  }
  CHECK(fake().count("zeModuleCreate") == 0);
  fake().inject("module_build");
  auto failed = d.load_module(HAL_MODULE_SPIRV, "spirv64", basic().data, basic().size, "basic.spv");
  REQUIRE(!failed.ok());
  CHECK(failed.error().status() == HAL_DEVICE_ERROR);
  CHECK(contains(failed.error().message(), "ZE_RESULT_ERROR_MODULE_BUILD_FAILURE"));
  CHECK(contains(failed.error().message(), "undefined reference to `__hc_missing_builtin'"));
  CHECK(fake().count("zeModuleBuildLogDestroy") == 1);
}

namespace {

// A SPIR-V module written word by word: the few instructions the reader looks at.
struct SpirvWriter {
  std::vector<uint32_t> words{0x07230203, 0x00010000, 0, 100, 0};
  SpirvWriter& op(uint32_t opcode, std::vector<uint32_t> operands) {
    words.push_back(uint32_t(operands.size() + 1) << 16 | opcode);
    words.insert(words.end(), operands.begin(), operands.end());
    return *this;
  }
  SpirvWriter& entry(uint32_t function, const char* name) {  // OpEntryPoint Kernel
    std::vector<uint32_t> operands{6, function};
    std::vector<uint32_t> packed((std::strlen(name) + 4) / 4, 0);  // NUL-terminated, padded to words
    std::memcpy(packed.data(), name, std::strlen(name));
    operands.insert(operands.end(), packed.begin(), packed.end());
    return op(15, operands);
  }
  SpirvWriter& types() { return op(14, {2, 2}).op(21, {20, 32, 0}).op(32, {21, 5, 20}); }  // int, __global int*
  SpirvWriter& function(uint32_t id) { return op(54, {1, id, 0, 2}); }
  SpirvWriter& param(uint32_t type, uint32_t id) { return op(55, {type, id}); }
  SpirvWriter& end() { return op(56, {}); }
  std::string refused() const {  // the reader's reason, "" when it accepts the module
    halcyon::spirv::Module m;
    std::string why;
    return halcyon::spirv::parse(words.data(), words.size() * 4, &m, &why) ? "" : why;
  }
};

}  // namespace

TEST_CASE("the SPIR-V reader refuses a function layout out of the spec's order, never crashing") {
  // Well formed: two kernels, their parameters read in order.
  SpirvWriter good;
  good.entry(10, "k1").entry(11, "k2").types().function(10).param(21, 30).param(20, 31).end();
  good.function(11).param(20, 32).end();
  halcyon::spirv::Module m;
  std::string why;
  REQUIRE_MESSAGE(halcyon::spirv::parse(good.words.data(), good.words.size() * 4, &m, &why), why);
  REQUIRE(m.kernels.size() == 2);
  REQUIRE(m.find("k1")->params.size() == 2);
  CHECK(m.find("k1")->params[0].kind == halcyon::spirv::ParamKind::kGlobalPointer);
  CHECK(m.find("k1")->params[1].size == 4);
  CHECK(m.find("k2")->params.size() == 1);

  // The reviewer's module: an entry point after a kernel's OpFunction, then parameters. The
  // reader kept a pointer into its kernel list across the entry point's push_back and wrote
  // through it once the list had moved (heap corruption, "double free or corruption").
  SpirvWriter late;
  late.entry(10, "k1").types().function(10).entry(11, "k2");
  for (uint32_t i = 0; i < 20; ++i) late.param(20, 30 + i);
  late.end();
  CHECK_MESSAGE(contains(late.refused(), "OpEntryPoint at word"), late.refused());
  CHECK_MESSAGE(contains(late.refused(), "comes after a function"), late.refused());
  // The same through hal_module_load: refused by name before the driver is asked.
  auto d = open_ze();
  auto r = d.load_module(HAL_MODULE_SPIRV, "spirv64", late.words.data(), late.words.size() * 4, "late_entry.spv");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(contains(r.error().message(), "late_entry.spv"), r.error().message());
  CHECK(fake().count("zeModuleCreate") == 0);

  // The other layout violations, each with its reason.
  SpirvWriter nested, stray_end, stray_param, unended, twice;
  nested.entry(10, "k").types().function(10).function(11).end().end();
  stray_end.entry(10, "k").types().function(10).end().end();
  stray_param.entry(10, "k").types().param(20, 30).function(10).end();
  unended.entry(10, "k").types().function(10).param(20, 30);
  twice.entry(10, "k").types().function(10).param(20, 30).end().function(10).param(20, 31).end();
  CHECK_MESSAGE(contains(nested.refused(), "(id 11) begins inside another function"), nested.refused());
  CHECK_MESSAGE(contains(stray_end.refused(), "ends no function"), stray_end.refused());
  CHECK_MESSAGE(contains(stray_param.refused(), "OpFunctionParameter at word 20 is outside a function"),
                stray_param.refused());
  CHECK_MESSAGE(contains(unended.refused(), "ends inside a function"), unended.refused());
  CHECK_MESSAGE(contains(twice.refused(), "function id 10 is defined twice"), twice.refused());
}

TEST_CASE("the SPIR-V reader gives every parameter it accepts a size a launch can pack (fuzz_spirv's findings)") {
  // fuzz_spirv's first crash: a later OpTypeInt reused the id of the kernel's int type with a
  // width of 16384 bits, and the parameter came back as a 2048-byte value.
  SpirvWriter retyped;
  retyped.entry(10, "k").types().op(21, {20, 16384, 0}).function(10).param(20, 30).end();
  CHECK_MESSAGE(contains(retyped.refused(), "type id 20 is defined twice (again at word"), retyped.refused());
  // Values no OpenCL argument is: an integer of 12 bits, a vector of 64 longs, a vector of
  // vectors whose size would wrap round 2^64.
  SpirvWriter odd, wide, nested;
  odd.entry(10, "k").types().op(21, {40, 12, 0}).function(10).param(40, 30).end();
  wide.entry(10, "k").types().op(21, {40, 64, 0}).op(23, {41, 40, 64}).function(10).param(41, 30).end();
  nested.entry(10, "k").types().op(23, {40, 20, 0x80000000u}).op(23, {41, 40, 0x80000000u}).op(23, {42, 41, 16});
  nested.function(10).param(42, 30).end();
  CHECK_MESSAGE(contains(odd.refused(), "parameter 0 is a value of no whole number of bytes"), odd.refused());
  CHECK_MESSAGE(contains(wide.refused(), "parameter 0 is a value of 512 bytes (a kernel argument value is 1 to 128"),
                wide.refused());
  CHECK_MESSAGE(contains(nested.refused(), "parameter 0 is a value of more than 2^64 bytes"), nested.refused());
  // An OpMemoryModel after a pointer type would change the pointer size under it.
  SpirvWriter late_model;
  late_model.entry(10, "k").types().op(14, {1, 2}).function(10).param(21, 30).end();
  CHECK_MESSAGE(contains(late_model.refused(), "OpMemoryModel at word"), late_model.refused());
  CHECK_MESSAGE(contains(late_model.refused(), "comes after a type or function"), late_model.refused());
  // A 16-element vector of longs (128 bytes) is the widest argument, and is accepted.
  SpirvWriter long16;
  long16.entry(10, "k").types().op(21, {40, 64, 0}).op(23, {41, 40, 16}).function(10).param(41, 30).end();
  CHECK_MESSAGE(long16.refused().empty(), long16.refused());
}

TEST_CASE("events: order across streams and timestamps") {
  auto d = open_ze();
  auto s1 = unwrap(d.create_stream()), s2 = unwrap(d.create_stream());
  auto e0 = unwrap(d.create_event()), e1 = unwrap(d.create_event());
  CHECK(unwrap(e0.query()));  // never recorded: complete
  REQUIRE(s1.record(e0).ok());
  auto b = unwrap(d.allocate(4096));
  REQUIRE(s1.fill<uint32_t>(b, 0, 4096, 7u).ok());
  REQUIRE(s1.record(e1).ok());
  REQUIRE(s2.wait(e1).ok());
  REQUIRE(e1.synchronize().ok());
  float ms = unwrap(e1.elapsed_since(e0));
  CHECK(ms >= 0.0f);
  CHECK(fake().count("zeCommandListAppendWriteGlobalTimestamp") == 2);
  CHECK(fake().count("zeCommandListAppendWaitOnEvents") == 1);
}

TEST_CASE("a kernel and a timing event's stamp complete in order with the stream's other work") {
  // Level Zero only starts a command list's commands in order; unless the list was made with
  // ZE_COMMAND_QUEUE_FLAG_IN_ORDER, a command may run before the one before it completes
  // (core programming guide, "Execution Barriers"). The fake counts each command appended that
  // relies on more than that: here a launch between a write of its input and a read of its
  // output, and work after a timing event's stamp.
  // Twice: on a list made in order (the default fake, 1.14), and on one without the flag (a
  // driver that refuses it), where the backend orders each command with barriers.
  for (const bool refuse_flag : {false, true}) {
  CAPTURE(refuse_flag);
  auto d = open_ze();
  if (refuse_flag) REQUIRE(fake().fn<int (*)(const char*)>("fakeze_inject")("no_in_order") == 1);
  const auto unordered = [] { return fake().fn<int (*)()>("fakeze_unordered_appends")(); };
  const auto in_order = [](const halcyon::Stream& s) {
    const uint64_t native = unwrap(s.info()).native;
    return fake().fn<int (*)(void*)>("fakeze_list_in_order")(reinterpret_cast<void*>(native));
  };
  auto s = unwrap(d.create_stream());
  CHECK(in_order(s) == (refuse_flag ? 0 : 1));
  auto m = unwrap(d.load_module(HAL_MODULE_SPIRV, basic().target, basic().data, basic().size, "basic.spv"));
  auto k = unwrap(m.kernel("hc_vector_add"));
  const int n = 256;
  auto a = unwrap(d.allocate(n * 4)), b = unwrap(d.allocate(n * 4)), c = unwrap(d.allocate(n * 4));
  auto start = unwrap(d.create_event()), stop = unwrap(d.create_event());
  struct {
    uint64_t a, b, c;
    int64_t n;
  } blob{a.address(), b.address(), c.address(), n};
  std::vector<float> x(n, 2.0f), z(n, 0.0f);
  REQUIRE(s.fill<uint32_t>(b, 0, n * 4, 0x3f800000u).ok());  // 1.0f
  REQUIRE(s.record(start).ok());
  // The async forms: write and read wait for the stream, which would order them anyway.
  REQUIRE(s.write_async(a, 0, x.data(), n * 4).ok());
  REQUIRE(s.launch(k, {1}, {n}, &blob, sizeof blob).ok());
  REQUIRE(s.read_async(c, 0, z.data(), n * 4).ok());
  REQUIRE(s.record(stop).ok());
  REQUIRE(s.launch(k, {1}, {n}, &blob, sizeof blob).ok());
  REQUIRE(s.synchronize().ok());
  CHECK(z[0] == 3.0f);
  CHECK(z[n - 1] == 3.0f);
  CHECK_MESSAGE(unordered() == 0, "commands relying on an order their list did not ask for: ", unordered());
  // The ordering barriers (one after each transfer: fill, write, read; one each side of a
  // launch; one after a stamp) only on a list not made in order; the one before each stamp and
  // the synchronize's are always there.
  REQUIRE(in_order(s) >= 0);
  CHECK(fake().count("zeCommandListAppendBarrier") == (in_order(s) ? 0 : 3 + 4 + 2) + 2 + 1);
  }
}

TEST_CASE("an event recorded on one thread is queried, waited for and synchronized on others") {
  // hal.h lets an event be recorded on one thread and waited for on others. The backend's
  // "recorded" flag is read by every one of those calls: a plain bool there was a data race
  // (ThreadSanitizer reports it; this test is for a TSan build of tests/level_zero).
  auto d = open_ze();
  auto s1 = unwrap(d.create_stream()), s2 = unwrap(d.create_stream());
  auto b = unwrap(d.allocate(4096));
  for (const bool timing : {false, true}) {
    auto ev = unwrap(d.create_event(timing));
    std::atomic<bool> done{false};
    std::atomic<int> failures{0};
    std::thread recorder([&] {
      for (int i = 0; i < 200; ++i) {
        failures += !s1.fill<uint32_t>(b, 0, 4096, uint32_t(i)).ok();
        failures += !s1.record(ev).ok();
      }
      done = true;
    });
    std::thread querier([&] {
      while (!done) failures += !ev.query().ok();
    });
    std::thread waiter([&] {
      while (!done) failures += !ev.synchronize().ok() + !s2.wait(ev).ok();
    });
    recorder.join();
    querier.join();
    waiter.join();
    CHECK(failures == 0);
    REQUIRE(ev.synchronize().ok());
    CHECK(unwrap(ev.query()));
  }
  REQUIRE(s2.synchronize().ok());
}

TEST_CASE("partitions are whole sub-devices, and their streams go to their tile") {
  auto d = open_ze();
  auto caps = unwrap(d.partition_caps());
  CHECK(caps.mechanism == HAL_PARTITION_SUB_DEVICE);
  CHECK(caps.enforced == 1);
  CHECK(caps.min_units == 32);
  CHECK(caps.step_units == 32);
  auto [comm, rest] = unwrap(d.split(20));
  auto ci = unwrap(comm.info()), ri = unwrap(rest.info());
  CHECK(ci.units_granted == 32);  // 20 EUs round up to one tile
  CHECK(ci.mechanism == HAL_PARTITION_SUB_DEVICE);
  CHECK(ci.enforced == 1);
  CHECK(ri.units_granted == 32);
  CHECK(ri.first_unit == 32);
  auto s = unwrap(d.create_stream(&rest));
  CHECK(fake().last_list_device() == 2);  // sub-device 1
  auto again = d.split(1);
  REQUIRE(!again.ok());  // both tiles are taken
}

TEST_CASE("without sub-devices, partitions are soft caps") {
  open_ze();  // initialises the registry with the fake
  fake().set_tiles(0);
  auto d = unwrap(halcyon::Device::open("ze:0"));
  fake().set_tiles(2);
  CHECK(!d.has("partition.enforced"));
  auto caps = unwrap(d.partition_caps());
  CHECK(caps.mechanism == HAL_PARTITION_SOFT_CAP);
  CHECK(caps.enforced == 0);
  CHECK(caps.min_units == 1);
  auto [comm, rest] = unwrap(d.split(20));
  auto ci = unwrap(comm.info()), ri = unwrap(rest.info());
  CHECK(ci.units_granted == 20);
  CHECK(ci.mechanism == HAL_PARTITION_SOFT_CAP);
  CHECK(ci.enforced == 0);
  CHECK(ri.units_granted == 44);
  auto s = unwrap(d.create_stream(&comm));
  auto si = unwrap(s.info());
  CHECK(si.units == 20);  // what a persistent grid on this stream is sized by
  CHECK(fake().last_list_device() == 0);  // the root device: nothing enforces the cap
}

TEST_CASE("a lost device makes every later call an error that says so") {
  auto d = open_ze();
  auto s = unwrap(d.create_stream());
  auto b = unwrap(d.allocate(64));
  fake().inject("device_lost");
  auto st = s.fill<uint32_t>(b, 0, 64, 1u);
  REQUIRE(!st.ok());
  CHECK(st.error().status() == HAL_DEVICE_ERROR);
  CHECK(contains(st.error().message(), "ZE_RESULT_ERROR_DEVICE_LOST"));
  CHECK(contains(st.error().message(), "the device was lost"));
  auto sync = s.synchronize();
  REQUIRE(!sync.ok());
  CHECK(contains(sync.error().message(), "DEVICE_LOST"));
  fake().reset();  // the handles above are released with a working device
}
