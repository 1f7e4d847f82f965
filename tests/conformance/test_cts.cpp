// Tests of the conformance suite itself: that it passes a correct backend, catches broken
// kernels, applies declared expectations, and that its JUnit XML agrees with its summary.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halcyon/cts/cts.hpp>
#include <halcyon/halcyon.hpp>

#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "junit_reader.hpp"

#ifdef HALCYON_CTS_NUMERIC
#include <halcyon/ops/op.hpp>

#include "near_ties.hpp"
#include "numeric_values.hpp"
#endif

using halcyon::cts::Expectation;
using halcyon::cts::Outcome;

namespace {

halcyon::cts::Options options(std::string device, std::string filter) {
  halcyon::cts::Options o;
  o.device = std::move(device);
  o.filter = std::move(filter);
  o.out = nullptr;  // quiet
  o.seed = 20261122;
  o.seed_given = true;
  return o;
}

halcyon::cts::Report run_ok(const halcyon::cts::Options& o) {
  auto r = halcyon::cts::run(o);
  REQUIRE_MESSAGE(r.error == halcyon::cts::RunError::none, r.message);
  return r.report;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

#ifdef HALCYON_CTS_NUMERIC

namespace ops = halcyon::ops;

// ---- deliberately broken operator implementations for the test-only backends ----------------

const ops::OpImpl* reference_impl(std::string_view op) {
  static auto cpu = halcyon::Device::open("cpu");
  return cpu ? ops::select_impl(*cpu, op) : nullptr;
}

void store(ops::DType t, double v, uint8_t* p) {
  switch (t) {
    case ops::DType::f32: { float x = float(v); std::memcpy(p, &x, 4); break; }
    case ops::DType::f64: std::memcpy(p, &v, 8); break;
    case ops::DType::f16: { uint16_t x = halcyon::cts::f32_to_f16(float(v)); std::memcpy(p, &x, 2); break; }
    case ops::DType::bf16: { uint16_t x = halcyon::cts::f32_to_bf16(float(v)); std::memcpy(p, &x, 2); break; }
    case ops::DType::i32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
    case ops::DType::i64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
    case ops::DType::u8: *p = uint8_t(v); break;
    case ops::DType::e4m3: *p = halcyon::cts::f32_to_e4m3(float(v)); break;
  }
}

// How many leading elements of an output the contract defines (all, unless a `rows` line
// limits them to the count held by another tensor; none when a `defined ... if` param is false).
halcyon::Result<size_t> defined_elements(ops::OpContext& ctx, const ops::TensorSpec& out) {
  const ops::Tensor& t = ctx.tensor(out.name);
  if (!ops::output_defined(ctx.contract, ctx.binding, out.name)) return size_t(0);
  size_t n = size_t(t.numel());
  const ops::DefinedRows* d = ctx.contract.find_defined_rows(out.name);
  if (!d || n == 0) return n;
  const ops::Tensor& counts = ctx.tensor(d->count_tensor);
  int64_t k = d->index < 0 ? counts.numel() + d->index : d->index;
  int32_t rows = 0;
  HALCYON_TRY(ctx.stream.read(counts.buffer, counts.offset + uint64_t(k) * 4, &rows, 4));
  HALCYON_TRY(ctx.stream.synchronize());
  return std::min(n, size_t(std::max(rows, 0)) * (n / size_t(t.shape[0])));
}

// The reference, then one defined element of the first output that has one changed: by 1
// for integers, by 1 + 2 ||output|| for floats (so the relative error exceeds 2); e4m3, which
// saturates at 448, to 448 where it is below 224 in magnitude, else to its negative (at least
// 224 away either way).
halcyon::Status flip_one_element(ops::OpContext& ctx) {
  const ops::OpImpl* ref = reference_impl(ctx.contract.op);
  if (!ref) return halcyon::Error(HAL_UNSUPPORTED, "no reference");
  HALCYON_TRY(ref->fn(ctx));
  for (auto& out : ctx.contract.outputs) {
    const ops::Tensor& t = ctx.tensor(out.name);
    auto defined = defined_elements(ctx, out);
    if (!defined) return defined.error();
    if (*defined == 0) continue;
    std::vector<uint8_t> bytes(t.bytes());
    HALCYON_TRY(ctx.stream.read(t.buffer, t.offset, bytes.data(), bytes.size()));
    HALCYON_TRY(ctx.stream.synchronize());
    // The middle element, or the first finite one after it: a NaN the contract defines (an
    // input's, carried) stays, and the norm counts the finite elements only.
    size_t n = *defined, i = n / 2, size = ops::dtype_size(t.dtype);
    auto at = [&](size_t k) { return halcyon::cts::element(t.dtype, bytes.data(), k); };
    for (size_t k = 0; k < n && !std::isfinite(at(i)); ++k) i = (i + 1) % n;
    double v = at(i), norm = 0;
    for (size_t k = 0; k < n; ++k)
      if (std::isfinite(at(k))) norm += std::pow(at(k), 2);
    double changed = ops::dtype_is_float(t.dtype) ? v + 1 + 2 * std::sqrt(norm) : v + 1;
    if (t.dtype == ops::DType::e4m3) changed = std::fabs(v) < 224 ? 448 : -v;
    uint8_t enc[8];
    store(t.dtype, changed, enc);
    HALCYON_TRY(ctx.stream.write(t.buffer, t.offset + i * size, enc, size));
    return ctx.stream.synchronize();
  }
  return halcyon::Error(HAL_INTERNAL, "flip: no output to change");
}

// The reference run with the outputs in new tensors: `scratch` is the call's tensors with
// those outputs replaced.
halcyon::Status reference_into_scratch(ops::OpContext& ctx, std::map<std::string, ops::Tensor, std::less<>>* scratch) {
  const ops::OpImpl* ref = reference_impl(ctx.contract.op);
  if (!ref) return halcyon::Error(HAL_UNSUPPORTED, "no reference");
  *scratch = ctx.tensors;
  for (auto& out : ctx.contract.outputs) {
    const ops::Tensor& real = ctx.tensor(out.name);
    auto t = ops::make_tensor(ctx.device, real.dtype, real.shape);
    if (!t) return t.error();
    (*scratch)[out.name] = std::move(t).value();
  }
  ops::OpContext inner{ctx.device, ctx.stream, ctx.contract, ctx.binding, *scratch};
  return ref->fn(inner);
}

// The reference into scratch outputs, then all but the last eighth (at least one element) of
// each output copied out: the rest keeps whatever the output held before.
halcyon::Status leave_tail_unwritten(ops::OpContext& ctx) {
  std::map<std::string, ops::Tensor, std::less<>> scratch;
  HALCYON_TRY(reference_into_scratch(ctx, &scratch));
  for (auto& out : ctx.contract.outputs) {
    const ops::Tensor& real = ctx.tensor(out.name);
    const ops::Tensor& s = scratch.at(out.name);
    uint64_t n = uint64_t(real.numel());
    if (n == 0) continue;
    uint64_t keep = n - std::max<uint64_t>(1, n / 8);
    HALCYON_TRY(ctx.stream.copy(real.buffer, real.offset, s.buffer, s.offset, keep * ops::dtype_size(real.dtype)));
  }
  return ctx.stream.synchronize();
}

// The reference into scratch outputs, then every element copied out except those whose bytes
// are all 0xFF (-1 for integers): an implementation that counts on its outputs being filled
// with -1 beforehand. Where the reference writes no -1 it is correct.
halcyon::Status skip_minus_one(ops::OpContext& ctx) {
  std::map<std::string, ops::Tensor, std::less<>> scratch;
  HALCYON_TRY(reference_into_scratch(ctx, &scratch));
  for (auto& out : ctx.contract.outputs) {
    const ops::Tensor& real = ctx.tensor(out.name);
    const ops::Tensor& s = scratch.at(out.name);
    std::vector<uint8_t> bytes(s.bytes());
    HALCYON_TRY(ctx.stream.read(s.buffer, s.offset, bytes.data(), bytes.size()));
    HALCYON_TRY(ctx.stream.synchronize());
    const size_t size = ops::dtype_size(real.dtype);
    for (size_t i = 0; i < bytes.size(); i += size)
      if (std::any_of(bytes.begin() + i, bytes.begin() + i + size, [](uint8_t b) { return b != 0xFF; }))
        HALCYON_TRY(ctx.stream.write(real.buffer, real.offset + i, bytes.data() + i, size));
  }
  return ctx.stream.synchronize();
}

// The reference, then every NaN of a float output written as +0: an implementation that loses
// the NaNs its inputs carry (a zero scale skipping its group, a clamp in silu). Where no NaN
// reaches an output it is correct.
halcyon::Status zero_nans(ops::OpContext& ctx) {
  const ops::OpImpl* ref = reference_impl(ctx.contract.op);
  if (!ref) return halcyon::Error(HAL_UNSUPPORTED, "no reference");
  HALCYON_TRY(ref->fn(ctx));
  for (auto& out : ctx.contract.outputs) {
    const ops::Tensor& t = ctx.tensor(out.name);
    if (!ops::dtype_is_float(t.dtype) || t.bytes() == 0) continue;
    std::vector<uint8_t> bytes(t.bytes());
    HALCYON_TRY(ctx.stream.read(t.buffer, t.offset, bytes.data(), bytes.size()));
    HALCYON_TRY(ctx.stream.synchronize());
    const size_t size = ops::dtype_size(t.dtype);
    for (size_t i = 0; i < bytes.size() / size; ++i)
      if (std::isnan(halcyon::cts::element(t.dtype, bytes.data(), i))) std::fill_n(bytes.data() + i * size, size, 0);
    HALCYON_TRY(ctx.stream.write(t.buffer, t.offset, bytes.data(), bytes.size()));
  }
  return ctx.stream.synchronize();
}

// A correct implementation of vector_add on cts-flip, only when named ("whole"), whose predicate
// refuses calls of fewer than 8 elements: what `--impls all` runs beside the broken default.
halcyon::Status run_reference(ops::OpContext& ctx) {
  const ops::OpImpl* ref = reference_impl(ctx.contract.op);
  if (!ref) return halcyon::Error(HAL_UNSUPPORTED, "no reference");
  return ref->fn(ctx);
}
bool whole_applies(const ops::ApplyContext& ctx, std::string* why) {
  if (!ctx.has_call() || ctx.dim("N") >= 8) return true;
  if (why) *why = "test: fewer than 8 elements";
  return false;
}

// Ops whose reference exists get a broken implementation on each test-only backend.
std::vector<std::string> register_broken_impls() {
  ops::OpImpl whole{"vector_add", HAL_MODULE_HOST, "host", "cts-flip", -1, run_reference};
  whole.name = "whole";
  whole.applies = whole_applies;
  whole.automatic = false;
  ops::register_op_impl(std::move(whole));
  std::vector<std::string> ops;
  for (const ops::Contract& c : ops::contracts()) {
    if (!reference_impl(c.op)) continue;
    ops.push_back(c.op);
    ops::register_op_impl({c.op, HAL_MODULE_HOST, "host", "cts-flip", 0, flip_one_element});
    ops::register_op_impl({c.op, HAL_MODULE_HOST, "host", "cts-short", 0, leave_tail_unwritten});
    ops::register_op_impl({c.op, HAL_MODULE_HOST, "host", "cts-keep", 0, skip_minus_one});
    ops::register_op_impl({c.op, HAL_MODULE_HOST, "host", "cts-nonan", 0, zero_nans});
  }
  return ops;
}

std::vector<std::string>& broken_ops() {
  static std::vector<std::string> ops;
  return ops;
}

std::string op_of(const std::string& test) {  // "numeric.<op>.<k>" -> op
  auto a = test.find('.'), b = test.rfind('.');
  return test.substr(a + 1, b - a - 1);
}

// Every numeric case of an op with a broken implementation fails, with a message that
// contains `evidence`; there is at least one.
void expect_caught(const halcyon::cts::Report& rep, std::initializer_list<const char*> evidence) {
  int failed = 0;
  for (auto& r : rep.results) {
    bool broken = std::count(broken_ops().begin(), broken_ops().end(), op_of(r.name)) > 0;
    INFO(r.device, " ", r.name, ": ", std::string(halcyon::cts::outcome_name(r.outcome)), ": ", r.message);
    if (!broken) {
      CHECK(r.outcome == Outcome::unsupported);
      continue;
    }
    CHECK(r.outcome == Outcome::failed);
    bool named = std::any_of(evidence.begin(), evidence.end(),
                             [&](const char* e) { return r.message.find(e) != std::string::npos; });
    CHECK(named);
    failed += r.outcome == Outcome::failed;
  }
  CHECK(failed >= 1);
  CHECK_FALSE(rep.ok());
}

TEST_CASE("a backend that changes one output element fails the numeric suite") {
  REQUIRE_FALSE(broken_ops().empty());
  auto rep = run_ok(options("cts-flip:0", "numeric.*,-*.cases"));
  expect_caught(rep, {"exceeds the tolerance", "elements differ"});
}

TEST_CASE("a backend that leaves the last output elements unwritten fails the numeric suite") {
  REQUIRE_FALSE(broken_ops().empty());
  auto rep = run_ok(options("cts-short:0", "numeric.*,-*.cases"));
  expect_caught(rep, {"the poison's bytes", "still poisoned"});
}

TEST_CASE("a backend that leaves the -1 elements of an output unwritten fails the numeric suite") {
  // Under the first poison (0xFF) such elements read -1 and pass; the prepared call's poison
  // (0x5A) catches them. moe_permute's slot_to_row holds -1 where an expert is not local.
  REQUIRE_FALSE(broken_ops().empty());
  auto rep = run_ok(options("cts-keep:0", "numeric.moe_permute.*,-*.cases"));
  int failed = 0;
  for (auto& r : rep.results) {
    INFO(r.name, ": ", std::string(halcyon::cts::outcome_name(r.outcome)), ": ", r.message);
    if (r.outcome != Outcome::failed) continue;
    ++failed;
    CHECK(r.message.find("(prepared call)") != std::string::npos);
    CHECK(r.message.find("output slot_to_row:") == std::string::npos);  // the first run passed
  }
  CHECK(failed >= 1);
}

TEST_CASE("a backend that loses the NaNs its inputs carry fails the numeric suite") {
  // The FP8 GEMMs' contracts plant NaNs in a and w (`generate ... nans`); a case fails where a
  // planted NaN reaches a defined output (not when it sits in an expert with no rows).
  REQUIRE_FALSE(broken_ops().empty());
  auto rep = run_ok(options("cts-nonan:0", "numeric.moe_grouped_gemm_fp8*,-*.cases"));
  std::map<std::string, int> failed;  // per op
  for (auto& r : rep.results) {
    INFO(r.name, ": ", std::string(halcyon::cts::outcome_name(r.outcome)), ": ", r.message);
    if (r.outcome != Outcome::failed) continue;
    ++failed[op_of(r.name)];
    CHECK(r.message.find("not NaN where the reference is (a NaN input lost)") != std::string::npos);
  }
  for (const char* op : {"moe_grouped_gemm_fp8", "moe_grouped_gemm_fp8_swiglu", "moe_grouped_gemm_fp8_swiglu_gather",
                         "moe_grouped_gemm_fp8_swiglu_quant"}) {
    INFO(op);
    CHECK(failed[op] >= 3);
  }
}

TEST_CASE("--impls all: every implementation the device can run, by name; a case its predicate refuses is unsupported") {
  auto o = options("cts-flip:0", "numeric.vector_add*,-*.cases");
  for (auto& r : run_ok(o).results) CHECK(r.name.find('@') == std::string::npos);  // the default: the choice only
  o.every_impl = true;
  auto rep = run_ok(o);
  int plain = 0, broken = 0, passed = 0, refused = 0;
  for (auto& r : rep.results) {
    INFO(r.name, ": ", std::string(halcyon::cts::outcome_name(r.outcome)), ": ", r.message, " | ", r.detail);
    if (r.name.starts_with("numeric.vector_add.")) {
      ++plain;
      CHECK(r.outcome == Outcome::failed);  // the registry's choice, the broken "host"
    } else if (r.name.starts_with("numeric.vector_add@host.")) {
      ++broken;  // cts-flip's own "host" (the CPU's, also runnable here, is not listed twice)
      CHECK(r.outcome == Outcome::failed);
    } else {
      REQUIRE(r.name.starts_with("numeric.vector_add@whole."));
      if (r.outcome == Outcome::unsupported) {
        ++refused;
        CHECK(r.message.find("test: fewer than 8 elements") != std::string::npos);
      } else {
        ++passed;
        CHECK(r.outcome == Outcome::passed);
        CHECK(r.detail.find("implementation whole") != std::string::npos);
      }
    }
  }
  CHECK(plain == 6);
  CHECK(broken == 6);
  CHECK(passed == 4);   // N = 256, 1000, 4099, 65537
  CHECK(refused == 2);  // N = 1, 7
}

TEST_CASE("the same seed reproduces a run, another seed changes the inputs") {
  auto o = options("cts-flip:0", "numeric.*,-*.cases");
  auto a = run_ok(o), b = run_ok(o);
  o.seed += 1;
  auto c = run_ok(o);
  REQUIRE(a.results.size() == b.results.size());
  REQUIRE(a.results.size() == c.results.size());
  int differs = 0;
  for (size_t i = 0; i < a.results.size(); ++i) {
    CHECK(a.results[i].message == b.results[i].message);  // the messages quote element values
    differs += a.results[i].message != c.results[i].message;
  }
  CHECK(differs > 0);
}

TEST_CASE("the CPU backend passes the numeric suite, and its outputs are checked") {
  auto rep = run_ok(options("cpu:0", "numeric.*"));
  CHECK(rep.ok());
  int compared = 0;
  for (auto& r : rep.results) {
    INFO(r.name, ": ", r.message);
    CHECK(r.outcome != Outcome::failed);
    compared += r.outcome == Outcome::passed && r.detail.find("rel err") != std::string::npos;
  }
  CHECK(compared >= 1);
}

TEST_CASE("numeric suite: an output that a false `defined ... if` param leaves unspecified is not compared") {
  // moe_permute's permuted with write_permuted=false: both the CPU and its reference leave it
  // poisoned (NaN), so comparing it would fail; with write_permuted=true it is compared.
  const ops::Contract* c = ops::find_contract("moe_permute");
  REQUIRE(c);
  auto rep = run_ok(options("cpu:0", "numeric.moe_permute.*,-*.cases"));
  CHECK(rep.ok());
  int skipped = 0, compared = 0;
  for (auto& r : rep.results) {
    INFO(r.name, ": ", r.detail, " ", r.message);
    CHECK(r.outcome == Outcome::passed);
    const auto& cs = c->cases.at(std::stoul(r.name.substr(r.name.rfind('.') + 1)));
    const bool off = cs.params.count("write_permuted") && cs.params.at("write_permuted") == "false";
    CHECK((r.detail.find("permuted: not compared (write_permuted = false") != std::string::npos) == off);
    CHECK((r.detail.find("permuted: exact") != std::string::npos) == !off);
    CHECK(r.detail.find("row_to_slot: exact") != std::string::npos);  // the rest still is
    skipped += off;
    compared += !off;
  }
  CHECK(skipped >= 1);
  CHECK(compared >= 1);
}

TEST_CASE("numeric suite: `generate <input> bounds` draws indices the reference accepts") {
  // The reference refuses a row_to_slot outside [0, T * topk) and writes nothing, so an
  // out-of-range draw would leave the poison in its output and fail the case.
  const ops::Contract* c = ops::find_contract("moe_grouped_gemm_swiglu_gather");
  REQUIRE(c);
  auto rep = run_ok(options("cpu:0", "numeric.moe_grouped_gemm_swiglu_gather.*,-*.cases"));
  CHECK(rep.ok());
  CHECK(rep.results.size() == c->cases.size());
  for (auto& r : rep.results) {
    INFO(r.name, ": ", r.detail, " ", r.message);
    CHECK(r.outcome == Outcome::passed);
    CHECK(r.detail.find("out: rel err") != std::string::npos);
  }
}

TEST_CASE("numeric suite: moe_gate answers that differ only within a near-tie are correct, others are not") {
  using halcyon::cts::gate_ids_valid_within_ties;
  // 8 experts in 4 groups of 2, the best 2 groups kept, top-3 experts; selection = sigmoid(logit)
  // (+ bias). Group scores: g0 s(1)+s(2) = 1.61, g2 s(1.5)+s(1) = 1.55, g1 s(1.5)+s(-1) = 1.09,
  // g3 0.50: g0 and g2 kept; then e1 (0.881), e4 (0.818), and e0 and e5 tie (0.731) for third.
  std::vector<float> logits{1.0f, 2.0f, 1.5f, -1.0f, 1.5f, 1.0f, -2.0f, -0.5f};
  std::vector<float> bias(8, 0.0f);
  auto valid = [&](std::vector<int32_t> ids) {
    return gate_ids_valid_within_ties(logits.data(), bias.data(), 8, false, 4, 2, ids.data(), int64_t(ids.size()));
  };
  CHECK(valid({1, 4, 0}));        // the reference's answer (ties to the lower index)
  CHECK(valid({1, 4, 5}));        // the other side of the exact tie
  CHECK_FALSE(valid({4, 1, 0}));  // e1 ranks clearly above e4: not a tie
  CHECK_FALSE(valid({1, 0, 5}));  // e4 (a kept group) clearly above e5, left out
  CHECK_FALSE(valid({1, 4, 2}));  // e2's group (g1) ranks clearly below the two kept
  CHECK_FALSE(valid({1, 4, 4}));  // an expert twice
  CHECK_FALSE(valid({1, 4, 8}));  // out of range
  // Half an fp32 ulp apart (as the CTS met it on ze, 2026-11-29): either order; 1e-4 apart: not.
  bias[5] = 2e-8f;
  CHECK(valid({1, 4, 0}));
  CHECK(valid({1, 4, 5}));
  bias[5] = 1e-4f;
  CHECK(valid({1, 4, 5}));
  CHECK_FALSE(valid({1, 4, 0}));
  // Groups g1 and g2 tie for the second place: either may be kept, not both.
  bias[5] = 0.0f;
  logits = {1.0f, 2.0f, 1.5f, 1.0f, 1.5f, 1.0f, -2.0f, -0.5f};
  CHECK(valid({1, 2, 0}));
  CHECK(valid({1, 4, 0}));
  CHECK(valid({1, 4, 5}));
  CHECK_FALSE(valid({1, 2, 4}));  // experts of three groups
}
#endif  // HALCYON_CTS_NUMERIC

TEST_CASE("glob and filter") {
  using halcyon::cts::filter_match;
  using halcyon::cts::glob_match;
  CHECK(glob_match("api.*", "api.copy.roundtrip"));
  CHECK(glob_match("*.copy.*", "api.copy.roundtrip"));
  CHECK(glob_match("numeric.moe_gate.?", "numeric.moe_gate.3"));
  CHECK_FALSE(glob_match("numeric.moe_gate.?", "numeric.moe_gate.cases"));
  CHECK_FALSE(glob_match("api.copy", "api.copy.roundtrip"));
  CHECK(glob_match("a*b*c", "axxbyyc"));
  CHECK_FALSE(glob_match("a*b*c", "axxbyy"));
  CHECK(filter_match("", "anything"));
  CHECK(filter_match("api.*,numeric.*", "numeric.x.1"));
  CHECK_FALSE(filter_match("api.*,-api.copy.*", "api.copy.largest"));
  CHECK(filter_match("-api.copy.*", "api.fill.patterns"));
}

TEST_CASE("the CPU backend passes the API suite") {
  auto rep = run_ok(options("cpu:0", "api.*"));
  CHECK(rep.ok());
  auto c = rep.totals();
  CHECK(c.failed == 0);
  CHECK(c.passed >= 20);
  for (auto& r : rep.results) {
    INFO(r.name, ": ", std::string(halcyon::cts::outcome_name(r.outcome)), ": ", r.message);
    // The CPU device advertises every capability the API suite selects on; only the split
    // test may find a single-core machine, and its expectations declare the stream import
    // unsupported (host queues have no native handle).
    if (r.name == "api.stream.import") CHECK(r.outcome == Outcome::unsupported);
    else if (r.name != "api.partition.split") CHECK(r.outcome == Outcome::passed);
  }
}

TEST_CASE("declared expectations: unsupported is not run, an expected failure that passes is reported") {
  auto o = options("cpu:0", "api.device.*,api.alloc.*");
  o.extra_expectations = {{"cpu",
                           {{Expectation::Kind::unsupported, "api.alloc.*", "test: no allocator", ""},
                            {Expectation::Kind::expected_failure, "api.device.info", "test: stale declaration", ""}}}};
  auto rep = run_ok(o);
  int unsupported = 0;
  for (auto& r : rep.results) {
    INFO(r.name, ": ", r.message);
    if (r.name.starts_with("api.alloc.")) {
      CHECK(r.outcome == Outcome::unsupported);
      CHECK(r.message.find("test: no allocator") != std::string::npos);
      CHECK(r.seconds == 0);
      ++unsupported;
    } else if (r.name == "api.device.info") {
      CHECK(r.outcome == Outcome::unexpected_pass);
      CHECK(r.message.find("stale declaration") != std::string::npos);
    } else {
      CHECK(r.outcome == Outcome::passed);
    }
  }
  CHECK(unsupported == 3);
  CHECK_FALSE(rep.ok());  // an unexpected pass fails the run
}

#ifdef HALCYON_CTS_NUMERIC
TEST_CASE("a declared expected failure that fails is not a failure of the run") {
  REQUIRE_FALSE(broken_ops().empty());
  std::string op = broken_ops().front();
  auto o = options("cts-flip:0", "numeric." + op + ".*,-*.cases");
  o.extra_expectations = {{"cts-flip", {{Expectation::Kind::expected_failure, "numeric.*", "test: known broken", ""}}}};
  auto rep = run_ok(o);
  REQUIRE_FALSE(rep.results.empty());
  for (auto& r : rep.results) CHECK(r.outcome == Outcome::expected_failure);
  CHECK(rep.ok());
}
#endif

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  REQUIRE_MESSAGE(bool(f), "cannot write " << path);
}

TEST_CASE("expectations files: the format, and errors that name the line") {
  auto good = halcyon::cts::parse_expectations(
      "# a comment\n\nbackend acme\nunsupported api.copy.largest  the simulator has 64 MiB\n"
      "  expected-failure numeric.moe_gate.*\tACME-123: bias # ignored  \nbackend other\n",
      "acme.txt");
  REQUIRE_MESSAGE(good.ok(), good.error().message());
  REQUIRE(good->size() == 2);
  const auto& acme = (*good)[0];
  CHECK(acme.backend == "acme");
  REQUIRE(acme.items.size() == 2);
  CHECK(acme.items[0].kind == Expectation::Kind::unsupported);
  CHECK(acme.items[0].glob == "api.copy.largest");
  CHECK(acme.items[0].reason == "the simulator has 64 MiB");
  CHECK(acme.items[0].where == "acme.txt:4");
  CHECK(acme.items[1].kind == Expectation::Kind::expected_failure);
  CHECK(acme.items[1].glob == "numeric.moe_gate.*");
  CHECK(acme.items[1].reason == "ACME-123: bias # ignored");
  CHECK(acme.items[1].where == "acme.txt:5");
  CHECK((*good)[1].backend == "other");
  CHECK((*good)[1].items.empty());

  struct Bad {
    const char* text;
    const char* says;
  };
  for (auto [text, says] : {Bad{"backend cpu\nxfail api.* reason\n", "bad.txt:2: unknown keyword 'xfail'"},
                            Bad{"unsupported api.* why\n", "bad.txt:1: 'unsupported' before any 'backend NAME' line"},
                            Bad{"backend cpu\n\n# c\nunsupported api.alloc.*\n", "bad.txt:4: 'unsupported api.alloc.*' gives no reason"},
                            Bad{"backend cpu\nexpected-failure\n", "bad.txt:2: 'expected-failure' needs a test-name glob"},
                            Bad{"backend\n", "bad.txt:1: 'backend' takes one name"},
                            Bad{"backend a b\n", "bad.txt:1: 'backend' takes one name"},
                            Bad{"backend cuda:0\n", "bad.txt:1: 'cuda:0' is not a backend name"}}) {
    auto r = halcyon::cts::parse_expectations(text, "bad.txt");
    INFO(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(r.error().message().find(says) != std::string::npos, r.error().message());
  }
  auto missing = halcyon::cts::read_expectations_file("/no/such/dir/expectations.txt");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message().find("/no/such/dir/expectations.txt") != std::string::npos);
}

TEST_CASE("every backend's own expectations file is embedded and parses") {
  bool cpu = false;
  for (const auto& f : halcyon::cts::embedded_expectations()) {
    auto r = halcyon::cts::parse_expectations(f.text, f.path);
    CHECK_MESSAGE(r.ok(), f.path, ": ", r.ok() ? "" : r.error().message());
    cpu = cpu || std::string(f.path) == "backends/cpu/cts_expectations.txt";
  }
  CHECK(cpu);
  const auto& declared = halcyon::cts::declared_expectations();
  REQUIRE(declared.ok());
  CHECK(std::any_of(declared->begin(), declared->end(), [](auto& b) { return b.backend == "cpu"; }));
}

TEST_CASE("a custom expectations file changes the verdicts") {
  std::string path = std::string(CTS_TEST_OUT) + "/suite-test-expectations.txt";
  write_text(path,
             "# a vendor's declarations\nbackend cpu\nunsupported api.alloc.*  test: no allocator here\n"
             "expected-failure api.device.info  test: a stale line\nunsupported api.no_such_test.*  test: a typo\n");
  auto o = options("cpu:0", "api.device.*,api.alloc.*");
  auto before = run_ok(o);
  CHECK(before.totals().passed == int(before.results.size()));

  auto file = halcyon::cts::read_expectations_file(path);
  REQUIRE_MESSAGE(file.ok(), file.error().message());
  o.extra_expectations = *file;
  std::FILE* printed = std::tmpfile();
  REQUIRE(printed != nullptr);
  o.out = printed;
  o.progress = halcyon::cts::Progress::quiet;
  auto after = run_ok(o);
  std::rewind(printed);
  std::string text;
  for (int c; (c = std::fgetc(printed)) != EOF;) text += char(c);
  std::fclose(printed);
  // A declaration that matches no test at all (whatever --filter says) is pointed out.
  CHECK_MESSAGE(text.find("warning: " + path + ":5: 'api.no_such_test.*' declared for backend 'cpu' matches none of its tests") !=
                    std::string::npos,
                text);
  CHECK(text.find("api.alloc.*' declared") == std::string::npos);
  REQUIRE(after.results.size() == before.results.size());
  int unsupported = 0;
  for (auto& r : after.results) {
    INFO(r.name, ": ", r.message);
    if (r.name.starts_with("api.alloc.")) {
      CHECK(r.outcome == Outcome::unsupported);
      CHECK(r.message.find(path + ":3") != std::string::npos);  // where the declaration is
      CHECK(r.message.find("test: no allocator here") != std::string::npos);
      ++unsupported;
    } else if (r.name == "api.device.info") {
      CHECK(r.outcome == Outcome::unexpected_pass);
      CHECK(r.message.find(path + ":4") != std::string::npos);
    } else {
      CHECK(r.outcome == Outcome::passed);
    }
  }
  CHECK(unsupported == 3);
  CHECK_FALSE(after.ok());
}

TEST_CASE("xml_escape produces text the reader decodes back") {
  std::string nasty = "a<b>&\"c'\n\td\x01";
  std::string doc = "<r v=\"" + halcyon::cts::xml_escape(nasty) + "\">" + halcyon::cts::xml_escape(nasty) + "</r>";
  cts_test::XmlElement root;
  std::string err;
  REQUIRE_MESSAGE(cts_test::parse_xml(doc, &root, &err), err);
  CHECK(root.attribute("v") == "a<b>&\"c'\n\td?");
  CHECK(root.text == "a<b>&\"c'\n\td?");
  CHECK_FALSE(cts_test::parse_xml("<r v=\"a<b\"/>", &root, &err));
  CHECK_FALSE(cts_test::parse_xml("<r>&bogus;</r>", &root, &err));
  CHECK_FALSE(cts_test::parse_xml("<r><s></r>", &root, &err));
}

// Counts of one <testsuite>, read from its <testcase> children.
halcyon::cts::Counts count_cases(const cts_test::XmlElement& suite) {
  halcyon::cts::Counts c;
  for (auto& tc : suite.children) {
    if (tc.name != "testcase") continue;
    if (auto* f = tc.child("failure")) {
      c.add(f->attribute("type") == "unexpected pass" ? Outcome::unexpected_pass : Outcome::failed);
    } else if (auto* s = tc.child("skipped")) {
      std::string m = s->attribute("message");
      bool xfail = m.starts_with("expected failure:");
      CHECK((xfail || m.starts_with("unsupported:")));
      c.add(xfail ? Outcome::expected_failure : Outcome::unsupported);
    } else {
      c.add(Outcome::passed);
    }
  }
  return c;
}

void check_junit_against(const std::string& xml, const std::map<std::string, halcyon::cts::Counts>& summary) {
  cts_test::XmlElement root;
  std::string err;
  REQUIRE_MESSAGE(cts_test::parse_xml(xml, &root, &err), err);
  REQUIRE(root.name == "testsuites");
  size_t suites = 0;
  int total = 0, failures = 0, skipped = 0;
  for (auto& s : root.children) {
    if (s.name != "testsuite") continue;
    ++suites;
    std::string backend = s.attribute("name").substr(4);  // "cts.<backend>"
    INFO("testsuite ", s.attribute("name"));
    REQUIRE(summary.count(backend) == 1);
    const auto& want = summary.at(backend);
    auto got = count_cases(s);
    CHECK(got.passed == want.passed);
    CHECK(got.failed == want.failed);
    CHECK(got.unsupported == want.unsupported);
    CHECK(got.expected_failure == want.expected_failure);
    CHECK(got.unexpected_pass == want.unexpected_pass);
    CHECK(std::stoi(s.attribute("tests")) == want.total());
    CHECK(std::stoi(s.attribute("failures")) == want.failed + want.unexpected_pass);
    CHECK(std::stoi(s.attribute("skipped")) == want.unsupported + want.expected_failure);
    CHECK(std::stoi(s.attribute("errors")) == 0);
    total += want.total();
    failures += want.failed + want.unexpected_pass;
    skipped += want.unsupported + want.expected_failure;
  }
  CHECK(suites == summary.size());
  CHECK(std::stoi(root.attribute("tests")) == total);
  CHECK(std::stoi(root.attribute("failures")) == failures);
  CHECK(std::stoi(root.attribute("skipped")) == skipped);
}

TEST_CASE("JUnit XML counts match the summary, for every kind of outcome") {
  // Two backends and all five outcomes: passes and an unexpected pass on cpu, unsupported
  // tests on both, failures and expected failures on cts-flip.
  auto a = options("cpu:0", "api.device.*,api.alloc.*,numeric.*");
  a.extra_expectations = {{"cpu",
                           {{Expectation::Kind::unsupported, "api.alloc.*", "test: not here <&>", ""},
                            {Expectation::Kind::expected_failure, "api.device.info", "test: stale \"declaration\"", ""}}}};
  halcyon::cts::Report rep = run_ok(a);
  auto b = options("cts-flip:0", "api.event.*,numeric.*");
  b.extra_expectations = {{"cts-flip", {{Expectation::Kind::expected_failure, "numeric.*.0", "test: known", ""}}}};
  halcyon::cts::Report second = run_ok(b);
  rep.results.insert(rep.results.end(), second.results.begin(), second.results.end());
  rep.devices.insert(rep.devices.end(), second.devices.begin(), second.devices.end());

  auto per = rep.per_backend();
  REQUIRE(per.size() == 2);
  CHECK(per["cpu"].passed > 0);
  CHECK(per["cpu"].unsupported == 3);
  CHECK(per["cpu"].unexpected_pass == 1);
#ifdef HALCYON_CTS_NUMERIC
  CHECK(per["cts-flip"].failed > 0);
  CHECK(per["cts-flip"].expected_failure > 0);
#endif
  std::string path = std::string(CTS_TEST_OUT) + "/suite-test-junit.xml";
  REQUIRE(halcyon::cts::write_junit(rep, path).ok());
  check_junit_against(read_file(path), per);

  std::string md = std::string(CTS_TEST_OUT) + "/suite-test-report.md";
  REQUIRE(halcyon::cts::write_markdown(rep, md).ok());
  std::string text = read_file(md);
  auto c = per["cpu"];
  CHECK(text.find(fmt::format("| cpu | {} | {} | {} | {} | {} | {} |", c.passed, c.failed, c.unsupported,
                              c.expected_failure, c.unexpected_pass, c.total())) != std::string::npos);
  CHECK(text.find("**FAILED**") != std::string::npos);
}

// ---- the command ------------------------------------------------------------------------------

struct CommandResult {
  int status = -1;
  std::string out;
};

CommandResult run_command(const std::string& args) {
  std::string cmd = std::string(CTS_HALCYON_CLI) + " " + args + " 2>&1";
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The summary table's row of `backend`: passed failed unsupported xfail xpass total.
std::vector<int> summary_row(const std::string& out, const std::string& backend) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first != backend) continue;
    std::vector<int> v;
    int x;
    while (words >> x) v.push_back(x);
    if (v.size() == 6) return v;
  }
  return {};
}

TEST_CASE("halcyon cts: the printed summary, the JUnit file and the exit status agree") {
  std::string xml = std::string(CTS_TEST_OUT) + "/suite-test-cli.xml";
  std::remove(xml.c_str());
  auto r = run_command("cts --backend cpu --filter 'api.device.*,api.copy.out_of_range,numeric.*' --seed 4242 "
                       "--progress plain --junit " + xml);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(r.out.find("seed 4242") != std::string::npos);
  auto row = summary_row(r.out, "cpu");
  REQUIRE(row.size() == 6);
  halcyon::cts::Counts c;
  c.passed = row[0], c.failed = row[1], c.unsupported = row[2], c.expected_failure = row[3], c.unexpected_pass = row[4];
  CHECK(c.total() == row[5]);
  CHECK(c.passed >= 3);
  check_junit_against(read_file(xml), {{"cpu", c}});
}

TEST_CASE("halcyon cts: a backend without devices is a skip (77), bad options are usage errors (2)") {
  auto r = run_command("cts --backend cts-no-such-backend");
  INFO(r.out);
  CHECK(r.status == 77);
  CHECK(r.out.find("cts-no-such-backend") != std::string::npos);
  CHECK(run_command("cts --seed banana").status == 2);
  CHECK(run_command("cts --no-such-option").status == 2);
  CHECK(run_command("cts --impls some").status == 2);
  for (const char* bad : {"0", "-1", "12x", "17592186044416"})  // the last overflows in bytes
    CHECK(run_command(std::string("cts --backend cpu --max-copy-mb ") + bad).status == 2);
  auto none = run_command("cts --backend cpu --filter 'no.such.test.*'");
  CHECK(none.status == 2);
  CHECK(none.out.find("no.such.test.*") != std::string::npos);
  auto list = run_command("cts --backend cpu --list --filter 'api.copy.*'");
  CHECK(list.status == 0);
  CHECK(list.out.find("cpu:0 api.copy.roundtrip") != std::string::npos);
  CHECK(list.out.find("api.fill") == std::string::npos);
  // --device as a run takes it: "cpu" is cpu:0.
  auto bare = run_command("cts --device cpu --list --filter 'api.copy.*'");
  CHECK(bare.status == 0);
  CHECK(bare.out.find("cpu:0 api.copy.roundtrip") != std::string::npos);
}

TEST_CASE("halcyon cts --expectations: the verdicts change; a malformed file is a usage error naming the line") {
  std::string path = std::string(CTS_TEST_OUT) + "/suite-test-cli-expectations.txt";
  write_text(path, "backend cpu\nunsupported api.alloc.* test: not here\nexpected-failure api.device.info test: stale\n");
  auto r = run_command("cts --backend cpu --filter 'api.device.*,api.alloc.*' --seed 1 --progress plain --expectations " + path);
  INFO(r.out);
  CHECK(r.status == 1);  // the unexpected pass fails the run
  CHECK(r.out.find("UNEXPECTED PASS") != std::string::npos);
  CHECK(r.out.find(path + ":3") != std::string::npos);
  auto row = summary_row(r.out, "cpu");
  REQUIRE(row.size() == 6);
  CHECK(row[1] == 0);  // failed
  CHECK(row[2] == 3);  // unsupported
  CHECK(row[4] == 1);  // unexpected pass

  std::string bad = std::string(CTS_TEST_OUT) + "/suite-test-bad-expectations.txt";
  write_text(bad, "backend cpu\n# fine so far\nunsupported api.alloc.*\n");
  auto b = run_command("cts --backend cpu --expectations " + bad);
  INFO(b.out);
  CHECK(b.status == 2);
  CHECK(b.out.find(bad + ":3: 'unsupported api.alloc.*' gives no reason") != std::string::npos);
  auto missing = run_command("cts --backend cpu --expectations " + std::string(CTS_TEST_OUT) + "/no-such-file.txt");
  CHECK(missing.status == 2);
  CHECK(missing.out.find("no-such-file.txt: cannot be opened") != std::string::npos);
}

}  // namespace

TEST_CASE("Options::max_copy_bytes caps api.copy.largest's buffer") {
  // The CPU device's memory is the host's, so a quarter of it is above both caps.
  for (uint64_t mb : {1, 3}) {
    auto o = options("cpu:0", "api.copy.largest");
    o.max_copy_bytes = mb << 20;
    auto rep = run_ok(o);
    REQUIRE(rep.results.size() == 1);
    CHECK(rep.results[0].outcome == Outcome::passed);
    // Rounded down to 8 bytes, plus 3 so that the size is odd.
    CHECK(rep.results[0].detail == fmt::format("{} bytes", (mb << 20) + 3));
  }
  // The command's option: the report's detail column shows the size.
  std::string md = std::string(CTS_TEST_OUT) + "/suite-test-max-copy.md";
  std::remove(md.c_str());
  auto r = run_command("cts --backend cpu --filter api.copy.largest --max-copy-mb 2 --progress quiet --report " + md);
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(read_file(md).find(fmt::format("{} bytes", (2u << 20) + 3)) != std::string::npos);
}

int main(int argc, char** argv) {
  // Hermetic: the built-in backends plus the four test-only ones.
  if (auto s = halcyon::init(HAL_INIT_NO_ENV_PATH | HAL_INIT_NO_INSTALL_DIR,
                             CTS_FLIP_PLUGIN ":" CTS_SHORT_PLUGIN ":" CTS_KEEP_PLUGIN ":" CTS_NONAN_PLUGIN);
      !s) {
    std::fprintf(stderr, "hal_init: %s\n", s.error().message().c_str());
    return 1;
  }
#ifdef HALCYON_CTS_NUMERIC
  broken_ops() = register_broken_impls();
#endif
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
