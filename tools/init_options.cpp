#include "init_options.hpp"

#include <string_view>

namespace halcyon::cli {
namespace {

// `from`: the variable the value came from, named when it holds the list separator ';' (which
// would split it into options of someone else's choosing).
void add_option(InitChoices* c, std::string_view key, std::string_view value, const char* from) {
  if (value.find(';') != std::string_view::npos) {
    if (c->error.empty())
      c->error = std::string(from) + "='" + std::string(value) + "' holds ';', which separates backend options";
    return;
  }
  if (!c->backend_options.empty()) c->backend_options += ';';
  c->backend_options += std::string(key) + "=" + std::string(value);
}

std::string ptx_cache_dir(const EnvLookup& env) {
  auto get = [&](const char* n) -> std::string {
    const char* v = env(n);
    return v ? v : "";
  };
  std::string off = get("HALCYON_PTX_CACHE");
  if (off == "0" || off == "off" || off == "OFF") return "off";
  if (auto d = get("HALCYON_CACHE_DIR"); !d.empty()) return d + "/ptx";
  // The implicit places: a ';' in them (a legal folder name) turns the cache off, rather than
  // failing every command.
  if (auto d = get("XDG_CACHE_HOME"); !d.empty()) return d.find(';') == std::string::npos ? d + "/halcyon/ptx" : "off";
  if (auto d = get("HOME"); !d.empty()) return d.find(';') == std::string::npos ? d + "/.cache/halcyon/ptx" : "off";
  return "off";
}

}  // namespace

InitChoices choices_from_environment(const EnvLookup& env) {
  InitChoices c;
  if (const char* v = env("HALCYON_BACKEND_PATH")) c.backend_path = v;
  if (const char* v = env("HALCYON_LOG")) c.log_level = v;
  add_option(&c, "cuda.cache_dir", ptx_cache_dir(env), "HALCYON_CACHE_DIR");
#define HALCYON_CLI_MAP(var, key) \
  if (const char* v = env(var)) add_option(&c, key, v, var);
  HALCYON_CLI_ENV_OPTIONS(HALCYON_CLI_MAP)
#undef HALCYON_CLI_MAP
  return c;
}

int parse_global_options(const std::vector<std::string>& args, InitChoices* c, std::string* err) {
  size_t i = 0;
  for (; i < args.size() && args[i].starts_with("--") && args[i].find('=') == std::string::npos; i += 2) {
    const std::string& flag = args[i];
    if (flag != "--backend-option" && flag != "--backend-path" && flag != "--log-level") break;
    if (i + 1 >= args.size()) {
      *err = flag + ": a value is needed";
      return -1;
    }
    const std::string& value = args[i + 1];
    if (flag == "--backend-option") {
      // One KEY=VALUE per flag: a ';' would smuggle in more options, and an empty one would be
      // dropped by hal_init's list parsing instead of being refused.
      if (value.empty() || value.find(';') != std::string::npos) {
        *err = "--backend-option '" + value + "' is not one <backend>.<key>=<value> (repeat the flag for more)";
        return -1;
      }
      c->backend_options += (c->backend_options.empty() ? "" : ";") + value;
    } else if (flag == "--backend-path") {
      c->backend_path = c->backend_path.empty() ? value : value + ":" + c->backend_path;
    } else {
      c->log_level = value;
    }
  }
  return int(i);
}

}  // namespace halcyon::cli
