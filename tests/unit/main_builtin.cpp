// Unit tests against the CPU backend built into libhalcyon.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "test_support.hpp"

const char* test::device_uri() { return "cpu:0"; }

int main(int argc, char** argv) {
  // Hermetic: built-ins only.
  if (auto s = halcyon::init(HAL_INIT_NO_ENV_PATH | HAL_INIT_NO_INSTALL_DIR); !s) {
    std::fprintf(stderr, "hal_init: %s\n", s.error().message().c_str());
    return 1;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
