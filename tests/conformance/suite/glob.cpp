// Test-name selection: shell-style globs, comma-separated, '-' to exclude.
#include <halcyon/cts/cts.hpp>

namespace halcyon::cts {

bool glob_match(std::string_view g, std::string_view s) {
  // Iterative matcher with one backtrack point (the last '*').
  size_t gi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (gi < g.size() && (g[gi] == '?' || g[gi] == s[si])) {
      ++gi;
      ++si;
    } else if (gi < g.size() && g[gi] == '*') {
      star = gi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      gi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (gi < g.size() && g[gi] == '*') ++gi;
  return gi == g.size();
}

bool filter_match(std::string_view filter, std::string_view name) {
  bool any_include = false, included = false;
  size_t start = 0;
  while (start <= filter.size()) {
    size_t comma = filter.find(',', start);
    if (comma == std::string_view::npos) comma = filter.size();
    std::string_view g = filter.substr(start, comma - start);
    start = comma + 1;
    if (g.empty()) continue;
    if (g.front() == '-') {
      if (glob_match(g.substr(1), name)) return false;
    } else {
      any_include = true;
      included = included || glob_match(g, name);
    }
  }
  return !any_include || included;
}

}  // namespace halcyon::cts
