// The AMD tests. By default amdgpu-sim is the backend built into libhalcyon; with
// --plugin=<file> only that plugin file is loaded, so the same tests run through the plugin path.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <halcyon/halcyon.hpp>

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
  uint32_t flags = HAL_INIT_NO_ENV_PATH | HAL_INIT_NO_INSTALL_DIR;  // hermetic
  if (!plugin.empty()) flags |= HAL_INIT_NO_BUILTIN_BACKENDS;
  if (auto s = halcyon::init(flags, plugin.empty() ? nullptr : plugin.c_str()); !s) {
    std::fprintf(stderr, "hal_init: %s\n", s.error().message().c_str());
    return 1;
  }
  doctest::Context ctx(int(rest.size()), rest.data());
  return ctx.run();
}
