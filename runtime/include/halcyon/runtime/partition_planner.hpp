// The partition planner: how many compute units to give communication, and in what chunks,
// so that communication and computation finish together (DeepSeek-V3 gave 20 of an H800's
// 132 SMs to communication). The cost model is docs/partitions.md's; this header is its
// inputs, its output and the search over the device's granularity.
//
// Rules:
//   - Pure: no device, no clock. Rates come from measurement (an autotune run on the device)
//     or from the caller; the planner only combines them, so it is unit-tested on synthetic
//     rates and gives the same answer for the same inputs.
//   - Every input is checked: a zero or negative rate, a granularity the device cannot
//     express, or a workload with nothing to do is an error naming the field and value.
//   - The answer is always a split the device can grant (a multiple of the granularity,
//     both sides at least the minimum), with the predicted times that chose it.
#pragma once

#include <halcyon/result.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace halcyon::rt {

// What the device can split into (the partition capability query's answer).
struct PartitionGranularity {
  uint32_t units = 0;        // compute units of the whole device (SMs, CUs, threads)
  uint32_t min_units = 1;    // smallest partition the mechanism grants
  uint32_t step_units = 1;   // partitions are min_units + k * step_units
};

// Per-unit rates, measured on the device (or synthetic in tests). Bytes and FLOPs per second.
struct PartitionRates {
  // Computation (the grouped GEMMs): FLOP/s one unit sustains, and bytes/s one unit pulls
  // from memory; memory_bytes_per_s caps the sum (the most the computation draws).
  double compute_flops_per_unit = 0;
  double compute_bytes_per_unit = 0;
  double memory_bytes_per_s = 0;
  // Communication (the dispatch/combine copy kernel): bytes/s one unit moves, capped by the
  // link it targets (PCIe, NVLink or the device's own memory for a peer-style buffer).
  double comm_bytes_per_unit = 0;
  double link_bytes_per_s = 0;
  // Fixed cost of one chunk (launch or flag hand-off, first-byte latency), seconds.
  double chunk_overhead_s = 0;
  // L2 interference: the computation slows by this fraction for each chunk-sized slice of the
  // L2 the communication keeps in flight (a chunk of l2_bytes slows it by `l2_penalty`).
  double l2_bytes = 0;
  double l2_penalty = 0;
  // Bandwidth interference: while both run, the computation loses this fraction of the
  // communication's time (both stream the same memory). Measured on an H100: 0.37.
  double comm_interference = 0;
};

// One layer's work: what must be communicated and computed, overlapped.
struct PartitionWorkload {
  double comm_bytes = 0;     // bytes the communication moves (dispatch + combine)
  double compute_flops = 0;  // FLOPs of the computation
  double compute_bytes = 0;  // bytes the computation reads and writes
};

// A candidate split and its predicted times (seconds).
struct PartitionPlan {
  uint32_t comm_units = 0;
  uint32_t compute_units = 0;
  uint64_t chunk_bytes = 0;
  double comm_s = 0;      // communication alone on comm_units, chunk_bytes at a time
  double compute_s = 0;   // computation alone on compute_units, slowed by the chunks in flight
  double makespan_s = 0;  // both overlapped: the longer side plus the pipeline's first chunk
};

// The predicted times of one split (checks its arguments like plan_partition).
Result<PartitionPlan> predict_partition(const PartitionGranularity& g, const PartitionRates& r,
                                        const PartitionWorkload& w, uint32_t comm_units, uint64_t chunk_bytes);

// Every split the device can grant, with each chunk size in `chunk_sizes` (none given: powers
// of two from 64 KiB to 16 MiB), and the one with the least makespan first (ties: fewer
// communication units, then the larger chunk).
Result<std::vector<PartitionPlan>> sweep_partitions(const PartitionGranularity& g, const PartitionRates& r,
                                                    const PartitionWorkload& w,
                                                    const std::vector<uint64_t>& chunk_sizes = {});

// The best split: sweep_partitions' first.
Result<PartitionPlan> plan_partition(const PartitionGranularity& g, const PartitionRates& r,
                                     const PartitionWorkload& w, const std::vector<uint64_t>& chunk_sizes = {});

// One point of a measured overlap sweep (`halcyon bench overlap`): communication on comm_units
// in chunks of chunk_bytes alone, the computation alone on compute_units, and the computation's
// own time when both ran together (seconds).
struct OverlapSample {
  uint32_t comm_units = 0;
  uint32_t compute_units = 0;
  uint64_t chunk_bytes = 0;
  double comm_s = 0;
  double compute_s = 0;
  double together_compute_s = 0;
};

// The autotune: the rates that docs/partitions.md ("halcyon bench overlap") derives from a
// sweep of `w` on a device of `device_units` units whose copy rate (bytes read + written per
// second) is `copy_bytes_per_s`, with an L2 of `l2_bytes` (0: 50 MB). comm_bytes_per_unit and
// compute_flops_per_unit come from the smallest comm_units measured, link_bytes_per_s is the
// best communication rate anywhere, chunk_overhead_s the smallest chunk's extra time over the
// largest's per extra chunk (at least 0). compute_flops_per_unit and compute_bytes_per_unit come
// from the sample with the fewest compute units (so that the model interpolates within the
// sweep rather than extrapolating a memory-bound rate to fewer units), memory_bytes_per_s is
// the best memory rate the computation reached. comm_interference and l2_penalty are a joint
// least-squares fit of the computation's extra time beside the communication, each clamped to
// [0, 10]. An empty sweep or a time <= 0 is HAL_INVALID_ARGUMENT.
Result<PartitionRates> rates_from_sweep(const std::vector<OverlapSample>& sweep, const PartitionWorkload& w,
                                        uint32_t device_units, double copy_bytes_per_s, double l2_bytes);

// Rates kept per device between runs (an autotune is seconds of device time): one line of
// "key value" pairs per device key (its URI and arch, e.g. "cuda:0 sm_90a NVIDIA H100").
std::string format_rates(const std::string& device_key, const PartitionRates& r);
// Reads the rates of `device_key` from text made of format_rates lines; HAL_NOT_FOUND when
// the text has no line for it, HAL_INVALID_ARGUMENT (naming the line) when one is malformed.
Result<PartitionRates> parse_rates(const std::string& text, const std::string& device_key);
// `text` with the line of `device_key` replaced by format_rates(device_key, r), or the line
// appended when it has none; every other line is kept as it was.
std::string upsert_rates(const std::string& text, const std::string& device_key, const PartitionRates& r);

}  // namespace halcyon::rt
