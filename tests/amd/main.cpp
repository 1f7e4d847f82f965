// The AMD tests. By default amdgpu-sim is the backend built into libhalcyon; with
// --plugin=<file> only that plugin file is loaded, so the same tests run through the plugin path.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <halcyon/hal.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::string plugin;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--plugin=", 0) == 0)
      plugin = a.substr(9);
    else
      rest.push_back(argv[i]);
  }
  hal_init_desc d{};
  d.struct_size = sizeof d;
  d.flags = HAL_INIT_NO_ENV_PATH | HAL_INIT_NO_INSTALL_DIR;  // hermetic
  if (!plugin.empty()) {
    d.flags |= HAL_INIT_NO_BUILTIN_BACKENDS;
    d.backend_path = plugin.c_str();
  }
  if (hal_error* e = hal_init(&d)) {
    std::fprintf(stderr, "hal_init: %s\n", hal_error_message(e));
    return 1;
  }
  doctest::Context ctx(int(rest.size()), rest.data());
  return ctx.run();
}
