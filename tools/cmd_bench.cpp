// `halcyon bench moe`: times an MoE layer stage by stage through the operators (run_op), so
// whatever implementation the device selects is what gets measured:
//   router logits (gemm_bf16 [T,H] x [H,E] -> f32), moe_gate, moe_permute,
//   moe_grouped_gemm_swiglu, moe_grouped_gemm (down), moe_combine, and, where the device
//   implements moe_grouped_gemm_swiglu_gather, moe_permute without its row copy and the gather
//   GEMM; then the whole layer as MoeLayer runs it (the gather path where it takes it), as
//   that stage sequence and as the MoeLayer object, in alternating runs (the same power state).
// Each stage: warm-up, then --iters timed runs between events, each after a write of twice
// the L2 size so that no stage is timed out of a warm cache; the median is reported with the
// bytes it must move and its FLOPs, and the fraction of the byte floor (bytes / the
// device-to-device copy rate measured in the same run) and of the FLOP floor (--peak-tflops).
// Inputs are random (never zeros). --json writes every figure.
#include <halcyon/runtime/moe_layer.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "bench_common.hpp"
#include "cli_support.hpp"
#include "command.hpp"

namespace {

namespace rt = halcyon::rt;
namespace cli = halcyon::cli;
namespace ops = halcyon::ops;
using halcyon::bench::BenchTimer;
using halcyon::bench::Filler;
using halcyon::bench::median;
using halcyon::bench::write_file;
using Tensors = std::map<std::string, ops::Tensor, std::less<>>;

struct Options {
  std::string device;  // "": the best device, as `halcyon demo` picks it
  int64_t T = -1, E = -1, K = -1, H = -1, I = -1, groups = -1, topk_groups = -1;
  int64_t iters = 20;
  double peak_tflops = 0;  // 0: the device's known figure (peak_tflops_of), or unknown
  double preheat_ms = 0;   // each stage run this long before its timed runs (BenchTimer)
  std::string json;
  std::string sizes = "7,4096,1,300";  // moe-sizes: token counts, in turn
  int64_t rounds = 5;
  rt::MoeLayerOptions layer;  // --impl OP=NAME, --path, --code: what every stage and the layer run
  bool fp8 = false;           // --dtype fp8: e4m3 experts with block scales (docs/kernels/fp8.md)
};

// Dense bf16 rate that the FLOP floor divides by: measured figures only (cuBLAS 8192^3 on
// H100/H200, shared/BASELINES.md). Elsewhere the floor is unknown unless --peak-tflops says.
double peak_tflops_of(const hal_device_info& info) {
  std::string name = info.name;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 800;
  return 0;
}

// role: 'r' for gate/permute/combine (the routing overhead line), 'e' for an expert GEMM
// (weight_bytes: the expert weights it must read), else 0.
struct Stage {
  std::string name;
  double ms = 0, bytes = 0, flops = 0;
  char role = 0;
  double weight_bytes = 0;
  bool fp8 = false;  // its FLOP floor is at twice the bf16 rate (Hopper's FP8 tensor cores)
};

#define TRY_OR_FAIL(expr)                                                     \
  do {                                                                        \
    auto _s = (expr);                                                         \
    if (!_s) {                                                                \
      fmt::print(stderr, "halcyon bench: {}: {}\n", #expr, _s.error().to_string()); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int usage(int status) {
  fmt::print(status ? stderr : stdout,
      "usage: halcyon bench moe [--device URI] [--tokens N] [--experts E] [--topk K] [--hidden H]\n"
      "                         [--inter I] [--groups G] [--topk-groups TG] [--iters N]\n"
      "                         [--peak-tflops F] [--preheat-ms MS] [--json FILE] [--impl OP=NAME ...]\n"
      "                         [--path auto|gather|copy] [--code auto|ir|binary] [--dtype bf16|fp8]\n"
      "  Times the MoE layer's stages through the operators on one device: by default the best\n"
      "  device, as `halcyon demo` picks it (the first GPU that runs every stage, else the CPU).\n"
      "  Defaults: the DeepSeek-V3 shape per GPU (4096 tokens, top-8 of 256 experts in 8 groups,\n"
      "  top-4 groups, hidden 7168, expert intermediate 2048) on a GPU; 64 tokens, top-4 of 16,\n"
      "  256, 128 on cpu. Sizes are integers >= 1. The FLOP floor uses --peak-tflops, else the\n"
      "  device's measured bf16 rate where one is known (H100/H200: 800), else it is not given.\n"
      "  Where the device implements moe_grouped_gemm_swiglu_gather, moe_permute without its row\n"
      "  copy and the gather GEMM are timed too; the whole layer takes the path MoeLayer takes\n"
      "  (--path gather: the gather path; --path copy: the permuted copy). --impl OP=NAME runs\n"
      "  that implementation of OP ('halcyon run OP --help' lists them); --code ir|binary loads\n"
      "  every PTX kernel from its PTX or its cubin. --dtype fp8: the experts in FP8 (e4m3 weights\n"
      "  [E, N, K] with 128x128 f32 scales, activations quantized per 1x128 group by\n"
      "  moe_quantize_fp8, moe_grouped_gemm_fp8_swiglu[_gather] and moe_grouped_gemm_fp8); the FLOP\n"
      "  floor of the FP8 GEMMs is at twice the bf16 rate. moe_grouped_gemm_fp8_swiglu_quant (h\n"
      "  quantized in the SwiGLU GEMM) is timed where it runs, and the layer takes it where it pays\n"
      "  or where --impl names it. --preheat-ms MS runs each stage for MS ms\n"
      "  before timing it: a compute-bound kernel then runs at the clock it keeps under the GPU's\n"
      "  power cap (the first ~50-100 ms of work run faster); the JSON's us_each has every run.\n"
      "\n"
      "usage: halcyon bench moe-sizes [--device URI] [--sizes 7,4096,1,300] [--rounds N] [shape options as above]\n"
      "                               [--impl OP=NAME]... [--path auto|gather|copy] [--code auto|ir|binary]\n"
      "  Runs one MoeLayer with the token counts of --sizes in turn, --rounds times, on one stream,\n"
      "  never waiting between calls; prints per call the host time forward() took to queue it and\n"
      "  the device time between events around it, and how many device-wide synchronizations the\n"
      "  backend logged meanwhile (its debug lines 'device-wide synchronization #N (why)'). The\n"
      "  workspace grows in the first round; 0 synchronizations and host times far below the\n"
      "  device times show that no call, and no workspace change, waited for the device.\n");
  return status;
}

// Parses the options; returns -1 when they are good, else the exit status.
int parse_options(const std::vector<std::string>& args, bool sizes_mode, Options* o) {
  const std::pair<const char*, int64_t*> sizes[] = {
      {"--tokens", &o->T}, {"--experts", &o->E}, {"--topk", &o->K}, {"--hidden", &o->H}, {"--inter", &o->I},
      {"--groups", &o->groups}, {"--topk-groups", &o->topk_groups}, {"--iters", &o->iters}, {"--rounds", &o->rounds}};
  std::string err;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return usage(0);
    if (i + 1 >= args.size()) {
      fmt::print(stderr, "halcyon bench: {} {}\n", a, a.starts_with("--") ? "needs a value" : "is not an option");
      return usage(2);
    }
    const std::string& v = args[++i];
    // moe-sizes times one bf16 layer over --sizes: options of bench moe's per-stage timing
    // (and its single token count) would be ignored there, so they are refused.
    for (const char* alone : {"--tokens", "--dtype", "--json", "--iters", "--peak-tflops", "--preheat-ms"})
      if (sizes_mode && a == alone) {
        fmt::print(stderr, "halcyon bench moe-sizes: {} is an option of bench moe only (moe-sizes takes --sizes, "
                           "--rounds, the shape, --impl, --path and --code)\n", a);
        return 2;
      }
    bool known = true;
    if (a == "--device") o->device = v;
    else if (a == "--json") o->json = v;
    else if (sizes_mode && a == "--sizes") o->sizes = v;
    else if (a == "--impl") {
      std::string err;
      if (!cli::parse_impl(v, &o->layer.impl, &err)) {
        fmt::print(stderr, "halcyon bench: {}\n", err);
        return 2;
      }
    } else if (a == "--dtype") {
      if (v != "bf16" && v != "fp8") {
        fmt::print(stderr, "halcyon bench: --dtype '{}' is not bf16 or fp8\n", v);
        return usage(2);
      }
      o->fp8 = v == "fp8";
    } else if (a == "--path" || a == "--code") {
      if (a == "--path" && (v == "auto" || v == "gather" || v == "copy"))
        o->layer.path = v == "gather" ? rt::MoePath::kGather : v == "copy" ? rt::MoePath::kCopy : rt::MoePath::kAuto;
      else if (a == "--code" && (v == "auto" || v == "ir" || v == "binary"))
        o->layer.code = v == "ir" ? ops::CodeSource::kIr : v == "binary" ? ops::CodeSource::kBinary : ops::CodeSource::kAuto;
      else {
        fmt::print(stderr, "halcyon bench: {} '{}' is not one of its values\n", a, v);
        return usage(2);
      }
    }
    else if (a == "--peak-tflops") {
      if (auto f = cli::parse_positive(a, v, &err)) o->peak_tflops = *f;
    } else if (a == "--preheat-ms") {
      if (auto f = cli::parse_positive(a, v, &err)) o->preheat_ms = *f;
    } else {
      auto it = std::find_if(std::begin(sizes), std::end(sizes), [&](auto& p) { return a == p.first; });
      known = it != std::end(sizes) && (sizes_mode || a != "--rounds");
      if (known)
        if (auto n = cli::parse_int(a, v, 1, int64_t(1) << 24, &err)) *it->second = *n;
    }
    if (!known) {
      fmt::print(stderr, "halcyon bench: unknown option '{}'\n", a);
      return usage(2);
    }
    if (!err.empty()) {
      fmt::print(stderr, "halcyon bench: {}\n", err);
      return 2;
    }
  }
  return -1;
}

int bench_moe_sizes(const Options& o, const halcyon::Device& dev, const hal_device_info& info);

int bench_moe(const std::vector<std::string>& args, bool sizes_mode) {
  Options o;
  if (int status = parse_options(args, sizes_mode, &o); status >= 0) return status;
  if (o.device.empty()) {
    auto best = cli::best_moe_device();
    if (!best) {
      fmt::print(stderr, "halcyon bench: {}\n", best.error().to_string());
      return 1;
    }
    o.device = *best;
    fmt::print("device: {} (the best device here; --device chooses another)\n", o.device);
  }
  // HALCYON_MOE_GATHER chose the path until 2026-12-02; --path replaced it (choices travel
  // through the API). Older commands in docs/PERFORMANCE.md still set it: refused rather than
  // ignored, so that such a command cannot silently time the other path.
  if (const char* env = std::getenv("HALCYON_MOE_GATHER")) {
    fmt::print(stderr, "halcyon bench: HALCYON_MOE_GATHER={} is no longer read: write --path {} instead\n", env,
               std::string(env) == "0" ? "copy" : "gather");
    return 2;
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
  if (!info) return halcyon::bench::fail("device info", info.error());
  if (o.peak_tflops == 0) o.peak_tflops = peak_tflops_of(*info);
  const bool cpu = halcyon::bench::is_cpu(*info);  // the device opened (--device may be empty)
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
  if (sizes_mode) return bench_moe_sizes(o, *dev, *info);
  const int64_t T = o.T, E = o.E, K = o.K, H = o.H, I = o.I, TK = T * K;
  auto stream = dev->create_stream();
  if (!stream) return halcyon::bench::fail("stream", stream.error());
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
            alloc("num_rows", DType::i32, {1}) && alloc("h", DType::bf16, {TK, I}) &&
            alloc("y", DType::bf16, {TK, H}) && alloc("out", DType::bf16, {T, H});
  // The expert weights: bf16 [E, K, N], or (--dtype fp8) e4m3 [E, N, K] with [E, N/128, K/128]
  // scales, and the quantized activations (rows of x or of the permuted copy, and of h).
  const int64_t HG = (H + 127) / 128, IG = (I + 127) / 128, I2B = (2 * I + 127) / 128;
  if (!o.fp8)
    ok = ok && alloc("w_gate_up", DType::bf16, {E, H, 2 * I}) && alloc("w_down", DType::bf16, {E, I, H});
  else
    ok = ok && alloc("w_gate_up", DType::e4m3, {E, 2 * I, H}) && alloc("w_gate_up_scale", DType::f32, {E, I2B, HG}) &&
         alloc("w_down", DType::e4m3, {E, H, I}) && alloc("w_down_scale", DType::f32, {E, HG, IG}) &&
         alloc("xq", DType::e4m3, {TK, H}) && alloc("xs", DType::f32, {TK, HG}) && alloc("hq", DType::e4m3, {TK, I}) &&
         alloc("hs", DType::f32, {TK, IG}) && alloc("tq", DType::e4m3, {T, H}) && alloc("ts", DType::f32, {T, HG});
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
  if (o.fp8) {
    Filler qf{*dev, s, {}}, sf{*dev, s, {}};
    TRY_OR_FAIL(qf.init_e4m3(5));
    TRY_OR_FAIL(sf.init(6, true, 0.004f));
    for (const char* n : {"w_gate_up", "w_down"}) TRY_OR_FAIL(qf.fill(t[n]));
    for (const char* n : {"w_gate_up_scale", "w_down_scale"}) TRY_OR_FAIL(sf.fill(t[n]));
  } else {
    for (const char* n : {"w_gate_up", "w_down"}) TRY_OR_FAIL(wf.fill(t[n]));
  }
  TRY_OR_FAIL(ff.fill(t["bias"]));

  // The cache flush buffer and the copy-rate buffers.
  const uint64_t flush_bytes = halcyon::bench::flush_bytes(*info);
  auto flush = dev->allocate(flush_bytes);
  if (!flush) return halcyon::bench::fail("the cache-flush buffer", flush.error());
  auto ev0 = dev->create_event(), ev1 = dev->create_event();
  if (!ev0) return halcyon::bench::fail("event", ev0.error());
  if (!ev1) return halcyon::bench::fail("event", ev1.error());

  BenchTimer timer{*dev, s, *flush, flush_bytes, std::move(*ev0), std::move(*ev1), o.preheat_ms};
  auto timed = [&](auto&& fn, int iters, std::vector<double>* ms) { return timer.time(fn, iters, ms); };

  // Copy rate: device-to-device, bytes read + written.
  auto copy_rate = halcyon::bench::copy_tbps(*dev, timer, cpu, o.iters);
  if (!copy_rate) {
    fmt::print(stderr, "halcyon bench: copy rate: {}\n", copy_rate.error().to_string());
    return 1;
  }
  const double copy_tbps = *copy_rate;

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
  // FP8: quantize the tokens (T rows of x for the gather form, the T*K permuted rows for the
  // copy) and h, then the block-scaled GEMMs.
  auto quantize = [&](const char* from, const char* q, const char* scale) {
    Tensors call{{"x", t[from]}, {"q", t[q]}, {"scale", t[scale]}};
    // Views of the first rows of q / scale where x has fewer rows than they hold.
    const int64_t rows = call["x"].shape[0], k = call["x"].shape[1];
    call["q"].shape = {rows, k};
    call["scale"].shape = {rows, (k + 127) / 128};
    return ops::run_op(*dev, s, "moe_quantize_fp8", call, {}, o.layer.run_options("moe_quantize_fp8"));
  };
  auto quant_tokens = [&] { return quantize("x", "tq", "ts"); };
  auto quant_permuted = [&] { return quantize("permuted", "xq", "xs"); };
  auto quant_hidden = [&] { return quantize("h", "hq", "hs"); };
  auto fp8_swiglu = [&] {
    return run("moe_grouped_gemm_fp8_swiglu", {{"a", "xq"}, {"a_scale", "xs"}, {"w_gate_up", "w_gate_up"},
                                               {"w_scale", "w_gate_up_scale"}, {"expert_offsets", "expert_offsets"},
                                               {"out", "h"}});
  };
  // The SwiGLU GEMM with h quantized in its epilogue (the layer's choice where it pays).
  const std::initializer_list<std::pair<const char*, const char*>> kQuantNames{
      {"a", "xq"}, {"a_scale", "xs"}, {"w_gate_up", "w_gate_up"}, {"w_scale", "w_gate_up_scale"},
      {"expert_offsets", "expert_offsets"}, {"q", "hq"}, {"q_scale", "hs"}};
  const char* kFp8Quant = "moe_grouped_gemm_fp8_swiglu_quant";
  auto fp8_swiglu_quant = [&] { return run(kFp8Quant, kQuantNames); };
  auto fp8_swiglu_gather = [&] {
    Tensors call{{"x", t["tq"]}, {"x_scale", t["ts"]}, {"w_gate_up", t["w_gate_up"]}, {"w_scale", t["w_gate_up_scale"]},
                 {"expert_offsets", t["expert_offsets"]}, {"row_to_slot", t["row_to_slot"]}, {"out", t["h"]}};
    return ops::run_op(*dev, s, "moe_grouped_gemm_fp8_swiglu_gather", call, {{"topk", std::to_string(K)}},
                       o.layer.run_options("moe_grouped_gemm_fp8_swiglu_gather"));
  };
  auto fp8_down = [&] {
    return run("moe_grouped_gemm_fp8", {{"a", "hq"}, {"a_scale", "hs"}, {"w", "w_down"}, {"w_scale", "w_down_scale"},
                                        {"expert_offsets", "expert_offsets"}, {"out", "y"}});
  };
  // What MoeLayer's FP8 copy path runs: moe_permute_fp8, the rows quantized on the way.
  auto permute_fp8 = [&] {
    return run("moe_permute_fp8",
               {{"x", "x"}, {"topk_ids", "topk_ids"}, {"permuted", "xq"}, {"permuted_scale", "xs"},
                {"expert_counts", "expert_counts"}, {"expert_offsets", "expert_offsets"},
                {"row_to_slot", "row_to_slot"}, {"slot_to_row", "slot_to_row"}, {"num_rows", "num_rows"}},
               {{"n_experts", std::to_string(E)}, {"expert_begin", "0"}, {"expert_end", std::to_string(E)}});
  };
  // What it ran before (for comparison): the T token rows quantized, then their e4m3 rows and
  // f32 scales permuted as bf16 rows (H / 2 and 2 HG columns), the same plan twice.
  auto permute_e4m3_views = [&]() -> halcyon::Status {
    auto view = [&](const char* name, int64_t cols) {
      ops::Tensor v = t[name];
      v.dtype = DType::bf16;
      v.shape = {v.shape[0], cols};
      return v;
    };
    for (auto [from, to, cols] : {std::tuple{"tq", "xq", H / 2}, std::tuple{"ts", "xs", 2 * HG}}) {
      Tensors call{{"x", view(from, cols)},
                   {"topk_ids", t["topk_ids"]},
                   {"permuted", view(to, cols)},
                   {"expert_counts", t["expert_counts"]},
                   {"expert_offsets", t["expert_offsets"]},
                   {"row_to_slot", t["row_to_slot"]},
                   {"slot_to_row", t["slot_to_row"]},
                   {"num_rows", t["num_rows"]}};
      HALCYON_TRY(ops::run_op(*dev, s, "moe_permute", call,
                              {{"n_experts", std::to_string(E)}, {"expert_begin", "0"}, {"expert_end", std::to_string(E)}},
                              o.layer.run_options("moe_permute")));
    }
    return {};
  };
  const bool fp8_views = o.fp8 && H % 2 == 0;
  // Whether the quantizing SwiGLU GEMM runs here, and whether MoeLayer takes it for this call.
  bool fp8_quant = false, layer_quant = false;
  if (o.fp8) {
    Tensors call;
    for (auto& [contract_name, ours] : kQuantNames) call[contract_name] = t[ours];
    fp8_quant = ops::select_impl_for_call(*dev, kFp8Quant, call, {}, o.layer.run_options(kFp8Quant)).ok();
    layer_quant = fp8_quant && ops::fused_pays_for_call(*dev, kFp8Quant, call, {}, o.layer.run_options(kFp8Quant));
  }
  const char* kFp8Gather = "moe_grouped_gemm_fp8_swiglu_gather";
  const bool fp8_has_gather = o.fp8 && ops::select_impl(*dev, kFp8Gather, o.layer.run_options(kFp8Gather)).ok();
  // One pass first so that every stage has real inputs (routing decides the expert rows).
  TRY_OR_FAIL(router());
  TRY_OR_FAIL(gate());
  TRY_OR_FAIL(permute());
  if (o.fp8) {
    TRY_OR_FAIL(quant_permuted());
    TRY_OR_FAIL(fp8_swiglu());
    TRY_OR_FAIL(quant_hidden());
    TRY_OR_FAIL(fp8_down());
  } else {
    TRY_OR_FAIL(swiglu());
    TRY_OR_FAIL(down());
  }
  TRY_OR_FAIL(combine());
  if (has_gather && !o.fp8) {
    TRY_OR_FAIL(permute_plan_only());
    TRY_OR_FAIL(swiglu_gather());
  }
  if (o.fp8) TRY_OR_FAIL(quant_tokens());
  if (fp8_views) TRY_OR_FAIL(permute_e4m3_views());
  if (o.fp8) TRY_OR_FAIL(permute_fp8());
  if (fp8_quant) TRY_OR_FAIL(fp8_swiglu_quant());
  if (fp8_has_gather) {
    TRY_OR_FAIL(permute_plan_only());
    TRY_OR_FAIL(fp8_swiglu_gather());
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
  // FP8: one byte a weight plus the f32 block scales.
  const double wgu8 = double(H) * 2 * I + double(I2B) * HG * 4, wd8 = double(I) * H + double(HG) * IG * 4;
  std::vector<Stage> st{
      {"router gemm_bf16", 0, double(T) * H * b2 + double(H) * E * b2 + double(T) * E * 4, 2.0 * T * H * E},
      {"moe_gate", 0, double(T) * E * 4 + E * 4 + double(TK) * 8, 0, 'r'},
      {"moe_permute", 0, double(T) * H * b2 + double(TK) * 4 + double(R) * H * b2 + double(R) * 4 + double(TK) * 4 + E * 8, 0,
       'r'},
      {"moe_grouped_gemm_swiglu", 0, active * wgu + double(R) * H * b2 + double(R) * I * b2, 2.0 * R * H * 2 * I, 'e',
       active * wgu},
      {"moe_grouped_gemm (down)", 0, active * wd + double(R) * I * b2 + double(R) * H * b2, 2.0 * R * I * H, 'e', active * wd},
      {"moe_combine", 0, double(R) * H * b2 + double(TK) * 8 + double(T) * H * b2, 2.0 * R * H, 'r'},
  };
  std::vector<std::function<halcyon::Status()>> fns{router, gate, permute, swiglu, down, combine};
  if (o.fp8) {
    // The quantizations read bf16 rows and write e4m3 plus one f32 scale per 128.
    auto qbytes = [](double rows, double k) { return rows * k * 2 + rows * k + rows * std::ceil(k / 128) * 4; };
    st[3] = {"moe_quantize_fp8 (permuted rows)", 0, qbytes(double(TK), double(H)), 0};
    st[4] = {"moe_grouped_gemm_fp8_swiglu", 0, active * wgu8 + double(R) * (H + HG * 4) + double(R) * I * b2,
             2.0 * R * H * 2 * I, 'e', active * wgu8, true};
    st.insert(st.begin() + 5, Stage{"moe_quantize_fp8 (h)", 0, qbytes(double(TK), double(I)), 0});
    st.insert(st.begin() + 6, Stage{"moe_grouped_gemm_fp8 (down)", 0,
                                    active * wd8 + double(R) * (I + IG * 4) + double(R) * H * b2, 2.0 * R * I * H, 'e',
                                    active * wd8, true});
    fns = {router, gate, permute, quant_permuted, fp8_swiglu, quant_hidden, fp8_down, combine};
  }
  // Indices into st/fns of the stages the layer runs, in order; the expert GEMMs of the copy path.
  std::vector<size_t> layer_stages{0, 1, 2, 3, 4, 5};
  std::vector<size_t> expert_stages{3, 4}, gather_experts;
  if (o.fp8) layer_stages = {0, 1, 2, 3, 4, 5, 6, 7}, expert_stages = {4, 6};
  // FP8: the token rows quantized (the gather form's input; the copy path's before permuting).
  const size_t kQuantTokens = st.size();
  if (o.fp8) {
    st.push_back({"moe_quantize_fp8 (tokens)", 0, double(T) * H * 3 + double(T) * HG * 4, 0});
    fns.push_back(quant_tokens);
  }
  if (fp8_views) {
    // The earlier copy path, for comparison: two permutes of the same plan, e4m3 rows and their
    // scales, read from T and written to R rows (after "moe_quantize_fp8 (tokens)").
    st.push_back({"moe_permute (e4m3 rows + scales)", 0,
                  2 * (double(TK) * 4 + double(R) * 4 + double(TK) * 4 + E * 8) + double(T) * (H + HG * 4) +
                      double(R) * (H + HG * 4),
                  0});
    fns.push_back(permute_e4m3_views);
  }
  if (o.fp8) {
    // The layer's copy path: x read once (bf16), R quantized rows and their scales written.
    st.push_back({"moe_permute_fp8", 0,
                  double(TK) * 4 + double(R) * 4 + double(TK) * 4 + E * 8 + double(T) * H * b2 +
                      double(R) * (H + HG * 4),
                  0});
    fns.push_back(permute_fp8);
    layer_stages = {0, 1, st.size() - 1, 4, 5, 6, 7};
  }
  if (fp8_quant) {
    // h written as e4m3 + scales: the quantize of h's bytes fall away (bf16 h neither written nor read).
    st.push_back({"moe_grouped_gemm_fp8_swiglu_quant", 0,
                  active * wgu8 + double(R) * (H + HG * 4) + double(R) * (I + IG * 4), 2.0 * R * H * 2 * I, 'e',
                  active * wgu8, true});
    fns.push_back(fp8_swiglu_quant);
    if (layer_quant) layer_stages = {0, 1, layer_stages[2], st.size() - 1, 6, 7}, expert_stages = {st.size() - 1, 6};
  }
  const size_t kPlanOnly = st.size(), kGather = st.size() + 1;
  if (fp8_has_gather) {
    st.push_back({"moe_permute (write_permuted=false)", 0, double(TK) * 4 + double(R) * 4 + double(TK) * 4 + E * 8, 0});
    st.push_back({"moe_grouped_gemm_fp8_swiglu_gather", 0,
                  active * wgu8 + double(T) * (H + HG * 4) + double(R) * 4 + double(R) * I * b2, 2.0 * R * H * 2 * I, 0,
                  0, true});
    fns.push_back(permute_plan_only);
    fns.push_back(fp8_swiglu_gather);
    gather_experts = {kGather, 6};
    if (rt::moe_gather_path(*dev, o.layer, kFp8Gather)) layer_stages = {0, 1, kPlanOnly, kQuantTokens, kGather, 5, 6, 7};
  }
  if (has_gather && !o.fp8) {
    // The plan alone: ids in, counts, offsets and both maps out; no row of x is moved. The
    // gather GEMM reads each token's row once per local expert it chose, from the L2 after the
    // first time, so its floor counts x once, as the weights.
    st.push_back({"moe_permute (write_permuted=false)", 0, double(TK) * 4 + double(R) * 4 + double(TK) * 4 + E * 8, 0});
    st.push_back({"moe_grouped_gemm_swiglu_gather", 0,
                  active * wgu + double(T) * H * b2 + double(R) * 4 + double(R) * I * b2, 2.0 * R * H * 2 * I});
    fns.push_back(permute_plan_only);
    fns.push_back(swiglu_gather);
    gather_experts = {kGather, 4};
    if (layer_gathers) layer_stages = {0, 1, kPlanOnly, kGather, 4, 5};
  }
  std::vector<std::vector<double>> each_ms(st.size());  // every timed run (the JSON's "us_each")
  for (size_t i = 0; i < st.size(); ++i) {
    TRY_OR_FAIL(timed(fns[i], o.iters, &each_ms[i]));
    st[i].ms = median(each_ms[i]);
  }
  // The whole layer twice: as the stage sequence above and as the MoeLayer object on the same
  // tensors (the layer's own workspace and forward()'s host work between launches), in
  // alternating runs so that both meet the same clock and power state.
  rt::MoeLayerConfig lc;
  lc.hidden = H, lc.inter = I, lc.experts = E, lc.topk = K, lc.n_groups = o.groups, lc.topk_groups = o.topk_groups;
  lc.score = gate_params.at("score"), lc.normalize = true, lc.routed_scale = 2.5;
  rt::MoeLayerWeights lw;
  lw.w_router = t["w_router"];
  lw.bias = t["bias"];
  if (o.fp8)
    lw.fp8 = rt::MoeFp8Weights{t["w_gate_up"], t["w_gate_up_scale"], t["w_down"], t["w_down_scale"]};
  else
    lw.w_gate_up = t["w_gate_up"], lw.w_down = t["w_down"];
  auto obj = rt::MoeLayer::create(*dev, lc, lw, o.layer);
  if (!obj) {
    fmt::print(stderr, "halcyon bench: MoeLayer::create: {}\n", obj.error().to_string());
    return 1;
  }
  TRY_OR_FAIL(obj->reserve(T));
  TRY_OR_FAIL(obj->forward(s, t["x"], t["out"]));  // the workspace's first use outside the timing
  std::vector<double> layer_ms, object_ms;
  TRY_OR_FAIL(timer.time_alternating(
      [&]() -> halcyon::Status {
        for (size_t i : layer_stages) HALCYON_TRY(fns[i]());
        return {};
      },
      [&] { return obj->forward(s, t["x"], t["out"]); }, o.iters, &layer_ms, &object_ms));
  const double layer = median(layer_ms);
  const double object = median(object_ms);
  size_t name_width = 26;
  for (auto& x : st) name_width = std::max(name_width, x.name.size());

  fmt::print("halcyon bench moe on {} ({}, {}), {} iterations, medians\n", info->uri, info->name, info->arch, o.iters);
  fmt::print("  T={} E={} K={} H={} I={} groups={}/{}; rows R={} over {} active experts (min/max {}/{})\n", T, E, K,
             H, I, o.topk_groups, o.groups, R, active, cmin, cmax);
  fmt::print("  copy rate {:.3f} TB/s (read+write); {}\n", copy_tbps,
             o.peak_tflops > 0 ? fmt::format("FLOP floor at {:.0f} TFLOP/s", o.peak_tflops)
                               : std::string("FLOP floor unknown for this device (--peak-tflops F gives one)"));
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
    const double peak = o.peak_tflops * (x.fp8 ? 2 : 1);
    double byte_floor = x.bytes / (copy_tbps * 1e12) * 1e6, flop_floor = peak > 0 ? x.flops / (peak * 1e12) * 1e6 : 0;
    double floor = std::max(byte_floor, flop_floor);
    fmt::print("  {:<{}} {:>10.1f} {:>10.1f} {:>9.3f} {:>10.1f} {:>10.1f} {:>8.0f}%\n", x.name, name_width, x.ms * 1e3,
               x.bytes / 1e6, x.bytes / (x.ms * 1e-3) / 1e12, x.flops / (x.ms * 1e-3) / 1e12, floor,
               100.0 * floor / (x.ms * 1e3));
    json += fmt::format("  {{\"stage\": \"{}\", \"us\": {:.2f}, \"bytes\": {:.0f}, \"flops\": {:.0f}, \"byte_floor_us\": "
                        "{:.2f}, \"flop_floor_us\": {}, \"us_each\": [{}]}}{}\n",
                        x.name, x.ms * 1e3, x.bytes, x.flops, byte_floor,
                        o.peak_tflops > 0 ? fmt::format("{:.2f}", flop_floor) : "null", halcyon::bench::us_list(each_ms[i]),
                        i + 1 < st.size() ? "," : "");
    if (std::find(layer_stages.begin(), layer_stages.end(), i) != layer_stages.end()) sum += x.ms;
    if (x.role == 'r') gpc += x.ms * 1e3, gpc_floor += byte_floor;
  }
  for (size_t i : expert_stages) experts += st[i].ms, experts_bytes += st[i].weight_bytes;
  fmt::print("  gate+permute+combine     {:>10.1f} us, byte floor {:.1f} us ({:.2f}x the floor)\n", gpc, gpc_floor,
             gpc / gpc_floor);
  fmt::print("  experts (swiglu + down)  {:>10.3f} ms, weights {:.2f} GB at {:.3f} TB/s = {:.0f}% of the copy rate\n",
             experts, experts_bytes / 1e9, experts_bytes / (experts * 1e-3) / 1e12,
             100.0 * experts_bytes / (experts * 1e-3) / 1e12 / copy_tbps);
  std::string gather_json;
  if (!gather_experts.empty()) {
    const double experts_gather = st[gather_experts[0]].ms + st[gather_experts[1]].ms;
    fmt::print("  experts, gather form (swiglu gather + down) {:.3f} ms, weights {:.2f} GB at {:.3f} TB/s = {:.0f}% of the "
               "copy rate\n",
               experts_gather, experts_bytes / 1e9, experts_bytes / (experts_gather * 1e-3) / 1e12,
               100.0 * experts_bytes / (experts_gather * 1e-3) / 1e12 / copy_tbps);
    gather_json = fmt::format(", \"experts_gather_ms\": {:.4f}", experts_gather);
  }
  const bool gathered = layer_stages[2] == kPlanOnly;
  fmt::print("  layer path{}: {}\n", o.fp8 ? " (fp8)" : "",
             gathered ? "gather (moe_permute write_permuted=false, the gather GEMM)"
             : o.fp8 ? (layer_quant ? "moe_permute_fp8: the rows quantized on the way; h quantized in the SwiGLU "
                                      "GEMM's epilogue (--path gather gathers)"
                                    : "moe_permute_fp8: the rows quantized on the way (--path gather gathers)")
             : has_gather ? "permuted copy (--path gather gathers)"
                          : "permuted copy (no gather GEMM here)");
  fmt::print("  whole layer              {:>10.3f} ms (stages summed {:.3f} ms)\n", layer, sum);
  fmt::print("  MoeLayer::forward        {:>10.3f} ms (the layer object on the same tensors{})\n", object,
             o.fp8 ? ", FP8 experts" : "");
  for (size_t i = 0; !cpu && i <= st.size() + 1; ++i) {
    const std::vector<double>& runs = i < st.size() ? each_ms[i] : i == st.size() ? layer_ms : object_ms;
    if (const double d = halcyon::bench::drift(runs); std::abs(d) > halcyon::bench::kDriftNote)
      fmt::print("  note: {} drifted {:+.0f}% from its first timed runs to its last (clock or power state; "
                 "the JSON's us_each has every run)\n",
                 i < st.size() ? st[i].name : i == st.size() ? "whole layer" : "MoeLayer::forward", 100 * d);
  }
  json += fmt::format(
      " ],\n \"gate_permute_combine_us\": {:.2f}, \"gate_permute_combine_floor_us\": {:.2f}, \"experts_ms\": {:.4f}, "
      "\"expert_weight_bytes\": {:.0f}, \"layer_ms\": {:.4f}, \"layer_us_each\": [{}], \"layer_object_ms\": {:.4f}, "
      "\"layer_object_us_each\": [{}]{}, \"layer_path\": \"{}\", \"dtype\": \"{}\"\n}}\n",
      gpc, gpc_floor, experts, experts_bytes, layer, halcyon::bench::us_list(layer_ms), object,
      halcyon::bench::us_list(object_ms), gather_json, gathered ? "gather" : "permuted", o.fp8 ? "fp8" : "bf16");
  if (!o.json.empty() && !write_file("bench", o.json, json)) return 1;
  return 0;
}

// Counts the backend's "device-wide synchronization" log lines while it lives; those lines,
// warnings and errors go to stderr.
class SyncCounter {
 public:
  SyncCounter() { hal_set_log_callback(&SyncCounter::on_log, this); }
  ~SyncCounter() { hal_set_log_callback(nullptr, nullptr); }
  SyncCounter(const SyncCounter&) = delete;
  SyncCounter& operator=(const SyncCounter&) = delete;
  uint64_t count() const { return count_.load(); }
  const std::string& last() const { return last_; }

 private:
  static void on_log(void* user, hal_log_level level, const char* message) {
    auto* self = static_cast<SyncCounter*>(user);
    if (std::strstr(message, "device-wide synchronization")) {
      ++self->count_;
      self->last_ = message;  // the log's own mutex serializes these calls
    }
    if (level >= HAL_LOG_WARNING || self->last_ == message) fmt::print(stderr, "halcyon: {}\n", message);
  }
  std::atomic<uint64_t> count_{0};
  std::string last_;
};

int bench_moe_sizes(const Options& o, const halcyon::Device& dev, const hal_device_info& info) {
  std::vector<int64_t> sizes;
  for (size_t at = 0; at <= o.sizes.size();) {
    size_t comma = o.sizes.find(',', at);
    std::string one = o.sizes.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    std::string err;
    if (one.empty()) {  // "7,,3", "7,3," or ""
      fmt::print(stderr, "halcyon bench: --sizes '{}' has an empty entry (comma-separated token counts)\n", o.sizes);
      return 2;
    }
    auto n = cli::parse_int("--sizes", one, 1, int64_t(1) << 24, &err);
    if (!n) {
      fmt::print(stderr, "halcyon bench: {}\n", err);
      return 2;
    }
    sizes.push_back(*n);
    at = comma == std::string::npos ? o.sizes.size() + 1 : comma + 1;  // past the end: a trailing ',' is an entry
  }
  const int64_t max_t = *std::max_element(sizes.begin(), sizes.end());
  const int64_t E = o.E, H = o.H, I = o.I;
  auto stream = dev.create_stream();
  if (!stream) return halcyon::bench::fail("stream", stream.error());
  const auto& s = *stream;
  using ops::DType;
  auto tensor = [&](DType dt, std::vector<int64_t> shape) { return ops::make_tensor(dev, dt, std::move(shape)); };
  auto x = tensor(DType::bf16, {max_t, H}), out = tensor(DType::bf16, {max_t, H});
  auto wr = tensor(DType::bf16, {H, E}), bias = tensor(DType::f32, {E});
  auto wgu = tensor(DType::bf16, {E, H, 2 * I}), wd = tensor(DType::bf16, {E, I, H});
  for (auto* r : {&x, &out, &wr, &bias, &wgu, &wd}) {
    if (!*r) {
      fmt::print(stderr, "halcyon bench: {}\n", r->error().to_string());
      return 1;
    }
  }
  int shift = 0;  // as bench moe: logits of spread ~1, a balanced routing
  while (std::sqrt(double(H)) * 0.096 / double(int64_t(1) << shift) > 1.5) ++shift;
  Filler bf{dev, s, {}}, rf{dev, s, {}}, wf{dev, s, {}}, ff{dev, s, {}};
  TRY_OR_FAIL(bf.init(1, false, 0));
  TRY_OR_FAIL(rf.init(3, false, 0, shift));
  TRY_OR_FAIL(wf.init(4, false, 0, 4));
  TRY_OR_FAIL(ff.init(2, true, 0.01f));
  TRY_OR_FAIL(bf.fill(*x));
  TRY_OR_FAIL(rf.fill(*wr));
  TRY_OR_FAIL(wf.fill(*wgu));
  TRY_OR_FAIL(wf.fill(*wd));
  TRY_OR_FAIL(ff.fill(*bias));
  rt::MoeLayerConfig c;
  c.hidden = H;
  c.inter = I;
  c.experts = E;
  c.topk = o.K;
  c.n_groups = o.groups;
  c.topk_groups = o.topk_groups;
  auto layer = rt::MoeLayer::create(dev, c, {*wr, *bias, *wgu, *wd}, o.layer);  // --impl, --path, --code
  if (!layer) {
    fmt::print(stderr, "halcyon bench: {}\n", layer.error().to_string());
    return 1;
  }
  TRY_OR_FAIL(s.synchronize());

  struct Call {
    int64_t tokens;
    double host_us;
    halcyon::Event start, end;
    int64_t capacity;
  };
  std::vector<Call> calls;
  SyncCounter syncs;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t round = 0; round < o.rounds; ++round) {
    for (int64_t T : sizes) {
      ops::Tensor tx = *x, to = *out;
      tx.shape = to.shape = {T, H};
      auto a = dev.create_event(), b = dev.create_event();
      if (!a) return halcyon::bench::fail("event", a.error());
      if (!b) return halcyon::bench::fail("event", b.error());
      TRY_OR_FAIL(s.record(*a));
      const auto h0 = std::chrono::steady_clock::now();
      TRY_OR_FAIL(layer->forward(s, tx, to));
      const auto h1 = std::chrono::steady_clock::now();
      TRY_OR_FAIL(s.record(*b));
      calls.push_back({T, std::chrono::duration<double, std::micro>(h1 - h0).count(), std::move(a).value(),
                       std::move(b).value(), layer->workspace_capacity()});
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  const uint64_t sync_count = syncs.count();
  TRY_OR_FAIL(s.synchronize());
  const auto t2 = std::chrono::steady_clock::now();

  fmt::print("halcyon bench moe-sizes on {} ({}, {}): E={} K={} H={} I={}, token counts {} x {} rounds, one stream\n",
             info.uri, info.name, info.arch, E, o.K, H, I, o.sizes, o.rounds);
  fmt::print("  {:>5} {:>6} {:>8} {:>12} {:>12}\n", "round", "tokens", "capacity", "host us", "device us");
  double host_sum = 0, dev_sum = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    auto ms = calls[i].end.elapsed_since(calls[i].start);
    if (!ms) return halcyon::bench::fail("event time", ms.error());
    fmt::print("  {:>5} {:>6} {:>8} {:>12.1f} {:>12.1f}\n", i / sizes.size(), calls[i].tokens, calls[i].capacity,
               calls[i].host_us, *ms * 1e3);
    if (i >= sizes.size()) host_sum += calls[i].host_us, dev_sum += *ms * 1e3;
  }
  const double queue_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double total_ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
  fmt::print("  rounds after the first: host {:.1f} us to queue, device {:.1f} us to run\n", host_sum, dev_sum);
  fmt::print("  all calls queued in {:.2f} ms; the device finished {:.2f} ms after the first\n", queue_ms, total_ms);
  fmt::print("  device-wide synchronizations during the calls: {}{}\n", sync_count,
             sync_count ? " (last: " + syncs.last() + ")" : "");
  return sync_count == 0 ? 0 : 3;
}

int run(const std::vector<std::string>& args) {
  if (args.empty()) return usage(2);
  if (args[0] == "-h" || args[0] == "--help") return usage(0);
  if (args[0] == "moe") return bench_moe({args.begin() + 1, args.end()}, false);
  if (args[0] == "moe-sizes") return bench_moe({args.begin() + 1, args.end()}, true);
  if (args[0] == "attention") return halcyon::bench::bench_attention({args.begin() + 1, args.end()});
  if (args[0] == "overlap") return halcyon::bench::bench_overlap({args.begin() + 1, args.end()});
  if (args[0] == "ep") return halcyon::bench::bench_ep({args.begin() + 1, args.end()});
  fmt::print(stderr, "halcyon bench: unknown benchmark '{}' (known: moe, moe-sizes, attention, overlap, ep)\n", args[0]);
  return 2;
}

halcyon::cli::Register reg({"bench", "time operators on a device (halcyon bench moe|moe-sizes|attention|overlap|ep --help)", run});

}  // namespace
