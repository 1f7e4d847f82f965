// The partition planner's cost model (docs/partitions.md) and its search.
#include <halcyon/runtime/partition_planner.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>
#include <string_view>

namespace halcyon::rt {
namespace {

// Every rate, once: its field and whether 0 is allowed (optional effects default to off).
#define HALCYON_PARTITION_RATES(X)                 \
  X(compute_flops_per_unit, false)                 \
  X(compute_bytes_per_unit, false)                 \
  X(memory_bytes_per_s, false)                     \
  X(comm_bytes_per_unit, false)                    \
  X(link_bytes_per_s, false)                       \
  X(chunk_overhead_s, true)                        \
  X(l2_bytes, true)                                \
  X(l2_penalty, true)                              \
  X(comm_interference, true)

Status check_value(const char* what, double v, bool zero_ok) {
  if (!std::isfinite(v) || v < 0 || (!zero_ok && v == 0))
    return Error(HAL_INVALID_ARGUMENT, fmt::format("partition planner: {} is {}, expected a finite value {} 0", what, v,
                                                   zero_ok ? ">=" : ">"));
  return {};
}

Status check_inputs(const PartitionGranularity& g, const PartitionRates& r, const PartitionWorkload& w) {
  if (g.min_units < 1 || g.step_units < 1)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("partition planner: granularity min {} step {} (both must be >= 1)",
                                                   g.min_units, g.step_units));
  if (g.units < 2 * g.min_units)
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("partition planner: a device of {} units cannot hold two partitions of at least {}",
                             g.units, g.min_units));
#define HALCYON_CHECK_RATE(field, zero_ok) HALCYON_TRY(check_value(#field, r.field, zero_ok));
  HALCYON_PARTITION_RATES(HALCYON_CHECK_RATE)
#undef HALCYON_CHECK_RATE
  HALCYON_TRY(check_value("comm_bytes", w.comm_bytes, true));
  HALCYON_TRY(check_value("compute_flops", w.compute_flops, true));
  HALCYON_TRY(check_value("compute_bytes", w.compute_bytes, true));
  if (w.comm_bytes == 0 && w.compute_flops == 0 && w.compute_bytes == 0)
    return Error(HAL_INVALID_ARGUMENT, "partition planner: the workload has nothing to communicate or compute");
  return {};
}

bool grantable(const PartitionGranularity& g, uint32_t comm_units) {
  return comm_units >= g.min_units && (comm_units - g.min_units) % g.step_units == 0 &&
         comm_units <= g.units - g.min_units;
}

// The model, for inputs already checked.
PartitionPlan model(const PartitionGranularity& g, const PartitionRates& r, const PartitionWorkload& w,
                    uint32_t comm_units, uint64_t chunk) {
  PartitionPlan p;
  p.comm_units = comm_units;
  p.compute_units = g.units - comm_units;
  p.chunk_bytes = chunk;
  // Communication: its units' rate up to the link's, plus a fixed cost per chunk.
  const double comm_rate = std::min(r.link_bytes_per_s, r.comm_bytes_per_unit * comm_units);
  const double chunks = std::ceil(w.comm_bytes / double(chunk));
  p.comm_s = w.comm_bytes > 0 ? w.comm_bytes / comm_rate + chunks * r.chunk_overhead_s : 0;
  // Computation: bound by its FLOPs or its bytes (its units' rate up to the memory's); beside
  // the communication it loses the chunk's L2 share and a fraction of the communication's time
  // to the memory both stream.
  const double compute_memory = std::min(r.compute_bytes_per_unit * p.compute_units, r.memory_bytes_per_s);
  const double alone = std::max(w.compute_flops / (r.compute_flops_per_unit * p.compute_units),
                                w.compute_bytes / compute_memory);
  const double l2_share = r.l2_bytes > 0 && w.comm_bytes > 0 ? std::min(1.0, double(chunk) / r.l2_bytes) : 0;
  p.compute_s = alone * (1 + r.l2_penalty * l2_share) + r.comm_interference * p.comm_s;
  // Overlapped: the longer side, plus the first chunk that must arrive before work starts.
  const double fill = w.comm_bytes > 0 ? std::min(double(chunk), w.comm_bytes) / comm_rate + r.chunk_overhead_s : 0;
  p.makespan_s = std::max(p.comm_s, p.compute_s) + fill;
  return p;
}

std::vector<uint64_t> default_chunks() {
  std::vector<uint64_t> out;
  for (uint64_t c = uint64_t(64) << 10; c <= (uint64_t(16) << 20); c *= 2) out.push_back(c);
  return out;
}

bool better(const PartitionPlan& a, const PartitionPlan& b) {
  const double eps = 1e-12 * std::max(a.makespan_s, b.makespan_s);
  if (std::abs(a.makespan_s - b.makespan_s) > eps) return a.makespan_s < b.makespan_s;
  if (a.comm_units != b.comm_units) return a.comm_units < b.comm_units;
  return a.chunk_bytes > b.chunk_bytes;
}

}  // namespace

Result<PartitionPlan> predict_partition(const PartitionGranularity& g, const PartitionRates& r,
                                        const PartitionWorkload& w, uint32_t comm_units, uint64_t chunk_bytes) {
  HALCYON_TRY(check_inputs(g, r, w));
  if (!grantable(g, comm_units))
    return Error(HAL_INVALID_ARGUMENT,
                 fmt::format("partition planner: {} communication units is not a split of {} units in steps of {} "
                             "from {} (both sides at least {})",
                             comm_units, g.units, g.step_units, g.min_units, g.min_units));
  if (chunk_bytes == 0) return Error(HAL_INVALID_ARGUMENT, "partition planner: chunk_bytes is 0");
  return model(g, r, w, comm_units, chunk_bytes);
}

Result<std::vector<PartitionPlan>> sweep_partitions(const PartitionGranularity& g, const PartitionRates& r,
                                                    const PartitionWorkload& w,
                                                    const std::vector<uint64_t>& chunk_sizes) {
  HALCYON_TRY(check_inputs(g, r, w));
  const std::vector<uint64_t> chunks = chunk_sizes.empty() ? default_chunks() : chunk_sizes;
  for (uint64_t c : chunks)
    if (c == 0) return Error(HAL_INVALID_ARGUMENT, "partition planner: a chunk size is 0");
  std::vector<PartitionPlan> plans;
  for (uint32_t units = g.min_units; units <= g.units - g.min_units; units += g.step_units)
    for (uint64_t c : chunks) plans.push_back(model(g, r, w, units, c));
  std::sort(plans.begin(), plans.end(), better);  // better() orders every pair (no ties left)
  return plans;
}

Result<PartitionPlan> plan_partition(const PartitionGranularity& g, const PartitionRates& r,
                                     const PartitionWorkload& w, const std::vector<uint64_t>& chunk_sizes) {
  auto plans = sweep_partitions(g, r, w, chunk_sizes);
  if (!plans) return plans.error();
  return plans->front();  // check_inputs guarantees at least one grantable split
}

std::string format_rates(const std::string& device_key, const PartitionRates& r) {
  std::string line = device_key + '\t';
#define HALCYON_FORMAT_RATE(field, zero_ok) line += fmt::format(" {}={:.17g}", #field, r.field);
  HALCYON_PARTITION_RATES(HALCYON_FORMAT_RATE)
#undef HALCYON_FORMAT_RATE
  return line + '\n';
}

std::string upsert_rates(const std::string& text, const std::string& device_key, const PartitionRates& r) {
  const std::string prefix = device_key + '\t';
  std::string out;
  bool replaced = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    std::string_view line(text.data() + pos, end - pos);
    if (line.substr(0, prefix.size()) == prefix) {
      if (!replaced) out += format_rates(device_key, r);
      replaced = true;
    } else {
      out += line;
      if (line.back() != '\n') out += '\n';
    }
    pos = end;
  }
  if (!replaced) out += format_rates(device_key, r);
  return out;
}

namespace {

Status parse_rate_line(std::string_view fields, int line_no, PartitionRates* r) {
  std::istringstream in{std::string(fields)};
  std::string item;
  int seen = 0;
  std::set<std::string_view> given;  // each rate once: a repeat must not stand in for a missing one
  while (in >> item) {
    auto eq = item.find('=');
    std::string_view name = std::string_view(item).substr(0, eq == std::string::npos ? item.size() : eq);
    double v = 0;
    bool ok = eq != std::string::npos;
    if (ok) {
      const char* b = item.data() + eq + 1;
      auto [p, ec] = std::from_chars(b, item.data() + item.size(), v);
      ok = ec == std::errc() && p == item.data() + item.size();
    }
    bool known = false;
#define HALCYON_PARSE_RATE(field, zero_ok)                              \
  if (name == #field) {                                                 \
    known = true;                                                       \
    if (ok && !given.insert(#field).second)                             \
      return Error(HAL_INVALID_ARGUMENT,                                \
                   fmt::format("partition rates, line {}: '{}' is given twice", line_no, #field)); \
    if (ok) r->field = v, ++seen;                                       \
  }
    HALCYON_PARTITION_RATES(HALCYON_PARSE_RATE)
#undef HALCYON_PARSE_RATE
    if (!known || !ok)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("partition rates, line {}: '{}' is not <rate>=<number>", line_no,
                                                     item));
  }
#define HALCYON_COUNT_RATE(field, zero_ok) +1
  constexpr int kRates = 0 HALCYON_PARTITION_RATES(HALCYON_COUNT_RATE);
#undef HALCYON_COUNT_RATE
  if (seen != kRates)
    return Error(HAL_INVALID_ARGUMENT, fmt::format("partition rates, line {}: {} of the {} rates given", line_no, seen,
                                                   kRates));
  return {};
}

}  // namespace

namespace {

// The computation's extra time beside the communication, together - alone =
// comm_interference * comm_s + l2_penalty * alone * min(1, chunk / l2_bytes): a least-squares
// fit of both (normal equations of two unknowns); a coefficient that comes out negative is 0
// and the other is fitted alone; each is clamped to [0, 10].
void fit_interference(const std::vector<OverlapSample>& sweep, PartitionRates* r) {
  double s11 = 0, s12 = 0, s22 = 0, s1y = 0, s2y = 0;
  for (const auto& p : sweep) {
    const double x1 = p.comm_s, x2 = p.compute_s * std::min(1.0, double(p.chunk_bytes) / r->l2_bytes);
    const double y = p.together_compute_s - p.compute_s;
    s11 += x1 * x1, s12 += x1 * x2, s22 += x2 * x2, s1y += x1 * y, s2y += x2 * y;
  }
  double g = 0, l = 0;
  const double det = s11 * s22 - s12 * s12;
  if (det > 1e-12 * s11 * s22) {
    g = (s1y * s22 - s2y * s12) / det;
    l = (s2y * s11 - s1y * s12) / det;
  }
  if (!(det > 1e-12 * s11 * s22) || g < 0 || l < 0) {  // one term alone: the better of the two
    const double g1 = s11 > 0 ? std::max(0.0, s1y / s11) : 0, l1 = s22 > 0 ? std::max(0.0, s2y / s22) : 0;
    const double e_g = s11 * g1 * g1 - 2 * s1y * g1, e_l = s22 * l1 * l1 - 2 * s2y * l1;  // residual - sum(y^2)
    g = e_g <= e_l ? g1 : 0;
    l = e_g <= e_l ? 0 : l1;
  }
  r->comm_interference = std::clamp(g, 0.0, 10.0);
  r->l2_penalty = std::clamp(l, 0.0, 10.0);
}

}  // namespace

Result<PartitionRates> rates_from_sweep(const std::vector<OverlapSample>& sweep, const PartitionWorkload& w,
                                        uint32_t device_units, double copy_bytes_per_s, double l2_bytes) {
  if (sweep.empty()) return Error(HAL_INVALID_ARGUMENT, "partition autotune: the sweep is empty");
  if (device_units == 0) return Error(HAL_INVALID_ARGUMENT, "partition autotune: the device has 0 units");
  HALCYON_TRY(check_value("copy_bytes_per_s", copy_bytes_per_s, false));
  HALCYON_TRY(check_value("l2_bytes", l2_bytes, true));
  uint32_t cmin = sweep.front().comm_units;
  for (const auto& p : sweep) {
    if (!(p.comm_s > 0) || !(p.compute_s > 0) || !(p.together_compute_s > 0) || p.comm_units == 0 ||
        p.compute_units == 0 || p.chunk_bytes == 0 || !std::isfinite(p.comm_s + p.compute_s + p.together_compute_s))
      return Error(HAL_INVALID_ARGUMENT,
                   fmt::format("partition autotune: a sample ({} units, chunk {} B) has a time, unit count or chunk "
                               "that is not > 0",
                               p.comm_units, p.chunk_bytes));
    cmin = std::min(cmin, p.comm_units);
  }
  PartitionRates r;
  const double Bc = w.comm_bytes;
  const OverlapSample *fast = nullptr, *small = nullptr, *large = nullptr, *few = nullptr;
  for (const auto& p : sweep) {
    r.link_bytes_per_s = std::max(r.link_bytes_per_s, Bc / p.comm_s);
    if (w.compute_bytes > 0) r.memory_bytes_per_s = std::max(r.memory_bytes_per_s, w.compute_bytes / p.compute_s);
    if (!few || p.compute_units < few->compute_units ||
        (p.compute_units == few->compute_units && p.compute_s < few->compute_s))
      few = &p;
    if (p.comm_units != cmin) continue;
    if (!fast || p.comm_s < fast->comm_s) fast = &p;
    if (!small || p.chunk_bytes < small->chunk_bytes) small = &p;
    if (!large || p.chunk_bytes > large->chunk_bytes) large = &p;
  }
  r.comm_bytes_per_unit = Bc / fast->comm_s / cmin;
  r.compute_flops_per_unit = w.compute_flops / few->compute_s / few->compute_units;
  if (!(r.memory_bytes_per_s > 0)) r.memory_bytes_per_s = copy_bytes_per_s;
  r.compute_bytes_per_unit = w.compute_bytes > 0 ? w.compute_bytes / few->compute_s / few->compute_units
                                                 : copy_bytes_per_s / device_units;
  const double n_small = std::ceil(Bc / double(small->chunk_bytes)), n_large = std::ceil(Bc / double(large->chunk_bytes));
  r.chunk_overhead_s = n_small > n_large ? std::max(0.0, (small->comm_s - large->comm_s) / (n_small - n_large)) : 0.0;
  r.l2_bytes = l2_bytes > 0 ? l2_bytes : 50e6;
  fit_interference(sweep, &r);
  if (!(r.link_bytes_per_s > 0) || !std::isfinite(r.link_bytes_per_s) || !(r.compute_flops_per_unit > 0))
    return Error(HAL_INVALID_ARGUMENT, "partition autotune: the workload has no communication or computation");
  return r;
}

Result<PartitionRates> parse_rates(const std::string& text, const std::string& device_key) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    auto tab = line.find('\t');
    if (line.empty() || line[0] == '#') continue;
    if (tab == std::string::npos)
      return Error(HAL_INVALID_ARGUMENT, fmt::format("partition rates, line {}: no tab after the device key", line_no));
    if (std::string_view(line).substr(0, tab) != device_key) continue;
    PartitionRates r;
    HALCYON_TRY(parse_rate_line(std::string_view(line).substr(tab + 1), line_no, &r));
    return r;
  }
  return Error(HAL_NOT_FOUND, fmt::format("partition rates: none recorded for '{}'", device_key));
}

}  // namespace halcyon::rt
