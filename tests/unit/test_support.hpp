// Shared helpers for the unit tests.
#pragma once

#include <halcyon/halcyon.hpp>

#include <doctest/doctest.h>

#include <string>

namespace test {

// The device every backend-parametrised test runs on ("cpu", set by main()).
const char* device_uri();

// Checks a C call failed with `status` and that its message contains `needle`.
inline void expect_error(hal_error* e, hal_status status, const std::string& needle = "") {
  REQUIRE_MESSAGE(e != nullptr, "expected ", hal_status_name(status), ", got success");
  std::string msg = hal_error_message(e);
  CHECK_MESSAGE(hal_error_status(e) == status, "got ", hal_status_name(hal_error_status(e)), ": ", msg);
  if (!needle.empty()) CHECK_MESSAGE(msg.find(needle) != std::string::npos, "message: ", msg);
  hal_error_free(e);
}

inline void expect_ok(hal_error* e) {
  std::string msg = e ? hal_error_message(e) : "";
  CHECK_MESSAGE(e == nullptr, msg);
  hal_error_free(e);
}

template <typename T>
T unwrap(halcyon::Result<T> r) {
  REQUIRE_MESSAGE(r.ok(), (r.ok() ? std::string() : r.error().to_string()));
  return std::move(r).value();
}

inline void unwrap(halcyon::Status s) { REQUIRE_MESSAGE(s.ok(), (s.ok() ? std::string() : s.error().to_string())); }

}  // namespace test
