// What `halcyon` hands to hal_init. libhalcyon and its backends read no environment variable
// (hal.h, hal_init); the CLI, a user program, maps the documented variables below to
// hal_init_desc's fields for operators' convenience, and its global options come after them
// (a later backend option replaces an earlier one of the same key).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace halcyon::cli {

// X(variable, backend option): the variable's value becomes that option when it is set.
#define HALCYON_CLI_ENV_OPTIONS(X)                     \
  X("HALCYON_CUDA_LIBRARY", "cuda.library")            \
  X("HALCYON_SIM_MAX_INSTRUCTIONS", "amdgpu-sim.max_instructions") \
  X("HALCYON_SIM_COVERAGE", "amdgpu-sim.coverage")

struct InitChoices {
  std::string backend_path;     // ':'-separated (hal_init_desc.backend_path)
  std::string backend_options;  // ';'-separated "<backend>.<key>=<value>"
  std::string log_level;        // "" = the library's default
  std::string error;            // a variable's value that cannot be handed over (holds ';'); "" = none
};

using EnvLookup = std::function<const char*(const char*)>;

// From the environment: HALCYON_BACKEND_PATH, HALCYON_LOG, the variables of
// HALCYON_CLI_ENV_OPTIONS, and cuda.cache_dir: "off" when HALCYON_PTX_CACHE is 0 or off, else
// $HALCYON_CACHE_DIR/ptx, else $XDG_CACHE_HOME/halcyon/ptx, else $HOME/.cache/halcyon/ptx.
InitChoices choices_from_environment(const EnvLookup& env);

// Consumes the global options before the command: --backend-option KEY=VALUE (repeatable),
// --backend-path PATHS (searched before HALCYON_BACKEND_PATH), --log-level LEVEL (replaces
// HALCYON_LOG). Returns the number of arguments consumed, or -1 with *err set.
int parse_global_options(const std::vector<std::string>& args, InitChoices* choices, std::string* err);

}  // namespace halcyon::cli
