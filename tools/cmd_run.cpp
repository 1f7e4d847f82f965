// `halcyon run OP --device URI --in NAME=FILE.npy ... --set PARAM=VALUE ... --out DIR
// [--impl NAME] [--code auto|ir|binary]`: runs one operator on the user's own tensors.
// `halcyon run --list` lists the operators, `halcyon run OP --help` prints its contract and its
// implementations.
#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/kernels/reference/e4m3.hpp>
#include <halcyon/runtime/npy.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "cli_support.hpp"
#include "command.hpp"

using namespace halcyon;
using namespace halcyon::rt;
using namespace halcyon::ops;
namespace cli = halcyon::cli;

namespace {

void print_contract(const Contract& c) {
  fmt::print("{} — {}\n  (kernels/{})\n\n", c.op, c.summary, c.file);
  auto dims = [](const TensorSpec& t) { return fmt::format("[{}]", fmt::join(t.dims, ", ")); };
  fmt::print("inputs:\n");
  for (auto& t : c.inputs) fmt::print("  {:<16} {:<5} {}{}\n", t.name, dtype_name(t.dtype), dims(t), t.optional ? "  (optional)" : "");
  fmt::print("outputs:\n");
  for (auto& t : c.outputs)
    fmt::print("  {:<16} {:<5} {:<16} {}\n", t.name, dtype_name(t.dtype), dims(t),
               t.tolerance.exact        ? std::string("exact")
               : t.tolerance.steps >= 0 ? fmt::format("within {} e4m3 step(s) of the reference{}", t.tolerance.steps,
                                                      t.tolerance.abs >= 0 ? fmt::format(" or within {}", t.tolerance.abs) : "")
                                        : fmt::format("rel error <= {}", t.tolerance.rel));
  if (!c.params.empty()) fmt::print("parameters (--set NAME=VALUE):\n");
  for (auto& p : c.params) {
    const char* type = p.type == ParamType::Int ? "int" : p.type == ParamType::F32 ? "f32" : p.type == ParamType::Bool ? "bool" : "enum";
    fmt::print("  {:<16} {:<5} default {}{}\n", p.name, type, to_string(p.default_value),
               p.choices.empty() ? "" : fmt::format("  ({})", fmt::join(p.choices, "|")));
  }
  for (auto& r : c.dim_rules) fmt::print("dim {} = {}\n", r.symbol, r.expression);
  for (auto& b : c.bounds) fmt::print("values of {} must lie in [{}, {})\n", b.input, b.lo, b.hi);
  for (auto& d : c.defined_if) fmt::print("{} is written only when {} is true\n", d.output, d.param);
  for (auto& n : c.notes) fmt::print("note: {}\n", n);
  fmt::print("implementations (--impl NAME; by default the registry's choice, highest first that runs):\n");
  const char* kinds[] = {"?", "ptx", "cubin", "hsaco", "spirv", "host"};
  for (auto& i : impls_of(c.op))
    fmt::print("  {:<16} {:<5} {:<7} priority {:>3}{}  {}\n", i.name, kinds[i.format <= 5 ? i.format : 0], i.target,
               i.priority, i.automatic ? "" : " (only when named)", i.summary);
  fmt::print("\nbf16 tensors: give them as float32 .npy (rounded to nearest even) or as raw 2-byte values (<u2);\n"
             "they are written back as float32 unless --raw-bf16 is given.\n"
             "e4m3 tensors (FP8, max 448): float32 .npy (rounded to nearest even, saturating) or raw bytes\n"
             "(|u1, or |V1 as NumPy writes ml_dtypes.float8_e4m3fn); the file carries no tag, the contract's\n"
             "dtype says e4m3. Written back as float32 unless --raw-bf16 is given (then |u1).\n");
}

int usage() {
  fmt::print("usage: halcyon run OP [--device URI] --in NAME=FILE.npy ... [--set NAME=VALUE ...] --out DIR [--raw-bf16]\n"
             "                    [--impl NAME] [--code auto|ir|binary]\n"
             "       halcyon run --list\n"
             "       halcyon run OP --help\n");
  return 2;
}

// Converts an .npy array to the contract's dtype where that is exact or a plain rounding.
Result<std::vector<unsigned char>> convert(const NpyArray& a, DType want, const std::string& name) {
  const std::string& d = a.descr;
  auto same = [&](const char* descr) { return d == descr || (d.size() == 3 && std::string(descr).substr(1) == d.substr(1) && d[0] == '|'); };
  size_t n = size_t(a.numel());
  std::vector<unsigned char> out;
  auto refuse = [&] {
    return Error(HAL_INVALID_ARGUMENT, fmt::format("input '{}' is {} in its file; the contract says {}", name, d, dtype_name(want)));
  };
  switch (want) {
    case DType::f32:
      if (same("<f4")) return a.data;
      if (same("<f8")) {
        out.resize(n * 4);
        for (size_t i = 0; i < n; ++i) {
          double v;
          std::memcpy(&v, &a.data[i * 8], 8);
          float f = float(v);
          if (std::isfinite(v) && !std::isfinite(f))  // rounding would make it an infinity
            return Error(HAL_OUT_OF_RANGE, fmt::format("input '{}': element {} = {} does not fit in float32", name, i, v));
          std::memcpy(&out[i * 4], &f, 4);
        }
        return out;
      }
      return refuse();
    case DType::bf16:
      if (same("<u2") || same("<i2")) return a.data;
      if (same("<f4")) {
        out.resize(n * 2);
        for (size_t i = 0; i < n; ++i) {
          float f;
          std::memcpy(&f, &a.data[i * 4], 4);
          uint16_t b = ref::float_to_bf16(f).bits;
          std::memcpy(&out[i * 2], &b, 2);
        }
        return out;
      }
      return refuse();
    case DType::i32:
      if (same("<i4")) return a.data;
      if (same("<i8")) {
        out.resize(n * 4);
        for (size_t i = 0; i < n; ++i) {
          int64_t v;
          std::memcpy(&v, &a.data[i * 8], 8);
          if (v < INT32_MIN || v > INT32_MAX)
            return Error(HAL_OUT_OF_RANGE, fmt::format("input '{}': element {} = {} does not fit in int32", name, i, v));
          int32_t w = int32_t(v);
          std::memcpy(&out[i * 4], &w, 4);
        }
        return out;
      }
      return refuse();
    case DType::f16: if (same("<f2")) return a.data; return refuse();
    case DType::i64: if (same("<i8")) return a.data; return refuse();
    case DType::u8: if (same("|u1") || same("<u1")) return a.data; return refuse();
    case DType::f64: if (same("<f8")) return a.data; return refuse();
    case DType::e4m3:
      // Raw bits: NumPy's uint8, or the 1-byte void NumPy writes for ml_dtypes.float8_e4m3fn.
      if (same("|u1") || same("|V1")) return a.data;
      if (same("<f4")) {
        out.resize(n);
        for (size_t i = 0; i < n; ++i) {
          float f;
          std::memcpy(&f, &a.data[i * 4], 4);
          out[i] = ref::float_to_e4m3(f).bits;  // nearest even, saturating to +-448
        }
        return out;
      }
      return refuse();
  }
  return refuse();
}

std::string npy_descr(DType t, bool raw_bf16) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return raw_bf16 ? "<u2" : "<f4";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::u8: return "|u1";
    case DType::f64: return "<f8";
    case DType::e4m3: return raw_bf16 ? "|u1" : "<f4";
  }
  return "";
}

// Integer inputs with declared bounds, and offsets inputs, are checked on the host: a
// kernel cannot report a bad index, so it must not be handed one.
Status check_values(const Contract& c, const Binding& b, const std::string& name, DType dtype,
                    const std::vector<unsigned char>& data) {
  if (dtype != DType::i32) return {};
  size_t n = data.size() / 4;
  auto at = [&](size_t i) {
    int32_t v;
    std::memcpy(&v, &data[i * 4], 4);
    return v;
  };
  for (auto& bd : c.bounds) {
    if (bd.input != name) continue;
    auto lo = evaluate(b, bd.lo), hi = evaluate(b, bd.hi);
    if (!lo || !hi) return Error(HAL_INVALID_ARGUMENT, fmt::format("bounds of '{}': {}", name, (!lo ? lo.error() : hi.error()).message()));
    for (size_t i = 0; i < n; ++i)
      if (at(i) < *lo || at(i) >= *hi)
        return Error(HAL_OUT_OF_RANGE, fmt::format("input '{}': element {} is {}, outside [{}, {}) ({} = {})", name, i, at(i),
                                                   *lo, *hi, bd.hi, *hi));
  }
  if (const InputGenerator* g = c.find_generator(name); g && g->kind == "offsets") {
    int64_t total = b.dim(g->total);
    if (n == 0 || at(0) != 0) return Error(HAL_INVALID_ARGUMENT, fmt::format("offsets '{}' must start at 0", name));
    for (size_t i = 1; i < n; ++i)
      if (at(i) < at(i - 1))
        return Error(HAL_INVALID_ARGUMENT, fmt::format("offsets '{}' decrease at {} ({} after {})", name, i, at(i), at(i - 1)));
    if (at(n - 1) > total)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("offsets '{}' end at {}, past {} = {}", name, at(n - 1), g->total, total));
  }
  return {};
}

int run(const std::vector<std::string>& args) {
  if (args.empty()) return usage();
  if (args[0] == "--list") {
    size_t width = 0;
    for (auto& c : contracts()) width = std::max(width, c.op.size());
    for (auto& c : contracts()) fmt::print("  {:<{}} {}\n", c.op, width + 1, c.summary);
    return 0;
  }
  if (args[0] == "--help" || args[0] == "-h") {
    usage();
    return 0;
  }
  const std::string op = args[0];
  const Contract* c = find_contract(op);
  if (!c) {
    fmt::print(stderr, "halcyon run: unknown operator '{}' ('halcyon run --list' lists them)\n", op);
    return 2;
  }
  std::string uri = "cpu", out_dir;
  bool raw_bf16 = false;
  RunOptions options;
  std::map<std::string, std::string> ins, params;
  std::map<std::string, int64_t> dims;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        fmt::print(stderr, "halcyon run: {} needs a value\n", a);
        std::exit(2);
      }
      return args[++i];
    };
    auto kv = [&](const std::string& s, std::string* k, std::string* v) {
      size_t eq = s.find('=');
      if (eq == std::string::npos || eq == 0) {
        fmt::print(stderr, "halcyon run: '{}' is not NAME=VALUE\n", s);
        std::exit(2);
      }
      *k = s.substr(0, eq);
      *v = s.substr(eq + 1);
    };
    if (a == "--help" || a == "-h") {
      print_contract(*c);
      return 0;
    } else if (a == "--device") {
      uri = value();
    } else if (a == "--out") {
      out_dir = value();
    } else if (a == "--raw-bf16") {
      raw_bf16 = true;
    } else if (a == "--impl") {
      options.impl = value();
    } else if (a == "--code") {
      const std::string v = value();
      if (v != "auto" && v != "ir" && v != "binary") {
        fmt::print(stderr, "halcyon run: --code {}: auto, ir (PTX through the JIT) or binary (a cubin)\n", v);
        return 2;
      }
      options.code = v == "ir" ? CodeSource::kIr : v == "binary" ? CodeSource::kBinary : CodeSource::kAuto;
    } else if (a == "--in") {
      std::string k, v;
      kv(value(), &k, &v);
      if (std::none_of(c->inputs.begin(), c->inputs.end(), [&](const TensorSpec& t) { return t.name == k; })) {
        fmt::print(stderr, "halcyon run: {} has no input '{}'{}\n", op, k,
                   c->find_tensor(k) ? " (it is an output: --out DIR receives it)" : "");
        return 2;
      }
      if (!ins.emplace(k, v).second) {
        fmt::print(stderr, "halcyon run: --in {} is given twice\n", k);
        return 2;
      }
    } else if (a == "--set") {
      std::string k, v;
      kv(value(), &k, &v);
      if (params.count(k) || dims.count(k)) {
        fmt::print(stderr, "halcyon run: --set {} is given twice\n", k);
        return 2;
      }
      bool is_dim = false;
      for (auto* list : {&c->inputs, &c->outputs})
        for (auto& t : *list) is_dim |= std::find(t.dims.begin(), t.dims.end(), k) != t.dims.end();
      for (auto& r : c->dim_rules) is_dim |= r.symbol == k;
      if (c->find_param(k)) {
        params[k] = v;
      } else if (!is_dim) {
        fmt::print(stderr, "halcyon run: {} has no parameter '{}' ('halcyon run {} --help' lists them)\n", op, k, op);
        return 2;
      } else {
        std::string err;
        auto d = cli::parse_int(k, v, 0, INT64_MAX, &err);
        if (!d) {
          fmt::print(stderr, "halcyon run: dimension {}\n", err);
          return 2;
        }
        dims[k] = *d;
      }
    } else {
      fmt::print(stderr, "halcyon run: unknown option '{}'\n", a);
      return usage();
    }
  }
  if (out_dir.empty()) {
    fmt::print(stderr, "halcyon run: --out DIR is required\n");
    return 2;
  }
  // The --set values of parameters, checked before any file is read: a bad one is a usage
  // error (2).
  if (auto checked = check_params(*c, params); !checked) {
    fmt::print(stderr, "halcyon run: {}\n", checked.error().message());
    return 2;
  }
  // The output folder first: an operator's result with nowhere to go is wasted work.
  if (mkdir(out_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    fmt::print(stderr, "halcyon run {}: cannot create --out {}: {}\n", op, out_dir, std::strerror(errno));
    return 1;
  }
  if (struct stat st{}; stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    fmt::print(stderr, "halcyon run {}: --out {} is not a folder\n", op, out_dir);
    return 1;
  }
  auto fail = [&](const Error& e) {
    fmt::print(stderr, "halcyon run {}: {}\n", op, e.to_string());
    return 1;
  };
  // Read and convert inputs.
  std::map<std::string, std::vector<unsigned char>> host;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, file] : ins) {
    const TensorSpec* spec = nullptr;
    for (auto& t : c->inputs)
      if (t.name == name) spec = &t;
    if (!spec) return fail(Error(HAL_INVALID_ARGUMENT, fmt::format("{} has no input '{}'", op, name)));
    auto arr = read_npy(file);
    if (!arr) return fail(arr.error());
    auto data = convert(*arr, spec->dtype, name);
    if (!data) return fail(Error(data.error().status(), fmt::format("{}: {}", file, data.error().message())));
    host[name] = std::move(data).value();
    shapes[name] = arr->shape;
  }
  auto b = bind(*c, params, dims, shapes);
  if (!b) return fail(b.error());
  for (auto& t : c->inputs)
    if (!t.optional && !ins.count(t.name)) return fail(Error(HAL_INVALID_ARGUMENT, fmt::format("input '{}' is missing (--in {}=FILE.npy)", t.name, t.name)));
  for (auto& [name, data] : host) {
    auto st = check_values(*c, *b, name, c->find_tensor(name)->dtype, data);
    if (!st) return fail(st.error());
  }
  auto dev = Device::open(uri.c_str());
  if (!dev) return fail(dev.error());
  auto stream = dev->create_stream();
  if (!stream) return fail(stream.error());
  std::map<std::string, Tensor, std::less<>> tensors;
  for (auto& [name, data] : host) {
    auto t = make_tensor(*dev, c->find_tensor(name)->dtype, shapes[name]);
    if (!t) return fail(t.error());
    auto st = stream->write(t->buffer, 0, data.data(), data.size());
    if (!st) return fail(st.error());
    tensors[name] = std::move(t).value();
  }
  for (auto& o : c->outputs) {
    auto t = make_tensor(*dev, o.dtype, b->shape_of(o));
    if (!t) return fail(t.error());
    tensors[o.name] = std::move(t).value();
  }
  auto chosen = select_impl_for_call(*dev, op, tensors, params, options);  // what run_op takes below
  if (!chosen) return fail(chosen.error());
  const OpImpl* impl = *chosen;
  auto start = dev->create_event(), end = dev->create_event();
  if (!start || !end) return fail((!start ? start : end).error());
  auto st = stream->record(*start);
  if (st) st = run_op(*dev, *stream, op, tensors, params, options);
  if (st) st = stream->record(*end);
  if (st) st = stream->synchronize();
  if (!st) return fail(st.error());
  auto ms = end->elapsed_since(*start);
  const char* kinds[] = {"?", "PTX", "cubin", "code object", "SPIR-V", "host code"};
  fmt::print("{} on {} ({}: {} for {}): {:.3f} ms\n", op, uri, impl->name, kinds[impl->format <= 5 ? impl->format : 0],
             impl->target, ms ? *ms : -1.0f);
  for (auto& o : c->outputs) {
    Tensor& t = tensors[o.name];
    std::vector<unsigned char> data(t.bytes());
    auto rs = stream->read(t.buffer, 0, data.data(), data.size());
    if (rs) rs = stream->synchronize();
    if (!rs) return fail(rs.error());
    if (o.dtype == DType::bf16 && !raw_bf16) {
      std::vector<unsigned char> wide(data.size() * 2);
      for (size_t i = 0; i < data.size() / 2; ++i) {
        ref::bf16 h;
        std::memcpy(&h.bits, &data[i * 2], 2);
        float f = ref::bf16_to_float(h);
        std::memcpy(&wide[i * 4], &f, 4);
      }
      data.swap(wide);
    } else if (o.dtype == DType::e4m3 && !raw_bf16) {
      std::vector<unsigned char> wide(data.size() * 4);
      for (size_t i = 0; i < data.size(); ++i) {
        float f = ref::e4m3_to_float({data[i]});
        std::memcpy(&wide[i * 4], &f, 4);
      }
      data.swap(wide);
    }
    std::string path = out_dir + "/" + o.name + ".npy";
    auto ws = write_npy(path, npy_descr(o.dtype, raw_bf16), t.shape, data.data(), data.size());
    if (!ws) return fail(ws.error());
    std::string note;
    if (auto* dr = c->find_defined_rows(o.name)) note = fmt::format("  (only the first {}[{}] rows are defined)", dr->count_tensor, dr->index);
    if (!output_defined(*c, *b, o.name))
      note = fmt::format("  (not defined: {} = false)", c->find_defined_if(o.name)->param);
    fmt::print("  {} {} {} -> {}{}\n", o.name, dtype_name(o.dtype), t.shape_string(), path, note);
  }
  return 0;
}

halcyon::cli::Register reg({"run", "run one operator on .npy tensors (--list, OP --help)", run});

}  // namespace
