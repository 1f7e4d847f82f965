// Modules (PTX and cubin), kernel argument layouts, launches, events around kernels, the JIT
// cache and the errors of each.
#include "gpu_support.hpp"
#include "ptx_cache.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

using test::expect_error;
using test::expect_ok;
using test::unwrap;

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), {});
}

hal_error* load_raw(const halcyon::Device& dev, hal_module_format f, const char* target, const std::string& text,
                    hal_module* out) {
  hal_module_desc d{};
  d.struct_size = sizeof d;
  d.format = f;
  d.target = target;
  d.data = text.data();
  d.size = text.size();
  d.name = "test";
  return hal_module_load(dev.get(), &d, out);
}

void check_vector_add(const halcyon::Device& dev, const halcyon::Kernel& k, uint32_t n) {
  auto s = unwrap(dev.create_stream());
  auto x = gpu::random_floats(n, n), y = gpu::random_floats(n, n + 1);
  auto a = unwrap(dev.allocate(n * 4)), b = unwrap(dev.allocate(n * 4)), c = unwrap(dev.allocate(n * 4 + 4));
  unwrap(s.write(a, 0, x.data(), n * 4));
  unwrap(s.write(b, 0, y.data(), n * 4));
  unwrap(s.fill<uint32_t>(c, 0, n * 4 + 4, 0x7FC00001u));
  halcyon::ArgPack args;
  args.pointer(a).pointer(b).pointer(c).value(n);
  unwrap(s.launch(k, {(n + 127) / 128}, {128}, args));
  std::vector<float> got(n + 1);
  unwrap(s.read(c, 0, got.data(), n * 4 + 4));
  unwrap(s.synchronize());
  size_t bad = 0;
  for (uint32_t i = 0; i < n; ++i) bad += got[i] != x[i] + y[i];
  CHECK(bad == 0);
  uint32_t guard;
  std::memcpy(&guard, &got[n], 4);
  CHECK(guard == 0x7FC00001u);  // nothing written past n
}

// vector_add's inputs and output on one stream, for launches with dynamic shared memory (which
// the kernel does not use: the launch is refused or not by the attribute alone).
struct AddJob {
  static constexpr uint32_t n = 4096;
  halcyon::Stream s;
  halcyon::Buffer a, b, c;
  std::vector<float> x, y;
  halcyon::ArgPack args;

  AddJob(const halcyon::Device& dev, uint32_t seed)
      : s(unwrap(dev.create_stream())), a(unwrap(dev.allocate(n * 4))), b(unwrap(dev.allocate(n * 4))),
        c(unwrap(dev.allocate(n * 4))), x(gpu::random_floats(n, seed)), y(gpu::random_floats(n, seed + 1)) {
    unwrap(s.write(a, 0, x.data(), n * 4));
    unwrap(s.write(b, 0, y.data(), n * 4));
    unwrap(s.synchronize());
    args.pointer(a).pointer(b).pointer(c).value(n);
  }
  // "" when the launch succeeded, else its error. Thread-safe: no doctest assertion.
  std::string launch(const halcyon::Kernel& k, uint32_t shared_bytes) {
    auto st = s.launch(k, {n / 128}, {128}, args, shared_bytes);
    return st.ok() ? "" : fmt::format("{} bytes: {}", shared_bytes, st.error().message());
  }
  // Elements of c that are not x + y, after clearing c to NaN, one launch and a read.
  size_t wrong_after(const halcyon::Kernel& k, uint32_t shared_bytes) {
    unwrap(s.fill<uint32_t>(c, 0, n * 4, 0x7FC00001u));
    std::string e = launch(k, shared_bytes);
    CHECK_MESSAGE(e.empty(), e);
    std::vector<float> got(n);
    unwrap(s.read(c, 0, got.data(), n * 4));
    unwrap(s.synchronize());
    size_t bad = 0;
    for (uint32_t i = 0; i < n; ++i) bad += got[i] != x[i] + y[i];
    return bad;
  }
};

std::mutex log_mu;
std::vector<std::string> log_lines;
void capture(void*, hal_log_level, const char* m) {
  std::lock_guard lock(log_mu);
  log_lines.push_back(m);
}

}  // namespace

TEST_CASE("cuda: vector_add from PTX, both targets, argument layout from the PTX") {
  auto dev = gpu::open();
  for (const char* target : {"sm_80", "sm_90a"}) {
    if (target == std::string("sm_90a") && gpu::arch(dev) != "sm_90a") continue;
    CAPTURE(target);
    auto* img = halcyon::ptx::find("vector_add", target);
    REQUIRE(img);
    auto mod = unwrap(dev.load_module(HAL_MODULE_PTX, target, img->text, img->size, "vector_add"));
    auto k = unwrap(mod.kernel("vector_add"));
    auto info = unwrap(k.info());
    CHECK(info.arg_count == 4);
    CHECK(info.args_size == 28);
    CHECK(info.max_threads_per_block > 0);
    CHECK(info.registers > 0);
    auto args = unwrap(k.args());
    CHECK(args[2].offset == 16);
    CHECK(args[3].offset == 24);
    CHECK(args[3].size == 4);
    CHECK(args[0].kind == HAL_ARG_VALUE);  // nvcc's .u64 parameters carry no pointer mark
    for (uint32_t n : {1u, 127u, 128u, 1000003u}) check_vector_add(dev, k, n);
  }
}

TEST_CASE("cuda: .ptr parameters are reported as pointers") {
  auto dev = gpu::open();
  auto mod = gpu::load(dev, "smid_record");
  auto k = unwrap(mod.kernel("smid_record"));
  auto args = unwrap(k.args());
  REQUIRE(args.size() == 2);
  CHECK(args[0].kind == HAL_ARG_POINTER);
  CHECK(args[1].kind == HAL_ARG_VALUE);
  CHECK(unwrap(k.info()).args_size == 16);
}

TEST_CASE("cuda: a cubin built by ptxas loads and runs") {
  auto dev = gpu::open();
  if (gpu::arch(dev) != "sm_90a") {
    MESSAGE("the build's cubins are for sm_90a; device is " << gpu::arch(dev));
    return;
  }
  auto bin = read_file(std::string(HALCYON_PTX_BINARY_DIR) + "/vector_add.sm_90a.cubin");
  auto mod = unwrap(dev.load_module(HAL_MODULE_CUBIN, "sm_90a", bin.data(), bin.size(), "vector_add.sm_90a.cubin"));
  auto k = unwrap(mod.kernel("vector_add"));
  CHECK(unwrap(k.info()).args_size == 28);
  check_vector_add(dev, k, 4099);
  // A cubin of another major version is refused before the driver sees it.
  auto bin80 = read_file(std::string(HALCYON_PTX_BINARY_DIR) + "/vector_add.sm_80.cubin");
  hal_module m = nullptr;
  hal_module_desc d{};
  d.struct_size = sizeof d;
  d.format = HAL_MODULE_CUBIN;
  d.target = "sm_80";
  d.data = bin80.data();
  d.size = bin80.size();
  expect_error(hal_module_load(dev.get(), &d, &m), HAL_ARCH_MISMATCH, "sm_80");
}

TEST_CASE("cuda: architecture and tag errors name both sides") {
  auto dev = gpu::open();
  auto* img = halcyon::ptx::find("vector_add", "sm_80");
  REQUIRE(img);
  std::string text(img->text, img->size);
  hal_module m = nullptr;
  // PTX for an architecture this device is not (sm_100a on Hopper, sm_90a elsewhere).
  const char* foreign = gpu::arch(dev) == "sm_100a" ? "sm_90a" : "sm_100a";
  std::string retagged = text;
  retagged.replace(retagged.find(".target sm_80"), 13, std::string(".target ") + foreign);
  expect_error(load_raw(dev, HAL_MODULE_PTX, foreign, retagged, &m), HAL_ARCH_MISMATCH, foreign);
  // The tag given and the PTX's own .target disagree.
  expect_error(load_raw(dev, HAL_MODULE_PTX, "sm_86", text, &m), HAL_INVALID_ARGUMENT, ".target sm_80");
  expect_error(load_raw(dev, HAL_MODULE_PTX, "gfx942", text, &m), HAL_ARCH_MISMATCH, "gfx942");
  expect_error(load_raw(dev, HAL_MODULE_HOST, "host", text, &m), HAL_ARCH_MISMATCH, "host");
}

TEST_CASE("cuda: broken PTX carries the JIT's error log into the message") {
  auto dev = gpu::open();
  std::string bad =
      ".version 7.0\n.target sm_80\n.address_size 64\n"
      ".visible .entry broken(.param .u64 p)\n{\n  .reg .b32 %r<2>;\n"
      "  mov.u32 %r1, %no_such_register;\n  frobnicate.u32 %r1, %r1;\n  ret;\n}\n";
  hal_module m = nullptr;
  hal_error* e = load_raw(dev, HAL_MODULE_PTX, "sm_80", bad, &m);
  REQUIRE(e != nullptr);
  std::string msg = hal_error_message(e);
  MESSAGE(msg);
  CHECK(hal_error_status(e) == HAL_DEVICE_ERROR);
  CHECK(msg.find("PTX JIT compilation failed") != std::string::npos);
  CHECK(msg.find("ptxas") != std::string::npos);  // the log itself, not only the status
  CHECK(msg.find("line") != std::string::npos);
  hal_error_free(e);
}

TEST_CASE("cuda: unknown kernels and wrong launches are refused") {
  auto dev = gpu::open();
  auto mod = gpu::load(dev, "vector_add");
  hal_kernel k = nullptr;
  expect_error(hal_module_get_kernel(mod.get(), "vector_sub", &k), HAL_NOT_FOUND, "vector_add");
  auto kern = unwrap(mod.kernel("vector_add"));
  auto s = unwrap(dev.create_stream());
  auto buf = unwrap(dev.allocate(1024));
  halcyon::ArgPack short_args;
  short_args.pointer(buf).pointer(buf).pointer(buf);  // 24 bytes, the kernel takes 28
  auto st = s.launch(kern, {1}, {32}, short_args);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().status() == HAL_INVALID_ARGUMENT);
  CHECK(st.error().message().find("28-byte") != std::string::npos);
  halcyon::ArgPack args;
  args.pointer(buf).pointer(buf).pointer(buf).value(uint32_t(0));
  auto too_big = s.launch(kern, {1}, {2048}, args);
  REQUIRE_FALSE(too_big.ok());
  CHECK(too_big.error().status() == HAL_INVALID_ARGUMENT);
  // A launch the driver itself rejects (more dynamic shared memory than the device has).
  auto i = unwrap(dev.info());
  auto st2 = s.launch(kern, {1}, {32}, args, i.max_shared_per_block + 1);
  CHECK_FALSE(st2.ok());
  unwrap(s.launch(kern, {1}, {32}, args));  // n = 0: nothing to do, but a valid launch
  unwrap(s.synchronize());
}

TEST_CASE("cuda: events time kernels and order streams") {
  auto dev = gpu::open();
  auto mod = gpu::load(dev, "smid_record");
  auto k = unwrap(mod.kernel("smid_record"));
  auto a = unwrap(dev.create_stream()), b = unwrap(dev.create_stream());
  auto start = unwrap(dev.create_event()), end = unwrap(dev.create_event());
  auto ids = unwrap(dev.allocate(4 * 1024));
  halcyon::ArgPack args;
  args.pointer(ids).value(uint64_t(20'000'000));  // ~10 ms at 2 GHz
  unwrap(a.record(start));
  unwrap(a.launch(k, {1}, {32}, args));
  unwrap(a.record(end));
  CHECK_FALSE(unwrap(end.query()));  // the spin is still running
  // b waits for a's kernel, then overwrites the id it wrote.
  unwrap(b.wait(end));
  unwrap(b.fill<uint32_t>(ids, 0, 4, 0xABCDu));
  uint32_t v = 0;
  unwrap(b.read(ids, 0, &v, 4));
  unwrap(b.synchronize());
  CHECK(v == 0xABCDu);
  CHECK(unwrap(end.query()));
  float ms = unwrap(end.elapsed_since(start));
  MESSAGE("spin of 2e7 cycles: " << ms << " ms");
  CHECK(ms > 1.0f);
  CHECK(ms < 1000.0f);
}

namespace {

// The cache folder is read when the backend starts, so cache tests run their checks in a child
// process: this program again, running the test cases `filter` names with HALCYON_TEST_PTX_CACHE
// (gpu_main.cpp passes it as cuda.cache_dir) set to `dir`. Returns the child's exit code.
int run_cache_child(const std::string& dir, const char* filter) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setenv("HALCYON_TEST_PTX_CACHE", dir.c_str(), 1);
    // A fresh registry would be needed; exec ourselves with a filter instead.
    execl("/proc/self/exe", "halcyon_cuda_gpu_tests", filter, "--no-intro", static_cast<char*>(nullptr));
    _exit(3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}

std::vector<std::string> cubin_files(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).ends_with(".cubin")) files.push_back(e->d_name);
    closedir(d);
  }
  return files;
}

// A fresh folder's not yet made "ptx" subfolder, the folder's name starting with `prefix`.
std::string fresh_cache_dir(const std::string& prefix) {
  std::string tmpl = prefix + "XXXXXX";
  REQUIRE(mkdtemp(tmpl.data()));
  return tmpl + "/ptx";
}

// Loads vector_add's PTX (through the cache, when there is one) and checks a launch of it.
void load_and_run_vector_add(const halcyon::Device& dev) {
  auto mod = gpu::load(dev, "vector_add");
  check_vector_add(dev, unwrap(mod.kernel("vector_add")), 1000);
}

// Log lines captured so far that contain `what`.
int logged(const std::string& what) {
  std::lock_guard lock(log_mu);
  return int(std::count_if(log_lines.begin(), log_lines.end(),
                           [&](const std::string& l) { return l.find(what) != std::string::npos; }));
}

// The cache folder of this process when it is the child of the test whose folders start with
// `prefix`, else "" (the case is then skipped: it only runs in that child).
std::string cache_child_dir(const char* prefix) {
  const char* dir = std::getenv("HALCYON_TEST_PTX_CACHE");
  return dir && std::string(dir).starts_with(prefix) ? dir : "";
}

}  // namespace

TEST_CASE("cuda: the PTX JIT cache writes one file per PTX and reuses it") {
  const std::string dir = fresh_cache_dir("/tmp/halcyon_gpu_cache_");
  CHECK(run_cache_child(dir, "--test-case=cuda: cache child*") == 0);
  CHECK(cubin_files(dir).size() == 1);
}

TEST_CASE("cuda: cache child (run by the JIT cache test)") {
  if (cache_child_dir("/tmp/halcyon_gpu_cache_").empty()) return;  // only in the child
  hal_set_log_callback(capture, nullptr);
  auto dev = gpu::open();
  for (int i = 0; i < 2; ++i) load_and_run_vector_add(dev);
  hal_set_log_callback(nullptr, nullptr);
  CHECK(logged("PTX cache stored") == 1);
  CHECK(logged("PTX cache hit") == 1);
}

// An entry can pass every check of the cache (key, size, checksum) and still be no cubin the
// driver loads: loading the PTX must then compile it, as on a miss, not fail.
TEST_CASE("cuda: a cache entry the driver refuses is dropped, the PTX compiled and the entry rewritten") {
  const std::string dir = fresh_cache_dir("/tmp/halcyon_gpu_badcache_");
  CHECK(run_cache_child(dir, "--test-case=cuda: refused cache entry child*") == 0);
  CHECK(cubin_files(dir).size() == 1);
}

TEST_CASE("cuda: refused cache entry child (run by the refused cache entry test)") {
  const std::string dir = cache_child_dir("/tmp/halcyon_gpu_badcache_");
  if (dir.empty()) return;  // only in the child
  hal_set_log_callback(capture, nullptr);
  auto dev = gpu::open();
  load_and_run_vector_add(dev);  // a miss: compiled and stored
  REQUIRE(logged("PTX cache stored") == 1);
  auto files = cubin_files(dir);
  REQUIRE(files.size() == 1);
  halcyon::cuda::PtxCacheKey key;
  REQUIRE(halcyon::cuda::read_cache_key(dir + "/" + files[0], &key));
  // Well-formed for the cache, garbage for the driver: neither ELF nor fatbin, so the driver
  // reads it as PTX text, which the NUL at its end stops (the loader takes no size).
  std::string junk(4096, 'j');
  junk.back() = '\0';
  halcyon::cuda::PtxCache cache(dir);
  std::string why;
  REQUIRE_MESSAGE(cache.store(key, junk.data(), junk.size(), &why), why);
  load_and_run_vector_add(dev);  // a hit the driver refuses: compiled again and the entry rewritten
  CHECK(logged("was refused by the driver") == 1);
  CHECK(logged("PTX cache stored") == 2);
  std::vector<char> now;
  REQUIRE(cache.load(key, &now));
  CHECK(std::string(now.begin(), now.end()) != junk);
  load_and_run_vector_add(dev);  // the rewritten entry loads
  hal_set_log_callback(nullptr, nullptr);
  CHECK(logged("PTX cache hit") == 2);
  CHECK(logged("was refused by the driver") == 1);
}

// The dynamic shared memory attribute belongs to the CUfunction, which every handle of the entry
// shares: a launch asking less through a second handle must not lower it under the first.
TEST_CASE("cuda: dynamic shared memory raised through one kernel handle stays raised for another") {
  auto dev = gpu::open();
  auto i = unwrap(dev.info());
  if (i.max_shared_per_block < 100 * 1024) {
    MESSAGE("the device allows only " << i.max_shared_per_block << " bytes of shared memory per block");
    return;
  }
  auto mod = gpu::load(dev, "vector_add");
  auto k1 = unwrap(mod.kernel("vector_add")), k2 = unwrap(mod.kernel("vector_add"));
  AddJob job(dev, 21);
  CHECK(job.wrong_after(k1, 100 * 1024) == 0);
  CHECK(job.wrong_after(k2, 60 * 1024) == 0);
  CHECK(job.wrong_after(k1, 100 * 1024) == 0);  // was CUDA_ERROR_INVALID_VALUE: the attribute read 60 KB
}

// Concurrent launches of one kernel asking different dynamic shared sizes (each round a fresh
// handle, whose cached limit starts at 48 KB): every launch succeeds and computes right.
TEST_CASE("cuda: concurrent launches with different dynamic shared sizes all succeed") {
  auto dev = gpu::open();
  auto i = unwrap(dev.info());
  if (i.max_shared_per_block <= 48 * 1024) {
    MESSAGE("the device allows only " << i.max_shared_per_block << " bytes of shared memory per block");
    return;
  }
  auto mod = gpu::load(dev, "vector_add");
  constexpr uint32_t kThreads = 8, kRounds = 32, kLaunches = 4;
  std::vector<halcyon::Kernel> kernels;
  for (uint32_t r = 0; r < kRounds; ++r) kernels.push_back(unwrap(mod.kernel("vector_add")));
  std::vector<std::unique_ptr<AddJob>> jobs;
  for (uint32_t t = 0; t < kThreads; ++t) jobs.push_back(std::make_unique<AddJob>(dev, 100 + 2 * t));
  // From just over the default 48 KB to the device's maximum, largest first in half the threads.
  std::vector<uint32_t> sizes(kThreads);
  const uint32_t span = i.max_shared_per_block - 48 * 1024;
  for (uint32_t t = 0; t < kThreads; ++t) {
    uint32_t step = t % 2 ? t + 1 : kThreads - t;
    sizes[t] = 48 * 1024 + span * step / kThreads / 16 * 16;
  }
  std::vector<std::string> failures(kThreads);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (uint32_t r = 0; r < kRounds; ++r) {
        start.arrive_and_wait();
        for (uint32_t l = 0; l < kLaunches && failures[t].empty(); ++l)
          failures[t] = jobs[t]->launch(kernels[r], sizes[t]);
      }
    });
  for (auto& th : threads) th.join();
  for (uint32_t t = 0; t < kThreads; ++t) CHECK_MESSAGE(failures[t].empty(), "thread ", t, ": ", failures[t]);
  for (uint32_t t = 0; t < kThreads; ++t) CHECK(jobs[t]->wrong_after(kernels.back(), sizes[t]) == 0);
}

// By default a kernel's dynamic shared memory may not take its static shared memory past 48 KB:
// a handle must not assume 48 KB of dynamic memory for a kernel with static memory, or a launch
// asking exactly 48 KB skips raising the attribute and is refused.
TEST_CASE("cuda: 48 KB of dynamic shared memory for a kernel with static shared memory") {
  auto dev = gpu::open();
  auto mod = gpu::load(dev, "ops_basic");
  auto k = unwrap(mod.kernel("hc_row_softmax"));
  REQUIRE(unwrap(k.info()).static_shared_bytes > 0);
  auto s = unwrap(dev.create_stream());
  const uint32_t cols = 1000;
  auto x = gpu::random_floats(cols, 5);
  for (auto& v : x) v /= 10;
  auto bx = unwrap(dev.allocate(cols * 4)), by = unwrap(dev.allocate(cols * 4));
  unwrap(s.write(bx, 0, x.data(), cols * 4));
  halcyon::ArgPack args;
  args.pointer(bx).pointer(by).value(int64_t(1)).value(int64_t(cols));
  unwrap(s.launch(k, {1}, {256}, args, 48 * 1024));  // was CUDA_ERROR_INVALID_VALUE
  std::vector<float> y(cols);
  unwrap(s.read(by, 0, y.data(), cols * 4));
  unwrap(s.synchronize());
  double m = *std::max_element(x.begin(), x.end()), sum = 0;
  for (float v : x) sum += std::exp(double(v) - m);
  size_t bad = 0;
  for (uint32_t i = 0; i < cols; ++i) bad += std::fabs(y[i] - std::exp(double(x[i]) - m) / sum) > 1e-5;
  CHECK(bad == 0);
}
