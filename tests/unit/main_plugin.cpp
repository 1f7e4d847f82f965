// The same API tests, against the CPU backend loaded as an external plugin file: no
// built-in backends at all, so every call goes through the dlopen'ed table.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "test_support.hpp"

const char* test::device_uri() { return "cpu:0"; }

int main(int argc, char** argv) {
  if (auto s = halcyon::init(HAL_INIT_NO_BUILTIN_BACKENDS | HAL_INIT_NO_ENV_PATH | HAL_INIT_NO_INSTALL_DIR,
                              HALCYON_CPU_PLUGIN);
      !s) {
    std::fprintf(stderr, "hal_init: %s\n", s.error().message().c_str());
    return 1;
  }
  // Prove the device really comes from the plugin file.
  auto recs = halcyon::backend_records();
  bool from_plugin = false;
  if (recs)
    for (auto& r : *recs)
      if (std::string(r.name) == "cpu" && r.state == HAL_BACKEND_AVAILABLE && std::string(r.source) == HALCYON_CPU_PLUGIN)
        from_plugin = true;
  if (!from_plugin) {
    std::fprintf(stderr, "the cpu backend was not loaded from %s\n", HALCYON_CPU_PLUGIN);
    return 1;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
