// `halcyon run` end to end for every operator contract: valid inputs for its first case
// written as .npy, the command run on the CPU, its outputs compared with the CPU reference run
// in this process (issue 22: moe_combine's bounds '-1' had never been evaluated by a test).
#include <halcyon/ops/op.hpp>
#include <halcyon/kernels/reference/e4m3.hpp>
#include <halcyon/runtime/npy.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "test_support.hpp"

using namespace halcyon;
using namespace halcyon::ops;
using test::unwrap;

namespace {

using HostTensors = std::map<std::string, std::vector<unsigned char>>;

std::string work(const std::string& name) { return std::string(HALCYON_TEST_TMP) + "/run_ops/" + name; }

int run_cli(const std::string& args, std::string* output) {
  std::string log = work("cli.log");
  int rc = std::system((std::string(HALCYON_CLI) + " run " + args + " > " + log + " 2>&1").c_str());
  std::ifstream f(log);
  output->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// The .npy dtype each contract dtype travels as (bf16 as raw 2-byte values: --raw-bf16).
const char* descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return "<u2";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::f64: return "<f8";
    case DType::e4m3: return "|u1";  // raw bits
  }
  return "";
}

template <typename T>
std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  std::vector<unsigned char> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Offsets: n+1 prefix sums of near-even counts summing to `total`.
std::vector<unsigned char> even_offsets(int64_t entries, int64_t total) {
  std::vector<int32_t> v(static_cast<size_t>(entries));
  for (int64_t i = 0; i < entries; ++i) v[size_t(i)] = int32_t(entries > 1 ? total * i / (entries - 1) : 0);
  return bytes_of(v);
}

// Deterministic values of the input's dtype: integers cycle through [lo, hi); floats through
// [lo, hi) as a sawtooth, so that no two neighbours are equal.
std::vector<unsigned char> sawtooth(DType t, int64_t n, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = lo + std::fmod(double(i) * 0.618034, 1.0) * (hi - lo);
  switch (t) {
    case DType::i32: {
      std::vector<int32_t> w(v.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = int32_t(lo) + int32_t(int64_t(i) % std::max<int64_t>(1, int64_t(hi - lo)));
      return bytes_of(w);
    }
    case DType::bf16: {
      std::vector<uint16_t> w(v.size());
      for (size_t i = 0; i < w.size(); ++i) {
        float f = float(v[i]);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        w[i] = uint16_t(u >> 16);
      }
      return bytes_of(w);
    }
    case DType::f32: {
      std::vector<float> w(v.begin(), v.end());
      return bytes_of(w);
    }
    case DType::e4m3: {
      std::vector<uint8_t> w(v.size());
      for (size_t i = 0; i < w.size(); ++i) w[i] = halcyon::ref::float_to_e4m3(float(v[i])).bits;
      return bytes_of(w);
    }
    default: FAIL("no values for dtype ", dtype_name(t)); return {};
  }
}

HostTensors valid_inputs(const Contract& c, const Binding& b) {
  HostTensors out;
  for (auto& in : c.inputs) {
    int64_t n = 1;
    for (int64_t d : b.shape_of(in)) n *= d;
    const InputGenerator* g = c.find_generator(in.name);
    if (g && g->kind == "offsets") {
      out[in.name] = even_offsets(n, b.dim(g->total));
    } else if (const ValueBounds* bd = c.find_bounds(in.name)) {
      out[in.name] = sawtooth(in.dtype, n, double(unwrap(evaluate(b, bd->lo))), double(unwrap(evaluate(b, bd->hi))));
    } else {
      const ValueRange* r = c.find_range(in.name);
      out[in.name] = sawtooth(in.dtype, n, r ? r->lo : -1.0, r ? r->hi : 1.0);
    }
  }
  return out;
}

// The CPU reference: run_op on the CPU device in this process.
HostTensors reference(const Contract& c, const ContractCase& cs, const Binding& b, const HostTensors& inputs) {
  auto dev = unwrap(Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::map<std::string, Tensor, std::less<>> t;
  for (auto& in : c.inputs) {
    t[in.name] = unwrap(make_tensor(dev, in.dtype, b.shape_of(in)));
    const auto& bytes = inputs.at(in.name);
    if (!bytes.empty()) unwrap(s.write(t[in.name].buffer, 0, bytes.data(), bytes.size()));
  }
  unwrap(allocate_outputs(dev, c.op, t, cs.params));
  unwrap(run_op(dev, s, c.op, t, cs.params));
  HostTensors out;
  for (auto& o : c.outputs) {
    std::vector<unsigned char> bytes(t[o.name].bytes());
    if (!bytes.empty()) unwrap(s.read(t[o.name].buffer, 0, bytes.data(), bytes.size()));
    out[o.name] = std::move(bytes);
  }
  return out;
}

std::string cli_args(const Contract& c, const ContractCase& cs, const HostTensors& inputs, const Binding& b) {
  std::string args = c.op + " --device cpu --raw-bf16 --out " + work(c.op);
  for (auto& in : c.inputs) {
    std::string file = work(c.op + "." + in.name + ".npy");
    const auto& bytes = inputs.at(in.name);
    unwrap(rt::write_npy(file, descr_of(in.dtype), b.shape_of(in), bytes.data(), bytes.size()));
    args += " --in " + in.name + "=" + file;
  }
  for (auto& [k, v] : cs.params) args += " --set " + k + "=" + v;
  // Dims no input shape gives (an output's own) come from the case.
  for (auto& [k, v] : cs.dims) {
    bool in_inputs = false;
    for (auto& in : c.inputs) in_inputs |= std::find(in.dims.begin(), in.dims.end(), k) != in.dims.end();
    if (!in_inputs) args += fmt::format(" --set {}={}", k, v);
  }
  return args;
}

// Bytes of an output that the contract defines: all, the first rows of a defined-rows output,
// or none of an output its defined-if parameter switches off.
size_t defined_bytes(const Contract& c, const Binding& b, const TensorSpec& o, const HostTensors& inputs,
                     const HostTensors& ref) {
  if (!output_defined(c, b, o.name)) return 0;
  const DefinedRows* dr = c.find_defined_rows(o.name);
  auto shape = b.shape_of(o);
  size_t total = ref.at(o.name).size();
  if (!dr || shape.empty() || shape[0] == 0) return total;
  const auto& counts = ref.count(dr->count_tensor) ? ref.at(dr->count_tensor) : inputs.at(dr->count_tensor);
  int64_t n = int64_t(counts.size() / 4), k = dr->index < 0 ? n + dr->index : dr->index;
  int32_t rows;
  std::memcpy(&rows, &counts[size_t(k) * 4], 4);
  return total / size_t(shape[0]) * size_t(rows);
}

double element(DType t, const unsigned char* p, size_t i) {
  if (t == DType::f32) {
    float f;
    std::memcpy(&f, p + i * 4, 4);
    return f;
  }
  if (t == DType::bf16) {
    uint32_t u = uint32_t(p[i * 2] | (p[i * 2 + 1] << 8)) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  if (t == DType::e4m3) return halcyon::ref::e4m3_to_float({p[i]});
  return 0;
}

void compare(const Contract& c, const TensorSpec& o, const std::vector<unsigned char>& got,
             const std::vector<unsigned char>& want, size_t n) {
  INFO(c.op, ": output ", o.name);
  REQUIRE(got.size() == want.size());
  if (o.tolerance.exact || !dtype_is_float(o.dtype)) {
    CHECK(std::memcmp(got.data(), want.data(), n) == 0);
    return;
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < n / dtype_size(o.dtype); ++i) {
    double g = element(o.dtype, got.data(), i), w = element(o.dtype, want.data(), i);
    REQUIRE(std::isfinite(g));
    num += (g - w) * (g - w);
    den += w * w;
  }
  CHECK(std::sqrt(num) <= o.tolerance.rel * std::sqrt(den) + 1e-30);
}

}  // namespace

TEST_CASE("halcyon run: every operator on valid input matches the CPU reference") {
  REQUIRE(std::system(("mkdir -p " + work("")).c_str()) == 0);
  for (const Contract& c : contracts()) {
    REQUIRE_MESSAGE(!c.cases.empty(), c.op, " has no case");
    const ContractCase& cs = c.cases.front();
    INFO(c.op, " case: ", cs.text);
    Binding b = unwrap(bind(c, cs.params, cs.dims, {}));
    HostTensors inputs = valid_inputs(c, b);
    HostTensors want = reference(c, cs, b, inputs);
    std::string out;
    int rc = run_cli(cli_args(c, cs, inputs, b), &out);
    REQUIRE_MESSAGE(rc == 0, "halcyon run ", c.op, ": ", out);
    for (auto& o : c.outputs) {
      auto got = unwrap(rt::read_npy(work(c.op + "/" + o.name + ".npy")));
      CHECK(got.shape == b.shape_of(o));
      compare(c, o, got.data, want.at(o.name), defined_bytes(c, b, o, inputs, want));
    }
  }
}
