// Subcommands of `halcyon` register themselves here at static-initialisation time.
#pragma once

#include <string>
#include <vector>

namespace halcyon::cli {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);  // args exclude the subcommand name
};

std::vector<Command>& commands();

// The global options given before the command, as typed (--backend-option, --backend-path,
// --log-level): a command that starts more halcyon processes (bench ep's ranks) hands them on,
// so that every process loads the same backends with the same options.
std::vector<std::string>& global_arguments();

struct Register {
  explicit Register(Command c) { commands().push_back(c); }
};

}  // namespace halcyon::cli
