// Runs the suite: picks devices, plans the tests, applies each backend's expectations, shows
// progress, and collects results.
#include <halcyon/cts/cts.hpp>

#include <unistd.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>

#include "testing.hpp"

namespace halcyon::cts {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::passed: return "passed";
    case Outcome::failed: return "failed";
    case Outcome::unsupported: return "unsupported";
    case Outcome::expected_failure: return "expected failure";
    case Outcome::unexpected_pass: return "unexpected pass";
  }
  return "?";
}

void Counts::add(Outcome o) {
  switch (o) {
    case Outcome::passed: ++passed; break;
    case Outcome::failed: ++failed; break;
    case Outcome::unsupported: ++unsupported; break;
    case Outcome::expected_failure: ++expected_failure; break;
    case Outcome::unexpected_pass: ++unexpected_pass; break;
  }
}

std::map<std::string, Counts> Report::per_backend() const {
  std::map<std::string, Counts> out;
  for (auto& r : results) out[r.backend].add(r.outcome);
  return out;
}

Counts Report::totals() const {
  Counts c;
  for (auto& r : results) c.add(r.outcome);
  return c;
}

bool Report::ok() const {
  Counts c = totals();
  return c.failed == 0 && c.unexpected_pass == 0;
}

uint64_t test_seed(uint64_t run_seed, std::string_view name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the name, mixed with the run's seed
  for (char c : name) h = (h ^ uint8_t(c)) * 1099511628211ull;
  uint64_t z = run_seed ^ h;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64 finaliser
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#ifndef HALCYON_CTS_NUMERIC
std::vector<TestCase> numeric_tests(const Device&, const hal_device_info&, bool) { return {}; }
#endif

namespace {

std::string scheme_of(std::string_view uri) { return std::string(uri.substr(0, uri.find(':'))); }

const Expectation* find_expectation(const std::vector<BackendExpectations>& table, std::string_view backend,
                                    std::string_view test) {
  for (auto& b : table) {
    if (b.backend != backend) continue;
    for (auto& e : b.items)
      if (glob_match(e.glob, test)) return &e;
  }
  return nullptr;
}

// The first capability glob the device does not satisfy, or "".
std::string missing_capability(const std::vector<std::string>& needs, std::string_view caps) {
  for (auto& need : needs) {
    bool found = false;
    std::istringstream in{std::string(caps)};
    std::string tag;
    while (in >> tag && !found) found = glob_match(need, tag);
    if (!found) return need;
  }
  return "";
}

struct DeviceUnderTest {
  Device device;
  hal_device_info info{};
  std::vector<TestCase> tests;
};

struct Plan {
  std::vector<DeviceUnderTest> devices;
  size_t total = 0;
  std::vector<std::string> warnings;  // declarations that match none of their backend's tests
};

// Adds a warning for each declaration of `backend` whose glob matches none of `all` (every
// test of one of its devices, before --filter): a typo, or a test renamed since.
void check_declarations(const Options& o, const std::string& backend, const std::vector<TestCase>& all, Plan* plan) {
  for (const auto* table : {&o.extra_expectations, &declared_expectations().value()})
    for (auto& b : *table) {
      if (b.backend != backend) continue;
      for (auto& e : b.items)
        if (std::none_of(all.begin(), all.end(), [&](const TestCase& t) { return glob_match(e.glob, t.name); }))
          plan->warnings.push_back(fmt::format("{}'{}' declared for backend '{}' matches none of its tests",
                                               e.where.empty() ? "" : e.where + ": ", e.glob, backend));
    }
}

// Devices chosen by --backend / --device, with their tests after --filter.
RunOutcome make_plan(const Options& o, Plan* plan) {
  RunOutcome out;
  if (const auto& declared = declared_expectations(); !declared) {  // a malformed backends/*/cts_expectations.txt
    out.error = RunError::bad_option;
    out.message = declared.error().message();
    return out;
  }
  auto uris = device_uris();
  if (!uris) {
    out.error = RunError::no_device;
    out.message = uris.error().to_string();
    return out;
  }
  std::vector<std::string> chosen;
  if (!o.device.empty()) {
    auto d = Device::open(o.device.c_str());
    if (!d) {
      // "Skipped" only when the backend has no device here at all: a device that does not
      // exist on a backend that has some is a mistake (a typo must not pass CI as a skip).
      std::vector<std::string> same;
      for (auto& u : *uris)
        if (scheme_of(u) == scheme_of(o.device)) same.push_back(u);
      out.error = same.empty() ? RunError::no_device : RunError::bad_option;
      out.message = fmt::format("device {}: {}{}", o.device, d.error().to_string(),
                                same.empty() ? "" : fmt::format(" (this machine has {})", fmt::join(same, ", ")));
      return out;
    }
    auto i = d->info();
    if (!i) {
      out.error = RunError::no_device;
      out.message = fmt::format("device {}: {}", o.device, i.error().to_string());
      return out;
    }
    if (!o.backend.empty() && scheme_of(i->uri) != o.backend) {
      out.error = RunError::bad_option;
      out.message = fmt::format("--device {} is not a device of --backend {}", o.device, o.backend);
      return out;
    }
    chosen.push_back(i->uri);
  } else {
    for (auto& u : *uris)
      if (o.backend.empty() || scheme_of(u) == o.backend) chosen.push_back(u);
  }
  if (chosen.empty()) {
    out.error = RunError::no_device;
    std::string why;
    if (auto recs = backend_records())
      for (auto& r : *recs)
        if (o.backend == r.name) why += fmt::format("; backend '{}' from {}: {}", r.name, r.source, r.reason);
    out.message = o.backend.empty() ? "no device found" : fmt::format("no device of backend '{}' on this machine{}", o.backend,
                                                                       why.empty() ? " (no such backend was loaded)" : why);
    return out;
  }
  for (auto& uri : chosen) {
    DeviceUnderTest d;
    auto dev = Device::open(uri.c_str());
    if (!dev) {
      out.error = RunError::no_device;
      out.message = fmt::format("device {}: {}", uri, dev.error().to_string());
      return out;
    }
    d.device = std::move(dev).value();
    auto info = d.device.info();
    if (!info) {
      out.error = RunError::no_device;
      out.message = fmt::format("device {}: {}", uri, info.error().to_string());
      return out;
    }
    d.info = *info;
    std::vector<TestCase> all = api_tests();
    for (auto& t : numeric_tests(d.device, d.info, o.every_impl)) all.push_back(std::move(t));
    if (std::none_of(plan->devices.begin(), plan->devices.end(),
                     [&](auto& other) { return scheme_of(other.info.uri) == scheme_of(uri); }))
      check_declarations(o, scheme_of(uri), all, plan);  // once per backend
    for (auto& t : all)
      if (filter_match(o.filter, t.name)) d.tests.push_back(std::move(t));
    plan->total += d.tests.size();
    plan->devices.push_back(std::move(d));
  }
  if (plan->total == 0) {
    out.error = RunError::bad_option;
    out.message = fmt::format("no test name matches --filter '{}' ('halcyon cts --list' prints them)", o.filter);
  }
  return out;
}

TestResult run_one(const DeviceUnderTest& d, const TestCase& tc, uint64_t run_seed, const Options& o) {
  const std::vector<BackendExpectations>& extra = o.extra_expectations;
  TestResult r;
  r.device = d.info.uri;
  r.backend = scheme_of(r.device);
  r.name = tc.name;
  const Expectation* decl = find_expectation(extra, r.backend, tc.name);
  if (!decl) decl = find_expectation(declared_expectations().value(), r.backend, tc.name);
  // Where the declaration is, so that a stale one is easy to find and remove.
  std::string where = decl && !decl->where.empty() ? fmt::format(" ({})", decl->where) : "";
  if (decl && decl->kind == Expectation::Kind::unsupported) {
    r.outcome = Outcome::unsupported;
    r.message = fmt::format("declared unsupported by backend '{}'{}: {}", r.backend, where, decl->reason);
    return r;
  }
  if (std::string miss = missing_capability(tc.needs, d.info.capabilities); !miss.empty()) {
    r.outcome = Outcome::unsupported;
    r.message = fmt::format("the device does not advertise capability '{}'", miss);
    return r;
  }
  auto start = std::chrono::steady_clock::now();
  TestContext ctx(d.device, d.info, test_seed(run_seed, tc.name), o.max_copy_bytes);
  bool unsupported = false;
  try {
    tc.body(ctx);
  } catch (const Abort&) {
  } catch (const Unsupported& u) {
    unsupported = true;
    r.message = u.reason;
  } catch (const std::exception& ex) {
    ctx.fail(fmt::format("exception: {}", ex.what()));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.detail = ctx.detail;
  if (unsupported && ctx.failures.empty()) {
    r.outcome = Outcome::unsupported;
    return r;
  }
  std::string failures;
  for (auto& f : ctx.failures) failures += (failures.empty() ? "" : "\n") + f;
  bool failed = !ctx.failures.empty();
  if (decl) {  // an expected failure
    r.outcome = failed ? Outcome::expected_failure : Outcome::unexpected_pass;
    r.message = failed ? fmt::format("expected failure ({}){}: {}", decl->reason, where, failures)
                       : fmt::format("passed, but backend '{}' declares an expected failure{}: {}", r.backend,
                                     where, decl->reason);
  } else {
    r.outcome = failed ? Outcome::failed : Outcome::passed;
    r.message = failures;
  }
  return r;
}

class ProgressPrinter {
 public:
  ProgressPrinter(const Options& o, size_t total) : out_(o.out), total_(total), start_(std::chrono::steady_clock::now()) {
    mode_ = o.progress;
    if (mode_ == Progress::automatic) mode_ = out_ && isatty(fileno(out_)) ? Progress::live : Progress::plain;
    if (!out_) mode_ = Progress::quiet;
  }
  void starting(size_t n, const std::string& device, const std::string& name) {
    if (mode_ != Progress::live) return;
    fmt::print(out_, "\r\x1b[K[{}/{}] {:.1f}s, {} failed  {} {}", n, total_, elapsed(), failures_, device, name);
    std::fflush(out_);
  }
  void finished(size_t n, const TestResult& r) {
    bool bad = r.outcome == Outcome::failed || r.outcome == Outcome::unexpected_pass;
    failures_ += bad;
    if (!out_) return;
    if (mode_ == Progress::live) {
      if (!bad) return;
      fmt::print(out_, "\r\x1b[K");
    } else if (mode_ == Progress::quiet && !bad) {
      return;
    }
    fmt::print(out_, "[{}/{}] {:<16} {} {} ({:.3f} s)\n", n, total_, label(r.outcome), r.device, r.name, r.seconds);
    if (bad || (mode_ == Progress::plain && r.outcome != Outcome::passed && !r.message.empty())) {
      std::istringstream lines(r.message);
      for (std::string line; std::getline(lines, line);) fmt::print(out_, "    {}\n", line);
    }
    std::fflush(out_);
  }
  void done() {
    if (out_ && mode_ == Progress::live) fmt::print(out_, "\r\x1b[K");
  }

 private:
  static const char* label(Outcome o) {
    switch (o) {
      case Outcome::passed: return "PASS";
      case Outcome::failed: return "FAIL";
      case Outcome::unsupported: return "UNSUPPORTED";
      case Outcome::expected_failure: return "XFAIL";
      case Outcome::unexpected_pass: return "UNEXPECTED PASS";
    }
    return "?";
  }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  std::FILE* out_;
  size_t total_;
  std::chrono::steady_clock::time_point start_;
  Progress mode_;
  int failures_ = 0;
};

}  // namespace

RunOutcome run(const Options& o) {
  Plan plan;
  RunOutcome out = make_plan(o, &plan);
  if (out.error != RunError::none) return out;
  Report& rep = out.report;
  rep.command = o.command;
  rep.seed = o.seed_given ? o.seed : (uint64_t(std::random_device{}()) << 32) ^ uint64_t(std::random_device{}()) ^
                                         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  if (o.out && o.progress != Progress::quiet)
    fmt::print(o.out, "halcyon cts: {} test(s) on {} device(s), seed {} (reproduce with --seed {})\n", plan.total,
               plan.devices.size(), rep.seed, rep.seed);
  if (o.out)
    for (auto& w : plan.warnings) fmt::print(o.out, "warning: {}\n", w);
  ProgressPrinter progress(o, plan.total);
  auto start = std::chrono::steady_clock::now();
  size_t n = 0;
  for (auto& d : plan.devices) {
    rep.devices.push_back({d.info.uri, d.info.name, d.info.arch, d.info.capabilities});
    for (auto& tc : d.tests) {
      ++n;
      progress.starting(n, d.info.uri, tc.name);
      rep.results.push_back(run_one(d, tc, rep.seed, o));
      progress.finished(n, rep.results.back());
    }
  }
  progress.done();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Result<std::vector<std::string>> list_tests(const std::string& device_uri, const Options& o) {
  Options one = o;
  one.device = device_uri;
  Plan plan;
  RunOutcome r = make_plan(one, &plan);
  if (r.error != RunError::none) return Error(HAL_NOT_FOUND, r.message);
  std::vector<std::string> names;
  for (auto& d : plan.devices)
    for (auto& t : d.tests) names.push_back(t.name);
  return names;
}

}  // namespace halcyon::cts
