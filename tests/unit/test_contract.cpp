// The contract parser, call binding and operator dispatch rules.
#include <halcyon/ops/contract.hpp>
#include <halcyon/ops/op.hpp>

#include "test_support.hpp"

#include <vector>


using namespace halcyon::ops;
using test::unwrap;

namespace {
const char* kGate = R"(# a test contract
op gate_test
summary routing
input logits f32 [T, E]
input bias f32 [E] optional
output ids i32 [T, K] exact
output weights f32 [T, K] rel 1e-5
param score enum sigmoid sigmoid|softmax
param topk int 8
param scale f32 2.5
param normalize bool true
dim K = topk
dim TK = T * K
range logits -4 4
case T=1 E=16 topk=2
case T=7 E=64 score=softmax
note ties go to the lower index
)";
}

TEST_CASE("contract: parse a well-formed contract") {
  auto c = unwrap(parse_contract(kGate, "test/gate.contract"));
  CHECK(c.op == "gate_test");
  CHECK(c.summary == "routing");
  REQUIRE(c.inputs.size() == 2);
  CHECK(c.inputs[1].optional);
  CHECK(c.inputs[0].dims == std::vector<std::string>{"T", "E"});
  REQUIRE(c.outputs.size() == 2);
  CHECK(c.outputs[0].tolerance.exact);
  CHECK(c.outputs[1].tolerance.rel == doctest::Approx(1e-5));
  REQUIRE(c.params.size() == 4);
  CHECK(std::get<std::string>(c.params[0].default_value) == "sigmoid");
  CHECK(c.params[0].choices.size() == 2);
  CHECK(std::get<int64_t>(c.params[1].default_value) == 8);
  CHECK(std::get<double>(c.params[2].default_value) == doctest::Approx(2.5));
  CHECK(std::get<bool>(c.params[3].default_value));
  REQUIRE(c.cases.size() == 2);
  CHECK(c.cases[0].dims.at("T") == 1);
  CHECK(c.cases[0].params.at("topk") == "2");
  CHECK(c.find_range("logits")->lo == -4);
  CHECK(c.notes.size() == 1);
}

TEST_CASE("contract: binding resolves dims from shapes, rules and cases") {
  auto c = unwrap(parse_contract(kGate, "gate.contract"));
  auto b = unwrap(bind(c, {{"topk", "4"}}, {}, {{"logits", {5, 32}}}));
  CHECK(b.dim("T") == 5);
  CHECK(b.dim("E") == 32);
  CHECK(b.dim("K") == 4);
  CHECK(b.dim("TK") == 20);
  CHECK(b.params.i("topk") == 4);
  CHECK(b.params.s("score") == "sigmoid");
  CHECK(b.shape_of(c.outputs[0]) == std::vector<int64_t>{5, 4});
  auto from_case = unwrap(bind(c, c.cases[1].params, c.cases[1].dims, {}));
  CHECK(from_case.dim("K") == 8);
  CHECK(from_case.params.s("score") == "softmax");
}

TEST_CASE("contract: binding errors name the bad value") {
  auto c = unwrap(parse_contract(kGate, "gate.contract"));
  auto bad_enum = bind(c, {{"score", "relu"}}, {}, {{"logits", {5, 32}}});
  REQUIRE(!bad_enum.ok());
  CHECK(bad_enum.error().message().find("'relu' is not one of sigmoid|softmax") != std::string::npos);
  auto bad_int = bind(c, {{"topk", "eight"}}, {}, {{"logits", {5, 32}}});
  REQUIRE(!bad_int.ok());
  CHECK(bad_int.error().message().find("'eight' is not an integer") != std::string::npos);
  auto unknown = bind(c, {{"colour", "red"}}, {}, {{"logits", {5, 32}}});
  REQUIRE(!unknown.ok());
  CHECK(unknown.error().message().find("unknown parameter 'colour'") != std::string::npos);
  auto rank = bind(c, {}, {}, {{"logits", {5, 32, 2}}});
  REQUIRE(!rank.ok());
  CHECK(rank.error().message().find("has 3 dimension(s)") != std::string::npos);
  auto mismatch = bind(c, {}, {}, {{"logits", {5, 32}}, {"bias", {31}}});
  REQUIRE(!mismatch.ok());
  CHECK(mismatch.error().message().find("'bias' dimension 0 (E) is 31, expected 32") != std::string::npos);
  auto missing = bind(c, {}, {}, {});
  REQUIRE(!missing.ok());
  CHECK(missing.error().message().find("unknown") != std::string::npos);
}

// check_params judges the parameters alone: no tensor, case or dim rule is needed, and what
// it accepts or refuses (with the same message) is what bind() does with them.
TEST_CASE("contract: check_params types parameters without tensors or dims") {
  auto c = unwrap(parse_contract(kGate, "gate.contract"));
  auto ps = unwrap(check_params(c, {{"topk", "4"}, {"normalize", "0"}}));
  CHECK(ps.i("topk") == 4);
  CHECK_FALSE(ps.b("normalize"));
  CHECK(ps.s("score") == "sigmoid");  // defaults fill the rest
  CHECK(ps.f("scale") == doctest::Approx(2.5));
  CHECK(ps.values().size() == c.params.size());
  // bind() with no dims cannot resolve T and E, but the parameters alone are fine.
  CHECK_FALSE(bind(c, {{"topk", "4"}}, {}, {}).ok());
  struct Bad {
    std::map<std::string, std::string> params;
    std::string says;
  };
  for (const Bad& bad : {Bad{{{"topk", "eight"}}, "gate_test: parameter 'topk': 'eight' is not an integer"},
                         Bad{{{"scale", "inf"}}, "gate_test: parameter 'scale': 'inf' is not a finite number"},
                         Bad{{{"normalize", "yes"}}, "gate_test: parameter 'normalize': 'yes' is not true or false"},
                         Bad{{{"score", "relu"}}, "gate_test: parameter 'score': 'relu' is not one of sigmoid|softmax"},
                         Bad{{{"colour", "red"}}, "gate_test: unknown parameter 'colour'"}}) {
    auto r = check_params(c, bad.params);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
    CHECK(r.error().message() == bad.says);
    auto b = bind(c, bad.params, {}, {{"logits", {5, 32}}});
    REQUIRE_FALSE(b.ok());
    CHECK(b.error().message() == bad.says);
  }
}

TEST_CASE("contract: malformed contracts are rejected with file and line") {
  auto r = parse_contract("op x\noutput y f32 [N]\n", "x.contract");
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("x.contract:2: an output needs a tolerance") != std::string::npos);
  r = parse_contract("op x\ninput a f99 [N]\n", "x.contract");
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("unknown dtype 'f99'") != std::string::npos);
  r = parse_contract("op x\ninput a f32 [N\n", "x.contract");
  REQUIRE(!r.ok());
  r = parse_contract("summary no op\n", "x.contract");
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("no 'op' line") != std::string::npos);
  r = parse_contract("op x\nfrobnicate\n", "x.contract");
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("unknown statement 'frobnicate'") != std::string::npos);
  // A tolerance in e4m3 steps: only for e4m3 outputs, a whole count.
  r = parse_contract("op x\noutput y f32 [N] steps 1\n", "x.contract");
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("x.contract:2: a tolerance in steps is for e4m3 outputs") != std::string::npos);
  r = parse_contract("op x\noutput y e4m3 [N] steps 1.5\n", "x.contract");
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("bad step count '1.5'") != std::string::npos);
  auto ok = parse_contract("op x\noutput y e4m3 [N] steps 1\n", "x.contract");
  REQUIRE(ok.ok());
  CHECK(ok->outputs[0].tolerance.steps == 1);
  CHECK(ok->outputs[0].tolerance.abs < 0);
  CHECK_FALSE(ok->outputs[0].tolerance.exact);
  ok = parse_contract("op x\noutput y e4m3 [N] steps 1 abs 9\n", "x.contract");
  REQUIRE(ok.ok());
  CHECK(ok->outputs[0].tolerance.abs == 9);
}

TEST_CASE("contract: every embedded contract parses and binds its cases") {
  for (auto& c : contracts()) {
    CAPTURE(c.file);
    CHECK(!c.op.empty());
    CHECK(!c.cases.empty());
    for (auto& cs : c.cases) {
      CAPTURE(cs.text);
      auto b = bind(c, cs.params, cs.dims, {});
      CHECK_MESSAGE(b.ok(), (b.ok() ? std::string() : b.error().message()));
    }
  }
}

TEST_CASE("op: unknown operators and missing implementations are clear errors") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::map<std::string, Tensor, std::less<>> t;
  auto st = run_op(dev, s, "no_such_op", t);
  REQUIRE(!st.ok());
  CHECK(st.error().status() == HAL_NOT_FOUND);
  std::string why;
  CHECK(select_impl(dev, "no_such_op", &why) == nullptr);
  CHECK(why.find("no implementation") != std::string::npos);
}

TEST_CASE("op: run_op runs vector_add on the cpu through the HAL, and checks its inputs") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  const int64_t n = 40000;  // several blocks
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int64_t i = 0; i < n; ++i) a[i] = float(i) * 0.25f, b[i] = 1.0f - float(i);
  std::map<std::string, Tensor, std::less<>> t;
  t["a"] = unwrap(make_tensor(dev, DType::f32, {n}));
  t["b"] = unwrap(make_tensor(dev, DType::f32, {n}));
  unwrap(s.write(t["a"].buffer, 0, a.data(), n * 4));
  unwrap(s.write(t["b"].buffer, 0, b.data(), n * 4));
  unwrap(allocate_outputs(dev, "vector_add", t));
  REQUIRE(t.count("c"));
  CHECK(t["c"].shape == std::vector<int64_t>{n});
  unwrap(run_op(dev, s, "vector_add", t));
  unwrap(s.read(t["c"].buffer, 0, c.data(), n * 4));
  unwrap(s.synchronize());
  for (int64_t i = 0; i < n; ++i) REQUIRE(c[i] == a[i] + b[i]);

  t["b"].dtype = DType::i32;
  auto st = run_op(dev, s, "vector_add", t);
  REQUIRE(!st.ok());
  CHECK(st.error().message().find("'b' is i32, the contract says f32") != std::string::npos);
  t["b"].dtype = DType::f32;
  t["b"].shape = {n - 1};
  st = run_op(dev, s, "vector_add", t);
  REQUIRE(!st.ok());
  CHECK(st.error().message().find("expected") != std::string::npos);
  t.erase("b");
  st = run_op(dev, s, "vector_add", t);
  REQUIRE(!st.ok());
  CHECK(st.error().message().find("input 'b' is missing") != std::string::npos);
}

TEST_CASE("contract: generators and defined-row rules") {
  auto c = unwrap(parse_contract(R"(op g
input a bf16 [R, H]
input offsets i32 [EL1]
output out bf16 [R, H] rel 1e-2
output n i32 [1] exact
dim EL1 = EL+1
generate offsets offsets R
rows out offsets[-1]
case R=5 H=3 EL=2
)", "g.contract"));
  REQUIRE(c.find_generator("offsets"));
  CHECK(c.find_generator("offsets")->total == "R");
  REQUIRE(c.find_defined_rows("out"));
  CHECK(c.find_defined_rows("out")->count_tensor == "offsets");
  CHECK(c.find_defined_rows("out")->index == -1);
  CHECK(!parse_contract("op g\ninput a f32 [N]\noutput o f32 [N] exact\ngenerate a offsets N\n", "x").ok());
  CHECK(!parse_contract("op g\ninput a i32 [N]\noutput o f32 [N] exact\nrows o a\n", "x").ok());
  // blockscaled, with and without special values
  const std::string head = "op g\ninput a bf16 [N]\noutput o f32 [N] exact\n";
  auto plain = unwrap(parse_contract(head + "generate a blockscaled 128\n", "x"));
  REQUIRE(plain.find_generator("a"));
  CHECK(plain.find_generator("a")->total == "128");
  CHECK_FALSE(plain.find_generator("a")->specials);
  auto special = unwrap(parse_contract(head + "generate a blockscaled 16 specials\n", "x"));
  REQUIRE(special.find_generator("a"));
  CHECK(special.find_generator("a")->specials);
  CHECK(!parse_contract(head + "generate a blockscaled 16 nans\n", "x").ok());
  CHECK(!parse_contract(head + "generate a blockscaled specials\n", "x").ok());
  // NaNs planted at a count given by an expression; float inputs only
  auto nans = unwrap(parse_contract(head + "generate a nans N/8\n", "x"));
  REQUIRE(nans.find_generator("a"));
  CHECK(nans.find_generator("a")->kind == "nans");
  CHECK(nans.find_generator("a")->total == "N/8");
  CHECK(!parse_contract(head + "generate a nans\n", "x").ok());
  CHECK(!parse_contract("op g\ninput a i32 [N]\noutput o f32 [N] exact\ngenerate a nans 1\n", "x").ok());
}

TEST_CASE("contract: values drawn within their bounds, outputs defined only under a bool param") {
  auto c = unwrap(parse_contract(R"(op g
input x bf16 [T, H]
input map i32 [R]
output out bf16 [R, H] rel 1e-2
output copy bf16 [R, H] exact
param topk int 8
param write_copy bool true
generate map bounds
bounds map 0 T*topk
defined copy if write_copy
case R=5 T=2 H=3
)", "g.contract"));
  REQUIRE(c.find_generator("map"));
  CHECK(c.find_generator("map")->kind == "bounds");
  REQUIRE(c.find_bounds("map"));
  CHECK(c.find_bounds("map")->hi == "T*topk");
  REQUIRE(c.find_defined_if("copy"));
  CHECK(c.find_defined_if("copy")->param == "write_copy");
  CHECK(c.find_defined_if("out") == nullptr);
  auto on = unwrap(bind(c, {}, c.cases[0].dims, {}));
  CHECK(output_defined(c, on, "copy"));
  CHECK(output_defined(c, on, "out"));
  CHECK(unwrap(evaluate(on, c.find_bounds("map")->hi)) == 16);
  auto off = unwrap(bind(c, {{"write_copy", "false"}, {"topk", "3"}}, c.cases[0].dims, {}));
  CHECK_FALSE(output_defined(c, off, "copy"));
  CHECK(output_defined(c, off, "out"));
  CHECK(unwrap(evaluate(off, c.find_bounds("map")->hi)) == 6);

  auto refused = [](const char* text, const char* why) {
    auto r = parse_contract(text, "x");
    REQUIRE(!r.ok());
    CHECK_MESSAGE(r.error().message().find(why) != std::string::npos, r.error().message());
  };
  const std::string head = "op g\ninput a i32 [N]\noutput o f32 [N] exact\nparam flag bool true\nparam n int 1\n";
  refused((head + "generate a bounds\n").c_str(), "'a' has no bounds line");
  refused((head + "generate a bounds 0 4\n").c_str(), "generate <input> bounds");
  refused((head + "defined o if n\n").c_str(), "'o' must be an output and 'n' a bool param");
  refused((head + "defined a if flag\n").c_str(), "'a' must be an output");
  refused((head + "defined o if nothing\n").c_str(), "'nothing' a bool param");
  refused((head + "defined o when flag\n").c_str(), "expected 'defined <output> if <bool param>'");
}

// Issue 22: bounds such as [-1, T) need unary minus; sizes past int64 are errors, not
// wrapped values (UBSan found the wrap with huge --set values).
TEST_CASE("contract: expressions have unary minus and refuse overflow") {
  const Contract* c = find_contract("vector_add");
  REQUIRE(c);
  Binding b = unwrap(bind(*c, {}, {{"N", 5}}, {}));
  CHECK(unwrap(evaluate(b, "-1")) == -1);
  CHECK(unwrap(evaluate(b, "-N + 2")) == -3);
  CHECK(unwrap(evaluate(b, "2 * -(N - 1)")) == -8);
  CHECK(unwrap(evaluate(b, "- - 4")) == 4);
  for (const char* e : {"9223372036854775807 + 1", "-9223372036854775807 - 2", "4611686018427387904 * 2",
                        "3037000500 * 3037000500", "-(-9223372036854775807 - 1)", "(-9223372036854775807 - 1) / -1"}) {
    auto r = evaluate(b, e);
    REQUIRE_MESSAGE(!r.ok(), e);
    CHECK_MESSAGE(r.error().message().find("overflows") != std::string::npos, r.error().message());
  }
  CHECK(!evaluate(b, std::string(100000, '(') + "1").ok());  // deep nesting: an error, not a stack overflow
  CHECK(!evaluate(b, std::string(100000, '-') + "1").ok());
  CHECK(!evaluate(b, "99999999999999999999").ok());
}

TEST_CASE("contract: a binding whose tensors hold more than 2^63 bytes is refused") {
  const Contract* c = find_contract("gemm_bf16");
  REQUIRE(c);
  auto r = bind(*c, {}, {{"M", int64_t(1) << 40}, {"N", int64_t(1) << 40}, {"K", 1}}, {});
  REQUIRE(!r.ok());
  CHECK_MESSAGE(r.error().message().find("more than 2^63 bytes") != std::string::npos, r.error().message());
  CHECK(bind(*c, {}, {{"M", int64_t(1) << 20}, {"N", 4}, {"K", 4}}, {}).ok());
}

TEST_CASE("tensor sizes: checked_extent refuses negative dimensions and more than 2^63 - 1 bytes") {
  using V = std::vector<int64_t>;
  auto extent = [](DType t, V shape) { return checked_extent(t, shape); };
  auto e = unwrap(extent(DType::f32, {3, 5}));
  CHECK(e.elements == 15);
  CHECK(e.bytes == 60);
  CHECK(unwrap(extent(DType::bf16, {})).bytes == 2);  // a scalar
  // A zero dimension holds nothing, whatever the others (their product is never formed).
  CHECK(unwrap(extent(DType::f64, {int64_t(1) << 62, 0, int64_t(1) << 62})).bytes == 0);
  // Exactly 2^63 - 1 bytes is representable; one element more is not.
  CHECK(unwrap(extent(DType::u8, {INT64_MAX})).bytes == INT64_MAX);
  for (V bad : {V{int64_t(1) << 32, int64_t(1) << 32}, V{int64_t(1) << 62, 4}, V{INT64_MAX, 2}, V{3037000500, 3037000500}}) {
    auto r = extent(DType::f32, bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().status() == HAL_OUT_OF_RANGE);
    CHECK_MESSAGE(r.error().message().find("of f32 holds more than 2^63 bytes") != std::string::npos, r.error().message());
  }
  for (V bad : {V{-2, -2}, V{0, -1}, V{4, INT64_MIN}}) {
    auto r = extent(DType::f32, bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(r.error().message().find("has a negative dimension") != std::string::npos, r.error().message());
  }
  // The unchecked accessors give values no buffer size check can pass.
  Tensor t;
  t.shape = {int64_t(1) << 62, 4};
  CHECK(t.numel() == -1);
  CHECK(t.bytes() == UINT64_MAX);
  t.shape = {-2, -2};
  CHECK(t.numel() == -1);
  CHECK(t.bytes() == UINT64_MAX);
}

TEST_CASE("tensor sizes: check_in_buffer compares offset and bytes without wrapping") {
  Tensor t;
  t.shape = {4};  // 16 bytes of f32
  halcyon::Status ok = check_in_buffer(t, 16, "'x'");
  CHECK(ok.ok());
  t.offset = 16;
  t.shape = {0};
  CHECK(check_in_buffer(t, 16, "'x'").ok());  // an empty tensor at the end
  t.shape = {4};
  for (uint64_t offset : {uint64_t(4), uint64_t(17), UINT64_MAX - 15, UINT64_MAX}) {
    CAPTURE(offset);
    t.offset = offset;
    auto r = check_in_buffer(t, 16, "vector_add: 'c'");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().status() == HAL_OUT_OF_RANGE);
    CHECK_MESSAGE(r.error().message().find("vector_add: 'c': f32 [4] needs 16 bytes at offset " + std::to_string(offset) +
                                           ", its buffer has 16") != std::string::npos,
                  r.error().message());
  }
  t.offset = 0;
  t.shape = {int64_t(1) << 62, 4};  // bytes() once wrapped to 0 here
  auto r = check_in_buffer(t, 16, "'x'");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("'x': [4611686018427387904, 4] of f32 holds more than 2^63 bytes") != std::string::npos);
}
