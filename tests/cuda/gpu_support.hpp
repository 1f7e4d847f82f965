// Helpers for the GPU tests: embedded PTX loading and random data.
#pragma once

#include <halcyon/halcyon.hpp>
#include <halcyon/ptx_kernels.hpp>

#include "test_support.hpp"

#include <random>
#include <string>
#include <vector>

namespace gpu {

inline halcyon::Device open() { return test::unwrap(halcyon::Device::open("cuda:0")); }

inline std::string arch(const halcyon::Device& dev) { return test::unwrap(dev.info()).arch; }

// The embedded PTX of `name` that suits the device (exact tag, else newest portable).
inline halcyon::Module load(const halcyon::Device& dev, const char* name) {
  const halcyon::ptx::Image* img = halcyon::ptx::best_for(
      name, arch(dev), [&](const halcyon::ptx::Image& i) { return test::unwrap(dev.can_run(HAL_MODULE_PTX, i.target)); });
  REQUIRE_MESSAGE(img, "no embedded PTX of ", name, " for ", arch(dev));
  return test::unwrap(dev.load_module(HAL_MODULE_PTX, img->target, img->text, img->size + 1,
                                      (std::string(name) + "." + img->target + ".ptx").c_str()));
}

inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace gpu
