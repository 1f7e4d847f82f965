// The .contract parser and call binding (see contract.hpp for the format).
#include <halcyon/ops/contract.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

namespace halcyon::ops {
namespace {

std::vector<std::string> split_ws(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) out.push_back(std::move(cur)), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parse_int(std::string_view s, int64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_double(std::string_view s, double* v) {
  std::string str(s);
  char* end = nullptr;
  *v = std::strtod(str.c_str(), &end);
  return !str.empty() && end == str.c_str() + str.size();
}

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Parses "[T, E]" (possibly spread over several tokens) starting at tokens[i].
bool parse_dims(const std::vector<std::string>& tok, size_t& i, std::vector<std::string>* dims) {
  std::string joined;
  for (; i < tok.size(); ++i) {
    joined += tok[i];
    if (tok[i].find(']') != std::string::npos) {
      ++i;
      break;
    }
  }
  if (joined.size() < 2 || joined.front() != '[' || joined.back() != ']') return false;
  std::string inner = joined.substr(1, joined.size() - 2);
  dims->clear();
  if (inner.empty()) return true;  // a scalar: []
  std::stringstream ss(inner);
  std::string d;
  while (std::getline(ss, d, ',')) {
    auto t = std::string(trim(d));
    int64_t v;
    if (!is_identifier(t) && !parse_int(t, &v)) return false;
    dims->push_back(t);
  }
  return true;
}

// Evaluates + - * / ( ), unary minus, over integers and symbols; overflow is an error.
class Expr {
 public:
  Expr(std::string_view s, const std::map<std::string, int64_t, std::less<>>& env) : s_(s), env_(env) {}
  bool eval(int64_t* out, std::string* err) {
    if (!sum(out, err)) return false;
    skip();
    if (pos_ != s_.size()) {
      *err = fmt::format("unexpected '{}' in '{}'", s_.substr(pos_), s_);
      return false;
    }
    return true;
  }

 private:
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool sum(int64_t* v, std::string* err) {
    if (!product(v, err)) return false;
    for (;;) {
      skip();
      if (pos_ >= s_.size() || (s_[pos_] != '+' && s_[pos_] != '-')) return true;
      char op = s_[pos_++];
      int64_t r;
      if (!product(&r, err)) return false;
      if (op == '+' ? __builtin_add_overflow(*v, r, v) : __builtin_sub_overflow(*v, r, v)) return overflow(err);
    }
  }
  // A dimension product or sum past int64 is an error, not a wrapped (negative) size.
  bool overflow(std::string* err) {
    *err = fmt::format("'{}' overflows a 64-bit integer", s_);
    return false;
  }
  bool product(int64_t* v, std::string* err) {
    if (!atom(v, err)) return false;
    for (;;) {
      skip();
      if (pos_ >= s_.size() || (s_[pos_] != '*' && s_[pos_] != '/')) return true;
      char op = s_[pos_++];
      int64_t r;
      if (!atom(&r, err)) return false;
      if (op == '/' && r == 0) {
        *err = fmt::format("division by zero in '{}'", s_);
        return false;
      }
      if (op == '*') {
        if (__builtin_mul_overflow(*v, r, v)) return overflow(err);
      } else {
        if (*v == INT64_MIN && r == -1) return overflow(err);
        *v /= r;
      }
    }
  }
  bool atom(int64_t* v, std::string* err) {
    // Each '(' or unary '-' recurses: a bound keeps a hostile expression off the stack's end.
    if (++depth_ > kMaxDepth) {
      *err = fmt::format("'{}' nests deeper than {} levels", s_.substr(0, 40), kMaxDepth);
      return false;
    }
    bool ok = atom_at_depth(v, err);
    --depth_;
    return ok;
  }
  bool atom_at_depth(int64_t* v, std::string* err) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == '-') {  // unary minus: bounds such as [-1, T)
      ++pos_;
      if (!atom(v, err)) return false;
      if (*v == INT64_MIN) return overflow(err);
      *v = -*v;
      return true;
    }
    if (pos_ < s_.size() && s_[pos_] == '(') {
      ++pos_;
      if (!sum(v, err)) return false;
      skip();
      if (pos_ >= s_.size() || s_[pos_] != ')') {
        *err = fmt::format("missing ')' in '{}'", s_);
        return false;
      }
      ++pos_;
      return true;
    }
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    std::string_view tok = s_.substr(start, pos_ - start);
    if (tok.empty()) {
      *err = fmt::format("expected a number or symbol in '{}'", s_);
      return false;
    }
    if (parse_int(tok, v)) return true;
    auto it = env_.find(tok);
    if (it == env_.end()) {
      *err = fmt::format("'{}' is not known yet", tok);
      return false;
    }
    *v = it->second;
    return true;
  }
  static constexpr int kMaxDepth = 64;
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  const std::map<std::string, int64_t, std::less<>>& env_;
};

Result<ParamValue> parse_param_value(const ParamSpec& p, std::string_view text) {
  auto bad = [&](const char* what) {
    return Error(HAL_INVALID_ARGUMENT, fmt::format("parameter '{}': '{}' is not {}", p.name, text, what));
  };
  switch (p.type) {
    case ParamType::Int: {
      int64_t v;
      if (!parse_int(text, &v)) return bad("an integer");
      return ParamValue(v);
    }
    case ParamType::F32: {
      double v;
      if (!parse_double(text, &v) || !std::isfinite(v)) return bad("a finite number");
      return ParamValue(v);
    }
    case ParamType::Bool:
      if (text == "true" || text == "1") return ParamValue(true);
      if (text == "false" || text == "0") return ParamValue(false);
      return bad("true or false");
    case ParamType::Enum:
      if (std::find(p.choices.begin(), p.choices.end(), text) == p.choices.end()) {
        std::string all;
        for (auto& c : p.choices) all += (all.empty() ? "" : "|") + c;
        return Error(HAL_INVALID_ARGUMENT, fmt::format("parameter '{}': '{}' is not one of {}", p.name, text, all));
      }
      return ParamValue(std::string(text));
  }
  return bad("valid");
}

}  // namespace

std::string to_string(const ParamValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) return fmt::format("{}", *d);
  if (auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  return std::get<std::string>(v);
}

const TensorSpec* Contract::find_tensor(std::string_view name) const {
  for (auto* list : {&inputs, &outputs})
    for (auto& t : *list)
      if (t.name == name) return &t;
  return nullptr;
}
namespace {
// The entry of `list` whose `key` member equals `name`, or null.
template <typename T>
const T* find_by(const std::vector<T>& list, std::string T::*key, std::string_view name) {
  for (auto& e : list)
    if (e.*key == name) return &e;
  return nullptr;
}
}  // namespace
const ParamSpec* Contract::find_param(std::string_view name) const { return find_by(params, &ParamSpec::name, name); }
const InputGenerator* Contract::find_generator(std::string_view input) const {
  return find_by(generators, &InputGenerator::input, input);
}
const DefinedRows* Contract::find_defined_rows(std::string_view output) const {
  return find_by(defined_rows, &DefinedRows::output, output);
}
const DefinedIf* Contract::find_defined_if(std::string_view output) const {
  return find_by(defined_if, &DefinedIf::output, output);
}
const ValueBounds* Contract::find_bounds(std::string_view input) const {
  return find_by(bounds, &ValueBounds::input, input);
}
const ValueRange* Contract::find_range(std::string_view input) const {
  return find_by(ranges, &ValueRange::input, input);
}

Result<Contract> parse_contract(std::string_view text, std::string_view file) {
  Contract c;
  c.file = std::string(file);
  c.text = std::string(text);
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    auto fail = [&](const std::string& why) {
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}:{}: {}", file, line_no, why));
    };
    auto tok = split_ws(line);
    const std::string& kw = tok[0];
    std::string_view rest = trim(line.substr(kw.size()));
    if (kw == "op") {
      if (tok.size() != 2 || !is_identifier(tok[1])) return fail("expected 'op <name>'");
      c.op = tok[1];
    } else if (kw == "summary") {
      c.summary = std::string(rest);
    } else if (kw == "note") {
      c.notes.emplace_back(rest);
    } else if (kw == "input" || kw == "output") {
      if (tok.size() < 4) return fail(fmt::format("expected '{} <name> <dtype> [dims]'", kw));
      TensorSpec t;
      t.name = tok[1];
      auto dt = parse_dtype(tok[2]);
      if (!dt) return fail(fmt::format("unknown dtype '{}'", tok[2]));
      t.dtype = *dt;
      size_t i = 3;
      if (!parse_dims(tok, i, &t.dims)) return fail("malformed dims: expected [A, B, 4]");
      if (kw == "input") {
        if (i < tok.size() && tok[i] == "optional") t.optional = true, ++i;
        if (i != tok.size()) return fail(fmt::format("unexpected '{}'", tok[i]));
        c.inputs.push_back(std::move(t));
      } else {
        if (i < tok.size() && tok[i] == "exact") {
          t.tolerance.exact = true;
          ++i;
        } else if (i + 1 < tok.size() && tok[i] == "rel") {
          if (!parse_double(tok[i + 1], &t.tolerance.rel) || t.tolerance.rel <= 0)
            return fail(fmt::format("bad tolerance '{}'", tok[i + 1]));
          i += 2;
        } else if (i + 1 < tok.size() && tok[i] == "steps") {
          double n = -1;
          if (!parse_double(tok[i + 1], &n) || n < 0 || n > 255 || n != double(int(n)))
            return fail(fmt::format("bad step count '{}'", tok[i + 1]));
          if (t.dtype != DType::e4m3) return fail("a tolerance in steps is for e4m3 outputs");
          t.tolerance.steps = int(n);
          i += 2;
          if (i + 1 < tok.size() && tok[i] == "abs") {
            if (!parse_double(tok[i + 1], &t.tolerance.abs) || t.tolerance.abs < 0)
              return fail(fmt::format("bad tolerance '{}'", tok[i + 1]));
            i += 2;
          }
        } else {
          return fail("an output needs a tolerance: 'exact', 'rel <value>' or (e4m3) 'steps <n>'");
        }
        if (i != tok.size()) return fail(fmt::format("unexpected '{}'", tok[i]));
        c.outputs.push_back(std::move(t));
      }
    } else if (kw == "param") {
      if (tok.size() < 4) return fail("expected 'param <name> <type> <default>'");
      ParamSpec p;
      p.name = tok[1];
      if (tok[2] == "int") p.type = ParamType::Int;
      else if (tok[2] == "f32") p.type = ParamType::F32;
      else if (tok[2] == "bool") p.type = ParamType::Bool;
      else if (tok[2] == "enum") p.type = ParamType::Enum;
      else return fail(fmt::format("unknown param type '{}'", tok[2]));
      if (p.type == ParamType::Enum) {
        if (tok.size() != 5) return fail("expected 'param <name> enum <default> <a>|<b>|...'");
        std::stringstream ss(tok[4]);
        std::string choice;
        while (std::getline(ss, choice, '|')) p.choices.push_back(choice);
      } else if (tok.size() != 4) {
        return fail(fmt::format("unexpected '{}'", tok[4]));
      }
      auto v = parse_param_value(p, tok[3]);
      if (!v) return fail(v.error().message());
      p.default_value = *v;
      c.params.push_back(std::move(p));
    } else if (kw == "dim") {
      size_t eq = rest.find('=');
      if (eq == std::string_view::npos) return fail("expected 'dim <symbol> = <expression>'");
      DimRule r{std::string(trim(rest.substr(0, eq))), std::string(trim(rest.substr(eq + 1)))};
      if (!is_identifier(r.symbol) || r.expression.empty()) return fail("expected 'dim <symbol> = <expression>'");
      c.dim_rules.push_back(std::move(r));
    } else if (kw == "range") {
      ValueRange r;
      if (tok.size() != 4 || !parse_double(tok[2], &r.lo) || !parse_double(tok[3], &r.hi) || r.lo > r.hi)
        return fail("expected 'range <input> <lo> <hi>' with lo <= hi");
      r.input = tok[1];
      c.ranges.push_back(std::move(r));
    } else if (kw == "generate") {
      if (tok.size() == 4 && tok[2] == "offsets" && is_identifier(tok[3]))
        c.generators.push_back({tok[1], tok[2], tok[3]});
      else if (tok.size() == 3 && tok[2] == "bounds")
        c.generators.push_back({tok[1], tok[2], ""});
      else if ((tok.size() == 4 || (tok.size() == 5 && tok[4] == "specials")) && tok[2] == "blockscaled" &&
               tok[3].find_first_not_of("0123456789") == std::string::npos && tok[3].size() <= 6 && tok[3] != "0")
        c.generators.push_back({tok[1], tok[2], tok[3], tok.size() == 5});
      else if (tok.size() == 4 && tok[2] == "nans")
        c.generators.push_back({tok[1], tok[2], tok[3]});
      else
        return fail("expected 'generate <input> offsets <total dim>', 'generate <input> bounds', "
                    "'generate <input> blockscaled <group> [specials]' or 'generate <input> nans <count>'");
    } else if (kw == "bounds") {
      if (tok.size() != 4) return fail("expected 'bounds <input> <lo> <hi>'");
      c.bounds.push_back({tok[1], tok[2], tok[3]});
    } else if (kw == "rows") {
      DefinedRows d;
      size_t lb = tok.size() == 3 ? tok[2].find('[') : std::string::npos;
      if (lb == std::string::npos || tok[2].back() != ']' || !parse_int(std::string_view(tok[2]).substr(lb + 1, tok[2].size() - lb - 2), &d.index))
        return fail("expected 'rows <output> <tensor>[<index>]'");
      d.output = tok[1];
      d.count_tensor = tok[2].substr(0, lb);
      c.defined_rows.push_back(std::move(d));
    } else if (kw == "defined") {
      if (tok.size() != 4 || tok[2] != "if" || !is_identifier(tok[3]))
        return fail("expected 'defined <output> if <bool param>'");
      c.defined_if.push_back({tok[1], tok[3]});
    } else if (kw == "case") {
      ContractCase cc;
      cc.text = std::string(rest);
      for (size_t i = 1; i < tok.size(); ++i) {
        size_t eq = tok[i].find('=');
        if (eq == std::string::npos) return fail(fmt::format("case item '{}' is not name=value", tok[i]));
        std::string k = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
        int64_t iv;
        // A name that is a param is a param; anything else must be a dim symbol.
        bool is_param = std::any_of(c.params.begin(), c.params.end(), [&](auto& p) { return p.name == k; });
        if (is_param) cc.params[k] = v;
        else if (parse_int(v, &iv)) cc.dims[k] = iv;
        else return fail(fmt::format("case item '{}': '{}' is neither a param (declare params before cases) nor an integer dim", tok[i], k));
      }
      c.cases.push_back(std::move(cc));
    } else {
      return fail(fmt::format("unknown statement '{}'", kw));
    }
  }
  if (c.op.empty()) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: no 'op' line", file));
  if (c.outputs.empty()) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: op {} has no outputs", file, c.op));
  for (auto& r : c.ranges)
    if (!c.find_tensor(r.input)) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: range for unknown input '{}'", file, r.input));
  for (auto& g : c.generators) {
    const TensorSpec* t = c.find_tensor(g.input);
    const bool float_kind = g.kind == "blockscaled" || g.kind == "nans";
    if (float_kind && (!t || !dtype_is_float(t->dtype)))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: generate {} {}: not a float input", file, g.input, g.kind));
    if (!float_kind && (!t || t->dtype != DType::i32))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: generate: '{}' is not an i32 input", file, g.input));
    if (g.kind == "bounds" && !c.find_bounds(g.input))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: generate {} bounds: '{}' has no bounds line", file, g.input, g.input));
  }
  for (auto& bd : c.bounds) {
    const TensorSpec* t = c.find_tensor(bd.input);
    if (!t || ops::dtype_is_float(t->dtype))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: bounds: '{}' is not an integer input", file, bd.input));
  }
  for (auto& d : c.defined_rows) {
    const TensorSpec* o = c.find_tensor(d.output);
    const TensorSpec* n = c.find_tensor(d.count_tensor);
    if (!o || o->dims.empty() || !n || n->dtype != DType::i32)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: rows: '{}' must be a tensor with rows and '{}' an i32 tensor",
                                                     file, d.output, d.count_tensor));
  }
  for (auto& d : c.defined_if) {
    bool is_output = std::any_of(c.outputs.begin(), c.outputs.end(), [&](auto& o) { return o.name == d.output; });
    const ParamSpec* p = c.find_param(d.param);
    if (!is_output || !p || p->type != ParamType::Bool)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: defined: '{}' must be an output and '{}' a bool param", file,
                                                     d.output, d.param));
  }
  return c;
}

bool output_defined(const Contract& c, const Binding& b, std::string_view output) {
  const DefinedIf* d = c.find_defined_if(output);
  if (!d) return true;
  auto it = b.params.values().find(d->param);
  return it == b.params.values().end() || std::get<bool>(it->second);
}

Result<int64_t> evaluate(const Binding& b, std::string_view expression) {
  std::map<std::string, int64_t, std::less<>> env(b.dims.begin(), b.dims.end());
  for (auto& [k, v] : b.params.values())
    if (auto* i = std::get_if<int64_t>(&v)) env.emplace(k, *i);
  int64_t out = 0;
  std::string why;
  if (!Expr(expression, env).eval(&out, &why)) return Error(HAL_INVALID_ARGUMENT, why);
  return out;
}

int64_t ParamSet::i(std::string_view name) const { return std::get<int64_t>(values_.find(name)->second); }
double ParamSet::f(std::string_view name) const { return std::get<double>(values_.find(name)->second); }
bool ParamSet::b(std::string_view name) const { return std::get<bool>(values_.find(name)->second); }
const std::string& ParamSet::s(std::string_view name) const {
  return std::get<std::string>(values_.find(name)->second);
}

int64_t Binding::dim(std::string_view symbol) const {
  auto it = dims.find(symbol);
  return it == dims.end() ? -1 : it->second;
}

std::vector<int64_t> Binding::shape_of(const TensorSpec& spec) const {
  std::vector<int64_t> out;
  for (auto& d : spec.dims) {
    int64_t v;
    out.push_back(parse_int(d, &v) ? v : dim(d));
  }
  return out;
}

namespace {
// Every tensor's byte size must fit in int64: a wrapped product would allocate a few bytes
// for a tensor that a kernel then indexes in full.
Status check_sizes(const Contract& c, const Binding& b) {
  for (auto* list : {&c.inputs, &c.outputs})
    for (auto& t : *list)
      if (auto e = checked_extent(t.dtype, b.shape_of(t)); !e)
        return Error(e.error().status(), fmt::format("{}: '{}' [{}] = {}", c.op, t.name, fmt::join(t.dims, ", "),
                                                     e.error().message()));
  return {};
}
}  // namespace

Result<ParamSet> check_params(const Contract& c, const std::map<std::string, std::string>& params) {
  ParamSet set;
  for (auto& [k, v] : params)
    if (!c.find_param(k))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: unknown parameter '{}'", c.op, k));
  for (auto& p : c.params) {
    auto it = params.find(p.name);
    if (it == params.end()) {
      set.values()[p.name] = p.default_value;
    } else {
      auto v = parse_param_value(p, it->second);
      if (!v) return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: {}", c.op, v.error().message()));
      set.values()[p.name] = *v;
    }
  }
  return set;
}

Result<Binding> bind(const Contract& c, const std::map<std::string, std::string>& params,
                     const std::map<std::string, int64_t>& dims,
                     const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  Binding b;
  auto checked = check_params(c, params);
  if (!checked) return checked.error();
  b.params = std::move(checked).value();
  // Int params are usable in dim expressions.
  std::map<std::string, int64_t, std::less<>> env;
  for (auto& [k, v] : b.params.values())
    if (auto* i = std::get_if<int64_t>(&v)) env[k] = *i;
  for (auto& [k, v] : dims) b.dims[k] = v;
  for (auto& [name, shape] : input_shapes)
    if (!c.find_tensor(name))
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: no input named '{}'", c.op, name));
  // Inputs in contract order, so the first input fixes a dim and later ones are checked
  // against it (outputs are checked by the caller against shape_of()).
  for (const TensorSpec& in : c.inputs) {
    auto found = input_shapes.find(in.name);
    if (found == input_shapes.end()) continue;
    const std::string& name = in.name;
    const std::vector<int64_t>& shape = found->second;
    const TensorSpec* spec = &in;
    if (shape.size() != spec->dims.size())
      return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: input '{}' has {} dimension(s), the contract says {} ([{}])",
                                                     c.op, name, shape.size(), spec->dims.size(), fmt::join(spec->dims, ", ")));
    for (size_t i = 0; i < shape.size(); ++i) {
      const std::string& sym = spec->dims[i];
      int64_t lit;
      int64_t want = parse_int(sym, &lit) ? lit : b.dim(sym);
      if (want >= 0 && want != shape[i])
        return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: input '{}' dimension {} ({}) is {}, expected {}", c.op, name,
                                                       i, sym, shape[i], want));
      if (want < 0) b.dims[sym] = shape[i];
    }
  }
  // Dim rules, repeated until nothing changes (rules may refer to each other).
  for (size_t round = 0; round <= c.dim_rules.size(); ++round) {
    for (auto& [k, v] : b.dims) env[k] = v;
    for (auto& r : c.dim_rules) {
      int64_t v;
      std::string why;
      if (!Expr(r.expression, env).eval(&v, &why)) continue;
      auto it = b.dims.find(r.symbol);
      if (it != b.dims.end() && it->second != v)
        return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: dimension {} is {}, but the contract says {} = {} = {}", c.op,
                                                       r.symbol, it->second, r.symbol, r.expression, v));
      b.dims[r.symbol] = v;
    }
  }
  for (auto* list : {&c.inputs, &c.outputs})
    for (auto& t : *list)
      for (auto& d : t.dims) {
        int64_t lit;
        if (parse_int(d, &lit)) continue;
        auto it = b.dims.find(d);
        if (it == b.dims.end())
          return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: dimension {} of '{}' is unknown (give the input or a case value)",
                                                         c.op, d, t.name));
        if (it->second < 0)
          return Error(HAL_INVALID_ARGUMENT, fmt::format("{}: dimension {} is negative ({})", c.op, d, it->second));
      }
  if (auto st = check_sizes(c, b); !st) return st.error();
  return b;
}

}  // namespace halcyon::ops
