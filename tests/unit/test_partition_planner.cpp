// The partition planner on synthetic rates: where the model's optimum must lie, that every
// answer is a split the device can grant, and that bad input is refused by name.
#include <halcyon/runtime/partition_planner.hpp>

#include "test_support.hpp"

#include <algorithm>
#include <cmath>

using namespace halcyon::rt;
using test::unwrap;

namespace {

// An H800-like device: 132 SMs in green-context steps of 8 from 8.
PartitionGranularity h800() { return {132, 8, 8}; }

// Rates chosen so that the arithmetic is easy: 1 TFLOP/s and 20 GB/s of memory per SM,
// 3 TB/s of memory, 8 GB/s per SM of communication over a 160 GB/s link, no chunk cost.
PartitionRates simple_rates() {
  PartitionRates r;
  r.compute_flops_per_unit = 1e12;
  r.compute_bytes_per_unit = 20e9;
  r.memory_bytes_per_s = 3e12;
  r.comm_bytes_per_unit = 8e9;
  r.link_bytes_per_s = 160e9;
  return r;
}

}  // namespace

TEST_CASE("the planner balances a compute-bound side against the communication") {
  // 112 TFLOP on the rest and 3.2 GB to move: with c SMs for communication, compute takes
  // 112/(132-c) s and communication 3.2/(8c) s (under the link's 160 GB/s up to 20 SMs).
  PartitionWorkload w{3.2e9, 112e12, 0};
  auto plan = unwrap(plan_partition(h800(), simple_rates(), w, {uint64_t(1) << 20}));
  // Balance lies near c = 3.5; the smallest grantable split, 8, is best.
  CHECK(plan.comm_units == 8);
  CHECK(plan.compute_units == 124);
  CHECK(plan.compute_s == doctest::Approx(112.0 / 124));
  CHECK(plan.makespan_s >= plan.compute_s);

  // With 200 GB to move, communication needs more SMs, but the link caps it at 160 GB/s
  // (20 SMs): 24 and 32 SMs both take 1.25 s, longer than the computation on what is left,
  // and the planner keeps the fewer.
  PartitionWorkload heavy{200e9, 112e12, 0};
  auto p2 = unwrap(plan_partition(h800(), simple_rates(), heavy, {uint64_t(1) << 20}));
  CHECK(p2.comm_units == 24);
  CHECK(p2.comm_s == doctest::Approx(200e9 / 160e9));
}

TEST_CASE("every plan is grantable and the sweep is sorted by makespan") {
  PartitionWorkload w{2e9, 50e12, 10e9};
  PartitionGranularity g{132, 2, 2};  // IGNORE_SM_COSCHEDULING: steps of 2
  auto plans = unwrap(sweep_partitions(g, simple_rates(), w, {65536, 1 << 20}));
  REQUIRE(plans.size() == 65 * 2);  // 2, 4, ..., 130 times two chunk sizes
  for (size_t i = 0; i < plans.size(); ++i) {
    CHECK(plans[i].comm_units % 2 == 0);
    CHECK(plans[i].comm_units + plans[i].compute_units == 132);
    CHECK(plans[i].compute_units >= 2);
    if (i) CHECK(plans[i - 1].makespan_s <= plans[i].makespan_s);
  }
  auto best = unwrap(plan_partition(g, simple_rates(), w, {65536, 1 << 20}));
  CHECK(best.comm_units == plans.front().comm_units);
  CHECK(best.chunk_bytes == plans.front().chunk_bytes);
}

TEST_CASE("chunk size trades per-chunk cost against L2 interference and pipeline fill") {
  PartitionRates r = simple_rates();
  r.chunk_overhead_s = 20e-6;  // 20 us a chunk
  r.l2_bytes = 50e6;
  r.l2_penalty = 0.5;  // a 50 MB chunk would slow the GEMMs by half
  PartitionWorkload w{1e9, 30e12, 0};
  auto small = unwrap(predict_partition(h800(), r, w, 16, 64 << 10));
  auto big = unwrap(predict_partition(h800(), r, w, 16, 16 << 20));
  auto best = unwrap(plan_partition(h800(), r, w));
  // Small chunks pay 15259 chunk costs; large ones slow the computation and fill the pipe.
  CHECK(small.comm_s > big.comm_s);
  CHECK(big.compute_s > small.compute_s);
  CHECK(best.makespan_s <= small.makespan_s);
  CHECK(best.makespan_s <= big.makespan_s);
  CHECK(best.chunk_bytes > (64u << 10));
  CHECK(best.chunk_bytes < (16u << 20));
}

TEST_CASE("the computation loses a fraction of the communication's time to the memory both stream") {
  // A memory-bound computation: 6 GB at 124 x 20 GB/s; 1 ms of communication beside it costs
  // it comm_interference x 1 ms.
  PartitionRates r = simple_rates();
  r.comm_bytes_per_unit = 125e9;  // fast units: 8 SMs move 1 TB/s
  r.link_bytes_per_s = 1e12;
  r.comm_interference = 0.4;
  PartitionWorkload w{1e9, 0, 6e9};
  auto p = unwrap(predict_partition(h800(), r, w, 8, 1 << 20));
  CHECK(p.comm_s == doctest::Approx(1e-3));
  CHECK(p.compute_s == doctest::Approx(6e9 / (124 * 20e9) + 0.4e-3));
}

TEST_CASE("bad input is refused by name") {
  PartitionWorkload w{1e9, 1e12, 0};
  auto r = simple_rates();
  r.comm_bytes_per_unit = 0;
  CHECK(plan_partition(h800(), r, w).error().message().find("comm_bytes_per_unit") != std::string::npos);
  r = simple_rates();
  r.l2_penalty = std::nan("");
  CHECK(plan_partition(h800(), r, w).error().message().find("l2_penalty") != std::string::npos);
  CHECK(plan_partition({12, 8, 8}, simple_rates(), w).error().message().find("two partitions") != std::string::npos);
  CHECK(plan_partition({132, 0, 8}, simple_rates(), w).error().status() == HAL_INVALID_ARGUMENT);
  CHECK(plan_partition(h800(), simple_rates(), {0, 0, 0}).error().message().find("nothing") != std::string::npos);
  CHECK(plan_partition(h800(), simple_rates(), {-1, 1, 1}).error().message().find("comm_bytes") != std::string::npos);
  CHECK(predict_partition(h800(), simple_rates(), w, 20, 1 << 20).error().message().find("20 communication units") !=
        std::string::npos);
  CHECK(predict_partition(h800(), simple_rates(), w, 128, 1 << 20).error().status() == HAL_INVALID_ARGUMENT);
  CHECK(predict_partition(h800(), simple_rates(), w, 8, 0).error().message().find("chunk_bytes") != std::string::npos);
  CHECK(sweep_partitions(h800(), simple_rates(), w, {4096, 0}).error().message().find("chunk size") !=
        std::string::npos);
}

TEST_CASE("rates round-trip through their text form, per device") {
  PartitionRates r = simple_rates();
  r.chunk_overhead_s = 1.5e-6;
  r.l2_bytes = 50331648;
  r.l2_penalty = 0.125;
  std::string text = "# halcyon partition rates\n" + format_rates("cuda:0 sm_90a NVIDIA H100", r) +
                     format_rates("cuda:1 sm_90a NVIDIA H200", simple_rates());
  auto back = unwrap(parse_rates(text, "cuda:0 sm_90a NVIDIA H100"));
  CHECK(back.compute_flops_per_unit == r.compute_flops_per_unit);
  CHECK(back.chunk_overhead_s == r.chunk_overhead_s);
  CHECK(back.l2_bytes == r.l2_bytes);
  CHECK(back.l2_penalty == r.l2_penalty);
  CHECK(unwrap(parse_rates(text, "cuda:1 sm_90a NVIDIA H200")).chunk_overhead_s == 0);
  CHECK(parse_rates(text, "cuda:2").error().status() == HAL_NOT_FOUND);
  auto bad = parse_rates("dev\t compute_flops_per_unit=abc\n", "dev");
  CHECK(bad.error().message().find("line 1") != std::string::npos);
  auto missing = parse_rates("dev\t compute_flops_per_unit=1\n", "dev");
  CHECK(missing.error().message().find("1 of the 9 rates") != std::string::npos);
  CHECK(parse_rates("dev compute_flops_per_unit=1\n", "dev").error().message().find("no tab") != std::string::npos);
  // A repeated rate must not stand in for a missing one (9 items, 8 names).
  std::string line = format_rates("dev", r);
  const size_t at = line.find("l2_penalty=");
  REQUIRE(at != std::string::npos);
  std::string repeated = line.substr(0, at) + "compute_flops_per_unit=1" + line.substr(line.find_first_of(" \n", at));
  auto twice = parse_rates(repeated, "dev");
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.error().message().find("'compute_flops_per_unit' is given twice") != std::string::npos);
}

TEST_CASE("partition autotune: rates from a synthetic sweep come back as they were made") {
  // Communication at 10 GB/s per unit plus 1 us per chunk (as the model counts chunks), a GEMM
  // at 1 TFLOP/s per unit, slowed by 0.5 * (chunk / 50 MB) beside the communication.
  const PartitionWorkload w{1e9, 1e12, 1e9};
  std::vector<OverlapSample> sweep;
  for (uint32_t c : {8u, 16u, 24u})
    for (uint64_t k : {1u << 20, 4u << 20, 16u << 20}) {
      const double comm = w.comm_bytes / (10e9 * c) + std::ceil(w.comm_bytes / double(k)) * 1e-6;
      const double gemm = w.compute_flops / (1e12 * (132 - c));
      sweep.push_back({c, 132 - c, k, comm, gemm, gemm * (1 + 0.5 * double(k) / 50e6)});
    }
  const PartitionRates r = unwrap(rates_from_sweep(sweep, w, 132, 3e12, 0));
  // The fastest comm at 8 units is the largest chunk: 0.0125 s + 60 chunks' overhead.
  CHECK(r.comm_bytes_per_unit == doctest::Approx(w.comm_bytes / (w.comm_bytes / 80e9 + 60e-6) / 8));
  CHECK(r.chunk_overhead_s == doctest::Approx(1e-6));
  CHECK(r.compute_flops_per_unit == doctest::Approx(1e12));
  CHECK(r.l2_bytes == 50e6);
  CHECK(r.l2_penalty == doctest::Approx(0.5));
  CHECK(r.memory_bytes_per_s == doctest::Approx(1e9 * 124));  // the best the GEMM reached
  CHECK(r.comm_interference == doctest::Approx(0).epsilon(1e-6));
  CHECK(r.link_bytes_per_s > r.comm_bytes_per_unit * 8);
  // The plan from tuned rates is one the device can grant.
  const PartitionPlan p = unwrap(plan_partition(h800(), r, w));
  CHECK((p.comm_units - 8) % 8 == 0);

  CHECK(!rates_from_sweep({}, w, 132, 3e12, 0).ok());
  sweep[0].comm_s = 0;
  CHECK(!rates_from_sweep(sweep, w, 132, 3e12, 0).ok());
}

TEST_CASE("partition autotune on the sweep measured on an H100: the planner's choice is within 5 percent of the best") {
  // `halcyon bench overlap --device cuda:0 --iters 20`, 2026-11-24 21:47 UTC (docs/partitions.md):
  // the DeepSeek-V3 down projection beside comm_dispatch of 32768 rows of 7168 bf16. Per point:
  // comm units, compute units, chunk bytes, comm alone, GEMM alone, GEMM's own time together,
  // both together (seconds).
  struct Measured {
    uint32_t comm, compute;
    uint64_t chunk;
    double comm_s, gemm_s, together_gemm_s, together_s;
  };
  const Measured h100[] = {
      {8, 124, 229376, 1.43798e-3, 2.87069e-3, 3.1448e-3, 3.55414e-3},
      {8, 124, 917504, 1.38387e-3, 2.87069e-3, 3.14925e-3, 3.54029e-3},
      {8, 124, 3670016, 1.43267e-3, 2.87069e-3, 3.1505e-3, 3.53821e-3},
      {16, 116, 229376, 0.84515e-3, 2.81763e-3, 3.196e-3, 3.19734e-3},
      {16, 116, 917504, 0.79152e-3, 2.81763e-3, 3.19798e-3, 3.1993e-3},
      {16, 116, 3670016, 0.77712e-3, 2.81763e-3, 3.20064e-3, 3.20198e-3},
      {24, 108, 229376, 0.55824e-3, 2.87226e-3, 3.23331e-3, 3.23466e-3},
      {24, 108, 917504, 0.53651e-3, 2.87226e-3, 3.23462e-3, 3.23594e-3},
      {24, 108, 3670016, 0.48368e-3, 2.87226e-3, 3.23853e-3, 3.23984e-3},
      {32, 100, 229376, 0.54982e-3, 2.88707e-3, 3.2568e-3, 3.25818e-3},
      {32, 100, 917504, 0.57949e-3, 2.88707e-3, 3.25136e-3, 3.25267e-3},
      {32, 100, 3670016, 0.5519e-3, 2.88707e-3, 3.25293e-3, 3.25427e-3},
      {40, 92, 229376, 0.49078e-3, 2.85014e-3, 3.22426e-3, 3.22557e-3},
      {40, 92, 917504, 0.45459e-3, 2.85014e-3, 3.21389e-3, 3.2152e-3},
      {40, 92, 3670016, 0.49811e-3, 2.85014e-3, 3.22576e-3, 3.2271e-3},
  };
  const PartitionWorkload w{939524096, 9.620726743e+11, 8120172544};
  std::vector<OverlapSample> sweep;
  std::vector<uint64_t> chunks;
  double best = 1e9;
  for (const auto& m : h100) {
    sweep.push_back({m.comm, m.compute, m.chunk, m.comm_s, m.gemm_s, m.together_gemm_s});
    if (std::find(chunks.begin(), chunks.end(), m.chunk) == chunks.end()) chunks.push_back(m.chunk);
    best = std::min(best, m.together_s);
  }
  const PartitionRates r = unwrap(rates_from_sweep(sweep, w, 132, 3.021e12, 0));
  MESSAGE("interference " << r.comm_interference << ", l2 penalty " << r.l2_penalty);
  CHECK(r.comm_interference > 0.2);  // the GEMM loses about a third of the copy's time
  CHECK(r.comm_interference < 0.6);
  const PartitionPlan p = unwrap(plan_partition({132, 8, 8}, r, w, chunks));
  const Measured* chosen = nullptr;
  for (const auto& m : h100)
    if (m.comm == p.comm_units && m.chunk == p.chunk_bytes) chosen = &m;
  if (!chosen) {  // a split outside the measured 8..40: the model must not go there
    FAIL_CHECK("the planner chose " << p.comm_units << " units, outside the measured sweep");
    return;
  }
  MESSAGE("planner: " << p.comm_units << " units, measured " << chosen->together_s << " s against the best " << best);
  CHECK(chosen->together_s <= 1.05 * best);
  CHECK(p.makespan_s == doctest::Approx(chosen->together_s).epsilon(0.1));
}

TEST_CASE("planner: upsert_rates replaces one device's line and keeps the others") {
  PartitionRates a = simple_rates(), b = simple_rates();
  b.chunk_overhead_s = 3e-6;
  std::string text = "# halcyon partition rates\n" + format_rates("cuda:0 x dest=host", a) + format_rates("cuda:1 y", a);
  std::string t2 = upsert_rates(text, "cuda:0 x dest=host", b);
  CHECK(t2.rfind("# halcyon partition rates\n", 0) == 0);
  CHECK(unwrap(parse_rates(t2, "cuda:0 x dest=host")).chunk_overhead_s == 3e-6);
  CHECK(unwrap(parse_rates(t2, "cuda:1 y")).chunk_overhead_s == a.chunk_overhead_s);
  CHECK(std::count(t2.begin(), t2.end(), '\n') == 3);
  std::string t3 = upsert_rates(t2, "cuda:2 z", a);  // a new device: appended
  CHECK(std::count(t3.begin(), t3.end(), '\n') == 4);
  CHECK(parse_rates(t3, "cuda:2 z").ok());
  CHECK(upsert_rates("", "k", a) == format_rates("k", a));
  CHECK(upsert_rates("no newline at end", "k", a) == "no newline at end\n" + format_rates("k", a));
}
