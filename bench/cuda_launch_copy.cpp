// halcyon against the raw CUDA driver, in one run on one device:
//   1. launch overhead of an empty kernel (and of a 4-argument kernel): hal_stream_launch vs
//      cuLaunchKernel, host time per launch for bursts short enough not to fill the launch
//      queue (the submission cost), and for long runs (the sustained rate). Trials alternate
//      between the two; medians.
//   2. device-to-device copy of 1 GiB of random data: hal_stream_copy vs cuMemcpyDtoDAsync,
//      timed with events; medians; bandwidth counts bytes read plus bytes written.
// usage: halcyon_bench_cuda [--device cuda:0] [--launches N] [--trials T] [--copy-mib M]
#include <halcyon/hal.h>
#include <halcyon/ptx_kernels.hpp>

#include <fmt/format.h>

#include "cuda_driver.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace halcyon::cuda;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string& m) {
  fmt::print(stderr, "halcyon_bench_cuda: {}\n", m);
  std::exit(1);
}
void hal_ok(hal_error* e, const char* what) {
  if (e) die(fmt::format("{}: {}: {}", what, hal_status_name(hal_error_status(e)), hal_error_message(e)));
}
void cu_ok(const Driver* d, CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) die(fmt::format("{}: {}", what, result_string(*d, r)));
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct LaunchTimes {
  std::vector<double> submit_us, total_us;
};

}  // namespace

int main(int argc, char** argv) {
  std::string uri = "cuda:0";
  int launches = 20000, trials = 15;
  uint64_t copy_mib = 1024;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--device") uri = next();
    else if (a == "--launches") launches = std::stoi(next());
    else if (a == "--trials") trials = std::stoi(next());
    else if (a == "--copy-mib") copy_mib = std::stoull(next());
    else die("unknown option " + a);
  }
  std::string why;
  const Driver* d = load_driver(&why);
  if (!d) die("no CUDA driver: " + why);

  // --- halcyon side ---
  hal_device dev = nullptr;
  hal_ok(hal_device_open(uri.c_str(), &dev), "hal_device_open");
  hal_device_info info{};
  info.struct_size = sizeof info;
  hal_ok(hal_device_get_info(dev, &info), "hal_device_get_info");
  hal_stream hs = nullptr;
  hal_ok(hal_stream_create(dev, nullptr, &hs), "hal_stream_create");
  auto load = [&](const char* name, const char* entry, const halcyon::ptx::Image** img_out) {
    const halcyon::ptx::Image* img = halcyon::ptx::best_for(name, info.arch, [&](const halcyon::ptx::Image& i) {
      bool yes = false;
      hal_error_free(hal_device_can_run(dev, HAL_MODULE_PTX, i.target, &yes, nullptr, 0));
      return yes;
    });
    if (!img) die(fmt::format("no PTX of {} for {}", name, info.arch));
    *img_out = img;
    hal_module_desc md{};
    md.struct_size = sizeof md;
    md.format = HAL_MODULE_PTX;
    md.target = img->target;
    md.data = img->text;
    md.size = img->size;
    md.name = name;
    hal_module m = nullptr;
    hal_ok(hal_module_load(dev, &md, &m), "hal_module_load");
    hal_kernel k = nullptr;
    hal_ok(hal_module_get_kernel(m, entry, &k), "hal_module_get_kernel");
    return k;
  };
  const halcyon::ptx::Image *empty_img = nullptr, *va_img = nullptr;
  hal_kernel hk_empty = load("empty", "empty_kernel", &empty_img);
  hal_kernel hk_va = load("vector_add", "vector_add", &va_img);

  // --- raw driver side: the same PTX, the classic module API, its own stream ---
  CUdevice cdev = 0;
  cu_ok(d, d->cuDeviceGet(&cdev, std::stoi(uri.substr(uri.find(':') + 1))), "cuDeviceGet");
  CUcontext ctx = nullptr;
  cu_ok(d, d->cuDevicePrimaryCtxRetain(&ctx, cdev), "cuDevicePrimaryCtxRetain");
  cu_ok(d, d->cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  auto raw_load = [&](const halcyon::ptx::Image* img, const char* entry) {
    CUmodule m = nullptr;
    cu_ok(d, d->cuModuleLoadDataEx(&m, img->text, 0, nullptr, nullptr), "cuModuleLoadDataEx");
    CUfunction f = nullptr;
    cu_ok(d, d->cuModuleGetFunction(&f, m, entry), "cuModuleGetFunction");
    return f;
  };
  CUfunction rf_empty = raw_load(empty_img, "empty_kernel");
  CUfunction rf_va = raw_load(va_img, "vector_add");
  CUstream rs = nullptr;
  cu_ok(d, d->cuStreamCreate(&rs, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  fmt::print("device {}: {} ({}, {} SMs), driver CUDA {}\n", info.uri, info.name, info.arch, info.compute_units,
             version_string(d->version));

  // Arguments for vector_add with n = 0: a real 4-argument launch that does no work.
  hal_buffer hbuf = nullptr;
  hal_buffer_desc bd{};
  bd.struct_size = sizeof bd;
  bd.size = 4096;
  hal_ok(hal_buffer_create(dev, &bd, &hbuf), "hal_buffer_create");
  hal_buffer_info bi{};
  bi.struct_size = sizeof bi;
  hal_ok(hal_buffer_get_info(hbuf, &bi), "hal_buffer_get_info");
  struct {
    uint64_t a, b, c;
    uint32_t n;
  } blob{bi.device_address, bi.device_address, bi.device_address, 0};
  void* raw_params[4] = {&blob.a, &blob.b, &blob.c, &blob.n};

  // Two regimes: a burst of `burst` launches stays under the driver's queue depth, so its host
  // time is the submission cost alone; `launches` back to back fill the queue, so submit plus
  // drain is the sustained rate (bounded by the GPU's kernel turnaround).
  const int burst = 256;
  auto bench_launch = [&](const char* label, hal_kernel hk, CUfunction rf, const void* args, size_t args_size,
                          void** params) {
    hal_launch_desc ld{};
    ld.struct_size = sizeof ld;
    ld.grid[0] = ld.grid[1] = ld.grid[2] = 1;
    ld.block[0] = 32;
    ld.block[1] = ld.block[2] = 1;
    ld.args = args;
    ld.args_size = args_size;
    auto hal_run = [&](LaunchTimes& t, int n) {
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) hal_ok(hal_stream_launch(hs, hk, &ld), "hal_stream_launch");
      auto t1 = Clock::now();
      hal_ok(hal_stream_synchronize(hs), "hal_stream_synchronize");
      auto t2 = Clock::now();
      t.submit_us.push_back(seconds(t0, t1) * 1e6 / n);
      t.total_us.push_back(seconds(t0, t2) * 1e6 / n);
    };
    auto raw_run = [&](LaunchTimes& t, int n) {
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) cu_ok(d, d->cuLaunchKernel(rf, 1, 1, 1, 32, 1, 1, 0, rs, params, nullptr), "cuLaunchKernel");
      auto t1 = Clock::now();
      cu_ok(d, d->cuStreamSynchronize(rs), "cuStreamSynchronize");
      auto t2 = Clock::now();
      t.submit_us.push_back(seconds(t0, t1) * 1e6 / n);
      t.total_us.push_back(seconds(t0, t2) * 1e6 / n);
    };
    auto pair = [&](int n, int reps, LaunchTimes& h, LaunchTimes& r) {
      LaunchTimes warm;
      hal_run(warm, n);
      raw_run(warm, n);
      for (int t = 0; t < reps; ++t) {  // alternate which goes first
        if (t % 2) {
          hal_run(h, n);
          raw_run(r, n);
        } else {
          raw_run(r, n);
          hal_run(h, n);
        }
      }
    };
    LaunchTimes hb, rb, hs_, rs2;
    pair(burst, 20 * trials, hb, rb);
    pair(launches, trials, hs_, rs2);
    double bh = median(hb.submit_us), br = median(rb.submit_us);
    double sh = median(hs_.total_us), sr = median(rs2.total_us);
    fmt::print("launch {:<22} submit cost ({} per burst, {} bursts): halcyon {:.3f} us, raw cuLaunchKernel {:.3f} us, "
               "ratio {:.3f}\n",
               label, burst, 20 * trials, bh, br, bh / br);
    fmt::print("launch {:<22} sustained ({} back to back, {} trials, submit+drain): halcyon {:.3f} us, raw {:.3f} us, "
               "ratio {:.3f}\n",
               label, launches, trials, sh, sr, sh / sr);
  };
  bench_launch("empty_kernel()", hk_empty, rf_empty, nullptr, 0, nullptr);
  bench_launch("vector_add(4 args,n=0)", hk_va, rf_va, &blob, 28, raw_params);

  // --- 1 GiB device-to-device copy ---
  const uint64_t bytes = copy_mib << 20;
  hal_buffer hsrc = nullptr, hdst = nullptr;
  bd.size = bytes;
  hal_ok(hal_buffer_create(dev, &bd, &hsrc), "hal_buffer_create src");
  hal_ok(hal_buffer_create(dev, &bd, &hdst), "hal_buffer_create dst");
  {
    std::vector<uint64_t> host(bytes / 8);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (auto& v : host) {  // xorshift64: random bytes, quickly
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = x;
    }
    hal_ok(hal_stream_write(hs, hsrc, 0, host.data(), bytes), "hal_stream_write");
    hal_ok(hal_stream_synchronize(hs), "hal_stream_synchronize");
  }
  hal_buffer_info si{}, di{};
  si.struct_size = di.struct_size = sizeof si;
  hal_ok(hal_buffer_get_info(hsrc, &si), "info");
  hal_ok(hal_buffer_get_info(hdst, &di), "info");
  CUdeviceptr rsrc = 0, rdst = 0;
  cu_ok(d, d->cuMemAlloc(&rsrc, bytes), "cuMemAlloc");
  cu_ok(d, d->cuMemAlloc(&rdst, bytes), "cuMemAlloc");
  cu_ok(d, d->cuMemcpyDtoDAsync(rsrc, si.device_address, bytes, rs), "seed raw src");
  cu_ok(d, d->cuStreamSynchronize(rs), "sync");
  hal_event he0 = nullptr, he1 = nullptr;
  hal_ok(hal_event_create(dev, nullptr, &he0), "hal_event_create");
  hal_ok(hal_event_create(dev, nullptr, &he1), "hal_event_create");
  CUevent re0 = nullptr, re1 = nullptr;
  cu_ok(d, d->cuEventCreate(&re0, CU_EVENT_DEFAULT), "cuEventCreate");
  cu_ok(d, d->cuEventCreate(&re1, CU_EVENT_DEFAULT), "cuEventCreate");
  auto hal_copy = [&] {
    hal_ok(hal_event_record(he0, hs), "record");
    hal_ok(hal_stream_copy(hs, hdst, 0, hsrc, 0, bytes), "hal_stream_copy");
    hal_ok(hal_event_record(he1, hs), "record");
    hal_ok(hal_event_synchronize(he1), "sync");
    float ms = 0;
    hal_ok(hal_event_elapsed_ms(he0, he1, &ms), "elapsed");
    return double(ms);
  };
  auto raw_copy = [&] {
    cu_ok(d, d->cuEventRecord(re0, rs), "record");
    cu_ok(d, d->cuMemcpyDtoDAsync(rdst, rsrc, bytes, rs), "cuMemcpyDtoDAsync");
    cu_ok(d, d->cuEventRecord(re1, rs), "record");
    cu_ok(d, d->cuEventSynchronize(re1), "sync");
    float ms = 0;
    cu_ok(d, d->cuEventElapsedTime(&ms, re0, re1), "elapsed");
    return double(ms);
  };
  for (int w = 0; w < 3; ++w) {
    hal_copy();
    raw_copy();
  }
  std::vector<double> hms, rms;
  for (int t = 0; t < 2 * trials; ++t) {
    if (t % 2) {
      hms.push_back(hal_copy());
      rms.push_back(raw_copy());
    } else {
      rms.push_back(raw_copy());
      hms.push_back(hal_copy());
    }
  }
  // The copy must be right, or its speed means nothing.
  {
    std::vector<uint64_t> a(bytes / 8), b(bytes / 8);
    hal_ok(hal_stream_read(hs, hsrc, 0, a.data(), bytes), "read");
    hal_ok(hal_stream_read(hs, hdst, 0, b.data(), bytes), "read");
    hal_ok(hal_stream_synchronize(hs), "sync");
    if (std::memcmp(a.data(), b.data(), bytes) != 0) die("hal_stream_copy result differs from its source");
  }
  double hm = median(hms), rm = median(rms);
  auto tbs = [&](double ms) { return 2.0 * double(bytes) / (ms * 1e-3) / 1e12; };
  fmt::print("copy D2D {} MiB: halcyon {:.3f} ms ({:.3f} TB/s), raw cuMemcpyDtoDAsync {:.3f} ms ({:.3f} TB/s), "
             "halcyon/raw rate {:.3f}  ({} trials each, medians, read+write bytes)\n",
             copy_mib, hm, tbs(hm), rm, tbs(rm), rm / hm, hms.size());
  d->cuMemFree(rsrc);
  d->cuMemFree(rdst);
  return 0;
}
