#include <fmt/format.h>
#include <halcyon/halcyon.hpp>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

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
  fmt::print("\n'halcyon <command> --help' describes one command; 'halcyon --version' is 'halcyon version'.\n"
             "global option, before the command: --backend-option <backend>.<key>=<value> (repeatable),\n"
             "e.g. --backend-option ze.loader=/path/libze_loader.so.1\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  // Global options before the command: --backend-option <backend>.<key>=<value> (repeatable),
  // handed to the backends through hal_init (hal_init_desc.backend_options).
  std::string options;
  while (argc >= 3 && !std::strcmp(argv[1], "--backend-option")) {
    options += (options.empty() ? "" : ";") + std::string(argv[2]);
    argv += 2;
    argc -= 2;
  }
  if (!options.empty()) {
    if (auto st = halcyon::init(0, nullptr, options.c_str()); !st) {
      fmt::print(stderr, "halcyon: --backend-option: {}\n", st.error().to_string());
      return 2;
    }
  }
  if (argc < 2) {
    usage();
    return 2;
  }
  const char* name = !std::strcmp(argv[1], "--version") ? "version" : argv[1];
  for (auto& c : halcyon::cli::commands()) {
    if (std::strcmp(c.name, name)) continue;
    // Commands report their errors as values; an exception escaping one is a defect, but it
    // still ends as a one-line error and exit status 1, never as SIGABRT.
    try {
      return c.run(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      fmt::print(stderr, "halcyon {}: internal error: {}\n", name, e.what());
    } catch (...) {
      fmt::print(stderr, "halcyon {}: internal error: unknown exception\n", name);
    }
    return 1;
  }
  fmt::print(stderr, "halcyon: unknown command '{}'\n\n", argv[1]);
  usage();
  return 2;
}
