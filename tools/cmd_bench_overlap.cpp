// `halcyon bench overlap`: the grouped GEMM (moe_grouped_gemm, the MoE down projection) on a
// compute partition beside comm_dispatch on a communication partition of the same device, swept
// over the communication partition's size and the chunk size; the partition planner's rates
// autotuned from the sweep and its choice compared with the sweep's best point
// (docs/partitions.md, "halcyon bench overlap"). Each point: comm alone, GEMM alone, both
// together (one start event, both streams wait on it, time = the later end), medians of --iters
// after warm-up and an L2 flush.
#include <fmt/format.h>

#include <halcyon/runtime/partition_planner.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <random>

#include "bench_common.hpp"
#include "cli_support.hpp"

namespace halcyon::bench {
namespace {

using Tensors = std::map<std::string, ops::Tensor, std::less<>>;

int usage(int rc) {
  fmt::print(rc ? stderr : stdout,
             "usage: halcyon bench overlap [--device URI] [--tokens N] [--topk N] [--experts N] [--hidden N]\n"
             "                             [--inter N] [--iters N] [--comm-units LIST] [--chunks LIST] [--fine]\n"
             "                             [--dest device|host] [--save-rates FILE] [--json FILE] [--svg FILE]\n"
             "  moe_grouped_gemm ([R, I] x [E, I, H], R = tokens * topk, balanced random experts) on a\n"
             "  compute partition beside comm_dispatch (R rows of H bf16 from `tokens` rows, random map)\n"
             "  on a communication partition of the same device: each alone and both together, for each\n"
             "  communication partition size (--comm-units, default 8..40 in the device's steps; --fine:\n"
             "  the fine-grained steps) and chunk size in rows (--chunks, default 16,64,256). Medians of\n"
             "  --iters (default 20) after two warm-up runs and an L2 flush. The partition planner's rates\n"
             "  are derived from the sweep and its choice compared with the best measured point.\n"
             "  --dest host: comm_dispatch writes into pinned host memory mapped for the device, and its\n"
             "  rate is set beside a device-to-host copy of the same bytes (the link) instead of the\n"
             "  device's copy rate. --save-rates FILE: the autotuned rates are kept in FILE, one line per\n"
             "  device and destination (replacing that line), for rt::parse_rates.\n"
             "  Defaults: the DeepSeek-V3 shape per GPU (4096 tokens, top-8, 256 experts, I 2048, H 7168);\n"
             "  on cpu 64 tokens, 16 experts, I 128, H 256.\n");
  return rc;
}

// A comma-separated list of integers in [lo, hi].
std::optional<std::vector<int64_t>> parse_list(std::string_view option, const std::string& text, int64_t lo,
                                               int64_t hi, std::string* err) {
  std::vector<int64_t> out;
  for (std::string_view piece : cli::split_commas(text)) {
    auto v = cli::parse_int(option, piece, lo, hi, err);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

struct Point {
  uint32_t comm_units = 0, compute_units = 0;
  int64_t chunk_rows = 0;
  double comm_ms = 0, gemm_ms = 0, together_ms = 0, together_gemm_ms = 0;
  double efficiency() const { return std::max(comm_ms, gemm_ms) / together_ms; }
  double slowdown() const { return together_gemm_ms / gemm_ms; }
};

// x = comm units, y = together ms, one line per chunk size, the planner's choice circled.
std::string svg_plot(const std::vector<Point>& pts, const std::vector<int64_t>& chunks, const Point* choice) {
  const double W = 640, Hh = 400, L = 70, R = 150, T = 30, B = 50;
  double x0 = 1e300, x1 = -1e300, y1 = 0;
  for (auto& p : pts) {
    x0 = std::min<double>(x0, p.comm_units);
    x1 = std::max<double>(x1, p.comm_units);
    y1 = std::max(y1, p.together_ms);
  }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= 0) y1 = 1;
  y1 *= 1.1;
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double y) { return Hh - B - y / y1 * (Hh - T - B); };
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  std::string s = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                              "font-family=\"sans-serif\" font-size=\"12\">\n",
                              W, Hh);
  s += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", W, Hh);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, Hh - B, W - R, Hh - B);
  s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, T, L, Hh - B);
  for (int i = 0; i <= 4; ++i) {
    double y = y1 * i / 4;
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3g}</text>\n", L - 5, Y(y) + 4, y);
  }
  std::vector<uint32_t> xs;
  for (auto& p : pts)
    if (std::find(xs.begin(), xs.end(), p.comm_units) == xs.end()) xs.push_back(p.comm_units);
  for (uint32_t x : xs)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", X(x), Hh - B + 16, x);
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">communication units</text>\n",
                   (L + W - R) / 2, Hh - 10);
  s += fmt::format("<text x=\"15\" y=\"{:.1f}\" text-anchor=\"middle\" transform=\"rotate(-90 15 {:.1f})\">"
                   "together (ms)</text>\n",
                   (T + Hh - B) / 2, (T + Hh - B) / 2);
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const char* col = colors[ci % 6];
    std::string path;
    for (auto& p : pts)
      if (p.chunk_rows == chunks[ci]) path += fmt::format("{:.1f},{:.1f} ", X(p.comm_units), Y(p.together_ms));
    s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", col, path);
    for (auto& p : pts)
      if (p.chunk_rows == chunks[ci])
        s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", X(p.comm_units),
                         Y(p.together_ms), col);
    s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">chunk {} rows</text>\n", W - R + 10, T + 16 * (ci + 1), col,
                     chunks[ci]);
  }
  if (choice) {
    s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"8\" fill=\"none\" stroke=\"black\" stroke-width=\"2\"/>\n",
                     X(choice->comm_units), Y(choice->together_ms));
    s += fmt::format("<text x=\"{}\" y=\"{}\">O planner's choice</text>\n", W - R + 10,
                     T + 16 * (chunks.size() + 2));
  }
  s += "</svg>\n";
  return s;
}

}  // namespace

int bench_overlap(const std::vector<std::string>& args) {
  std::string device = "cuda:0", json_path, svg_path, rates_path, dest = "device", err;
  int64_t iters = 20, tokens = -1, topk = 8, experts = -1, hidden = -1, inter = -1;
  std::vector<int64_t> comm_list, chunks;
  bool fine = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return usage(0);
    if (a == "--fine") {
      fine = true;
      continue;
    }
    if (i + 1 >= args.size()) {
      fmt::print(stderr, "halcyon bench overlap: {} needs a value (halcyon bench overlap --help)\n", a);
      return 2;
    }
    const std::string& v = args[++i];
    std::optional<int64_t> n;
    auto integer = [&](int64_t* dst, int64_t lo, int64_t hi) {
      n = cli::parse_int(a, v, lo, hi, &err);
      if (n) *dst = *n;
      return bool(n);
    };
    bool ok = true;
    if (a == "--device") device = v;
    else if (a == "--json") json_path = v;
    else if (a == "--svg") svg_path = v;
    else if (a == "--save-rates") rates_path = v;
    else if (a == "--dest") {
      ok = v == "device" || v == "host";
      if (ok) dest = v;
      else err = fmt::format("--dest: '{}' is not device or host", v);
    }
    else if (a == "--iters") ok = integer(&iters, 1, 10000);
    else if (a == "--tokens") ok = integer(&tokens, 1, 1 << 20);
    else if (a == "--topk") ok = integer(&topk, 1, 64);
    else if (a == "--experts") ok = integer(&experts, 1, 4096);
    else if (a == "--hidden") ok = integer(&hidden, 1, 65536);
    else if (a == "--inter") ok = integer(&inter, 1, 65536);
    else if (a == "--comm-units") {
      auto l = parse_list(a, v, 1, 1 << 20, &err);
      ok = bool(l);
      if (l) comm_list = *l;
    } else if (a == "--chunks") {
      auto l = parse_list(a, v, 1, 1 << 24, &err);
      ok = bool(l);
      if (l) chunks = *l;
    } else {
      fmt::print(stderr, "halcyon bench overlap: unknown option '{}' (halcyon bench overlap --help)\n", a);
      return 2;
    }
    if (!ok) {
      fmt::print(stderr, "halcyon bench overlap: {}\n", err);
      return 2;
    }
  }
  auto dev = Device::open(device.c_str());
  if (!dev) {
    fmt::print(stderr, "halcyon bench overlap: {}\n", dev.error().to_string());
    return 1;
  }
  auto info = dev->info();
  if (!info) {
    fmt::print(stderr, "halcyon bench overlap: {}\n", info.error().to_string());
    return 1;
  }
  const bool cpu = halcyon::bench::is_cpu(*info);  // the device opened (--device may be empty)
  // DeepSeek-V3's down projection per GPU; small on the CPU.
  if (tokens < 0) tokens = cpu ? 64 : 4096;
  if (experts < 0) experts = cpu ? 16 : 256;
  if (hidden < 0) hidden = cpu ? 256 : 7168;
  if (inter < 0) inter = cpu ? 128 : 2048;
  if (chunks.empty()) chunks = {16, 64, 256};
  const int64_t R = tokens * topk, E = experts, H = hidden, I = inter, D = R;
  const uint32_t flags = fine ? HAL_PARTITION_FINE_GRAINED : 0;
  auto caps = dev->partition_caps(flags);
  if (!caps) {
    fmt::print(stderr, "halcyon bench overlap: partition caps: {}\n", caps.error().to_string());
    return 1;
  }
  const uint32_t U = caps->units ? caps->units : info->compute_units, m = std::max(1u, caps->min_units),
                 step = std::max(1u, caps->step_units);
  auto grantable = [&](int64_t c) { return c >= m && c <= int64_t(U) - m && (c - m) % step == 0; };
  if (comm_list.empty()) {
    int64_t first = m;
    while (first < 8) first += step;
    for (int64_t c = first; c <= 40 && grantable(c); c += step) {
      comm_list.push_back(c);
      if (cpu && comm_list.size() == 3) break;
    }
    if (comm_list.empty() && grantable(m)) comm_list.push_back(m);
    if (comm_list.empty()) {
      fmt::print(stderr, "halcyon bench overlap: {} ({} units, min {}) cannot hold two partitions\n", info->uri, U, m);
      return 1;
    }
  }
  for (int64_t c : comm_list)
    if (!grantable(c)) {
      fmt::print(stderr,
                 "halcyon bench overlap: --comm-units: {} is not a split of {} units (from {} in steps of {}, both "
                 "sides at least {}{})\n",
                 c, U, m, step, m, fine ? "" : "; --fine asks for the fine-grained steps");
      return 2;
    }
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  std::sort(comm_list.begin(), comm_list.end());
  comm_list.erase(std::unique(comm_list.begin(), comm_list.end()), comm_list.end());

  auto fail = [](const char* what, const Error& e) {
    fmt::print(stderr, "halcyon bench overlap: {}: {}\n", what, e.to_string());
    return 1;
  };
  auto s0r = dev->create_stream();
  if (!s0r) return fail("stream", s0r.error());
  const Stream& s0 = *s0r;
  const uint64_t l2 = info->l2_cache_bytes;
  const uint64_t flush_bytes = halcyon::bench::flush_bytes(*info);
  auto flush = dev->allocate(flush_bytes);
  auto ev0 = dev->create_event(), ev1 = dev->create_event(), ev2 = dev->create_event();
  if (!flush) return fail("flush buffer", flush.error());
  if (!ev0 || !ev1 || !ev2) return fail("events", (!ev0 ? ev0 : !ev1 ? ev1 : ev2).error());
  // ev1, ev2: the copy rate's timer; ev0: the start event of every run below.
  BenchTimer timer{*dev, s0, *flush, flush_bytes, std::move(*ev1), std::move(*ev2)};
  auto copy = copy_tbps(*dev, timer, cpu, int(std::min<int64_t>(iters, 20)));
  if (!copy) return fail("copy rate", copy.error());
  // --dest host: the link's rate, a device-to-host copy of the rows comm_dispatch writes, into
  // the pinned buffer it then writes to (mapped for the device).
  const bool to_host = dest == "host";
  const uint64_t out_bytes = uint64_t(D) * uint64_t(H) * 2;
  std::optional<Buffer> host_out;
  double link_GBps = 0;
  if (to_host) {
    auto h = dev->allocate(out_bytes, HAL_MEMORY_HOST_PINNED);
    auto src = dev->allocate(out_bytes);
    if (!h) return fail("pinned host buffer", h.error());
    if (!src) return fail("link copy source", src.error());
    if (auto r = s0.fill<uint32_t>(*src, 0, out_bytes, 0x3f803f80u); !r) return fail("link copy source", r.error());
    std::vector<double> ms;
    auto r = timer.time([&] { return s0.copy(*h, 0, *src, 0, out_bytes); }, int(std::max<int64_t>(iters, 10)), &ms);
    if (!r) return fail("device-to-host copy", r.error());
    link_GBps = double(out_bytes) / (median(ms) * 1e-3) / 1e9;
    host_out = std::move(*h);
  }

  // Inputs, written once through the whole-device stream.
  Filler fill{*dev, s0, {}};
  if (auto r = fill.init(7, false, 0); !r) return fail("random block", r.error());
  Tensors g, cm;
  std::mt19937 rng(20261124);
  std::vector<int32_t> offsets(static_cast<size_t>(E + 1), 0), src(static_cast<size_t>(D));
  {  // balanced random: each expert gets R/E rows, the remainder spread at random
    std::vector<int64_t> count(size_t(E), R / E);
    for (int64_t i = 0; i < R % E; ++i) ++count[rng() % size_t(E)];
    for (int64_t e = 0; e < E; ++e) offsets[size_t(e + 1)] = offsets[size_t(e)] + int32_t(count[size_t(e)]);
  }
  for (auto& v : src) v = int32_t(rng() % uint64_t(tokens));
  Status ok;
  auto tensor = [&](Tensors& t, const char* name, ops::DType dt, std::vector<int64_t> shape) -> Status {
    HALCYON_ASSIGN_OR_RETURN(t[name], ops::make_tensor(*dev, dt, std::move(shape)));
    return {};
  };
  ok = tensor(g, "a", ops::DType::bf16, {R, I});
  if (ok) ok = tensor(g, "w", ops::DType::bf16, {E, I, H});
  if (ok) ok = tensor(g, "expert_offsets", ops::DType::i32, {E + 1});
  if (ok) ok = s0.write(g["expert_offsets"].buffer, g["expert_offsets"].offset, offsets.data(), offsets.size() * 4);
  if (ok) ok = tensor(cm, "x", ops::DType::bf16, {tokens, H});
  if (ok) ok = tensor(cm, "src_row", ops::DType::i32, {D});
  if (ok) ok = s0.write(cm["src_row"].buffer, cm["src_row"].offset, src.data(), src.size() * 4);
  if (ok) ok = fill.fill(g["a"]);
  if (ok) ok = fill.fill(g["w"]);
  if (ok) ok = fill.fill(cm["x"]);
  if (ok) ok = ops::allocate_outputs(*dev, "moe_grouped_gemm", g, {});
  if (ok) ok = ops::allocate_outputs(*dev, "comm_dispatch", cm, {{"chunk_rows", "16"}});
  if (ok && to_host) cm["out"] = ops::Tensor{*host_out, 0, ops::DType::bf16, {D, H}};
  if (ok) ok = s0.synchronize();
  if (!ok) return fail("inputs", ok.error());

  // One timed run: flush on s0 and a start event there; each job's stream waits on it, runs its
  // work and records its end; s0 then waits on the ends in turn, recording a join after each, so
  // that join j is when jobs 0..j have all finished (the last: the later end). Every timed event
  // is s0's: a green context's event and the primary context's are never compared.
  // Returns each join's ms from the start, medians over --iters after two warm-up runs.
  struct Job {
    const Stream* s;
    std::function<Status()> fn;
  };
  auto time_jobs = [&](std::vector<Job> jobs, std::vector<double>* med) -> Status {
    std::vector<Event> ends, joins;
    for (size_t j = 0; j < 2 * jobs.size(); ++j) {
      HALCYON_ASSIGN_OR_RETURN(auto e, dev->create_event());
      (j % 2 ? joins : ends).push_back(std::move(e));
    }
    std::vector<std::vector<double>> ms(jobs.size());
    for (int64_t i = -2; i < iters; ++i) {
      HALCYON_TRY(s0.fill<uint32_t>(*flush, 0, flush_bytes, 0x3f803f80u + uint32_t(i + 2)));
      HALCYON_TRY(s0.record(*ev0));
      for (auto& j : jobs) HALCYON_TRY(j.s->wait(*ev0));
      for (auto& j : jobs) HALCYON_TRY(j.fn());
      for (size_t j = 0; j < jobs.size(); ++j) HALCYON_TRY(jobs[j].s->record(ends[j]));
      for (size_t j = 0; j < jobs.size(); ++j) {
        HALCYON_TRY(s0.wait(ends[j]));
        HALCYON_TRY(s0.record(joins[j]));
      }
      HALCYON_TRY(joins.back().synchronize());
      if (i < 0) continue;
      for (size_t j = 0; j < jobs.size(); ++j) {
        HALCYON_ASSIGN_OR_RETURN(float e, joins[j].elapsed_since(*ev0));
        ms[j].push_back(e);
      }
    }
    med->clear();
    for (auto& v : ms) med->push_back(std::max(median(v), 1e-6));  // a CPU clock may read 0
    return {};
  };
  auto comm_params = [](int64_t chunk) {
    return std::map<std::string, std::string>{{"chunk_rows", std::to_string(chunk)}};
  };

  // The GEMM and comm_dispatch on the whole device (the baselines).
  std::vector<double> med;
  ok = time_jobs({{&s0, [&] { return ops::run_op(*dev, s0, "moe_grouped_gemm", g); }}}, &med);
  if (!ok) return fail("GEMM on the whole device", ok.error());
  const double gemm_whole_ms = med[0];
  std::map<int64_t, double> comm_whole_ms;
  for (int64_t k : chunks) {
    auto p = comm_params(k);
    ok = time_jobs({{&s0, [&] { return ops::run_op(*dev, s0, "comm_dispatch", cm, p); }}}, &med);
    if (!ok) return fail("comm_dispatch on the whole device", ok.error());
    comm_whole_ms[k] = med[0];
  }

  std::vector<Point> pts;
  for (int64_t c : comm_list) {
    auto parts = dev->split_n({{"comm", uint32_t(c)}, {"compute", 0}}, flags);
    if (!parts) return fail("split", parts.error());
    auto sc = dev->create_stream(&(*parts)[0]);
    auto sg = dev->create_stream(&(*parts)[1]);
    if (!sc || !sg) return fail("partition stream", (!sc ? sc : sg).error());
    auto ci = sc->info(), gi = sg->info();
    if (!ci || !gi) return fail("stream info", (!ci ? ci : gi).error());
    auto gemm = [&] { return ops::run_op(*dev, *sg, "moe_grouped_gemm", g); };
    ok = time_jobs({{&*sg, gemm}}, &med);
    if (!ok) return fail("GEMM on the compute partition", ok.error());
    const double gemm_ms = med[0];
    for (int64_t k : chunks) {
      auto p = comm_params(k);
      auto comm = [&] { return ops::run_op(*dev, *sc, "comm_dispatch", cm, p); };
      Point pt;
      pt.comm_units = uint32_t(c);
      pt.compute_units = gi->units;
      pt.chunk_rows = k;
      pt.gemm_ms = gemm_ms;
      ok = time_jobs({{&*sc, comm}}, &med);
      if (ok) pt.comm_ms = med[0];
      if (ok) ok = time_jobs({{&*sg, gemm}, {&*sc, comm}}, &med);  // joins: the GEMM's end, both ends
      if (!ok) return fail("comm_dispatch beside the GEMM", ok.error());
      pt.together_ms = med[1];
      pt.together_gemm_ms = med[0];
      pts.push_back(pt);
    }
  }

  // Autotune: the planner's rates from the sweep (rt::rates_from_sweep, docs/partitions.md).
  // Bytes the communication moves over what it targets: the device's memory (read + write) or
  // the link to the host (the rows written).
  const double Bc = to_host ? double(out_bytes) : 2.0 * double(D) * double(H) * 2, F = 2.0 * double(R) * double(I) * double(H),
               Bm = double(E) * I * H * 2 + double(R) * I * 2 + double(R) * H * 2;
  auto chunk_bytes = [&](int64_t k) { return uint64_t(k) * uint64_t(H) * 2; };
  rt::PartitionWorkload work{Bc, F, Bm};
  std::vector<rt::OverlapSample> samples;
  for (auto& p : pts)
    samples.push_back({p.comm_units, p.compute_units, chunk_bytes(p.chunk_rows), p.comm_ms * 1e-3, p.gemm_ms * 1e-3,
                       p.together_gemm_ms * 1e-3});
  auto tuned = rt::rates_from_sweep(samples, work, U, *copy * 1e12, double(l2));
  if (!tuned) return fail("autotune", tuned.error());
  const rt::PartitionRates rates = *tuned;
  rt::PartitionGranularity gran{U, m, step};
  std::vector<uint64_t> chunk_sizes;
  for (int64_t k : chunks) chunk_sizes.push_back(chunk_bytes(k));
  auto plans = rt::sweep_partitions(gran, rates, work, chunk_sizes);
  if (!plans) return fail("planner", plans.error());
  const rt::PartitionPlan* plan = nullptr;
  for (auto& p : *plans)
    if (std::find(comm_list.begin(), comm_list.end(), int64_t(p.comm_units)) != comm_list.end()) {
      plan = &p;
      break;
    }
  const Point* best = &pts.front();
  const Point* choice = nullptr;
  for (auto& p : pts) {
    if (p.together_ms < best->together_ms) best = &p;
    if (plan && p.comm_units == plan->comm_units &&
        chunk_bytes(p.chunk_rows) == plan->chunk_bytes)
      choice = &p;
  }
  const double within = choice ? 100.0 * (choice->together_ms / best->together_ms - 1) : 0;
  const double comm_whole_best_ms = std::min_element(comm_whole_ms.begin(), comm_whole_ms.end(), [](auto& a, auto& b) {
                                      return a.second < b.second;
                                    })->second;
  const double comm_whole_GBps = Bc / (comm_whole_best_ms * 1e-3) / 1e9;
  const double target_GBps = to_host ? link_GBps : *copy * 1e3;  // what the comm kernel is held to
  const char* target_name = to_host ? "device-to-host copy rate" : "copy rate";

  // Report.
  fmt::print("halcyon bench overlap on {} ({}, {}), {} iterations, medians\n", info->uri, info->name, info->arch, iters);
  fmt::print("  GEMM moe_grouped_gemm R {} x I {} -> H {}, {} experts ({:.4g} GFLOP, {:.4g} MB); comm_dispatch {} rows of "
             "{} from {} tokens into {} ({:.4g} MB {})\n",
             R, I, H, E, F / 1e9, Bm / 1e6, D, H, tokens, to_host ? "pinned host memory" : "device memory", Bc / 1e6,
             to_host ? "over the link" : "read+write");
  if (to_host) fmt::print("  device-to-host copy of the same {:.4g} MB: {:.2f} GB/s\n", Bc / 1e6, link_GBps);
  fmt::print("  {} units, splits from {} in steps of {} ({}); copy rate {:.3f} TB/s; GEMM on the whole device {:.3f} ms\n",
             U, m, step, caps->mechanism_name, *copy, gemm_whole_ms);
  fmt::print("  {:>6} {:>6} {:>11} {:>11} {:>11} {:>10} {:>9}\n", "comm", "chunk", "comm ms", "gemm ms", "together",
             "overlap", "slowdown");
  for (auto& p : pts)
    fmt::print("  {:>6} {:>6} {:>11.4f} {:>11.4f} {:>11.4f} {:>9.0f}% {:>8.3f}x{}{}\n", p.comm_units, p.chunk_rows,
               p.comm_ms, p.gemm_ms, p.together_ms, 100 * p.efficiency(), p.slowdown(),
               &p == choice ? "  <- planner" : "", &p == best ? "  <- best measured" : "");
  fmt::print("  rates: comm {:.3g} B/s/unit, link {:.3g} B/s, compute {:.3g} FLOP/s/unit, {:.3g} B/s/unit, memory {:.3g} "
             "B/s, chunk overhead {:.3g} s, l2 {:.3g} B, penalty {:.3g}, interference {:.3g}\n",
             rates.comm_bytes_per_unit, rates.link_bytes_per_s, rates.compute_flops_per_unit,
             rates.compute_bytes_per_unit, rates.memory_bytes_per_s, rates.chunk_overhead_s, rates.l2_bytes,
             rates.l2_penalty, rates.comm_interference);
  if (plan)
    fmt::print("  planner: {} comm units, chunk {} rows, predicted {:.4f} ms; measured {:.4f} ms\n", plan->comm_units,
               plan->chunk_bytes / uint64_t(H * 2), plan->makespan_s * 1e3, choice ? choice->together_ms : 0.0);
  fmt::print("summary: best measured {} comm units chunk {} rows together {:.4f} ms (overlap {:.0f}%, GEMM slowdown "
             "{:.3f}x); planner's choice within {:.1f}% of the best measured; comm_dispatch {:.4g} GB/s on the whole "
             "device = {:.0f}% of the {} (target >= 85%)\n",
             best->comm_units, best->chunk_rows, best->together_ms, 100 * best->efficiency(), best->slowdown(), within,
             comm_whole_GBps, 100 * comm_whole_GBps / target_GBps, target_name);

  if (!json_path.empty()) {
    std::string j = fmt::format(
        "{{\n \"device\": \"{}\", \"name\": \"{}\", \"arch\": \"{}\", \"iters\": {}, \"units\": {}, \"min_units\": {}, "
        "\"step_units\": {}, \"mechanism\": \"{}\",\n \"tokens\": {}, \"topk\": {}, \"rows\": {}, \"experts\": {}, "
        "\"inter\": {}, \"hidden\": {}, \"comm_bytes\": {:.0f}, \"gemm_flops\": {:.0f}, \"gemm_bytes\": {:.0f},\n"
        " \"copy_TBps\": {:.5f}, \"gemm_whole_ms\": {:.5f}, \"comm_whole_GBps\": {:.2f}, \"comm_of_copy_rate\": {:.4f},\n"
        " \"dest\": \"{}\", \"link_GBps\": {:.2f}, \"comm_of_target_rate\": {:.4f},\n",
        info->uri, info->name, info->arch, iters, U, m, step, caps->mechanism_name, tokens, topk, R, E, I, H, Bc, F, Bm,
        *copy, gemm_whole_ms, comm_whole_GBps, comm_whole_GBps / (*copy * 1e3), dest, link_GBps,
        comm_whole_GBps / target_GBps);
    j += " \"comm_whole_ms\": {";
    for (size_t i = 0; i < chunks.size(); ++i)
      j += fmt::format("{}\"{}\": {:.5f}", i ? ", " : "", chunks[i], comm_whole_ms[chunks[i]]);
    j += "},\n \"sweep\": [\n";
    for (size_t i = 0; i < pts.size(); ++i) {
      auto& p = pts[i];
      j += fmt::format("  {{\"comm_units\": {}, \"compute_units\": {}, \"chunk_rows\": {}, \"comm_ms\": {:.5f}, "
                       "\"gemm_ms\": {:.5f}, \"together_ms\": {:.5f}, \"together_gemm_ms\": {:.5f}, \"efficiency\": "
                       "{:.4f}, \"slowdown\": {:.4f}}}{}\n",
                       p.comm_units, p.compute_units, p.chunk_rows, p.comm_ms, p.gemm_ms, p.together_ms,
                       p.together_gemm_ms, p.efficiency(), p.slowdown(), i + 1 < pts.size() ? "," : "");
    }
    j += fmt::format(" ],\n \"rates\": {{\"comm_bytes_per_unit\": {:.6g}, \"link_bytes_per_s\": {:.6g}, "
                     "\"compute_flops_per_unit\": {:.6g}, \"compute_bytes_per_unit\": {:.6g}, \"memory_bytes_per_s\": "
                     "{:.6g}, \"chunk_overhead_s\": {:.6g}, \"l2_bytes\": {:.6g}, \"l2_penalty\": {:.6g}, "
                     "\"comm_interference\": {:.6g}}},\n",
                     rates.comm_bytes_per_unit, rates.link_bytes_per_s, rates.compute_flops_per_unit,
                     rates.compute_bytes_per_unit, rates.memory_bytes_per_s, rates.chunk_overhead_s, rates.l2_bytes,
                     rates.l2_penalty, rates.comm_interference);
    if (plan)
      j += fmt::format(" \"planner_choice\": {{\"comm_units\": {}, \"chunk_rows\": {}, \"chunk_bytes\": {}, "
                       "\"predicted_ms\": {:.5f}, \"measured_ms\": {:.5f}}},\n",
                       plan->comm_units, plan->chunk_bytes / uint64_t(H * 2), plan->chunk_bytes, plan->makespan_s * 1e3,
                       choice ? choice->together_ms : 0.0);
    j += fmt::format(" \"best_measured\": {{\"comm_units\": {}, \"chunk_rows\": {}, \"together_ms\": {:.5f}}},\n"
                     " \"planner_within_pct\": {:.2f}\n}}\n",
                     best->comm_units, best->chunk_rows, best->together_ms, within);
    if (!write_file("bench overlap", json_path, j)) return 1;
  }
  if (!svg_path.empty() && !write_file("bench overlap", svg_path, svg_plot(pts, chunks, choice))) return 1;
  if (!rates_path.empty()) {
    const std::string key = fmt::format("{} {} {} dest={}", info->uri, info->arch, info->name, dest);
    std::string old;
    if (FILE* f = std::fopen(rates_path.c_str(), "rb")) {  // absent: a new file
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) old.append(buf, n);
      std::fclose(f);
    }
    if (!write_file("bench overlap", rates_path, rt::upsert_rates(old, key, rates))) return 1;
    fmt::print("  rates saved in {} as '{}'\n", rates_path, key);
  }
  return 0;
}

}  // namespace halcyon::bench
