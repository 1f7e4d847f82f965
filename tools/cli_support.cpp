#include "cli_support.hpp"

#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace halcyon::cli {

std::optional<int64_t> parse_int(std::string_view option, std::string_view text, int64_t lo, int64_t hi, std::string* err) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (!text.empty() && ec == std::errc() && p == text.data() + text.size() && v >= lo && v <= hi) return v;
  *err = fmt::format("{}: '{}' is not an integer in [{}, {}]", option, text, lo, hi);
  return std::nullopt;
}

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t at = 0;;) {
    const size_t comma = text.find(',', at);
    pieces.push_back(text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    if (comma == std::string_view::npos) return pieces;
    at = comma + 1;
  }
}

bool parse_impl(std::string_view text, std::map<std::string, std::string, std::less<>>* impl, std::string* err) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    *err = fmt::format("--impl '{}' is not OP=NAME", text);
    return false;
  }
  (*impl)[std::string(text.substr(0, eq))] = std::string(text.substr(eq + 1));
  return true;
}

std::optional<double> parse_positive(std::string_view option, std::string_view text, std::string* err) {
  std::string s(text);
  char* end = nullptr;
  double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(v) && v > 0) return v;
  *err = fmt::format("{}: '{}' is not a finite number greater than 0", option, text);
  return std::nullopt;
}

namespace {
bool runs_moe(const Device& d) {
  for (const char* op : {"gemm_bf16", "moe_gate", "moe_permute", "moe_grouped_gemm_swiglu", "moe_grouped_gemm", "moe_combine"})
    if (!ops::select_impl(d, op)) return false;
  return true;
}
}  // namespace

Result<std::string> best_moe_device() {
  auto uris = device_uris();
  if (!uris) return uris.error();
  for (auto& u : *uris) {
    if (u.rfind("cpu", 0) == 0) continue;
    auto d = Device::open(u.c_str());
    // A simulator (amdgpu-sim) runs every stage, but thousands of times slower than the CPU:
    // it is chosen by name only.
    if (d && !d->has("simulator") && runs_moe(*d)) return u;
  }
  return std::string("cpu:0");
}

}  // namespace halcyon::cli
