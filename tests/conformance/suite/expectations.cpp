// What each backend declares about itself. The declarations live beside each backend, in
// backends/<name>/cts_expectations.txt (embedded at build time), and a vendor outside the
// tree passes its own file with `halcyon cts --expectations FILE`. A line either marks tests
// that are not run on that backend ("unsupported") or tests that run and are known to fail
// ("expected-failure"). A declared expected failure that passes is reported as an unexpected
// pass and fails the run, so that stale lines get removed.
//
// Tests that need a capability the device does not advertise (module.host, events.timing,
// partition.*) are reported unsupported without a line; declare only what the capability
// tags cannot say. The format is in docs/conformance.md.
#include <halcyon/cts/cts.hpp>

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace halcyon::cts {
namespace {

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// Splits off the first whitespace-separated word of `s` (which is left trimmed).
std::string_view next_word(std::string_view* s) {
  *s = trim(*s);
  size_t end = s->find_first_of(" \t");
  std::string_view w = s->substr(0, end);
  *s = end == std::string_view::npos ? std::string_view{} : trim(s->substr(end));
  return w;
}

}  // namespace

Result<std::vector<BackendExpectations>> parse_expectations(std::string_view text, const std::string& source) {
  std::vector<BackendExpectations> out;
  size_t line_no = 0;
  auto fail = [&](std::string what) { return Error(HAL_INVALID_ARGUMENT, fmt::format("{}:{}: {}", source, line_no, what)); };
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = trim(text.substr(start, nl - start));
    start = nl + 1;
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    std::string_view rest = line;
    std::string_view keyword = next_word(&rest);
    if (keyword == "backend") {
      std::string_view name = next_word(&rest);
      if (name.empty() || !rest.empty())
        return fail(fmt::format("'backend' takes one name (the URI scheme: cpu, cuda, amdgpu-sim, ...), got '{}'", line));
      if (name.find_first_of(":/") != std::string_view::npos)
        return fail(fmt::format("'{}' is not a backend name: give the URI scheme without ':' (cuda, not cuda:0)", name));
      out.push_back({std::string(name), {}});
      continue;
    }
    Expectation e;
    if (keyword == "unsupported") {
      e.kind = Expectation::Kind::unsupported;
    } else if (keyword == "expected-failure") {
      e.kind = Expectation::Kind::expected_failure;
    } else {
      return fail(fmt::format("unknown keyword '{}': a line is 'backend NAME', 'unsupported GLOB REASON' or "
                              "'expected-failure GLOB REASON' ('#' starts a comment)",
                              keyword));
    }
    if (out.empty())
      return fail(fmt::format("'{}' before any 'backend NAME' line: say which backend declares it", keyword));
    e.glob = std::string(next_word(&rest));
    if (e.glob.empty()) return fail(fmt::format("'{}' needs a test-name glob and a reason", keyword));
    if (rest.empty())
      return fail(fmt::format("'{} {}' gives no reason: every declaration says why (it is printed in every report)",
                              keyword, e.glob));
    e.reason = std::string(rest);
    e.where = fmt::format("{}:{}", source, line_no);
    out.back().items.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<BackendExpectations>> read_expectations_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(HAL_NOT_FOUND, fmt::format("expectations file {}: cannot be opened", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Error(HAL_INTERNAL, fmt::format("expectations file {}: read error", path));
  return parse_expectations(text.str(), path);
}

const Result<std::vector<BackendExpectations>>& declared_expectations() {
  static const Result<std::vector<BackendExpectations>> table = []() -> Result<std::vector<BackendExpectations>> {
    std::vector<BackendExpectations> all;
    for (const ExpectationText& f : embedded_expectations()) {
      auto parsed = parse_expectations(f.text, f.path);
      if (!parsed) return parsed.error();
      for (auto& b : *parsed) all.push_back(std::move(b));
    }
    return all;
  }();
  return table;
}

}  // namespace halcyon::cts
