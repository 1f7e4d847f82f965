#include "core.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string_view>

namespace halcyon::core {
namespace {

std::mutex g_log_mu;
hal_log_fn g_fn = nullptr;
void* g_user = nullptr;

// The default sink's threshold (hal_init_desc.log_level); the environment is not read.
std::atomic<hal_log_level> g_threshold{HAL_LOG_WARNING};

constexpr hal_log_level kLevels[] = {HAL_LOG_DEBUG, HAL_LOG_INFO, HAL_LOG_WARNING, HAL_LOG_ERROR};

const char* level_name(hal_log_level l) {
  switch (l) {
    case HAL_LOG_DEBUG: return "debug";
    case HAL_LOG_INFO: return "info";
    case HAL_LOG_WARNING: return "warning";
    case HAL_LOG_ERROR: return "error";
  }
  return "?";
}

void host_log(hal_log_level level, const char* message) { log(level, message ? message : ""); }
hal_error* host_error_new(hal_status status, const char* message) {
  return make_error(status, message ? message : "");
}

}  // namespace

hal_error* set_log_threshold(std::string_view name) {
  for (hal_log_level l : kLevels)
    if (name == level_name(l)) {
      g_threshold = l;
      return nullptr;
    }
  return make_error(HAL_INVALID_ARGUMENT,
                    fmt::format("hal_init: log_level '{}' is not debug, info, warning or error", name));
}

void log(hal_log_level level, const std::string& message) {
  std::lock_guard lock(g_log_mu);
  if (g_fn) {
    g_fn(g_user, level, message.c_str());
  } else if (level >= g_threshold.load()) {
    std::fprintf(stderr, "halcyon %s: %s\n", level_name(level), message.c_str());
  }
}

const hal_host_api kHostApi = {
    sizeof(hal_host_api), nullptr, HAL_ABI_MAJOR, HAL_ABI_MINOR, host_error_new, host_log, backend_option,
};

}  // namespace halcyon::core

extern "C" HAL_API void hal_set_log_callback(hal_log_fn fn, void* user) {
  std::lock_guard lock(halcyon::core::g_log_mu);
  halcyon::core::g_fn = fn;
  halcyon::core::g_user = user;
}

extern "C" HAL_API void hal_log(hal_log_level level, const char* message) {
  halcyon::core::log(level, message ? message : "");
}
