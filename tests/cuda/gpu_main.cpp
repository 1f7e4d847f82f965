// Runs the tests on cuda:0, or exits with 77 (skipped) saying why no CUDA device can be used.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halcyon/halcyon.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace test {
const char* device_uri() { return "cuda:0"; }
}  // namespace test

int main(int argc, char** argv) {
  // Hermetic: built-ins only, no PTX cache unless the JIT cache test's child asks for one
  // (HALCYON_TEST_PTX_CACHE, this test program's own variable, becomes cuda.cache_dir).
  const char* cache = std::getenv("HALCYON_TEST_PTX_CACHE");
  std::string options = cache ? std::string("cuda.cache_dir=") + cache : "";
  if (auto s = halcyon::init(HAL_INIT_NO_INSTALL_DIR, nullptr, cache ? options.c_str() : nullptr); !s) {
    std::fprintf(stderr, "hal_init: %s\n", s.error().message().c_str());
    return 1;
  }
  hal_device dev = nullptr;
  if (hal_error* e = hal_device_open("cuda:0", &dev)) {
    hal_status st = hal_error_status(e);
    std::printf("SKIPPED: no CUDA device can be opened: %s: %s\n", hal_status_name(st), hal_error_message(e));
    hal_error_free(e);
    if (st == HAL_UNAVAILABLE || st == HAL_NOT_FOUND) return 77;
    return 1;
  }
  hal_device_info info{};
  info.struct_size = sizeof info;
  hal_error_free(hal_device_get_info(dev, &info));
  std::printf("testing on %s: %s (%s, %u SMs)\n", info.uri, info.name, info.arch, info.compute_units);
  hal_error_free(hal_device_release(dev));
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
