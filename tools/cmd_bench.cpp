// `halcyon bench moe`: times an MoE layer stage by stage through the operators (run_op), so
// whatever implementation the device selects is what gets measured:
//   router logits (gemm_bf16 [T,H] x [H,E] -> f32), moe_gate, moe_permute,
//   moe_grouped_gemm_swiglu, moe_grouped_gemm (down), moe_combine, and, where the device
//   implements moe_grouped_gemm_swiglu_gather, moe_permute without its row copy and the gather
//   GEMM; then the whole layer as MoeLayer runs it (the gather path where it takes it).
// Each stage: warm-up, then --iters timed runs between events, each after a write of twice
// the L2 size so that no stage is timed out of a warm cache; the median is reported with the
// bytes it must move and its FLOPs, and the fraction of the byte floor (bytes / the
// device-to-device copy rate measured in the same run) and of the FLOP floor (--peak-tflops).
// Inputs are random (never zeros). --json writes every figure.
#include <halcyon/runtime/moe_layer.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "command.hpp"

namespace {

namespace rt = halcyon::rt;
namespace ops = halcyon::ops;
using Tensors = std::map<std::string, ops::Tensor, std::less<>>;

struct Options {
  std::string device = "cuda:0";
  int64_t T = -1, E = -1, K = -1, H = -1, I = -1, groups = -1, topk_groups = -1;
  int iters = 20;
  double peak_tflops = 800;  // bf16 dense, cuBLAS 8192^3 on H100/H200 (shared/BASELINES.md)
  std::string json;
  rt::MoeLayerOptions layer;  // --impl OP=NAME, --path, --code: what every stage and the layer run
};

struct Stage {
  std::string name;
  double ms = 0, bytes = 0, flops = 0;
};

#define TRY_OR_FAIL(expr)                                                     \
  do {                                                                        \
    auto _s = (expr);                                                         \
    if (!_s) {                                                                \
      fmt::print(stderr, "halcyon bench: {}: {}\n", #expr, _s.error().to_string()); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int usage() {
  fmt::print(
      "usage: halcyon bench moe [--device URI] [--tokens N] [--experts E] [--topk K] [--hidden H]\n"
      "                         [--inter I] [--groups G] [--topk-groups TG] [--iters N]\n"
      "                         [--peak-tflops F] [--json FILE] [--impl OP=NAME ...]\n"
      "                         [--path auto|gather|copy] [--code auto|ir|binary]\n"
      "  Times the MoE layer's stages through the operators on one device. Defaults: the\n"
      "  DeepSeek-V3 shape per GPU (4096 tokens, top-8 of 256 experts in 8 groups, top-4 groups,\n"
      "  hidden 7168, expert intermediate 2048) on a GPU; 64 tokens, top-4 of 16, 256, 128 on cpu.\n"
      "  Where the device implements moe_grouped_gemm_swiglu_gather, moe_permute without its row\n"
      "  copy and the gather GEMM are timed too; the whole layer takes the path MoeLayer takes\n"
      "  (--path gather, or HALCYON_MOE_GATHER=1: the gather path; --path copy or =0: the permuted\n"
      "  copy). --impl OP=NAME runs that implementation of OP ('halcyon run OP --help' lists them);\n"
      "  --code ir|binary loads every PTX kernel from its PTX or its cubin.\n");
  return 2;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Fills a buffer with random bf16 values in +-[2^-8, 1) (never zero) or f32 in (-s, s), from
// a 16 MiB random block written once and replicated by device copies.
struct Filler {
  const halcyon::Device& dev;
  const halcyon::Stream& stream;
  halcyon::Buffer block;
  static constexpr uint64_t kBlock = 16u << 20;
  // bf16: magnitudes in [2^-8, 1) * 2^-shift.
  halcyon::Status init(uint32_t seed, bool f32, float scale, int shift = 0) {
    auto b = dev.allocate(kBlock);
    if (!b) return b.error();
    block = std::move(b).value();
    std::mt19937 rng(seed);
    std::vector<uint32_t> host(kBlock / 4);
    if (f32) {
      std::uniform_real_distribution<float> u(-scale, scale);
      for (auto& w : host) {
        float f;
        do f = u(rng);
        while (f == 0.f);
        std::memcpy(&w, &f, 4);
      }
    } else {
      auto one = [&] {  // sign, exponent 2^-8..2^-1 (scaled), 7 random mantissa bits
        uint32_t r = rng();
        uint32_t e = uint32_t(127 - 8 - shift) + (r % 8);
        return uint16_t(((r >> 8) & 1u) << 15 | e << 7 | ((r >> 9) & 0x7f));
      };
      for (auto& w : host) w = uint32_t(one()) | uint32_t(one()) << 16;
    }
    HALCYON_TRY(stream.write(block, 0, host.data(), kBlock));
    return stream.synchronize();  // the write may read `host` later
  }
  halcyon::Status fill(const ops::Tensor& t) {
    for (uint64_t off = 0; off < t.bytes(); off += kBlock) {
      // A shifting start inside the block so that rows of equal length do not repeat exactly.
      uint64_t shift = (off / kBlock * 4096) % (kBlock / 2);
      uint64_t n = std::min<uint64_t>(kBlock - shift, t.bytes() - off);
      HALCYON_TRY(stream.copy(t.buffer, t.offset + off, block, shift, n));
      if (n < std::min<uint64_t>(kBlock, t.bytes() - off)) {
        uint64_t rest = std::min<uint64_t>(kBlock, t.bytes() - off) - n;
        HALCYON_TRY(stream.copy(t.buffer, t.offset + off + n, block, 0, rest));
      }
    }
    return {};
  }
};

int bench_moe(const std::vector<std::string>& args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    auto next = [&]() -> std::string { return i + 1 < args.size() ? args[++i] : std::string(); };
    const std::string& a = args[i];
    if (a == "--device") o.device = next();
    else if (a == "--tokens") o.T = std::stoll(next());
    else if (a == "--experts") o.E = std::stoll(next());
    else if (a == "--topk") o.K = std::stoll(next());
    else if (a == "--hidden") o.H = std::stoll(next());
    else if (a == "--inter") o.I = std::stoll(next());
    else if (a == "--groups") o.groups = std::stoll(next());
    else if (a == "--topk-groups") o.topk_groups = std::stoll(next());
    else if (a == "--iters") o.iters = std::max(1, std::stoi(next()));
    else if (a == "--peak-tflops") o.peak_tflops = std::stod(next());
    else if (a == "--json") o.json = next();
    else if (a == "--impl") {
      const std::string v = next();
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) {
        fmt::print(stderr, "halcyon bench: --impl '{}' is not OP=NAME\n", v);
        return 2;
      }
      o.layer.impl[v.substr(0, eq)] = v.substr(eq + 1);
    } else if (a == "--path" || a == "--code") {
      const std::string v = next();
      if (a == "--path" && (v == "auto" || v == "gather" || v == "copy"))
        o.layer.path = v == "gather" ? rt::MoePath::kGather : v == "copy" ? rt::MoePath::kCopy : rt::MoePath::kAuto;
      else if (a == "--code" && (v == "auto" || v == "ir" || v == "binary"))
        o.layer.code = v == "ir" ? ops::CodeSource::kIr : v == "binary" ? ops::CodeSource::kBinary : ops::CodeSource::kAuto;
      else return usage();
    } else return usage();
  }
  // HALCYON_MOE_GATHER: a command-line convenience of this tool only (the library reads no
  // environment on its launch path); --path wins.
  if (const char* env = std::getenv("HALCYON_MOE_GATHER"); env && o.layer.path == rt::MoePath::kAuto) {
    if (std::string(env) == "1") o.layer.path = rt::MoePath::kGather;
    if (std::string(env) == "0") o.layer.path = rt::MoePath::kCopy;
  }
  for (auto& [op, name] : o.layer.impl)
    if (ops::impls_of(op).empty()) {
      fmt::print(stderr, "halcyon bench: --impl {}={}: no operator '{}' has implementations\n", op, name, op);
      return 2;
    }
  auto dev = halcyon::Device::open(o.device.c_str());
  if (!dev) {
    fmt::print(stderr, "halcyon bench: {}\n", dev.error().to_string());
    return 1;
  }
  auto info = dev->info();
  if (!info) return 1;
  const bool cpu = o.device.rfind("cpu", 0) == 0;
  auto def = [](int64_t& v, int64_t gpu, int64_t host, bool is_cpu) {
    if (v < 0) v = is_cpu ? host : gpu;
  };
  def(o.T, 4096, 64, cpu);
  def(o.E, 256, 16, cpu);
  def(o.K, 8, 4, cpu);
  def(o.H, 7168, 256, cpu);
  def(o.I, 2048, 128, cpu);
  def(o.groups, 8, 4, cpu);
  def(o.topk_groups, 4, 2, cpu);
  const int64_t T = o.T, E = o.E, K = o.K, H = o.H, I = o.I, TK = T * K;
  auto stream = dev->create_stream();
  if (!stream) return 1;
  const auto& s = *stream;

  Tensors t;
  auto alloc = [&](const char* name, ops::DType dt, std::vector<int64_t> shape) {
    auto r = ops::make_tensor(*dev, dt, std::move(shape));
    if (!r) {
      fmt::print(stderr, "halcyon bench: allocating {}: {}\n", name, r.error().to_string());
      return false;
    }
    t[name] = std::move(r).value();
    return true;
  };
  using ops::DType;
  bool ok = alloc("x", DType::bf16, {T, H}) && alloc("w_router", DType::bf16, {H, E}) && alloc("bias", DType::f32, {E}) &&
            alloc("logits", DType::f32, {T, E}) && alloc("topk_ids", DType::i32, {T, K}) &&
            alloc("topk_weights", DType::f32, {T, K}) && alloc("permuted", DType::bf16, {TK, H}) &&
            alloc("expert_counts", DType::i32, {E}) && alloc("expert_offsets", DType::i32, {E + 1}) &&
            alloc("row_to_slot", DType::i32, {TK}) && alloc("slot_to_row", DType::i32, {T, K}) &&
            alloc("num_rows", DType::i32, {1}) && alloc("w_gate_up", DType::bf16, {E, H, 2 * I}) &&
            alloc("h", DType::bf16, {TK, I}) && alloc("w_down", DType::bf16, {E, I, H}) &&
            alloc("y", DType::bf16, {TK, H}) && alloc("out", DType::bf16, {T, H});
  if (!ok) return 1;
  // Router weights scaled so that the logits have a spread of about 1 (rms of these values is
  // about 0.31: logit rms ~ sqrt(H) * 0.31 * 0.31 * 2^-shift) and the small bias does not decide
  // the routing: balanced, as a trained router's is. Expert weights scaled by 1/16.
  int shift = 0;
  while (std::sqrt(double(H)) * 0.096 / double(int64_t(1) << shift) > 1.5) ++shift;
  Filler bf{*dev, s, {}}, rf{*dev, s, {}}, wf{*dev, s, {}}, ff{*dev, s, {}};
  TRY_OR_FAIL(bf.init(1, false, 0));
  TRY_OR_FAIL(rf.init(3, false, 0, shift));
  TRY_OR_FAIL(wf.init(4, false, 0, 4));
  TRY_OR_FAIL(ff.init(2, true, 0.01f));
  TRY_OR_FAIL(bf.fill(t["x"]));
  TRY_OR_FAIL(rf.fill(t["w_router"]));
  for (const char* n : {"w_gate_up", "w_down"}) TRY_OR_FAIL(wf.fill(t[n]));
  TRY_OR_FAIL(ff.fill(t["bias"]));

  // The L2 flush buffer and the copy-rate buffers.
  const uint64_t l2 = info->l2_cache_bytes ? info->l2_cache_bytes : (64u << 20);
  // Also long enough (about 100 us) that the host's launch work for the timed stage is done
  // before the GPU reaches the start event: the events time the GPU, not run_op's host path.
  const uint64_t flush_bytes = std::max<uint64_t>(2 * l2, 256u << 20);
  auto flush = dev->allocate(flush_bytes);
  if (!flush) return 1;
  auto ev0 = dev->create_event(), ev1 = dev->create_event();
  if (!ev0 || !ev1) return 1;

  auto timed = [&](auto&& fn, int iters, std::vector<double>* ms) -> halcyon::Status {
    for (int i = 0; i < 2; ++i) HALCYON_TRY(fn());  // warm-up (module load, JIT)
    for (int i = 0; i < iters; ++i) {
      HALCYON_TRY(s.fill<uint32_t>(*flush, 0, flush_bytes, 0x3f803f80u + uint32_t(i)));
      HALCYON_TRY(s.record(*ev0));
      HALCYON_TRY(fn());
      HALCYON_TRY(s.record(*ev1));
      HALCYON_TRY(ev1->synchronize());
      auto e = ev1->elapsed_since(*ev0);
      if (!e) return e.error();
      ms->push_back(*e);
    }
    return {};
  };

  // Copy rate: device-to-device, bytes read + written.
  double copy_tbps = 0;
  {
    const uint64_t n = cpu ? (256u << 20) : (2ull << 30);
    auto a = dev->allocate(n), b = dev->allocate(n);
    if (!a || !b) return 1;
    TRY_OR_FAIL(s.fill<uint32_t>(*a, 0, n, 0x3f803f80u));
    std::vector<double> ms;
    TRY_OR_FAIL(timed([&] { return s.copy(*b, 0, *a, 0, n); }, std::max(o.iters, 10), &ms));
    copy_tbps = 2.0 * double(n) / (median(ms) * 1e-3) / 1e12;
  }

  const std::map<std::string, std::string> gate_params{
      {"score", "sigmoid"},       {"n_groups", std::to_string(o.groups)},
      {"topk_groups", std::to_string(o.topk_groups)}, {"topk", std::to_string(K)},
      {"normalize", "true"},      {"routed_scale", "2.5"}};
  auto run = [&](const char* op, std::initializer_list<std::pair<const char*, const char*>> names,
                 const std::map<std::string, std::string>& params = {}) -> halcyon::Status {
    Tensors call;
    for (auto& [contract_name, ours] : names) call[contract_name] = t[ours];
    return ops::run_op(*dev, s, op, call, params, o.layer.run_options(op));
  };
  auto router = [&] { return run("gemm_bf16", {{"a", "x"}, {"b", "w_router"}, {"c", "logits"}}); };
  auto gate = [&] {
    return run("moe_gate", {{"logits", "logits"}, {"bias", "bias"}, {"topk_ids", "topk_ids"}, {"topk_weights", "topk_weights"}},
               gate_params);
  };
  // write_permuted = false: the plan alone, for the gather path.
  auto permute_rows = [&](bool write_permuted) {
    return run("moe_permute", {{"x", "x"}, {"topk_ids", "topk_ids"}, {"permuted", "permuted"},
                               {"expert_counts", "expert_counts"}, {"expert_offsets", "expert_offsets"},
                               {"row_to_slot", "row_to_slot"}, {"slot_to_row", "slot_to_row"}, {"num_rows", "num_rows"}},
               {{"n_experts", std::to_string(E)},
                {"expert_begin", "0"},
                {"expert_end", std::to_string(E)},
                {"write_permuted", write_permuted ? "true" : "false"}});
  };
  auto permute = [&] { return permute_rows(true); };
  auto swiglu = [&] {
    return run("moe_grouped_gemm_swiglu", {{"a", "permuted"}, {"w_gate_up", "w_gate_up"},
                                           {"expert_offsets", "expert_offsets"}, {"out", "h"}});
  };
  // The gather path: the plan without the row copy, then the SwiGLU GEMM reading x's rows
  // through row_to_slot.
  auto permute_plan_only = [&] { return permute_rows(false); };
  auto swiglu_gather = [&] {
    return run("moe_grouped_gemm_swiglu_gather", {{"x", "x"}, {"w_gate_up", "w_gate_up"},
                                                  {"expert_offsets", "expert_offsets"}, {"row_to_slot", "row_to_slot"},
                                                  {"out", "h"}},
               {{"topk", std::to_string(K)}});
  };
  const bool has_gather =
      ops::select_impl(*dev, "moe_grouped_gemm_swiglu_gather", o.layer.run_options("moe_grouped_gemm_swiglu_gather")).ok();
  const bool layer_gathers = rt::moe_gather_path(*dev, o.layer);  // what MoeLayer on this device runs
  auto down = [&] {
    return run("moe_grouped_gemm", {{"a", "h"}, {"w", "w_down"}, {"expert_offsets", "expert_offsets"}, {"out", "y"}});
  };
  auto combine = [&] {
    return run("moe_combine", {{"expert_out", "y"}, {"topk_weights", "topk_weights"}, {"slot_to_row", "slot_to_row"},
                               {"out", "out"}});
  };
  // One pass first so that every stage has real inputs (routing decides the expert rows).
  TRY_OR_FAIL(router());
  TRY_OR_FAIL(gate());
  TRY_OR_FAIL(permute());
  TRY_OR_FAIL(swiglu());
  TRY_OR_FAIL(down());
  TRY_OR_FAIL(combine());
  if (has_gather) {
    TRY_OR_FAIL(permute_plan_only());
    TRY_OR_FAIL(swiglu_gather());
  }
  std::vector<int32_t> counts(E);
  TRY_OR_FAIL(s.read(t["expert_counts"].buffer, 0, counts.data(), counts.size() * 4));
  TRY_OR_FAIL(s.synchronize());
  int64_t active = 0, R = 0, cmin = TK, cmax = 0;
  for (int32_t c : counts) {
    active += c > 0;
    R += c;
    cmin = std::min<int64_t>(cmin, c);
    cmax = std::max<int64_t>(cmax, c);
  }

  const double b2 = 2, wgu = double(H) * 2 * I * b2, wd = double(I) * H * b2;
  std::vector<Stage> st{
      {"router gemm_bf16", 0, double(T) * H * b2 + double(H) * E * b2 + double(T) * E * 4, 2.0 * T * H * E},
      {"moe_gate", 0, double(T) * E * 4 + E * 4 + double(TK) * 8, 0},
      {"moe_permute", 0, double(T) * H * b2 + double(TK) * 4 + double(R) * H * b2 + double(R) * 4 + double(TK) * 4 + E * 8, 0},
      {"moe_grouped_gemm_swiglu", 0, active * wgu + double(R) * H * b2 + double(R) * I * b2, 2.0 * R * H * 2 * I},
      {"moe_grouped_gemm (down)", 0, active * wd + double(R) * I * b2 + double(R) * H * b2, 2.0 * R * I * H},
      {"moe_combine", 0, double(R) * H * b2 + double(TK) * 8 + double(T) * H * b2, 2.0 * R * H},
  };
  std::vector<std::function<halcyon::Status()>> fns{router, gate, permute, swiglu, down, combine};
  // Indices into st/fns of the stages the layer runs, in order.
  std::vector<size_t> layer_stages{0, 1, 2, 3, 4, 5};
  const size_t kPlanOnly = st.size(), kGather = st.size() + 1;
  if (has_gather) {
    // The plan alone: ids in, counts, offsets and both maps out; no row of x is moved. The
    // gather GEMM reads each token's row once per local expert it chose, from the L2 after the
    // first time, so its floor counts x once, as the weights.
    st.push_back({"moe_permute (write_permuted=false)", 0, double(TK) * 4 + double(R) * 4 + double(TK) * 4 + E * 8, 0});
    st.push_back({"moe_grouped_gemm_swiglu_gather", 0,
                  active * wgu + double(T) * H * b2 + double(R) * 4 + double(R) * I * b2, 2.0 * R * H * 2 * I});
    fns.push_back(permute_plan_only);
    fns.push_back(swiglu_gather);
    if (layer_gathers) layer_stages = {0, 1, kPlanOnly, kGather, 4, 5};
  }
  for (size_t i = 0; i < st.size(); ++i) {
    std::vector<double> ms;
    TRY_OR_FAIL(timed(fns[i], o.iters, &ms));
    st[i].ms = median(ms);
  }
  std::vector<double> layer_ms;
  TRY_OR_FAIL(timed([&]() -> halcyon::Status {
    for (size_t i : layer_stages) HALCYON_TRY(fns[i]());
    return {};
  }, o.iters, &layer_ms));
  const double layer = median(layer_ms);
  size_t name_width = 26;
  for (auto& x : st) name_width = std::max(name_width, x.name.size());

  fmt::print("halcyon bench moe on {} ({}, {}), {} iterations, medians\n", info->uri, info->name, info->arch, o.iters);
  fmt::print("  T={} E={} K={} H={} I={} groups={}/{}; rows R={} over {} active experts (min/max {}/{})\n", T, E, K,
             H, I, o.topk_groups, o.groups, R, active, cmin, cmax);
  fmt::print("  copy rate {:.3f} TB/s (read+write); FLOP floor at {:.0f} TFLOP/s\n", copy_tbps, o.peak_tflops);
  fmt::print("  {:<{}} {:>10} {:>10} {:>9} {:>10} {:>10} {:>9}\n", "stage", name_width, "time us", "MB", "TB/s",
             "TFLOP/s", "floor us", "of floor");
  double sum = 0, gpc = 0, gpc_floor = 0, experts = 0, experts_bytes = 0;
  std::string json = fmt::format(
      "{{\n \"device\": \"{}\", \"name\": \"{}\", \"arch\": \"{}\", \"tokens\": {}, \"experts\": {}, \"topk\": {}, "
      "\"hidden\": {}, \"inter\": {}, \"rows\": {}, \"active_experts\": {}, \"iters\": {}, \"copy_TBps\": {:.4f},\n "
      "\"stages\": [\n",
      info->uri, info->name, info->arch, T, E, K, H, I, R, active, o.iters, copy_tbps);
  for (size_t i = 0; i < st.size(); ++i) {
    const Stage& x = st[i];
    double byte_floor = x.bytes / (copy_tbps * 1e12) * 1e6, flop_floor = x.flops / (o.peak_tflops * 1e12) * 1e6;
    double floor = std::max(byte_floor, flop_floor);
    fmt::print("  {:<{}} {:>10.1f} {:>10.1f} {:>9.3f} {:>10.1f} {:>10.1f} {:>8.0f}%\n", x.name, name_width, x.ms * 1e3,
               x.bytes / 1e6, x.bytes / (x.ms * 1e-3) / 1e12, x.flops / (x.ms * 1e-3) / 1e12, floor,
               100.0 * floor / (x.ms * 1e3));
    json += fmt::format("  {{\"stage\": \"{}\", \"us\": {:.2f}, \"bytes\": {:.0f}, \"flops\": {:.0f}, \"byte_floor_us\": "
                        "{:.2f}, \"flop_floor_us\": {:.2f}}}{}\n",
                        x.name, x.ms * 1e3, x.bytes, x.flops, byte_floor, flop_floor, i + 1 < st.size() ? "," : "");
    if (std::find(layer_stages.begin(), layer_stages.end(), i) != layer_stages.end()) sum += x.ms;
    if (i == 1 || i == 2 || i == 5) gpc += x.ms * 1e3, gpc_floor += byte_floor;
    if (i == 3 || i == 4) experts += x.ms, experts_bytes += double(active) * (i == 3 ? wgu : wd);
  }
  fmt::print("  gate+permute+combine     {:>10.1f} us, byte floor {:.1f} us ({:.2f}x the floor)\n", gpc, gpc_floor,
             gpc / gpc_floor);
  fmt::print("  experts (swiglu + down)  {:>10.3f} ms, weights {:.2f} GB at {:.3f} TB/s = {:.0f}% of the copy rate\n",
             experts, experts_bytes / 1e9, experts_bytes / (experts * 1e-3) / 1e12,
             100.0 * experts_bytes / (experts * 1e-3) / 1e12 / copy_tbps);
  std::string gather_json;
  if (has_gather) {
    const double experts_gather = st[kGather].ms + st[4].ms;
    fmt::print("  experts, gather form (swiglu gather + down) {:.3f} ms, weights {:.2f} GB at {:.3f} TB/s = {:.0f}% of the "
               "copy rate\n",
               experts_gather, experts_bytes / 1e9, experts_bytes / (experts_gather * 1e-3) / 1e12,
               100.0 * experts_bytes / (experts_gather * 1e-3) / 1e12 / copy_tbps);
    gather_json = fmt::format(", \"experts_gather_ms\": {:.4f}", experts_gather);
  }
  fmt::print("  layer path: {}\n", layer_gathers ? "gather (moe_permute write_permuted=false, moe_grouped_gemm_swiglu_gather)"
                                                : has_gather ? "permuted copy (--path gather gathers)"
                                                             : "permuted copy (no moe_grouped_gemm_swiglu_gather here)");
  fmt::print("  whole layer              {:>10.3f} ms (stages summed {:.3f} ms)\n", layer, sum);
  json += fmt::format(
      " ],\n \"gate_permute_combine_us\": {:.2f}, \"gate_permute_combine_floor_us\": {:.2f}, \"experts_ms\": {:.4f}, "
      "\"expert_weight_bytes\": {:.0f}, \"layer_ms\": {:.4f}{}, \"layer_path\": \"{}\"\n}}\n",
      gpc, gpc_floor, experts, experts_bytes, layer, gather_json, layer_gathers ? "gather" : "permuted");
  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (!f) {
      fmt::print(stderr, "halcyon bench: cannot write {}\n", o.json);
      return 1;
    }
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return 0;
}

int run(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help") return usage();
  if (args[0] == "moe") return bench_moe({args.begin() + 1, args.end()});
  fmt::print(stderr, "halcyon bench: unknown benchmark '{}' (known: moe)\n", args[0]);
  return 2;
}

halcyon::cli::Register reg({"bench", "time operators on a device (halcyon bench moe --help)", run});

}  // namespace
