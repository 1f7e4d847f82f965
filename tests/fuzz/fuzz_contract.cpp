// libFuzzer target: the contract parser and the dimension-expression evaluator. The first
// byte chooses: parse the rest as a .contract and bind each of its cases (and evaluate its
// bounds), or evaluate the rest as an expression over a bound vector_add (N = 5).
#include <halcyon/ops/contract.hpp>

#include <cstdint>
#include <string_view>

namespace ops = halcyon::ops;

namespace {

void parse_and_bind(std::string_view text) {
  auto c = ops::parse_contract(text, "fuzz.contract");
  if (!c) return;
  for (const ops::ContractCase& cs : c->cases) {
    auto b = ops::bind(*c, cs.params, cs.dims, {});
    if (!b) continue;
    for (const ops::ValueBounds& bd : c->bounds) {
      (void)ops::evaluate(*b, bd.lo);
      (void)ops::evaluate(*b, bd.hi);
    }
  }
}

void evaluate(std::string_view text) {
  static const ops::Binding binding = [] {
    auto b = ops::bind(*ops::find_contract("vector_add"), {}, {{"N", 5}}, {});
    return b ? *b : ops::Binding{};
  }();
  (void)ops::evaluate(binding, text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) evaluate(text);
  else parse_and_bind(text);
  return 0;
}
