// Unit tests against the CPU backend built into libhalcyon.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "test_support.hpp"

const char* test::device_uri() { return "cpu:0"; }

int main(int argc, char** argv) {
  hal_init_desc d{};
  d.struct_size = sizeof d;
  d.flags = HAL_INIT_NO_ENV_PATH | HAL_INIT_NO_INSTALL_DIR;  // hermetic: built-ins only
  if (hal_error* e = hal_init(&d)) {
    std::fprintf(stderr, "hal_init: %s\n", hal_error_message(e));
    return 1;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
