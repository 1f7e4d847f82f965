#include <fmt/format.h>
#include <halcyon/halcyon.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "command.hpp"
#include "init_options.hpp"

namespace halcyon::cli {
std::vector<Command>& commands() {
  static std::vector<Command> c;
  return c;
}
std::vector<std::string>& global_arguments() {
  static std::vector<std::string> a;
  return a;
}
}  // namespace halcyon::cli

namespace {
void usage() {
  auto cmds = halcyon::cli::commands();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return std::strcmp(a.name, b.name) < 0; });
  fmt::print("usage: halcyon <command> [options]\n\ncommands:\n");
  for (auto& c : cmds) fmt::print("  {:<10} {}\n", c.name, c.summary);
  fmt::print("\n'halcyon <command> --help' describes one command; 'halcyon --version' is 'halcyon version'.\n"
             "global options, before the command: --backend-option <backend>.<key>=<value> (repeatable),\n"
             "e.g. --backend-option ze.loader=/path/libze_loader.so.1 (hal.h lists the keys);\n"
             "--backend-path PATHS (plugin files or folders, ':'-separated); --log-level debug|info|warning|error.\n"
             "Environment, applied before them: HALCYON_BACKEND_PATH, HALCYON_LOG, HALCYON_CACHE_DIR,\n"
             "HALCYON_PTX_CACHE, HALCYON_CUDA_LIBRARY, HALCYON_SIM_MAX_INSTRUCTIONS, HALCYON_SIM_COVERAGE (tools/README.md).\n");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  // Global options before the command, applied over the documented environment variables
  // (init_options.hpp): every choice reaches libhalcyon through hal_init, which reads no
  // environment itself.
  auto init = halcyon::cli::choices_from_environment([](const char* name) { return std::getenv(name); });
  if (!init.error.empty()) {
    fmt::print(stderr, "halcyon: {}\n", init.error);
    return 2;
  }
  std::string why;
  int used = halcyon::cli::parse_global_options(std::vector<std::string>(argv + 1, argv + argc), &init, &why);
  if (used < 0) {
    fmt::print(stderr, "halcyon: {}\n", why);
    return 2;
  }
  halcyon::cli::global_arguments().assign(argv + 1, argv + 1 + used);
  argv += used;
  argc -= used;
  auto text = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
  if (auto st = halcyon::init(0, text(init.backend_path), text(init.backend_options), text(init.log_level)); !st) {
    fmt::print(stderr, "halcyon: {}\n", st.error().to_string());
    return 2;
  }
  hal_log(HAL_LOG_DEBUG, fmt::format("halcyon: hal_init backend_path '{}', backend_options '{}'", init.backend_path,
                                     init.backend_options).c_str());
  if (argc < 2) {
    usage();
    return 2;
  }
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {  // after global options
    usage();
    return 0;
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
