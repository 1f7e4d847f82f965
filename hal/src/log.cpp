#include "core.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

namespace halcyon::core {
namespace {

std::mutex g_log_mu;
hal_log_fn g_fn = nullptr;
void* g_user = nullptr;

hal_log_level threshold() {
  static const hal_log_level level = [] {
    const char* v = std::getenv("HALCYON_LOG");
    std::string_view s = v ? v : "";
    if (s == "debug") return HAL_LOG_DEBUG;
    if (s == "info") return HAL_LOG_INFO;
    if (s == "error") return HAL_LOG_ERROR;
    return HAL_LOG_WARNING;
  }();
  return level;
}

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

void log(hal_log_level level, const std::string& message) {
  std::lock_guard lock(g_log_mu);
  if (g_fn) {
    g_fn(g_user, level, message.c_str());
  } else if (level >= threshold()) {
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
