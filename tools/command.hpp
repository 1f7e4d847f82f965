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

struct Register {
  explicit Register(Command c) { commands().push_back(c); }
};

}  // namespace halcyon::cli
