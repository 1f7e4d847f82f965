// Helpers shared by the AMD tests: code objects from the build, amdgpu-sim devices through the
// public C++ API, typed buffers, seeded inputs and CPU-side bf16/f16 rounding.
#pragma once

#include <doctest/doctest.h>
#include <halcyon/halcyon.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace amdtest {

// Fails the current test with the error when `r` holds one.
template <typename T>
T must(halcyon::Result<T> r, const char* what) {
  if (!r) FAIL(std::string(what) << ": " << r.error().to_string());
  return std::move(r).value();
}
inline void must(halcyon::Status s, const char* what) {
  if (!s) FAIL(std::string(what) << ": " << s.error().to_string());
}

inline std::vector<unsigned char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(bool(in), "cannot open " << path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A test code object built by tests/amd/CMakeLists.txt: "<name>.<arch>.hsaco".
inline std::vector<unsigned char> test_object(const std::string& name, const std::string& arch) {
  return read_file(std::string(HALCYON_AMD_TEST_CO_DIR) + "/" + name + "." + arch + ".hsaco");
}

struct Sim {
  halcyon::Device dev;
  halcyon::Stream stream;
  std::string arch;

  explicit Sim(const std::string& a) : arch(a) {
    dev = must(halcyon::Device::open(("amdgpu-sim:" + a).c_str()), "open amdgpu-sim");
    stream = must(dev.create_stream(), "create stream");
  }
  template <typename T>
  halcyon::Buffer upload(const std::vector<T>& v) {
    auto b = must(dev.allocate(std::max<size_t>(1, v.size()) * sizeof(T)), "allocate");
    must(stream.write(b, 0, v.data(), v.size() * sizeof(T)), "write");
    return b;
  }
  template <typename T>
  halcyon::Buffer poisoned(size_t n) {  // outputs start as NaN/garbage, never as zeros
    auto b = must(dev.allocate(std::max<size_t>(1, n) * sizeof(T)), "allocate");
    must(stream.fill(b, 0, n * sizeof(T), uint32_t(0x7fc0dead)), "fill");
    return b;
  }
  template <typename T>
  std::vector<T> download(const halcyon::Buffer& b, size_t n) {
    std::vector<T> out(n);
    must(stream.read(b, 0, out.data(), n * sizeof(T)), "read");
    must(stream.synchronize(), "synchronize");
    return out;
  }
  halcyon::Module load(const std::vector<unsigned char>& co, const char* name) {
    return must(dev.load_module(HAL_MODULE_HSACO, arch.c_str(), co.data(), co.size(), name), "load module");
  }
};

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fff + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}
inline float from_bf16(uint16_t h) {
  uint32_t b = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint16_t to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline float from_f16(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return float(h);
}

// ||out - ref|| / ||ref|| and a NaN/Inf check.
inline double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Reference GEMM with inputs given as 16-bit patterns decoded by `dec`.
template <typename Dec>
std::vector<double> gemm_ref(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int m, int n, int k, Dec dec) {
  std::vector<double> c(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) s += double(dec(a[size_t(i) * k + p])) * double(dec(b[size_t(p) * n + j]));
      c[size_t(i) * n + j] = s;
    }
  return c;
}

}  // namespace amdtest
