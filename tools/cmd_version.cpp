#include <halcyon/hal.h>

#include <fmt/format.h>

#include "command.hpp"

namespace {
int run(const std::vector<std::string>& args) {
  if (!args.empty()) {
    if (args[0] == "--help" || args[0] == "-h") {
      fmt::print("usage: halcyon version (or halcyon --version)\n");
      return 0;
    }
    fmt::print(stderr, "halcyon version: unknown option '{}' (usage: halcyon version)\n", args[0]);
    return 2;
  }
  uint32_t major = 0, minor = 0;
  hal_abi_version(&major, &minor);
  fmt::print("halcyon {} (C ABI {}.{})\n", HALCYON_VERSION, major, minor);
  return 0;
}
halcyon::cli::Register reg({"version", "print the halcyon version and C ABI version", run});
}  // namespace
