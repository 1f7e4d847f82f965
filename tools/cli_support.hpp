// Shared by the subcommands: strict parsing of numeric options, and the choice of the best
// device for the MoE layer (demo and bench pick the same one).
#pragma once

#include <halcyon/halcyon.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace halcyon::cli {

// The whole of `text` as a decimal integer in [lo, hi]; otherwise nullopt, and *err names the
// option and the value ("--tokens: 'abc' is not an integer in [1, 1048576]").
std::optional<int64_t> parse_int(std::string_view option, std::string_view text, int64_t lo, int64_t hi, std::string* err);
// The whole of `text` as a finite number greater than zero.
std::optional<double> parse_positive(std::string_view option, std::string_view text, std::string* err);

// The pieces of a comma-separated list, empty ones included ("a,,b" -> a, "", b; "" -> one
// empty piece), for the list options to check one by one.
std::vector<std::string_view> split_commas(std::string_view text);

// `text` as OP=NAME (--impl: run implementation NAME of operator OP) into impl[OP]; false, with
// *err saying why ("--impl 'x' is not OP=NAME"), when it is not of that form.
bool parse_impl(std::string_view text, std::map<std::string, std::string, std::less<>>* impl, std::string* err);

// The first device, neither the CPU nor a simulator, that implements every stage of the MoE
// layer, else "cpu:0".
Result<std::string> best_moe_device();

}  // namespace halcyon::cli
