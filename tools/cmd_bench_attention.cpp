// `halcyon bench attention [prefill] [decode] [mla]`: times the attention operators through
// run_op (whatever implementation the device selects) on the shapes of issue 15's targets:
//   prefill  bf16 d128 s4096: b4 h16 non-causal and causal, b1 h128 causal
//   decode   paged, b64 Hq16 kv8192 d128 block 64, Hkv 16 and 2
//   mla      b64 Hq128 kv8192 block 64, Sq 1 and 2
// Each: warm-up, then --iters runs after an L2 flush, the median reported with its FLOPs, the
// bytes it must move (decode/MLA: the KV cache read, figure "GB/s KV"), and both floors:
// bytes / the device-to-device copy rate measured in the same run, FLOPs / --peak-tflops.
// --seqlen and --batch shrink the shapes (defaults on cpu: s 256, kv 512, batch 2); --json
// writes every figure; --ordered-blocks gives each sequence consecutive cache blocks (the
// default scrambles them).
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "bench_common.hpp"
#include "cli_support.hpp"

namespace halcyon::bench {
namespace {

using Tensors = std::map<std::string, ops::Tensor, std::less<>>;

struct Config {
  std::string family, name;
  int64_t B, Sq, Hq, Hkv, D, L;  // prefill: Sq = L = sequence length
  bool causal = false;
  int64_t BS = 64;
};

struct Figures {
  double ms = 0, flops = 0, bytes = 0, kv_bytes = 0;
};

void usage() {
  fmt::print(
      "usage: halcyon bench attention [prefill] [decode] [mla] [--device URI] [--iters N] [--seqlen N]\n"
      "                               [--batch N] [--ordered-blocks] [--peak-tflops F] [--preheat-ms MS]\n"
      "                               [--mla-shapes HQxSQ[,HQxSQ...]] [--json FILE]\n"
      "  Times attention_prefill (b4 h16 s4096 d128, causal and not; b1 h128 causal; d64),\n"
      "  attention_decode (b64 Hq16 Hkv16/2 kv8192 d128 and d64, block 64) and attention_mla_decode\n"
      "  (b64 Hq128 kv8192 Sq 1 and 2, block 64): time, TFLOP/s, GB/s of KV read, and each\n"
      "  figure's floor (bytes / measured copy rate, FLOPs / peak). All three by default.\n"
      "  --mla-shapes sets MLA's query heads and tokens a sequence (default 128x1,128x2; Hq 1-128,\n"
      "  Sq 1-16): where the registry's rules between the MLA kernels are measured.\n"
      "  The paged caches' blocks are in scrambled order unless --ordered-blocks (each sequence's\n"
      "  blocks consecutive, as a dense cache would be). --preheat-ms MS runs each call for MS ms\n"
      "  before timing it (the clock a compute-bound kernel keeps under the GPU's power cap); to\n"
      "  compare with a peer, bench/paired_vs_torch.py times both call against call.\n");
}

int64_t pairs(int64_t q, int64_t k, bool causal) {  // (query, key) pairs a sequence scores
  if (!causal) return q * k;
  int64_t n = 0;
  for (int64_t i = 0; i < q; ++i) n += std::clamp<int64_t>(i + k - q + 1, 0, k);
  return n;
}

// "HQxSQ[,HQxSQ...]" -> (Hq, Sq) pairs; empty on error (err says why).
std::vector<std::pair<int64_t, int64_t>> parse_mla_shapes(const std::string& text, std::string* err) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (std::string_view item : cli::split_commas(text)) {
    const size_t x = item.find('x');
    if (x == std::string_view::npos) {
      *err = fmt::format("--mla-shapes: '{}' is not HQxSQ (e.g. 64x2)", item);
      return {};
    }
    auto hq = cli::parse_int("--mla-shapes Hq", item.substr(0, x), 1, 128, err);
    auto sq = hq ? cli::parse_int("--mla-shapes Sq", item.substr(x + 1), 1, 16, err) : std::nullopt;
    if (!hq || !sq) return {};
    shapes.emplace_back(*hq, *sq);
  }
  return shapes;
}

}  // namespace

int bench_attention(const std::vector<std::string>& args) {
  std::string device = "cuda:0", json_path;
  int iters = 20;
  int64_t seqlen = -1, batch = -1;
  bool ordered_blocks = false;
  double peak_tflops = 989;  // H100 SXM bf16 dense (shared/BASELINES.md)
  double preheat_ms = 0;     // BenchTimer::preheat_ms
  std::vector<std::string> families;
  std::vector<std::pair<int64_t, int64_t>> mla_shapes = {{128, 1}, {128, 2}};  // (Hq, Sq)
  std::string err;
  for (size_t i = 0; i < args.size() && err.empty(); ++i) {
    const std::string& a = args[i];
    if (a == "prefill" || a == "decode" || a == "mla") {
      families.push_back(a);
      continue;
    }
    if (a == "--ordered-blocks") {
      ordered_blocks = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      usage();
      return 0;
    }
    const bool valued = a == "--device" || a == "--iters" || a == "--seqlen" || a == "--batch" ||
                        a == "--peak-tflops" || a == "--preheat-ms" || a == "--json" || a == "--mla-shapes";
    if (!valued) {
      fmt::print(stderr, "halcyon bench attention: unknown argument '{}' (--help lists them)\n", a);
      return 2;
    }
    if (i + 1 >= args.size()) {
      fmt::print(stderr, "halcyon bench attention: {} needs a value\n", a);
      return 2;
    }
    const std::string& v = args[++i];
    if (a == "--device") device = v;
    else if (a == "--json") json_path = v;
    else if (a == "--mla-shapes") mla_shapes = parse_mla_shapes(v, &err);
    else if (a == "--iters") {
      if (auto n = cli::parse_int(a, v, 1, 1 << 20, &err)) iters = int(*n);
    } else if (a == "--seqlen" || a == "--batch") {
      if (auto n = cli::parse_int(a, v, 1, int64_t(1) << 24, &err)) (a == "--seqlen" ? seqlen : batch) = *n;
    } else if (a == "--peak-tflops") {
      if (auto f = cli::parse_positive(a, v, &err)) peak_tflops = *f;
    } else if (auto f = cli::parse_positive(a, v, &err)) {
      preheat_ms = *f;
    }
  }
  if (!err.empty()) {
    fmt::print(stderr, "halcyon bench attention: {}\n", err);
    return 2;
  }
  if (families.empty()) families = {"prefill", "decode", "mla"};
  auto dev = Device::open(device.c_str());
  if (!dev) {
    fmt::print(stderr, "halcyon bench: {}\n", dev.error().to_string());
    return 1;
  }
  auto info = dev->info();
  if (!info) return halcyon::bench::fail("device info", info.error());
  const bool cpu = halcyon::bench::is_cpu(*info);  // the device opened (--device may be empty)
  const int64_t s = seqlen > 0 ? seqlen : (cpu ? 256 : 4096), kv = seqlen > 0 ? seqlen : (cpu ? 512 : 8192);
  auto b = [&](int64_t gpu) { return batch > 0 ? batch : (cpu ? std::min<int64_t>(gpu, 2) : gpu); };
  std::vector<Config> configs;
  for (auto& f : families) {
    if (f == "prefill") {
      configs.push_back({f, "prefill d128 non-causal", b(4), s, 16, 16, 128, s, false});
      configs.push_back({f, "prefill d128 causal", b(4), s, 16, 16, 128, s, true});
      configs.push_back({f, "prefill d128 causal h128", b(1), s, 128, 128, 128, s, true});
      configs.push_back({f, "prefill d64 non-causal", b(4), s, 16, 16, 64, s, false});
    } else if (f == "decode") {
      configs.push_back({f, "decode Hq16 Hkv16", b(64), 1, 16, 16, 128, kv});
      configs.push_back({f, "decode Hq16 Hkv2", b(64), 1, 16, 2, 128, kv});
      configs.push_back({f, "decode d64 Hq16 Hkv16", b(64), 1, 16, 16, 64, kv});
      configs.push_back({f, "decode d64 Hq16 Hkv2", b(64), 1, 16, 2, 64, kv});
    } else {
      for (auto [hq, sq] : mla_shapes) configs.push_back({f, fmt::format("mla Hq{} Sq{}", hq, sq), b(64), sq, hq, 1, 576, kv});
    }
  }
  auto stream = dev->create_stream();
  if (!stream) return halcyon::bench::fail("stream", stream.error());
  const Stream& st = *stream;
  const uint64_t flush_bytes = halcyon::bench::flush_bytes(*info);
  auto flush = dev->allocate(flush_bytes);
  auto ev0 = dev->create_event(), ev1 = dev->create_event();
  if (!flush) return halcyon::bench::fail("the cache-flush buffer", flush.error());
  if (!ev0) return halcyon::bench::fail("event", ev0.error());
  if (!ev1) return halcyon::bench::fail("event", ev1.error());
  BenchTimer timer{*dev, st, *flush, flush_bytes, std::move(*ev0), std::move(*ev1), preheat_ms};
  auto copy = copy_tbps(*dev, timer, cpu, iters);
  if (!copy) {
    fmt::print(stderr, "halcyon bench: copy rate: {}\n", copy.error().to_string());
    return 1;
  }
  Filler fill{*dev, st, {}};
  if (auto r = fill.init(7, false, 0); !r) return halcyon::bench::fail("the fill block", r.error());

  fmt::print("halcyon bench attention on {} ({}, {}), {} iterations, medians\n", info->uri, info->name, info->arch, iters);
  fmt::print("  copy rate {:.3f} TB/s (read+write); FLOP floor at {:.0f} TFLOP/s\n", *copy, peak_tflops);
  fmt::print("  {:<26} {:>10} {:>9} {:>9} {:>10} {:>10} {:>9}  {}\n", "config", "time us", "TFLOP/s", "GB/s KV",
             "floor us", "(bytes)", "of floor", "implementation");
  std::string json = fmt::format("{{\n \"device\": \"{}\", \"name\": \"{}\", \"arch\": \"{}\", \"iters\": {}, "
                                 "\"copy_TBps\": {:.4f}, \"peak_tflops\": {},\n \"configs\": [\n",
                                 info->uri, info->name, info->arch, iters, *copy, peak_tflops);
  int json_entries = 0;
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& c = configs[ci];
    Tensors t;
    std::map<std::string, std::string> params;
    std::string op;
    Figures f;
    auto tensor = [&](const char* name, ops::DType dt, std::vector<int64_t> shape) -> Status {
      HALCYON_ASSIGN_OR_RETURN(t[name], ops::make_tensor(*dev, dt, std::move(shape)));
      return {};
    };
    auto upload = [&](const char* name, const std::vector<int32_t>& v) -> Status {
      HALCYON_TRY(tensor(name, ops::DType::i32, {int64_t(v.size())}));
      return st.write(t[name].buffer, t[name].offset, v.data(), v.size() * 4);
    };
    Status ok;
    std::vector<int32_t> host_a, host_b;
    if (c.family == "prefill") {
      op = "attention_prefill";
      const int64_t T = c.B * c.L;
      params["causal"] = c.causal ? "true" : "false";
      for (int64_t i = 0; i <= c.B; ++i) host_a.push_back(int32_t(i * c.L));
      ok = tensor("q", ops::DType::bf16, {T, c.Hq, c.D});
      if (ok) ok = tensor("k", ops::DType::bf16, {T, c.Hkv, c.D});
      if (ok) ok = tensor("v", ops::DType::bf16, {T, c.Hkv, c.D});
      if (ok) ok = upload("cu_seqlens_q", host_a);
      if (ok) ok = upload("cu_seqlens_k", host_a);
      const double n = double(c.B) * double(pairs(c.L, c.L, c.causal)) * c.Hq;
      f.flops = 4.0 * n * c.D;
      f.kv_bytes = 2.0 * T * c.Hkv * c.D * 2;
      f.bytes = f.kv_bytes + 2.0 * T * c.Hq * c.D * 2 + 4.0 * T * c.Hq;
    } else {
      const bool mla = c.family == "mla";
      op = mla ? "attention_mla_decode" : "attention_decode";
      const int64_t MB = (c.L + c.BS - 1) / c.BS, NB = c.B * MB;
      std::vector<int32_t> perm(static_cast<size_t>(NB));
      std::iota(perm.begin(), perm.end(), 0);
      if (!ordered_blocks) std::shuffle(perm.begin(), perm.end(), std::mt19937(11));  // scrambled blocks
      host_a = perm;
      host_b.assign(size_t(c.B), int32_t(c.L));
      const int64_t Dv = mla ? 512 : c.D, row = mla ? 576 : c.Hkv * c.D;
      ok = tensor("q", ops::DType::bf16, mla ? std::vector<int64_t>{c.B, c.Sq, c.Hq, 576} : std::vector<int64_t>{c.B, c.Sq, c.Hq, c.D});
      if (ok && mla) ok = tensor("kv_cache", ops::DType::bf16, {NB, c.BS, 576});
      if (ok && !mla) ok = tensor("k_cache", ops::DType::bf16, {NB, c.BS, c.Hkv, c.D});
      if (ok && !mla) ok = tensor("v_cache", ops::DType::bf16, {NB, c.BS, c.Hkv, c.D});
      if (ok) ok = upload("block_table", host_a);
      if (ok) t["block_table"].shape = {c.B, MB};
      if (ok) ok = upload("seq_lens", host_b);
      f.kv_bytes = double(c.B) * c.L * row * 2 * (mla ? 1 : 2);
      f.bytes = f.kv_bytes + double(c.B) * c.Sq * c.Hq * (c.D + Dv) * 2 + double(c.B) * c.Sq * c.Hq * 4;
      f.flops = 2.0 * double(c.B) * double(pairs(c.Sq, c.L, true)) * c.Hq * (mla ? 576 + 512 : 2 * c.D);
    }
    for (auto& [name, tn] : t)
      if (ok && tn.dtype == ops::DType::bf16) ok = fill.fill(tn);
    if (ok) ok = ops::allocate_outputs(*dev, op, t, params);
    if (!ok) {
      fmt::print(stderr, "halcyon bench attention: {}: {}\n", c.name, ok.error().to_string());
      return 1;
    }
    // The implementation run_op selects for this call (its shapes: the registry's rules differ
    // by D, batch, ...), then every other PTX one that runs here (chosen explicitly), each on
    // its own line.
    std::vector<ops::OpImpl> impls;
    {
      auto sel = ops::select_impl_for_call(*dev, op, t, params);
      if (!sel || !*sel) {
        fmt::print(stderr, "halcyon bench attention: {}: {}\n", c.name,
                   sel ? std::string("no implementation takes this call") : sel.error().to_string());
        return 1;
      }
      impls.push_back(**sel);
    }
    for (auto& other : ops::impls_of(op))
      if (auto runs = dev->can_run(other.format, other.target.c_str());
          other.format == HAL_MODULE_PTX && runs && *runs &&
          !(impls.size() && other.name == impls[0].name))
        impls.push_back(other);
    for (size_t ii = 0; ii < impls.size(); ++ii) {
      const ops::OpImpl* impl = &impls[ii];
      std::vector<double> ms;
      ok = timer.time(
          [&] { return ops::run_op(*dev, st, op, t, params, ops::RunOptions{ii == 0 ? std::string() : impl->name}); },
          iters, &ms);
      if (!ok && ii > 0) {  // an implementation that does not take this call: say so, time the rest
        fmt::print("  {:<26} {:>10}  {}: {}\n", c.name, "-", impl->name, ok.error().message());
        continue;
      }
      if (!ok) {
        fmt::print(stderr, "halcyon bench attention: {} ({}): {}\n", c.name, impl->name, ok.error().to_string());
        return 1;
      }
      f.ms = median(ms);
      const double us = f.ms * 1e3, byte_floor = f.bytes / (*copy * 1e12) * 1e6,
                   flop_floor = f.flops / (peak_tflops * 1e12) * 1e6, floor = std::max(byte_floor, flop_floor);
      fmt::print("  {:<26} {:>10.1f} {:>9.1f} {:>9.0f} {:>10.1f} {:>10} {:>8.0f}%  {}\n", c.name, us,
                 f.flops / (f.ms * 1e-3) / 1e12, f.kv_bytes / (f.ms * 1e-3) / 1e9, floor,
                 byte_floor >= flop_floor ? "(bytes)" : "(flops)", 100.0 * floor / us,
                 fmt::format("{}{}", impl->name, ii == 0 ? " (selected)" : ""));
      if (const double d = drift(ms); !cpu && std::abs(d) > kDriftNote)
        fmt::print("  note: {} ({}) drifted {:+.0f}% from its first timed runs to its last (clock or power state; "
                   "the JSON's us_each has every run)\n", c.name, impl->name, 100 * d);
      json += fmt::format("{}  {{\"config\": \"{}\", \"op\": \"{}\", \"B\": {}, \"Sq\": {}, \"Hq\": {}, \"Hkv\": {}, \"D\": {}, "
                          "\"L\": {}, \"causal\": {}, \"us\": {:.2f}, \"tflops\": {:.2f}, \"kv_GBps\": {:.1f}, "
                          "\"kv_of_copy_rate\": {:.4f}, \"bytes\": {:.0f}, \"flops\": {:.0f}, \"byte_floor_us\": {:.2f}, "
                          "\"flop_floor_us\": {:.2f}, \"impl\": \"{}\", \"us_each\": [{}]}}",
                          json_entries++ ? ",\n" : "", c.name, op, c.B, c.Sq, c.Hq, c.Hkv, c.D, c.L, c.causal, us, f.flops / (f.ms * 1e-3) / 1e12,
                          f.kv_bytes / (f.ms * 1e-3) / 1e9, f.kv_bytes / (f.ms * 1e-3) / (*copy * 1e12), f.bytes,
                          f.flops, byte_floor, flop_floor, impl->name, us_list(ms));
    }
  }
  json += "\n ]\n}\n";
  fmt::print("  (GB/s KV: K+V bytes read / time; decode targets >= 90% of the copy rate, MLA >= 80%)\n");
  if (!json_path.empty() && !write_file("bench attention", json_path, json)) return 1;
  return 0;
}

}  // namespace halcyon::bench
