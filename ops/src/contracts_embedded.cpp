// The contracts compiled into the library (table generated at build time).
#include <halcyon/ops/contract.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

struct EmbeddedContract {
  const char* file;
  std::string_view text;
};
extern const EmbeddedContract kEmbeddedContracts[];

namespace halcyon::ops {

const std::vector<Contract>& contracts() {
  static const std::vector<Contract> all = [] {
    std::vector<Contract> out;
    for (const EmbeddedContract* e = kEmbeddedContracts; e->file; ++e) {
      auto c = parse_contract(e->text, e->file);
      // A malformed contract is a build defect; the unit tests parse every one.
      if (!c) {
        std::fprintf(stderr, "halcyon: %s\n", c.error().message().c_str());
        std::abort();
      }
      out.push_back(std::move(c).value());
    }
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.op < b.op; });
    return out;
  }();
  return all;
}

const Contract* find_contract(std::string_view op) {
  for (auto& c : contracts())
    if (c.op == op) return &c;
  return nullptr;
}

}  // namespace halcyon::ops
