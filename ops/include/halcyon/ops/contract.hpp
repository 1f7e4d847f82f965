// Kernel contracts: one declaration per operator (kernels/<family>/<op>.contract), shared by
// every implementation. Parsed from the text files embedded at build time.
//
// Line format (one statement a line, '#' starts a comment):
//   op <name>
//   summary <text>
//   input  <name> <dtype> [<dims>] [optional]
//   output <name> <dtype> [<dims>] exact | rel <tolerance> | steps <n> [abs <a>]   (steps: e4m3 only)
//   param  <name> int|f32|bool|enum <default> [<choice>|<choice>...]
//   dim    <symbol> = <expression over params, dims and integers: + - * / ( )>
//   range  <input> <lo> <hi>          value domain of random test inputs
//   generate <input> offsets <total>  a random test input that must be a valid offsets
//                                     array: counts >= 0 (some zero) summing to dim <total>,
//                                     as exclusive prefix sums
//   generate <input> bounds           a random integer test input drawn uniformly from the
//                                     [lo, hi) of its `bounds` line (for indices whose valid
//                                     range depends on the case's dims)
//   generate <input> blockscaled <n>  a random float input within its `range`, each run of n
//                                     elements (along the flat index) multiplied by one of
//                                     0, 2^-24, 2^24 or (mostly) 1: block scales of 0 and of
//                                     extreme magnitude (FP8 operators)
//   generate <input> blockscaled <n> specials
//                                     the same, and about one run in four also holds one
//                                     +inf, -inf, +NaN or -NaN at a random place (quantizing
//                                     operators, whose contracts define what those give)
//   generate <input> nans <count>     a random float input within its `range`, then <count>
//                                     (an expression over dims) elements at random places
//                                     made NaN, alternately +NaN and -NaN: operators whose
//                                     contracts say where an input's NaN goes
//   bounds <input> <lo> <hi>          every value of an integer input must lie in [lo, hi)
//                                     (expressions over dims): checked by `halcyon run`
//   rows   <output> <tensor>[<index>] only the leading rows of <output> are defined: as many
//                                     as the int value of <tensor> at flat <index> (negative
//                                     counts from the end); the rest is never compared
//   defined <output> if <bool param>  <output> is defined only when the param is true; when
//                                     it is false its contents are unspecified (an
//                                     implementation may leave it unwritten), never compared
//   case   <sym>=<int> ... [<param>=<value> ...]
//   note   <text>
#pragma once

#include <halcyon/result.hpp>
#include <halcyon/ops/tensor.hpp>

#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace halcyon::ops {

struct Tolerance {
  bool exact = false;
  double rel = 0;  // ||out - ref|| / ||ref|| must not exceed this
  // >= 0 (e4m3 outputs): every element within this many representable values of the
  // reference's (+0 and -0 one value), or within `abs` of it (in e4m3 values: 448 is a group's
  // maximum; -1: no such allowance). For quantized outputs, where a norm over the whole output
  // would let single wrong elements pass: a large value may move one code when the value it
  // quantizes was rounded differently; a small one, the result of cancellation in a sum, may
  // move further by an amount that is small against its group's maximum.
  int steps = -1;
  double abs = -1;
};

struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::string> dims;  // symbols or integer literals
  bool optional = false;
  Tolerance tolerance;            // outputs only
};

enum class ParamType : uint8_t { Int, F32, Bool, Enum };
using ParamValue = std::variant<int64_t, double, bool, std::string>;

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::Int;
  ParamValue default_value;
  std::vector<std::string> choices;  // enum only
};

struct DimRule {
  std::string symbol;
  std::string expression;
};

struct ValueRange {
  std::string input;
  double lo = 0, hi = 1;
};

struct InputGenerator {
  std::string input;
  std::string kind;   // "offsets", "bounds", "blockscaled" or "nans"
  std::string total;  // offsets: dim symbol the offsets sum to; blockscaled: the run length;
                      // nans: the count's expression; bounds: empty
  bool specials = false;  // blockscaled: plant infinities and NaNs as well
};

struct ValueBounds {
  std::string input;
  std::string lo, hi;  // expressions; valid values are [lo, hi)
};

struct DefinedRows {
  std::string output;
  std::string count_tensor;  // an input or output (int dtype)
  int64_t index = 0;         // flat index; negative counts from the end
};

struct DefinedIf {
  std::string output;
  std::string param;  // a bool param: the output is defined only when it is true
};

struct ContractCase {
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> params;  // as written; parsed by bind()
  std::string text;                            // the line, for reports
};

struct Contract {
  std::string op;
  std::string summary;
  std::string file;  // e.g. "moe/moe_gate.contract"
  std::vector<TensorSpec> inputs, outputs;
  std::vector<ParamSpec> params;
  std::vector<DimRule> dim_rules;
  std::vector<ValueRange> ranges;
  std::vector<InputGenerator> generators;
  std::vector<DefinedRows> defined_rows;
  std::vector<DefinedIf> defined_if;
  std::vector<ValueBounds> bounds;
  std::vector<ContractCase> cases;
  std::vector<std::string> notes;
  std::string text;  // the contract as written

  const TensorSpec* find_tensor(std::string_view name) const;
  const ParamSpec* find_param(std::string_view name) const;
  const ValueRange* find_range(std::string_view input) const;
  const InputGenerator* find_generator(std::string_view input) const;
  const DefinedRows* find_defined_rows(std::string_view output) const;
  const DefinedIf* find_defined_if(std::string_view output) const;
  const ValueBounds* find_bounds(std::string_view input) const;
};

Result<Contract> parse_contract(std::string_view text, std::string_view file);

// Every contract compiled into the library, sorted by op name.
const std::vector<Contract>& contracts();
const Contract* find_contract(std::string_view op);

// Parameters with defaults filled in and values type-checked.
class ParamSet {
 public:
  int64_t i(std::string_view name) const;
  double f(std::string_view name) const;
  bool b(std::string_view name) const;
  const std::string& s(std::string_view name) const;
  const std::map<std::string, ParamValue, std::less<>>& values() const { return values_; }
  std::map<std::string, ParamValue, std::less<>>& values() { return values_; }

 private:
  std::map<std::string, ParamValue, std::less<>> values_;
};

// A call checked against its contract: parameters typed, every dim symbol resolved.
struct Binding {
  ParamSet params;
  std::map<std::string, int64_t, std::less<>> dims;
  int64_t dim(std::string_view symbol) const;
  // Shape of a tensor of the contract under these dims.
  std::vector<int64_t> shape_of(const TensorSpec& spec) const;
};

// The call's parameters alone, as text (`name` -> value): each must be a param of the
// contract and parse as its type; the rest take their defaults. What bind() checks first, for
// callers that must judge parameters before any tensor exists (`halcyon run --set`).
Result<ParamSet> check_params(const Contract& c, const std::map<std::string, std::string>& params);

// Resolves params (text values, defaults; check_params) and dims. Dims come from `dims` first (a case),
// then from the shapes of given input tensors, then from dim rules.
Result<Binding> bind(const Contract& c, const std::map<std::string, std::string>& params,
                     const std::map<std::string, int64_t>& dims,
                     const std::map<std::string, std::vector<int64_t>>& input_shapes);

std::string to_string(const ParamValue& v);

// Evaluates an expression over the binding's dims (and int params), e.g. "E" or "T*K".
Result<int64_t> evaluate(const Binding& b, std::string_view expression);

// False when a `defined <output> if <param>` line applies and the param is false in `b`:
// the output's contents are then unspecified.
bool output_defined(const Contract& c, const Binding& b, std::string_view output);

}  // namespace halcyon::ops
