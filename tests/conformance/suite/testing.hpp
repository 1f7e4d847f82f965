// Internal to the suite: how a conformance test is written and what it is handed.
#pragma once

#include <halcyon/cts/cts.hpp>
#include <halcyon/halcyon.hpp>

#include <fmt/format.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

namespace halcyon::cts {

// Thrown to end a test early: after a failed requirement (Abort) or when the test finds that
// the device cannot do what it checks (Unsupported).
struct Abort {};
struct Unsupported {
  std::string reason;
};

class TestContext {
 public:
  TestContext(const Device& device, const hal_device_info& info, uint64_t seed, uint64_t max_copy_bytes)
      : device(device), info(info), seed(seed), max_copy_bytes(max_copy_bytes), rng(seed) {}

  const Device& device;
  const hal_device_info& info;
  const uint64_t seed;  // this test's own seed (derived from the run's seed and its name)
  const uint64_t max_copy_bytes;  // Options::max_copy_bytes
  std::mt19937_64 rng;

  std::vector<std::string> failures;
  std::string detail;  // measurements worth reporting when the test passes too

  void fail(std::string message) { failures.push_back(std::move(message)); }
  [[noreturn]] void require_failed(std::string message) {
    fail(std::move(message));
    throw Abort{};
  }
  [[noreturn]] static void unsupported(std::string reason) { throw Unsupported{std::move(reason)}; }
  void note(const std::string& s) { detail += (detail.empty() ? "" : "; ") + s; }

  // The value of a Result, or the test ends with a failure naming `what`.
  template <typename T>
  T must(Result<T> r, std::string_view what) {
    if (!r) require_failed(fmt::format("{}: {}", what, r.error().to_string()));
    return std::move(r).value();
  }
  void must(const Status& s, std::string_view what) {
    if (!s) require_failed(fmt::format("{}: {}", what, s.error().to_string()));
  }

  // Checks that a call failed with `status` and that its message names each of `names`.
  template <typename R>
  void expect_error(const R& r, hal_status status, std::string_view what,
                    std::initializer_list<std::string_view> names = {}) {
    if (r.ok()) {
      fail(fmt::format("{}: succeeded, expected {}", what, hal_status_name(status)));
      return;
    }
    check_error(r.error(), status, what, names);
  }
  void check_error(const Error& e, hal_status status, std::string_view what,
                   std::initializer_list<std::string_view> names = {});
};

#define CTS_CHECK(ctx, cond, ...)                                                          \
  do {                                                                                     \
    if (!(cond)) (ctx).fail(fmt::format("line {}: {} ({})", __LINE__, fmt::format(__VA_ARGS__), #cond)); \
  } while (0)
#define CTS_REQUIRE(ctx, cond, ...)                                                        \
  do {                                                                                     \
    if (!(cond))                                                                           \
      (ctx).require_failed(fmt::format("line {}: {} ({})", __LINE__, fmt::format(__VA_ARGS__), #cond)); \
  } while (0)

struct TestCase {
  std::string name;
  // Capability tags the device must advertise (each may be a glob: "partition.*").
  std::vector<std::string> needs;
  std::function<void(TestContext&)> body;
};

std::vector<TestCase> api_tests();

// Tests of every operator contract's cases. `reference` is the CPU device that computes the
// expected outputs. Empty when the runtime is not built.
// every_impl: also numeric.<op>@<impl>.<k> for every implementation the device can run (Options).
std::vector<TestCase> numeric_tests(const Device& device, const hal_device_info& info, bool every_impl = false);

// The per-test seed: stable under filtering, so `--seed N --filter X` reproduces one test.
uint64_t test_seed(uint64_t run_seed, std::string_view test_name);

}  // namespace halcyon::cts
