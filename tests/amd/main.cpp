// The AMD tests. amdgpu-sim is a plugin only: by default it is discovered in the plugin folder
// (build/plugins, found by libhalcyon itself, as any user's program finds it); with
// --plugin=<file> only that file is loaded (no built-ins, no plugin folder);
// --backend-option=<backend>.<key>=<value> (repeatable) goes to hal_init's backend_options.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <halcyon/halcyon.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  std::string plugin, options;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--plugin=", 0) == 0) {
      plugin = a.substr(9);
    } else if (a.rfind("--backend-option=", 0) == 0) {
      if (!options.empty()) options += ';';  // not `";" + a.substr(..)`: GCC 12 -O3 -Wrestrict (bug 105329)
      options += a.substr(17);
    } else {
      rest.push_back(argv[i]);
    }
  }
  uint32_t flags = 0;  // hermetic anyway: libhalcyon reads no environment
  if (!plugin.empty()) flags |= HAL_INIT_NO_BUILTIN_BACKENDS | HAL_INIT_NO_INSTALL_DIR;
  if (auto s = halcyon::init(flags, plugin.empty() ? nullptr : plugin.c_str(), options.empty() ? nullptr : options.c_str());
      !s) {
    std::fprintf(stderr, "hal_init: %s\n", s.error().message().c_str());
    return 1;
  }
  doctest::Context ctx(int(rest.size()), rest.data());
  return ctx.run();
}
