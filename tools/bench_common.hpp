// Shared by the `halcyon bench` benchmarks (cmd_bench.cpp: moe, cmd_bench_attention.cpp,
// cmd_bench_overlap.cpp):
// random device inputs without a host round trip, medians, and event timing of a GPU stage
// after an L2 flush.
#pragma once

#include <halcyon/halcyon.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace halcyon::bench {

namespace ops = halcyon::ops;

// Runs `halcyon bench attention ARGS` (cmd_bench_attention.cpp).
int bench_attention(const std::vector<std::string>& args);
// Runs `halcyon bench overlap ARGS` (cmd_bench_overlap.cpp).
int bench_overlap(const std::vector<std::string>& args);
// Runs `halcyon bench ep ARGS` (cmd_bench_ep.cpp).
int bench_ep(const std::vector<std::string>& args);

// Whether the device opened is the host CPU backend's (its URI "cpu:N"): the benches take host
// sizes and host copy rates there.
inline bool is_cpu(const hal_device_info& info) { return std::string(info.uri).rfind("cpu", 0) == 0; }

// Prints what failed and why ("halcyon bench: <what>: <error>"); returns the exit status 1.
inline int fail(const char* what, const halcyon::Error& e) {
  fmt::print(stderr, "halcyon bench: {}: {}\n", what, e.to_string());
  return 1;
}

// Bytes a bench writes before each timed run so that no run finds the previous one's data in
// cache. A GPU: twice its L2 (64 MiB assumed where the backend reports none), at least 256 MiB,
// which also takes ~100 us, so the host's launch path for the timed stage is done before the GPU
// reaches the start event. The CPU: 32 MiB (the host benches' tensors are a few MiB; with 256 MiB
// the CLI test of `bench moe` on the CPU took ~19 s, with 32 MiB ~4 s).
inline uint64_t flush_bytes(const hal_device_info& info) {
  if (is_cpu(info)) return 32u << 20;
  const uint64_t l2 = info.l2_cache_bytes ? info.l2_cache_bytes : (64u << 20);
  const uint64_t bytes = std::max<uint64_t>(2 * l2, 256u << 20);
  // A device of little memory (an emulated or small GPU) keeps three quarters for the work.
  return info.memory_bytes ? std::min<uint64_t>(bytes, info.memory_bytes / 4) : bytes;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Times in ms as a JSON list of microseconds ("us_each": every timed run, to show the spread
// that a median hides).
inline std::string us_list(const std::vector<double>& ms) {
  std::string s;
  for (double x : ms) s += fmt::format("{}{:.2f}", s.empty() ? "" : ", ", x * 1e3);
  return s;
}

// How far a series of timed runs moved: the median of its last quarter over that of its first,
// minus 1. On a GPU under its power cap a compute-bound kernel runs at full clock for its first
// ~50-100 ms of work and then slower (H200: 8-20%), so a median can sit in either regime; the
// GPU benches name each series that drifted more than kDriftNote (docs/PERFORMANCE.md, 2026-11-29
// fifth session; bench/paired_vs_torch.py compares with a peer in the same state).
constexpr double kDriftNote = 0.03;
inline double drift(const std::vector<double>& ms) {
  const size_t q = ms.size() / 4;
  if (q < 4) return 0;  // fewer than 16 runs: too few to tell
  const double first = median({ms.begin(), ms.begin() + q}), last = median({ms.end() - q, ms.end()});
  return first > 0 ? last / first - 1 : 0;
}

// Writes `text` to `path` (--json, --svg, ...); false, said on stderr as `command`'s, when it cannot.
inline bool write_file(const char* command, const std::string& path, const std::string& text) {
  FILE* fp = std::fopen(path.c_str(), "w");
  if (!fp) {
    fmt::print(stderr, "halcyon {}: cannot write {}\n", command, path);
    return false;
  }
  // fputs may only buffer: a full disk shows at fclose; both are checked, the file closed either way.
  const bool written = std::fputs(text.c_str(), fp) >= 0;
  if (std::fclose(fp) != 0 || !written) {
    fmt::print(stderr, "halcyon {}: writing {} failed: {}\n", command, path, std::strerror(errno));
    return false;
  }
  return true;
}

// Fills a buffer with random bf16 values in +-[2^-8, 1) (never zero) or f32 in (-s, s), from
// a 16 MiB random block written once and replicated by device copies.
struct Filler {
  const halcyon::Device& dev;
  const halcyon::Stream& stream;
  halcyon::Buffer block;
  static constexpr uint64_t kBlock = 16u << 20;
  // bf16: magnitudes in [2^-8, 1) * 2^-shift.
  halcyon::Status init(uint32_t seed, bool f32, float scale, int shift = 0) {
    auto b = dev.allocate(kBlock);
    if (!b) return b.error();
    block = std::move(b).value();
    std::mt19937 rng(seed);
    std::vector<uint32_t> host(kBlock / 4);
    if (f32) {
      std::uniform_real_distribution<float> u(-scale, scale);
      for (auto& w : host) {
        float f;
        do f = u(rng);
        while (f == 0.f);
        std::memcpy(&w, &f, 4);
      }
    } else {
      auto one = [&] {  // sign, exponent 2^-8..2^-1 (scaled), 7 random mantissa bits
        uint32_t r = rng();
        uint32_t e = uint32_t(127 - 8 - shift) + (r % 8);
        return uint16_t(((r >> 8) & 1u) << 15 | e << 7 | ((r >> 9) & 0x7f));
      };
      for (auto& w : host) w = uint32_t(one()) | uint32_t(one()) << 16;
    }
    HALCYON_TRY(stream.write(block, 0, host.data(), kBlock));
    return stream.synchronize();  // the write may read `host` later
  }
  // e4m3 bytes: random sign and mantissa, exponent field 4..10 (magnitudes 2^-3 .. 2^3 * 1.875),
  // never the NaN codes 0x7f / 0xff.
  halcyon::Status init_e4m3(uint32_t seed) {
    auto b = dev.allocate(kBlock);
    if (!b) return b.error();
    block = std::move(b).value();
    std::mt19937 rng(seed);
    std::vector<uint8_t> host(kBlock);
    for (auto& v : host) {
      const uint32_t r = rng();
      v = uint8_t((r & 0x80u) | (4u + (r >> 8) % 7) << 3 | ((r >> 16) & 7u));
    }
    HALCYON_TRY(stream.write(block, 0, host.data(), kBlock));
    return stream.synchronize();
  }
  halcyon::Status fill(const ops::Tensor& t) {
    for (uint64_t off = 0; off < t.bytes(); off += kBlock) {
      // A shifting start inside the block so that rows of equal length do not repeat exactly.
      uint64_t shift = (off / kBlock * 4096) % (kBlock / 2);
      uint64_t n = std::min<uint64_t>(kBlock - shift, t.bytes() - off);
      HALCYON_TRY(stream.copy(t.buffer, t.offset + off, block, shift, n));
      if (n < std::min<uint64_t>(kBlock, t.bytes() - off)) {
        uint64_t rest = std::min<uint64_t>(kBlock, t.bytes() - off) - n;
        HALCYON_TRY(stream.copy(t.buffer, t.offset + off + n, block, 0, rest));
      }
    }
    return {};
  }
};

// Times fn() between two events, each run after a write of the flush buffer (twice the L2,
// and long enough that the host's launch work is done before the GPU reaches the start event):
// two warm-up runs (module load, JIT), runs (flush + fn) for preheat_ms of wall time, then
// `iters` timed ones. A preheat puts a compute-bound kernel in the clock it keeps under the GPU's
// power cap (a server's steady state; see drift()); without one the first ~50-100 ms of work run
// at full clock.
struct BenchTimer {
  const halcyon::Device& dev;
  const halcyon::Stream& s;
  const halcyon::Buffer& flush;
  uint64_t flush_bytes;
  halcyon::Event ev0, ev1;
  double preheat_ms = 0;  // --preheat-ms
  template <typename Fn>
  halcyon::Status time(Fn&& fn, int iters, std::vector<double>* ms) {
    for (int i = 0; i < 2; ++i) HALCYON_TRY(fn());  // warm-up (module load, JIT)
    HALCYON_TRY(preheat(fn));
    for (int i = 0; i < iters; ++i) HALCYON_TRY(one(fn, i, ms));
    return {};
  }
  // Two functions in alternating runs (a, b, a, b, ...), each run as time() runs one: both then
  // see the same clock and power state. (Timed one after the other, the second ran deeper under
  // the power cap: the MoE layer object 4.71-4.88 ms after its stage sequence's 4.25-4.27 ms
  // fell to 4.70-4.78 halfway, H200, docs/PERFORMANCE.md 2026-11-30 seventh session.)
  template <typename FnA, typename FnB>
  halcyon::Status time_alternating(FnA&& a, FnB&& b, int iters, std::vector<double>* ms_a, std::vector<double>* ms_b) {
    for (int i = 0; i < 2; ++i) {
      HALCYON_TRY(a());
      HALCYON_TRY(b());
    }
    HALCYON_TRY(preheat([&]() -> halcyon::Status {
      HALCYON_TRY(a());
      return b();
    }));
    for (int i = 0; i < iters; ++i) {
      HALCYON_TRY(one(a, i, ms_a));
      HALCYON_TRY(one(b, i, ms_b));
    }
    return {};
  }

 private:
  template <typename Fn>
  halcyon::Status preheat(Fn&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() < preheat_ms) {
      HALCYON_TRY(s.fill<uint32_t>(flush, 0, flush_bytes, 0x3f803f80u));
      HALCYON_TRY(fn());
      HALCYON_TRY(s.synchronize());
    }
    return {};
  }
  // Run i: the flush, then fn() between the two events; its time appended to *ms.
  template <typename Fn>
  halcyon::Status one(Fn&& fn, int i, std::vector<double>* ms) {
    HALCYON_TRY(s.fill<uint32_t>(flush, 0, flush_bytes, 0x3f803f80u + uint32_t(i)));
    HALCYON_TRY(s.record(ev0));
    HALCYON_TRY(fn());
    HALCYON_TRY(s.record(ev1));
    HALCYON_TRY(ev1.synchronize());
    auto e = ev1.elapsed_since(ev0);
    if (!e) return e.error();
    ms->push_back(*e);
    return {};
  }
};

// The device-to-device copy rate in TB/s, bytes read + written (2 GiB; 256 MiB on a CPU).
inline halcyon::Result<double> copy_tbps(const halcyon::Device& dev, BenchTimer& timer, bool cpu, int iters) {
  uint64_t n = cpu ? (256u << 20) : (2ull << 30);
  auto info = dev.info();
  if (!info) return info.error();
  if (info->memory_bytes) n = std::min<uint64_t>(n, info->memory_bytes / 8 & ~uint64_t(255));  // a small device
  auto a = dev.allocate(n), b = dev.allocate(n);
  if (!a) return a.error();
  if (!b) return b.error();
  HALCYON_TRY(timer.s.fill<uint32_t>(*a, 0, n, 0x3f803f80u));
  std::vector<double> ms;
  HALCYON_TRY(timer.time([&] { return timer.s.copy(*b, 0, *a, 0, n); }, std::max(iters, 10), &ms));
  return 2.0 * double(n) / (median(ms) * 1e-3) / 1e12;
}

}  // namespace halcyon::bench
