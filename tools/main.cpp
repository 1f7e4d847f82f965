#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "command.hpp"

namespace halcyon::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
}  // namespace halcyon::cli

namespace {
void usage() {
  auto cmds = halcyon::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return std::strcmp(a.name, b.name) < 0; });
  fmt::print("usage: halcyon <command> [options]\n\ncommands:\n");
  for (auto& c : cmds) fmt::print("  {:<10} {}\n", c.name, c.summary);
  fmt::print("\n'halcyon <command> --help' describes one command.\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (auto& c : halcyon::cli::commands())
    if (!std::strcmp(c.name, argv[1])) return c.run(std::vector<std::string>(argv + 2, argv + argc));
  fmt::print(stderr, "halcyon: unknown command '{}'\n\n", argv[1]);
  usage();
  return 2;
}
