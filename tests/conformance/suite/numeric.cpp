// The numeric suite: every case of every operator contract, run on the device under test and
// on the CPU reference with the same seeded random inputs. Outputs are poisoned before each
// run, so elements an implementation leaves unwritten fail: the device's first run with all
// bytes 0xFF (NaN for floats, -1 for signed integers), its second (the prepared call) with
// 0x5A (a large finite float, 1515870810 for int32), because -1 is a value some integer
// outputs legitimately hold (and a finite poison might equal a reference value): no reference
// element equals both. NaN never passes, and an infinity only where the
// reference has the same one (attention's lse = -inf for a row with no keys); integer outputs must match
// exactly, float outputs within the contract's ||out - ref|| / ||ref||.
#include <halcyon/ops/op.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "near_ties.hpp"
#include "numeric_values.hpp"
#include "testing.hpp"

namespace halcyon::cts {
namespace {

using ops::DType;

// Inputs drawn for one case are HostTensors (near_ties.hpp): bytes per input name, in the
// contract's dtypes.

// A valid offsets array: n counts >= 0 summing to `total` (at least one zero when n > 1),
// as n + 1 exclusive prefix sums.
std::vector<uint8_t> random_offsets(std::mt19937_64& rng, int64_t entries, int64_t total) {
  int64_t n = std::max<int64_t>(entries - 1, 0);
  std::vector<int64_t> cuts;
  std::uniform_int_distribution<int64_t> at(0, total);
  for (int64_t i = 0; i + 1 < n; ++i) cuts.push_back(at(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int64_t> counts;
  int64_t prev = 0;
  for (int64_t c : cuts) counts.push_back(c - prev), prev = c;
  if (n > 0) counts.push_back(total - prev);
  if (n > 1 && std::find(counts.begin(), counts.end(), 0) == counts.end()) {
    // Empty experts are the case kernels get wrong: move one count onto its neighbour.
    size_t k = std::uniform_int_distribution<size_t>(0, counts.size() - 2)(rng);
    counts[k + 1] += counts[k];
    counts[k] = 0;
  }
  std::vector<uint8_t> out(size_t(entries) * 4);
  int32_t sum = 0;
  for (int64_t i = 0; i < entries; ++i) {
    std::memcpy(out.data() + 4 * i, &sum, 4);
    if (i < n) sum += int32_t(counts[size_t(i)]);
  }
  return out;
}

// Integers uniform in the [lo, hi) of the input's `bounds` line, evaluated for this case.
std::vector<uint8_t> random_within_bounds(TestContext& t, const ops::Contract& c, const ops::Binding& b,
                                          const ops::TensorSpec& in, int64_t n) {
  const ops::ValueBounds* bd = c.find_bounds(in.name);
  if (!bd) t.require_failed(fmt::format("input {}: 'generate {} bounds' without a bounds line", in.name, in.name));
  auto lo = ops::evaluate(b, bd->lo), hi = ops::evaluate(b, bd->hi);
  if (!lo || !hi)
    t.require_failed(fmt::format("input {}: bounds: {}", in.name, (!lo ? lo.error() : hi.error()).message()));
  if (n > 0 && *hi <= *lo)
    t.require_failed(fmt::format("input {}: bounds [{}, {}) hold no value for this case", in.name, *lo, *hi));
  return random_values(t.rng, in.dtype, size_t(n), double(*lo), double(*hi - 1));
}

HostTensors random_inputs(TestContext& t, const ops::Contract& c, const ops::Binding& b) {
  HostTensors out;
  for (auto& in : c.inputs) {
    int64_t n = 1;
    for (int64_t d : b.shape_of(in)) n *= d;
    if (const ops::InputGenerator* g = c.find_generator(in.name)) {
      if (g->kind == "offsets") {
        out[in.name] = random_offsets(t.rng, n, b.dim(g->total));
      } else if (g->kind == "bounds") {
        out[in.name] = random_within_bounds(t, c, b, in, n);
      } else if (g->kind == "blockscaled") {
        const ops::ValueRange* r = c.find_range(in.name);
        auto [lo, hi] = r ? std::pair{r->lo, r->hi} : default_range(in.dtype);
        out[in.name] = random_blockscaled(t.rng, in.dtype, size_t(n), lo, hi, size_t(std::stoll(g->total)), g->specials);
      } else if (g->kind == "nans") {
        const ops::ValueRange* r = c.find_range(in.name);
        auto [lo, hi] = r ? std::pair{r->lo, r->hi} : default_range(in.dtype);
        auto count = ops::evaluate(b, g->total);
        if (!count || *count < 0 || *count > n)
          t.require_failed(fmt::format("input {}: nans {}: {}", in.name, g->total,
                                       count ? fmt::format("{} is not a count of its {} elements", *count, n)
                                             : count.error().message()));
        out[in.name] = random_with_nans(t.rng, in.dtype, size_t(n), lo, hi, size_t(*count));
      } else {
        t.require_failed(fmt::format("input {}: the suite does not know generator '{}'", in.name, g->kind));
      }
      continue;
    }
    const ops::ValueRange* r = c.find_range(in.name);
    auto [lo, hi] = r ? std::pair{r->lo, r->hi} : default_range(in.dtype);
    out[in.name] = random_values(t.rng, in.dtype, size_t(n), lo, hi);
  }
  return out;
}

// The CPU device that computes expected outputs, opened once per process.
const Device* reference_device(std::string* why) {
  static std::once_flag once;
  static Device* dev = nullptr;
  static std::string error;
  std::call_once(once, [] {
    auto d = Device::open("cpu");
    if (d) dev = new Device(std::move(d).value());  // lives as long as the process
    else error = d.error().to_string();
  });
  if (!dev && why) *why = error;
  return dev;
}

// Runs one case on `device`: uploads inputs, poisons the outputs, runs (through run_op, or
// `prepared`: as a prepared call, ops::prepare_op then PreparedOp::run), reads them back.
// `impl`: that implementation by name (RunOptions::impl); one whose predicate refuses this
// call ends the test as unsupported, with the registry's reason.
// `poison`: the byte every output is filled with first.
HostTensors run_case(TestContext& t, const Device& device, const ops::Contract& c, const ops::ContractCase& cs,
                     const HostTensors& inputs, std::string_view role, bool prepared = false,
                     const std::string& impl = {}, uint8_t poison = 0xFF) {
  Stream s = t.must(device.create_stream(), fmt::format("{}: create a stream", role));
  std::map<std::string, ops::Tensor, std::less<>> tensors;
  ops::Binding b = t.must(ops::bind(c, cs.params, cs.dims, {}), fmt::format("{}: bind", role));
  for (auto& in : c.inputs) {
    auto tensor = t.must(ops::make_tensor(device, in.dtype, b.shape_of(in)), fmt::format("{}: allocate {}", role, in.name));
    const auto& bytes = inputs.at(in.name);
    t.must(s.write(tensor.buffer, tensor.offset, bytes.data(), bytes.size()), fmt::format("{}: upload {}", role, in.name));
    tensors[in.name] = std::move(tensor);
  }
  t.must(ops::allocate_outputs(device, c.op, tensors, cs.params), fmt::format("{}: allocate outputs", role));
  for (auto& out : c.outputs) {
    const ops::Tensor& o = tensors.at(out.name);
    if (o.bytes()) t.must(s.fill(o.buffer, o.offset, o.bytes(), poison), fmt::format("{}: poison {}", role, out.name));
  }
  ops::RunOptions options;
  options.impl = impl;
  if (!impl.empty()) {  // a refusal (HAL_UNSUPPORTED) is the predicate's; anything else is a failure
    auto chosen = ops::select_impl_for_call(device, c.op, tensors, cs.params, options);
    if (!chosen && chosen.error().status() == HAL_UNSUPPORTED) {
      const std::string& m = chosen.error().message();
      TestContext::unsupported(m.substr(0, m.find("; the implementations:")));
    }
    if (!chosen) t.require_failed(fmt::format("{}: choose {}: {}", role, impl, chosen.error().to_string()));
  }
  if (prepared) {
    auto call = t.must(ops::prepare_op(device, c.op, tensors, cs.params, options), fmt::format("{}: prepare {}", role, c.op));
    t.must(call.run(s), fmt::format("{}: run {}", role, c.op));
  } else {
    t.must(ops::run_op(device, s, c.op, tensors, cs.params, options), fmt::format("{}: run {}", role, c.op));
  }
  HostTensors result;
  for (auto& out : c.outputs) {
    const ops::Tensor& o = tensors.at(out.name);
    std::vector<uint8_t> bytes(o.bytes());
    t.must(s.read(o.buffer, o.offset, bytes.data(), bytes.size()), fmt::format("{}: read {}", role, out.name));
    result[out.name] = std::move(bytes);
  }
  t.must(s.synchronize(), fmt::format("{}: synchronize", role));
  return result;
}

int64_t defined_row_count(TestContext& t, const ops::DefinedRows& d, const HostTensors& inputs,
                          const HostTensors& ref_outputs) {
  const std::vector<uint8_t>* bytes = nullptr;
  if (auto it = ref_outputs.find(d.count_tensor); it != ref_outputs.end()) bytes = &it->second;
  else if (auto in = inputs.find(d.count_tensor); in != inputs.end()) bytes = &in->second;
  if (!bytes) t.require_failed(fmt::format("rows: no tensor named {}", d.count_tensor));
  int64_t n = int64_t(bytes->size() / 4);
  int64_t i = d.index < 0 ? n + d.index : d.index;
  if (i < 0 || i >= n) t.require_failed(fmt::format("rows: index {} is outside {}'s {} elements", d.index, d.count_tensor, n));
  int32_t v;
  std::memcpy(&v, bytes->data() + 4 * i, 4);
  return v;
}

// Do the contract's generators put NaNs in its inputs on purpose?
bool plants_nans(const ops::Contract& c) {
  return std::any_of(c.generators.begin(), c.generators.end(),
                     [](const ops::InputGenerator& g) { return g.kind == "nans" || g.specials; });
}

// Holds one device answer to the reference: near ties first, then every defined output.
void compare_case(TestContext& t, const ops::Contract& c, const ops::ContractCase& cs, const ops::Binding& b,
                  const HostTensors& inputs, HostTensors& got, HostTensors want, std::string_view how) {
  if (int64_t n = accept_near_ties(c, b, inputs, got, want))
    t.note(fmt::format("{} row(s) near-tied{}: the device's answer is correct when scores within {} fp32 ulps rank "
                       "either way (near_ties.hpp); compared against what it implies",
                       n, how, kTieUlps));
  for (auto& out : c.outputs) {
    std::vector<uint8_t>& g = got.at(out.name);
    std::vector<uint8_t>& w = want.at(out.name);
    if (!ops::output_defined(c, b, out.name)) {
      // `defined <output> if <param>` with the param false: contents unspecified.
      t.note(fmt::format("{}: not compared ({} = false leaves it unspecified)", out.name, c.find_defined_if(out.name)->param));
      continue;
    }
    if (const ops::DefinedRows* d = c.find_defined_rows(out.name)) {
      // Only the leading rows are defined; their count comes from the reference's tensors.
      int64_t rows = defined_row_count(t, *d, inputs, want);
      auto shape = b.shape_of(out);
      size_t row_bytes = ops::dtype_size(out.dtype);
      for (size_t i = 1; i < shape.size(); ++i) row_bytes *= size_t(shape[i]);
      if (rows < 0 || (!shape.empty() && rows > shape[0]))
        t.require_failed(fmt::format("output {}: the reference says {} defined rows of {}", out.name, rows, shape[0]));
      g.resize(std::min(g.size(), size_t(rows) * row_bytes));
      w.resize(std::min(w.size(), size_t(rows) * row_bytes));
      t.note(fmt::format("{}: first {} row(s) compared", out.name, rows));
    }
    Comparison cmp = compare_output(out.dtype, out.tolerance, g, w, plants_nans(c));
    t.note(fmt::format("{}{}: {}", out.name, how, cmp.summary));
    if (!cmp.ok)
      t.fail(fmt::format("case '{}' output {}{}: {} (test seed {})", cs.text, out.name, how, cmp.failure, t.seed));
  }
}

// impl: run the device's side with that implementation by name (--impls all); empty: the
// registry's choice.
void run_numeric_case(TestContext& t, const ops::Contract& c, size_t case_index, const std::string& impl = {}) {
  const ops::ContractCase& cs = c.cases[case_index];
  std::string why;
  if (impl.empty() && !ops::select_impl(t.device, c.op, &why)) TestContext::unsupported(why);
  const Device* ref = reference_device(&why);
  if (!ref) t.require_failed(fmt::format("the CPU reference device cannot be opened: {}", why));
  ops::Binding b = t.must(ops::bind(c, cs.params, cs.dims, {}), fmt::format("bind case '{}'", cs.text));
  HostTensors inputs = random_inputs(t, c, b);
  // The device runs the case twice, through run_op and as a prepared call (what an embedder
  // repeating a call uses), over outputs poisoned differently; each answer is held to the
  // reference on its own.
  HostTensors got = run_case(t, t.device, c, cs, inputs, "device", false, impl);
  HostTensors got_prepared = run_case(t, t.device, c, cs, inputs, "device (prepared)", true, impl, 0x5A);
  if (!impl.empty()) t.note(fmt::format("implementation {}", impl));
  const HostTensors reference = run_case(t, *ref, c, cs, inputs, "reference");
  compare_case(t, c, cs, b, inputs, got, reference, "");
  compare_case(t, c, cs, b, inputs, got_prepared, reference, " (prepared call)");
}

bool is_prime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d)
    if (n % d == 0) return false;
  return true;
}

// The contract's cases must reach the awkward shapes: a dimension of 1 and a prime >= 3
// (not a multiple of any power-of-two tile).
void check_case_coverage(TestContext& t, const ops::Contract& c) {
  bool has_one = false, has_prime = false;
  for (auto& cs : c.cases) {
    auto b = ops::bind(c, cs.params, cs.dims, {});
    if (!b) {
      t.fail(fmt::format("case '{}' does not bind: {}", cs.text, b.error().to_string()));
      continue;
    }
    for (auto& [sym, v] : b->dims) {
      has_one = has_one || v == 1;
      has_prime = has_prime || (v >= 3 && is_prime(v));
    }
  }
  CTS_CHECK(t, !c.cases.empty(), "{} declares no case lines", c.file);
  CTS_CHECK(t, has_one, "no case of {} has a dimension of 1", c.file);
  CTS_CHECK(t, has_prime, "no case of {} has a prime dimension (>= 3)", c.file);
  t.note(fmt::format("{} case(s)", c.cases.size()));
}

}  // namespace

std::vector<TestCase> numeric_tests(const Device& device, const hal_device_info&, bool every_impl) {
  std::vector<TestCase> out;
  for (const ops::Contract& c : ops::contracts()) {
    const ops::Contract* cp = &c;
    out.push_back({fmt::format("numeric.{}.cases", c.op), {}, [cp](TestContext& t) { check_case_coverage(t, *cp); }});
    for (size_t k = 0; k < c.cases.size(); ++k)
      out.push_back({fmt::format("numeric.{}.{}", c.op, k), {}, [cp, k](TestContext& t) { run_numeric_case(t, *cp, k); }});
    if (!every_impl) continue;
    // Every implementation that can run on this device (backend, code format and target, its
    // predicate without a call), in the registry's rank order; shapes are its predicate's to
    // refuse case by case.
    std::vector<std::string> names;  // a name the device can run twice: RunOptions::impl takes the first
    for (const ops::ImplVerdict& v : ops::judge_impls(device, c.op)) {
      if (!v.usable || std::find(names.begin(), names.end(), v.impl.name) != names.end()) continue;
      const std::string name = names.emplace_back(v.impl.name);
      for (size_t k = 0; k < c.cases.size(); ++k)
        out.push_back({fmt::format("numeric.{}@{}.{}", c.op, name, k), {},
                       [cp, k, name](TestContext& t) { run_numeric_case(t, *cp, k, name); }});
    }
  }
  return out;
}

}  // namespace halcyon::cts
