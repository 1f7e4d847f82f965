// Result<T>: a value or an Error, for code that must work without exceptions.
// Modelled on std::expected (C++23), which C++20 lacks.
#pragma once

#include <halcyon/hal.h>

#include <cassert>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace halcyon {

// An error as a value: a status code and a message naming the object and the bad value.
class Error {
 public:
  Error() = default;
  Error(hal_status status, std::string message) : status_(status), message_(std::move(message)) {}
  // Takes ownership of a C error (frees it).
  static Error adopt(hal_error* e) {
    Error out(hal_error_status(e), hal_error_message(e));
    hal_error_free(e);
    return out;
  }
  hal_status status() const { return status_; }
  const std::string& message() const { return message_; }
  std::string to_string() const {
    return std::string(hal_status_name(status_)) + ": " + message_;
  }

 private:
  hal_status status_ = HAL_INTERNAL;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

// Converts a C call's hal_error* into a Status (frees the C error).
inline Status check(hal_error* e) {
  if (e == nullptr) return {};
  return Error::adopt(e);
}

}  // namespace halcyon

// Propagates an error out of a function returning Result<...>/Status.
#define HALCYON_TRY(expr)                                  \
  do {                                                     \
    auto halcyon_try_r_ = (expr);                          \
    if (!halcyon_try_r_.ok()) return halcyon_try_r_.error(); \
  } while (0)

#define HALCYON_CONCAT_INNER_(a, b) a##b
#define HALCYON_CONCAT_(a, b) HALCYON_CONCAT_INNER_(a, b)
// Declares `decl` from a Result's value, or returns its error.
#define HALCYON_ASSIGN_OR_RETURN(decl, expr)                                   \
  auto HALCYON_CONCAT_(halcyon_r_, __LINE__) = (expr);                         \
  if (!HALCYON_CONCAT_(halcyon_r_, __LINE__).ok())                             \
    return HALCYON_CONCAT_(halcyon_r_, __LINE__).error();                      \
  decl = std::move(HALCYON_CONCAT_(halcyon_r_, __LINE__)).value()
