// `halcyon cts`: the conformance suite (tests/conformance/suite). A vendor certifies a backend
// with it; CI runs it on every backend the machine has. docs/conformance.md explains it.
#include <halcyon/cts/cts.hpp>
#include <halcyon/halcyon.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <tuple>

#include "command.hpp"

namespace {

// Exit status when the selected backend has no device here: CTest's SKIP_RETURN_CODE.
constexpr int kNoDevice = 77;

void usage(std::FILE* out) {
  fmt::print(out,
             "usage: halcyon cts [--backend B] [--device URI] [--filter GLOB] [--seed N]\n"
             "                   [--junit FILE] [--report FILE.md] [--progress live|plain|quiet] [--list]\n"
             "                   [--expectations FILE]... [--impls chosen|all] [--max-copy-mb N]\n"
             "\n"
             "Runs the conformance suite: the API suite and the numeric suite (every operator\n"
             "contract against the CPU reference) on every selected device.\n"
             "\n"
             "  --backend B     only devices of backend B (URI scheme: cpu, cuda, hip, ...)\n"
             "  --device URI    only this device (e.g. cuda:1)\n"
             "  --filter GLOB   test names to run, comma-separated globs; '-GLOB' excludes\n"
             "                  (e.g. 'api.*', 'numeric.moe_gate.*,-*.cases')\n"
             "  --seed N        seed of the random inputs (printed by every run)\n"
             "  --junit FILE    write JUnit XML for CI systems\n"
             "  --report FILE   write a Markdown report\n"
             "  --progress M    live (default on a terminal), plain (default otherwise), quiet\n"
             "  --list          print the tests that would run, and exit\n"
             "  --expectations FILE\n"
             "                  a backend's declared unsupported tests and expected failures\n"
             "                  (format: docs/conformance.md); searched before the backends' own\n"
             "                  backends/*/cts_expectations.txt; may be repeated\n"
             "  --impls M       chosen (default): each numeric case runs with the registry's\n"
             "                  choice; all: also once by name with every implementation the\n"
             "                  device can run (numeric.OP@IMPL.K; a case an implementation\n"
             "                  refuses is reported unsupported, with its reason)\n"
             "  --max-copy-mb N the cap, in MiB, on api.copy.largest's buffer (default 256; the\n"
             "                  buffer is a quarter of the device memory below the cap)\n"
             "\n"
             "exit status: 0 all passed; 1 a test failed or passed unexpectedly; 2 bad usage (a\n"
             "--device that does not exist on a backend that has devices, too); {} the selected\n"
             "backend has no device at all on this machine.\n",
             kNoDevice);
}

int run(const std::vector<std::string>& args) {
  halcyon::cts::Options o;
  std::string junit, report;
  bool list = false;
  o.command = "halcyon cts";
  for (auto& a : args) o.command += " " + a;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    bool has_inline = false;
    if (a.starts_with("--") && a.find('=') != std::string::npos) {
      value = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      has_inline = true;
    }
    auto take = [&](std::string* dst) {
      if (has_inline) {
        *dst = value;
        return true;
      }
      if (i + 1 >= args.size()) {
        fmt::print(stderr, "halcyon cts: {} needs a value\n", a);
        return false;
      }
      *dst = args[++i];
      return true;
    };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--backend") {
      if (!take(&o.backend)) return 2;
    } else if (a == "--device") {
      if (!take(&o.device)) return 2;
    } else if (a == "--filter") {
      if (!take(&o.filter)) return 2;
    } else if (a == "--junit") {
      if (!take(&junit)) return 2;
    } else if (a == "--report") {
      if (!take(&report)) return 2;
    } else if (a == "--list") {
      list = true;
    } else if (a == "--expectations") {
      std::string path;
      if (!take(&path)) return 2;
      auto file = halcyon::cts::read_expectations_file(path);
      if (!file) {
        fmt::print(stderr, "halcyon cts: {}\n", file.error().message());
        return 2;
      }
      for (auto& b : *file) o.extra_expectations.push_back(std::move(b));
    } else if (a == "--seed") {
      std::string s;
      if (!take(&s)) return 2;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), o.seed);
      if (ec != std::errc() || p != s.data() + s.size()) {
        fmt::print(stderr, "halcyon cts: --seed '{}' is not an unsigned integer\n", s);
        return 2;
      }
      o.seed_given = true;
    } else if (a == "--impls") {
      std::string m;
      if (!take(&m)) return 2;
      if (m == "all") o.every_impl = true;
      else if (m == "chosen") o.every_impl = false;
      else {
        fmt::print(stderr, "halcyon cts: --impls '{}' is not chosen or all\n", m);
        return 2;
      }
    } else if (a == "--max-copy-mb") {
      std::string s;
      if (!take(&s)) return 2;
      uint64_t mb = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), mb);
      if (ec != std::errc() || p != s.data() + s.size() || mb == 0 || mb > (UINT64_MAX >> 20)) {
        fmt::print(stderr, "halcyon cts: --max-copy-mb '{}' is not a positive number of MiB\n", s);
        return 2;
      }
      o.max_copy_bytes = mb << 20;
    } else if (a == "--progress") {
      std::string m;
      if (!take(&m)) return 2;
      if (m == "live") o.progress = halcyon::cts::Progress::live;
      else if (m == "plain") o.progress = halcyon::cts::Progress::plain;
      else if (m == "quiet") o.progress = halcyon::cts::Progress::quiet;
      else {
        fmt::print(stderr, "halcyon cts: --progress '{}' is not live, plain or quiet\n", m);
        return 2;
      }
    } else {
      fmt::print(stderr, "halcyon cts: unknown option '{}'\n", args[i]);
      usage(stderr);
      return 2;
    }
  }

  if (list) {
    // --device as a run takes it ("cpu" is cpu:0): the URI the device reports.
    if (!o.device.empty())
      if (auto dev = halcyon::Device::open(o.device.c_str()))
        if (auto info = dev->info()) o.device = info->uri;
    auto uris = halcyon::device_uris();
    if (!uris) {
      fmt::print(stderr, "halcyon cts: {}\n", uris.error().to_string());
      return 1;
    }
    int shown = 0;
    for (auto& uri : *uris) {
      if (!o.device.empty() && uri != o.device) continue;
      if (!o.backend.empty() && uri.substr(0, uri.find(':')) != o.backend) continue;
      auto names = halcyon::cts::list_tests(uri, o);
      if (!names) {
        fmt::print(stderr, "halcyon cts: {}\n", names.error().message());
        return 1;
      }
      for (auto& n : *names) fmt::print("{} {}\n", uri, n);
      ++shown;
    }
    if (!shown) {
      // As for a run: a skip only when the backend has no device here at all.
      std::string scheme = o.device.substr(0, o.device.find(':'));
      bool backend_has_devices = std::any_of(uris->begin(), uris->end(), [&](auto& u) { return u.starts_with(scheme + ":"); });
      fmt::print(stderr, "halcyon cts: no matching device\n");
      return !o.device.empty() && backend_has_devices ? 2 : kNoDevice;
    }
    return 0;
  }

  halcyon::cts::RunOutcome r = halcyon::cts::run(o);
  if (r.error == halcyon::cts::RunError::bad_option) {
    fmt::print(stderr, "halcyon cts: {}\n", r.message);
    return 2;
  }
  if (r.error == halcyon::cts::RunError::no_device) {
    fmt::print("halcyon cts: SKIPPED: {}\n", r.message);
    return kNoDevice;
  }
  halcyon::cts::print_summary(stdout, r.report);
  int status = r.report.ok() ? 0 : 1;
  using Writer = halcyon::Status (*)(const halcyon::cts::Report&, const std::string&);
  for (auto [path, write, what] : {std::tuple<const std::string&, Writer, const char*>{junit, halcyon::cts::write_junit, "JUnit XML"},
                                   {report, halcyon::cts::write_markdown, "report"}}) {
    if (path.empty()) continue;
    if (auto s = write(r.report, path); !s) {
      fmt::print(stderr, "halcyon cts: {}\n", s.error().message());
      status = 1;
    } else {
      fmt::print("{}: {}\n", what, path);
    }
  }
  return status;
}

halcyon::cli::Register reg({"cts", "conformance suite: API and numeric tests of every backend (JUnit, report)", run});

}  // namespace
