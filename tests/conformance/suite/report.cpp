// What a run leaves behind: the summary table, JUnit XML for CI systems, a Markdown report.
#include <halcyon/cts/cts.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>

namespace halcyon::cts {

namespace {

constexpr Outcome kOutcomes[] = {Outcome::passed, Outcome::failed, Outcome::unsupported, Outcome::expected_failure,
                                 Outcome::unexpected_pass};

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}", tm);
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return Error(HAL_NOT_FOUND, fmt::format("cannot open '{}' for writing", path));
  f << text;
  f.close();
  if (!f) return Error(HAL_INTERNAL, fmt::format("could not write '{}'", path));
  return {};
}

// First line of a message, for one-line summaries.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string md_cell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += "<br>";
    else out += c;
  }
  return out;
}

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\t': out += "&#9;"; break;
      case '\n': out += "&#10;"; break;
      case '\r': out += "&#13;"; break;
      default:
        // Control characters are not allowed in XML 1.0, even escaped.
        out += c < 0x20 ? '?' : char(c);
    }
  }
  return out;
}

void print_summary(std::FILE* out, const Report& rep) {
  auto per = rep.per_backend();
  fmt::print(out, "\n{:<14} {:>7} {:>7} {:>12} {:>17} {:>16} {:>7}\n", "backend", "passed", "failed", "unsupported",
             "expected failure", "unexpected pass", "total");
  auto row = [&](const std::string& name, const Counts& c) {
    fmt::print(out, "{:<14} {:>7} {:>7} {:>12} {:>17} {:>16} {:>7}\n", name, c.passed, c.failed, c.unsupported,
               c.expected_failure, c.unexpected_pass, c.total());
  };
  for (auto& [backend, c] : per) row(backend, c);
  if (per.size() > 1) row("all", rep.totals());
  Counts t = rep.totals();
  int bad = t.failed + t.unexpected_pass;
  fmt::print(out, "\n{}: {} failure(s), {} unexpected pass(es) in {:.1f} s; seed {}\n", bad ? "FAILED" : "PASSED",
             t.failed, t.unexpected_pass, rep.seconds, rep.seed);
  for (auto& r : rep.results)
    if (r.outcome == Outcome::failed || r.outcome == Outcome::unexpected_pass)
      fmt::print(out, "  {} {} {}: {}\n", outcome_name(r.outcome), r.device, r.name, first_line(r.message));
}

// One <testsuite> per backend. Failures and unexpected passes are <failure>; unsupported
// tests and expected failures are <skipped>, whose message starts with what it is.
Status write_junit(const Report& rep, const std::string& path) {
  auto per = rep.per_backend();
  Counts all = rep.totals();
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format("<testsuites name=\"halcyon cts\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
                   "time=\"{:.3f}\">\n",
                   all.total(), all.failed + all.unexpected_pass, all.unsupported + all.expected_failure, rep.seconds);
  std::string stamp = utc_now(), host = xml_escape(host_name());
  for (auto& [backend, c] : per) {
    double secs = 0;
    for (auto& r : rep.results)
      if (r.backend == backend) secs += r.seconds;
    x += fmt::format("  <testsuite name=\"cts.{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
                     "time=\"{:.3f}\" timestamp=\"{}\" hostname=\"{}\">\n",
                     xml_escape(backend), c.total(), c.failed + c.unexpected_pass, c.unsupported + c.expected_failure,
                     secs, stamp, host);
    x += "    <properties>\n";
    x += fmt::format("      <property name=\"seed\" value=\"{}\"/>\n", rep.seed);
    if (!rep.command.empty()) x += fmt::format("      <property name=\"command\" value=\"{}\"/>\n", xml_escape(rep.command));
    for (auto& d : rep.devices)
      if (d.uri.substr(0, d.uri.find(':')) == backend)
        x += fmt::format("      <property name=\"device\" value=\"{} | {} | {}\"/>\n", xml_escape(d.uri),
                         xml_escape(d.name), xml_escape(d.arch));
    x += "    </properties>\n";
    for (auto& r : rep.results) {
      if (r.backend != backend) continue;
      x += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3f}\"", xml_escape(r.device),
                       xml_escape(r.name), r.seconds);
      std::string body;
      switch (r.outcome) {
        case Outcome::passed: break;
        case Outcome::failed:
          body = fmt::format("      <failure message=\"{}\" type=\"failed\">{}</failure>\n", xml_escape(first_line(r.message)),
                             xml_escape(r.message));
          break;
        case Outcome::unexpected_pass:
          body = fmt::format("      <failure message=\"unexpected pass: {}\" type=\"unexpected pass\">{}</failure>\n",
                             xml_escape(first_line(r.message)), xml_escape(r.message));
          break;
        case Outcome::unsupported:
          body = fmt::format("      <skipped message=\"unsupported: {}\"/>\n", xml_escape(first_line(r.message)));
          break;
        case Outcome::expected_failure:
          body = fmt::format("      <skipped message=\"expected failure: {}\"/>\n", xml_escape(first_line(r.message)));
          break;
      }
      if (!r.detail.empty()) body += fmt::format("      <system-out>{}</system-out>\n", xml_escape(r.detail));
      x += body.empty() ? "/>\n" : ">\n" + body + "    </testcase>\n";
    }
    x += "  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return write_file(path, x);
}

Status write_markdown(const Report& rep, const std::string& path) {
  std::string m = "# halcyon conformance report\n\n";
  m += fmt::format("- date (UTC): {}\n- host: {}\n- seed: {} (reproduce with `--seed {}`)\n- duration: {:.1f} s\n",
                   utc_now(), host_name(), rep.seed, rep.seed, rep.seconds);
  if (!rep.command.empty()) m += fmt::format("- command: `{}`\n", rep.command);
  Counts t = rep.totals();
  m += fmt::format("- result: **{}**\n\n", rep.ok() ? "PASSED" : "FAILED");

  m += "## Devices\n\n| device | name | arch | capabilities |\n|---|---|---|---|\n";
  for (auto& d : rep.devices)
    m += fmt::format("| {} | {} | {} | {} |\n", md_cell(d.uri), md_cell(d.name), md_cell(d.arch), md_cell(d.capabilities));

  m += "\n## Summary\n\n| backend | passed | failed | unsupported | expected failure | unexpected pass | total |\n"
       "|---|---:|---:|---:|---:|---:|---:|\n";
  for (auto& [backend, c] : rep.per_backend())
    m += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", md_cell(backend), c.passed, c.failed, c.unsupported,
                     c.expected_failure, c.unexpected_pass, c.total());
  m += fmt::format("| **all** | {} | {} | {} | {} | {} | {} |\n", t.passed, t.failed, t.unsupported, t.expected_failure,
                   t.unexpected_pass, t.total());

  for (Outcome o : kOutcomes) {
    if (o == Outcome::passed) continue;
    bool any = false;
    for (auto& r : rep.results) any = any || r.outcome == o;
    if (!any) continue;
    std::string title = outcome_name(o);
    title[0] = char(std::toupper(title[0]));
    m += fmt::format("\n## {}\n\n| device | test | why |\n|---|---|---|\n", title);
    for (auto& r : rep.results)
      if (r.outcome == o) m += fmt::format("| {} | `{}` | {} |\n", md_cell(r.device), md_cell(r.name), md_cell(r.message));
  }

  m += "\n## All tests\n\n| device | test | outcome | time (s) | measured |\n|---|---|---|---:|---|\n";
  for (auto& r : rep.results)
    m += fmt::format("| {} | `{}` | {} | {:.3f} | {} |\n", md_cell(r.device), md_cell(r.name), outcome_name(r.outcome),
                     r.seconds, md_cell(r.detail));
  return write_file(path, m);
}

}  // namespace halcyon::cts
