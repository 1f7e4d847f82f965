// The conformance suite (`halcyon cts`): an API suite and a numeric suite run on every
// selected device, with per-backend expectations, a summary, JUnit XML and a Markdown report.
#pragma once

#include <halcyon/result.hpp>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::cts {

enum class Outcome : uint8_t {
  passed,
  failed,
  unsupported,       // not run: the device lacks a capability, or the backend declared it
  expected_failure,  // failed, and the backend declared that it would
  unexpected_pass    // passed although the backend declared an expected failure
};
const char* outcome_name(Outcome o);  // "passed", "failed", "unsupported", ...

// One line of a backend's declaration (backends/<name>/cts_expectations.txt, or a file given
// with --expectations): tests whose name matches `glob` are either not run (unsupported) or
// run and expected to fail (expected_failure).
struct Expectation {
  enum class Kind : uint8_t { unsupported, expected_failure };
  Kind kind = Kind::unsupported;
  std::string glob;
  std::string reason;
  std::string where;  // "backends/cpu/cts_expectations.txt:12"; empty when declared in code
};

struct BackendExpectations {
  std::string backend;  // URI scheme
  std::vector<Expectation> items;
};

// Parses the expectations format (docs/conformance.md): '#' comments, 'backend NAME', then
// 'unsupported GLOB REASON' / 'expected-failure GLOB REASON' lines. An error names
// "<source>:<line>" and what is wrong there.
Result<std::vector<BackendExpectations>> parse_expectations(std::string_view text, const std::string& source);
// Reads and parses a file (`halcyon cts --expectations FILE`).
Result<std::vector<BackendExpectations>> read_expectations_file(const std::string& path);

// A backend's expectations file as embedded at build time: its path in the source tree, its text.
struct ExpectationText {
  const char* path;
  const char* text;
};
const std::vector<ExpectationText>& embedded_expectations();
// Every backend's own declarations (backends/*/cts_expectations.txt), parsed once.
const Result<std::vector<BackendExpectations>>& declared_expectations();

// '*' matches any run of characters, '?' one character; everything else literally.
bool glob_match(std::string_view glob, std::string_view text);
// A filter is a comma-separated list of globs; a leading '-' excludes. Empty: everything.
bool filter_match(std::string_view filter, std::string_view name);

struct TestResult {
  std::string backend;  // URI scheme
  std::string device;   // "cpu:0"
  std::string name;     // "api.copy.roundtrip", "numeric.moe_gate.3"
  Outcome outcome = Outcome::passed;
  std::string message;  // why it failed / is unsupported / the declared reason
  std::string detail;   // measured values (errors against tolerances, ...)
  double seconds = 0;
};

struct Counts {
  int passed = 0, failed = 0, unsupported = 0, expected_failure = 0, unexpected_pass = 0;
  int total() const { return passed + failed + unsupported + expected_failure + unexpected_pass; }
  void add(Outcome o);
};

struct DeviceSummary {
  std::string uri, name, arch, capabilities;
};

struct Report {
  uint64_t seed = 0;
  std::string command;                   // as typed, for the reports
  std::vector<DeviceSummary> devices;
  std::vector<TestResult> results;       // in run order
  double seconds = 0;
  std::map<std::string, Counts> per_backend() const;
  Counts totals() const;
  // False when any test failed or passed unexpectedly.
  bool ok() const;
};

enum class Progress : uint8_t { automatic, live, plain, quiet };

struct Options {
  std::string backend;          // URI scheme; empty: every backend with a device
  std::string device;           // one URI; empty: every device of the selected backends
  std::string filter;           // test-name globs (filter_match)
  uint64_t seed = 0;
  bool seed_given = false;      // otherwise a fresh seed is drawn (and printed)
  Progress progress = Progress::automatic;  // live when `out` is a terminal
  std::FILE* out = stdout;
  // Searched before the backends' own declarations (the first matching line wins): what
  // --expectations FILE declares (a vendor's backend outside the tree), and what tests use to
  // exercise the expected-failure and unexpected-pass paths.
  std::vector<BackendExpectations> extra_expectations;
  std::string command;          // recorded in the reports
  // --impls all: each numeric case also runs once by name with every implementation the device
  // can run (tests numeric.<op>@<impl>.<k>), the named-only variants included, not only with
  // the registry's choice for the case's shapes; an implementation whose predicate refuses a
  // case reports that case unsupported, with its reason. For certifying every kernel a backend
  // ships.
  bool every_impl = false;
  // The cap on api.copy.largest's buffer, which is a quarter of the device memory below it
  // (--max-copy-mb): the default keeps the suite quick; a vendor certifying large transfers
  // raises it. Below 8 bytes it is 8.
  uint64_t max_copy_bytes = 256ull << 20;
};

// Why no test was run (the command turns `no_device` into its "skipped" exit status).
enum class RunError : uint8_t { none, no_device, bad_option };

struct RunOutcome {
  RunError error = RunError::none;
  std::string message;
  Report report;
};

RunOutcome run(const Options& options);

// Names of every test that would run on `device_uri` (for --list and the docs).
Result<std::vector<std::string>> list_tests(const std::string& device_uri, const Options& options);

void print_summary(std::FILE* out, const Report& report);
Status write_junit(const Report& report, const std::string& path);
Status write_markdown(const Report& report, const std::string& path);
std::string xml_escape(std::string_view s);

}  // namespace halcyon::cts
