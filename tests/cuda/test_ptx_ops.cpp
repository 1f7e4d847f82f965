// GPU tests of the PTX operator implementations (ops/ptx; kernels in kernels/ptx): every
// `case` of each contract, plus the DeepSeek-V3 shape for the grouped GEMMs, run through
// halcyon::ops::run_op on cuda:0 and compared with the CPU reference (kernels/reference).
// Inputs are seeded random values (never zeros), outputs are poisoned before each run
// (NaN for floats, 0x7f7f7f7f for ints), ints must match exactly, floats by
// ||out - ref|| / ||ref|| within the contract's tolerance; NaN never passes.
// Exits with 77 (CTest: skipped) when no CUDA device can be opened.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halcyon/kernels/reference/basic.hpp>
#include <halcyon/kernels/reference/moe.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>


namespace ops = halcyon::ops;
namespace ref = halcyon::ref;
using halcyon::Device;
using halcyon::Stream;
using Tensors = std::map<std::string, ops::Tensor, std::less<>>;

namespace {

uint32_t g_seed = 20261122;

Device& device() {
  static Device d = std::move(Device::open("cuda:0")).value();
  return d;
}
Stream& stream() {
  static Stream s = std::move(device().create_stream()).value();
  return s;
}

template <typename T>
T ok(halcyon::Result<T> r) {
  if (!r) FAIL(r.error().to_string());
  return std::move(r).value();
}
void ok(const halcyon::Status& s) {
  if (!s) FAIL(s.error().to_string());
}

template <typename T>
ops::Tensor upload(ops::DType dt, std::vector<int64_t> shape, const std::vector<T>& host) {
  ops::Tensor t = ok(ops::make_tensor(device(), dt, std::move(shape)));
  REQUIRE(t.bytes() == host.size() * sizeof(T));
  if (t.bytes()) ok(stream().write(t.buffer, t.offset, host.data(), t.bytes()));
  return t;
}
ops::Tensor output(ops::DType dt, std::vector<int64_t> shape) {
  ops::Tensor t = ok(ops::make_tensor(device(), dt, std::move(shape)));
  // Poison: NaN for f32 (0xffffffff) and bf16 (0xffff); 0x7f7f7f7f for i32.
  if (t.bytes()) {
    if (t.dtype == ops::DType::i32) ok(stream().fill<uint32_t>(t.buffer, t.offset, t.bytes(), 0x7f7f7f7fu));
    else if (t.dtype == ops::DType::bf16) ok(stream().fill<uint16_t>(t.buffer, t.offset, t.bytes(), uint16_t(0xffff)));
    else ok(stream().fill<uint32_t>(t.buffer, t.offset, t.bytes(), 0xffffffffu));
  }
  return t;
}
template <typename T>
std::vector<T> download(const ops::Tensor& t) {
  std::vector<T> v(t.bytes() / sizeof(T));
  if (t.bytes()) ok(stream().read(t.buffer, t.offset, v.data(), t.bytes()));
  ok(stream().synchronize());
  return v;
}

std::vector<float> uniform(size_t n, double lo, double hi, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = float(u(rng));
    while (x == 0.f);
  }
  return v;
}
std::vector<uint16_t> uniform_bf16(size_t n, double lo, double hi, std::mt19937& rng) {
  std::vector<uint16_t> v(n);
  auto f = uniform(n, lo, hi, rng);
  for (size_t i = 0; i < n; ++i) {
    v[i] = ref::float_to_bf16(f[i]).bits;
    if ((v[i] & 0x7fff) == 0) v[i] = 0x3f80;  // never a zero after rounding
  }
  return v;
}
// Counts >= 0 (some zero) summing to R, as exclusive prefix sums.
std::vector<int32_t> random_offsets(int64_t R, int64_t EL, std::mt19937& rng) {
  std::vector<int32_t> off(EL + 1, 0);
  std::vector<int64_t> cuts(EL - 1 > 0 ? EL - 1 : 0);
  std::uniform_int_distribution<int64_t> u(0, R);
  for (auto& c : cuts) c = u(rng);
  std::sort(cuts.begin(), cuts.end());
  for (int64_t e = 1; e < EL; ++e) off[e] = int32_t(cuts[e - 1]);
  if (EL >= 3) off[1] = 0, off[2] = std::max<int32_t>(off[2], 0);  // an empty first expert
  off[EL] = int32_t(R);
  return off;
}

float bf(uint16_t b) { return ref::bf16_to_float(ref::bf16{b}); }

double rel_error(const std::vector<double>& out, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (out[i] - want[i]) * (out[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
void check_close(const char* what, const std::vector<double>& out, const std::vector<double>& want, double tol) {
  REQUIRE(out.size() == want.size());
  double e = rel_error(out, want);
  INFO(what, ": rel error ", e, " (tolerance ", tol, ")");
  CHECK(e <= tol);
}
std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<double> widen_bf16(const std::vector<uint16_t>& v) {
  std::vector<double> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf(v[i]);
  return o;
}

double tol_of(const char* op, const char* out) {
  return ops::find_contract(op)->find_tensor(out)->tolerance.rel;
}


// Every PTX implementation of `op` whose target this device runs (hal_device_can_run: sm_80
// and, on a Hopper, sm_90a), each chosen by name through the API (RunOptions::impl) so that
// each is checked, not only the one run_op would choose: a named implementation that cannot
// run is an error, never a fallback, so a pass means that kernel ran. `wanted` leaves out those
// the shape at hand does not suit (the TMA kernels need 16-byte aligned rows). The kernels
// loaded from a cubin by default (the TMA and split-K kernels, the warp-specialized builds) run
// again JIT-compiled from their PTX (CodeSource::kIr), and the 256-thread swap-AB kernel, JIT
// by default, again from its cubin (kBinary), so both ways the launcher may load them pass.
struct Variant {
  std::string impl;
  ops::CodeSource code = ops::CodeSource::kAuto;
  std::string target{};
};
const char* code_name(ops::CodeSource c) {
  return c == ops::CodeSource::kIr ? "ptx" : c == ops::CodeSource::kBinary ? "cubin" : "auto";
}
bool loads_cubin(const std::string& name) {
  return name == "sm90.tma" || name == "sm90.swapw" || name.rfind("sm90.splitk", 0) == 0;
}
std::vector<Variant> ptx_variants(const char* op, const std::function<bool(const std::string&)>& wanted) {
  std::vector<Variant> v;
  for (auto& i : ops::impls_of(op)) {
    if (i.format != HAL_MODULE_PTX || !ok(device().can_run(i.format, i.target.c_str())) || !wanted(i.name)) continue;
    v.push_back({i.name, ops::CodeSource::kAuto, i.target});
    if (loads_cubin(i.name)) v.push_back({i.name, ops::CodeSource::kIr, i.target});
    if (i.name == "sm90.swap") v.push_back({i.name, ops::CodeSource::kBinary, i.target});
  }
  REQUIRE_MESSAGE(!v.empty(), "no PTX implementation of ", op, " runs on ", ok(device().info()).arch);
  return v;
}

// Rows [live, R) of an [R, cols] output still hold the 0xffff poison.
void check_rows_untouched(const std::vector<uint16_t>& out, int64_t live, int64_t R, int64_t cols) {
  bool untouched = true;
  for (int64_t i = live * cols; i < R * cols; ++i) untouched = untouched && out[i] == 0xffff;
  CHECK_MESSAGE(untouched, "rows past expert_offsets[EL] were written");
}

// Runs one implementation, named through run_op's options.
void run_impl(const Variant& variant, const char* op, Tensors& t, const std::map<std::string, std::string>& params = {}) {
  ok(ops::run_op(device(), stream(), op, t, params, ops::RunOptions{variant.impl, variant.code}));
}

// The implementation run_op chooses for this call (the registry's choice through the predicates).
std::string chosen_impl(const char* op, Tensors& t, const std::map<std::string, std::string>& params = {}) {
  const ops::Contract& c = *ops::find_contract(op);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (auto& [name, tensor] : t) shapes[name] = tensor.shape;
  ops::Binding b = ok(ops::bind(c, params, {}, shapes));
  ops::DeviceFacts facts = ok(ops::device_facts(device()));
  const ops::ApplyContext call{facts, &device(), &b, &t};
  return ok(ops::select_impl(device(), op, ops::RunOptions{}, &call))->name;
}

}  // namespace

TEST_CASE("vector_add: every contract case") {
  for (auto& c : ops::find_contract("vector_add")->cases) {
    CAPTURE(c.text);
    std::mt19937 rng(g_seed);
    int64_t N = c.dims.at("N");
    auto a = uniform(N, -10, 10, rng), b = uniform(N, -10, 10, rng);
    Tensors t{{"a", upload(ops::DType::f32, {N}, a)}, {"b", upload(ops::DType::f32, {N}, b)},
              {"c", output(ops::DType::f32, {N})}};
    ok(ops::run_op(device(), stream(), "vector_add", t));
    std::vector<float> want(N);
    ref::vector_add(a.data(), b.data(), want.data(), 0, N);
    check_close("c", widen(download<float>(t["c"])), widen(want), tol_of("vector_add", "c"));
  }
}

TEST_CASE("row_softmax: every contract case") {
  for (auto& c : ops::find_contract("row_softmax")->cases) {
    CAPTURE(c.text);
    std::mt19937 rng(g_seed + 1);
    int64_t R = c.dims.at("R"), C = c.dims.at("C");
    auto x = uniform(R * C, -20, 20, rng);
    Tensors t{{"x", upload(ops::DType::f32, {R, C}, x)}, {"y", output(ops::DType::f32, {R, C})}};
    ok(ops::run_op(device(), stream(), "row_softmax", t));
    std::vector<float> want(R * C);
    ref::row_softmax(x.data(), want.data(), C, 0, R);
    check_close("y", widen(download<float>(t["y"])), widen(want), tol_of("row_softmax", "y"));
  }
}

void gemm_case(int64_t M, int64_t N, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  auto a = uniform_bf16(M * K, -1, 1, rng), b = uniform_bf16(K * N, -1, 1, rng);
  std::vector<float> want(M * N);
  ref::gemm_bf16(a.data(), b.data(), want.data(), N, K, 0, M);
  // The Hopper kernels need K, N multiples of 8 (the split-K one 16-byte aligned rows and
  // tensor maps); the fixed splits run in the split-K test below.
  const bool aligned = K % 8 == 0 && N % 8 == 0;
  auto wanted = [&](const std::string& n) { return n == "sm80" || (aligned && (n == "sm90.basic" || n == "sm90.splitk")); };
  for (auto& impl : ptx_variants("gemm_bf16", wanted)) {
    CAPTURE(impl.impl);
    CAPTURE(code_name(impl.code));
    Tensors t{{"a", upload(ops::DType::bf16, {M, K}, a)}, {"b", upload(ops::DType::bf16, {K, N}, b)},
              {"c", output(ops::DType::f32, {M, N})}};
    run_impl(impl, "gemm_bf16", t);
    check_close("c", widen(download<float>(t["c"])), widen(want), tol_of("gemm_bf16", "c"));
  }
}

TEST_CASE("gemm_bf16: every contract case, and tile-crossing shapes") {
  for (auto& c : ops::find_contract("gemm_bf16")->cases) {
    CAPTURE(c.text);
    gemm_case(c.dims.at("M"), c.dims.at("N"), c.dims.at("K"), g_seed + 2);
  }
  SUBCASE("aligned, several tiles") { gemm_case(300, 264, 520, g_seed + 3); }
  SUBCASE("router shape (T=256, H=7168, E=256)") { gemm_case(256, 256, 7168, g_seed + 4); }
}

// Whether this device runs the sm_90a implementations (a Hopper) and they were built.
bool runs_sm90(const char* op) {
  for (auto& i : ops::impls_of(op))
    if (i.format == HAL_MODULE_PTX && i.target == "sm_90a" && ok(device().can_run(i.format, "sm_90a"))) return true;
  return false;
}

// The split-K kernel with each cluster size, whatever the launcher would pick: tiles of <= 64
// rows (the second consumer idle, one A box), n-tiles of one or three 64-column boxes, k ending
// inside a k-tile, uneven k splits, and K = 8 (one k-tile: most CTAs of a cluster have none).
TEST_CASE("gemm_bf16: split-K cluster kernel (sm_90a), every cluster size") {
  if (!runs_sm90("gemm_bf16")) {
    MESSAGE("not a Hopper (sm_90a) device: skipped");
    return;
  }
  struct Shape {
    int64_t M, N, K;
  };
  for (Shape sh : {Shape{300, 264, 1000}, Shape{333, 136, 520}, Shape{130, 8, 8}}) {
    std::mt19937 rng(g_seed + 5);
    auto a = uniform_bf16(sh.M * sh.K, -1, 1, rng), b = uniform_bf16(sh.K * sh.N, -1, 1, rng);
    std::vector<float> want(sh.M * sh.N);
    ref::gemm_bf16(a.data(), b.data(), want.data(), sh.N, sh.K, 0, sh.M);
    for (const char* split : {"2", "3", "4", "8"}) {
      CAPTURE(sh.M);
      CAPTURE(sh.N);
      CAPTURE(sh.K);
      CAPTURE(split);
      Tensors t{{"a", upload(ops::DType::bf16, {sh.M, sh.K}, a)}, {"b", upload(ops::DType::bf16, {sh.K, sh.N}, b)},
                {"c", output(ops::DType::f32, {sh.M, sh.N})}};
      run_impl({std::string("sm90.splitk") + split}, "gemm_bf16", t);
      check_close("c", widen(download<float>(t["c"])), widen(want), tol_of("gemm_bf16", "c"));
    }
  }
}

// The MoE router GEMM of DeepSeek-V3 at 4096 tokens (the shape the split-K kernel is for):
// rows of the first tile (every CTA's share of a tile, for any cluster size) and rows spread
// over all tiles against the reference; two runs bit for bit equal (the result feeds a top-k:
// ties must not flip); the launcher's own choice (no variable set) gives the same bits, i.e.
// it picks this kernel with the same split.
TEST_CASE("gemm_bf16: router shape 4096 x 7168 x 256 (split-K on sm_90a), sampled rows, bit-identical reruns") {
  if (!runs_sm90("gemm_bf16")) {
    MESSAGE("not a Hopper (sm_90a) device: skipped");
    return;
  }
  const int64_t M = 4096, K = 7168, N = 256;
  std::mt19937 rng(g_seed + 6);
  auto a = uniform_bf16(M * K, -1, 1, rng), b = uniform_bf16(K * N, -1, 1, rng);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 128; ++r) rows.push_back(r);
  for (int64_t r = 128; r < M; r += 37) rows.push_back(r);
  rows.push_back(M - 1);
  std::vector<float> want(M * N);
  for (int64_t r : rows) ref::gemm_bf16(a.data(), b.data(), want.data(), N, K, r, r + 1);
  ops::Tensor ta = upload(ops::DType::bf16, {M, K}, a), tb = upload(ops::DType::bf16, {K, N}, b);
  auto run = [&](const char* name) {  // "" = the registry's choice
    Tensors t{{"a", ta}, {"b", tb}, {"c", output(ops::DType::f32, {M, N})}};
    if (!*name) CHECK(chosen_impl("gemm_bf16", t) == "sm90.splitk");
    run_impl({name}, "gemm_bf16", t);
    return download<float>(t["c"]);
  };
  const std::vector<float> first = run("sm90.splitk"), second = run("sm90.splitk"), chosen = run("");
  std::vector<double> got, ref_rows;
  for (int64_t r : rows)
    for (int64_t n = 0; n < N; ++n) {
      got.push_back(first[r * N + n]);
      ref_rows.push_back(want[r * N + n]);
    }
  check_close("c (sampled rows)", got, ref_rows, tol_of("gemm_bf16", "c"));
  CHECK_MESSAGE(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0,
                "two runs of the split-K kernel differ");
  CHECK_MESSAGE(std::memcmp(first.data(), chosen.data(), first.size() * sizeof(float)) == 0,
                "the launcher's own choice differs from the split-K kernel's result (another kernel or split?)");
}

TEST_CASE("moe_gate: every contract case, with and without bias") {
  int n = 0;
  for (auto& c : ops::find_contract("moe_gate")->cases) {
    for (bool with_bias : {false, true}) {
      CAPTURE(c.text);
      CAPTURE(with_bias);
      std::mt19937 rng(g_seed + 10 + n++);
      int64_t T = c.dims.at("T"), E = c.dims.at("E");
      auto param = [&](const char* k, const char* d) { return c.params.count(k) ? c.params.at(k) : std::string(d); };
      ref::MoeGateParams p;
      p.score = param("score", "sigmoid") == "softmax" ? ref::ScoreFunction::kSoftmax : ref::ScoreFunction::kSigmoid;
      p.n_groups = std::stoll(param("n_groups", "1"));
      p.topk_groups = std::stoll(param("topk_groups", "1"));
      p.topk = std::stoll(param("topk", "8"));
      p.normalize = param("normalize", "true") == "true";
      p.routed_scale = std::stof(param("routed_scale", "1.0"));
      int64_t K = p.topk;
      auto logits = uniform(T * E, -4, 4, rng);
      auto bias = uniform(E, -0.25, 0.25, rng);
      Tensors t{{"logits", upload(ops::DType::f32, {T, E}, logits)},
                {"topk_ids", output(ops::DType::i32, {T, K})},
                {"topk_weights", output(ops::DType::f32, {T, K})}};
      if (with_bias) t["bias"] = upload(ops::DType::f32, {E}, bias);
      ok(ops::run_op(device(), stream(), "moe_gate", t, c.params));
      std::vector<int32_t> ids(T * K);
      std::vector<float> w(T * K);
      ok(ref::moe_gate(logits.data(), with_bias ? bias.data() : nullptr, T, E, p, ids.data(), w.data()));
      CHECK(download<int32_t>(t["topk_ids"]) == ids);
      check_close("topk_weights", widen(download<float>(t["topk_weights"])), widen(w),
                  tol_of("moe_gate", "topk_weights"));
    }
  }
}

// The register fast path of moe_gate (named "sm80.fast": run_op fails rather than fall back,
// so a pass means it ran; and it is the registry's choice for these shapes) on each of its layouts, DeepSeek-V3 at 4096 tokens among
// them, on three kinds of input: the contract's random range; logits and bias on a few values
// (ties between experts and between group scores everywhere); NaN, +-inf and underflowing
// scores. Ids must equal the reference's; ids and weights must equal the general kernel's bit
// for bit (same scores and arithmetic); weights must match the reference where all are finite.
TEST_CASE("moe_gate: fast path layouts, ties and NaN, bit for bit with the general kernel") {
  struct Shape {
    int64_t T, E, G, TG, K;
    bool normalize;
    float scale;
  };
  const Shape shapes[] = {{4096, 256, 8, 4, 8, true, 2.5f},  {257, 64, 8, 3, 6, true, 1.5f},
                          {257, 128, 1, 1, 8, true, 1.0f},   {257, 512, 2, 1, 8, false, 1.0f},
                          {257, 160, 5, 2, 6, true, 1.0f},   {257, 384, 12, 5, 32, true, 1.0f},
                          {257, 448, 7, 3, 10, true, 1.0f},  {257, 128, 32, 6, 20, true, 1.0f},
                          {257, 32, 16, 3, 6, false, 2.0f}};
  int n = 0;
  for (const Shape& sh : shapes) {
    for (int kind = 0; kind < 3; ++kind) {
      for (bool with_bias : {false, true}) {
        const std::string what = fmt::format("T={} E={} n_groups={} topk_groups={} topk={} inputs {} bias {}", sh.T,
                                             sh.E, sh.G, sh.TG, sh.K, kind, with_bias);
        CAPTURE(what);
        std::mt19937 rng(g_seed + 200 + n++);
        const int64_t T = sh.T, E = sh.E, K = sh.K;
        auto logits = uniform(T * E, -4, 4, rng);
        auto bias = uniform(E, -0.25, 0.25, rng);
        std::uniform_int_distribution<int> q(-2, 2), pick(0, 99);
        if (kind == 1) {
          for (auto& x : logits) x = 0.5f * q(rng);
          for (auto& b : bias) b = 0.125f * q(rng);
        } else if (kind == 2) {
          for (auto& x : logits) {
            const int r = pick(rng);
            x = r < 4 ? NAN : r < 7 ? INFINITY : r < 10 ? -INFINITY : r < 14 ? -200.f : 0.5f * q(rng);
          }
          for (auto& b : bias) b = pick(rng) < 3 ? NAN : 0.125f * q(rng);
          for (int64_t e = 0; e < E; ++e) logits[e] = -200.f;  // token 0: every score 0, a sum of 0
        }
        const std::map<std::string, std::string> params{
            {"score", "sigmoid"}, {"n_groups", std::to_string(sh.G)}, {"topk_groups", std::to_string(sh.TG)},
            {"topk", std::to_string(K)}, {"normalize", sh.normalize ? "true" : "false"},
            {"routed_scale", fmt::format("{}", sh.scale)}};
        std::vector<int32_t> ids[2];
        std::vector<float> w[2];
        for (int fast : {1, 0}) {
          Tensors t{{"logits", upload(ops::DType::f32, {T, E}, logits)},
                    {"topk_ids", output(ops::DType::i32, {T, K})},
                    {"topk_weights", output(ops::DType::f32, {T, K})}};
          if (with_bias) t["bias"] = upload(ops::DType::f32, {E}, bias);
          if (fast) CHECK(chosen_impl("moe_gate", t, params) == "sm80.fast");
          run_impl({fast ? "sm80.fast" : "sm80.general"}, "moe_gate", t, params);
          ids[fast] = download<int32_t>(t["topk_ids"]);
          w[fast] = download<float>(t["topk_weights"]);
        }
        ref::MoeGateParams p;
        p.n_groups = sh.G, p.topk_groups = sh.TG, p.topk = K, p.normalize = sh.normalize, p.routed_scale = sh.scale;
        std::vector<int32_t> want_ids(T * K);
        std::vector<float> want_w(T * K);
        ok(ref::moe_gate(logits.data(), with_bias ? bias.data() : nullptr, T, E, p, want_ids.data(), want_w.data()));
        CHECK(ids[1] == want_ids);
        CHECK(ids[1] == ids[0]);
        CHECK(std::memcmp(w[1].data(), w[0].data(), w[0].size() * sizeof(float)) == 0);
        if (kind != 2)
          check_close("topk_weights", widen(w[1]), widen(want_w), tol_of("moe_gate", "topk_weights"));
      }
    }
  }
}

struct PermuteOut {
  std::vector<uint16_t> permuted;
  std::vector<int32_t> counts, offsets, row_to_slot, slot_to_row, num_rows;
};

// Runs moe_permute on the device and checks every output against the reference: counts,
// offsets, num_rows and slot_to_row in full, row_to_slot and permuted in their first R rows.
// Returns R.
int64_t check_permute(int64_t T, int64_t K, int64_t H, int64_t E, int64_t begin, int64_t EL,
                      const std::vector<int32_t>& ids, std::mt19937& rng,
                      const std::map<std::string, std::string>& params, const char* impl = "") {
  auto x = uniform_bf16(T * H, -2, 2, rng);
  Tensors t{{"x", upload(ops::DType::bf16, {T, H}, x)},         {"topk_ids", upload(ops::DType::i32, {T, K}, ids)},
            {"permuted", output(ops::DType::bf16, {T * K, H})}, {"expert_counts", output(ops::DType::i32, {EL})},
            {"expert_offsets", output(ops::DType::i32, {EL + 1})}, {"row_to_slot", output(ops::DType::i32, {T * K})},
            {"slot_to_row", output(ops::DType::i32, {T, K})},   {"num_rows", output(ops::DType::i32, {1})}};
  if (!*impl) CHECK(chosen_impl("moe_permute", t, params) == (T > 0 && K > 0 && EL > 0 && H % 8 == 0 &&
                                                                     (!params.count("write_permuted") ||
                                                                      params.at("write_permuted") == "true")
                                                                 ? "sm80.fused"
                                                             : EL > 0 ? "sm80.spread"
                                                                      : "sm80.one"));
  run_impl({impl}, "moe_permute", t, params);
  PermuteOut want;
  want.permuted.assign(T * K * H, 0);
  want.counts.assign(EL, 0);
  want.offsets.assign(EL + 1, 0);
  want.row_to_slot.assign(T * K, 0);
  want.slot_to_row.assign(T * K, 0);
  want.num_rows.assign(1, 0);
  ok(ref::moe_permute(reinterpret_cast<const ref::bf16*>(x.data()), ids.data(), T, K, H, E, begin, begin + EL,
                      reinterpret_cast<ref::bf16*>(want.permuted.data()), want.counts.data(), want.offsets.data(),
                      want.row_to_slot.data(), want.slot_to_row.data(), want.num_rows.data()));
  const int64_t R = want.num_rows[0];
  CHECK(download<int32_t>(t["num_rows"]) == want.num_rows);
  CHECK(download<int32_t>(t["expert_counts"]) == want.counts);
  CHECK(download<int32_t>(t["expert_offsets"]) == want.offsets);
  CHECK(download<int32_t>(t["slot_to_row"]) == want.slot_to_row);
  auto r2s = download<int32_t>(t["row_to_slot"]);
  CHECK(std::vector<int32_t>(r2s.begin(), r2s.begin() + R) ==
        std::vector<int32_t>(want.row_to_slot.begin(), want.row_to_slot.begin() + R));
  auto perm = download<uint16_t>(t["permuted"]);
  auto wp = params.find("write_permuted");
  if (wp != params.end() && wp->second == "false") {
    // Not required by the contract, but the point of the parameter here: no scatter ran.
    CHECK_MESSAGE(std::all_of(perm.begin(), perm.end(), [](uint16_t v) { return v == 0xffff; }),
                  "write_permuted=false still wrote permuted");
  } else {
    CHECK(std::vector<uint16_t>(perm.begin(), perm.begin() + R * H) ==
          std::vector<uint16_t>(want.permuted.begin(), want.permuted.begin() + R * H));
  }
  return R;
}

TEST_CASE("moe_permute: every contract case (stable order, first R rows)") {
  int n = 0;
  for (auto& c : ops::find_contract("moe_permute")->cases) {
    CAPTURE(c.text);
    std::mt19937 rng(g_seed + 40 + n++);
    const ops::Contract& contract = *ops::find_contract("moe_permute");
    ops::Binding bound = ok(ops::bind(contract, c.params, c.dims, {}));  // E, EL from the params
    int64_t T = bound.dim("T"), K = bound.dim("K"), H = bound.dim("H"), E = bound.dim("E"), EL = bound.dim("EL");
    int64_t begin = bound.params.i("expert_begin");
    std::vector<int32_t> ids(T * K);
    std::uniform_int_distribution<int32_t> u(0, 15);
    for (auto& v : ids) v = u(rng);
    check_permute(T, K, H, E, begin, EL, ids, rng, c.params);
  }
}

// The plan layouts, each an implementation: "" = the registry's choice (here the fused plan +
// row copy, hc_moe_permute_fused), "sm80.spread" = the same plan layout then the scatter,
// "sm80.two" = the earlier layout then the scatter, "sm80.one" = the single-block plan.
const char* const kPermuteWays[] = {"", "sm80.spread", "sm80.two", "sm80.one"};

// Several plan blocks (above 2048 slots), a local expert range and ids outside it, uneven block
// sizes (K = 7: the fused kernel's blocks own 224-slot multiples), and one expert taking a third
// of the slots (its rows span every block): the order must still be by expert, then by slot.
TEST_CASE("moe_permute: multi-block plan with a local expert range") {
  const int64_t T = 1111, K = 7, H = 24, E = 40, begin = 8, EL = 20;
  for (const char* how : kPermuteWays) {
    CAPTURE(how);
    std::mt19937 rng(g_seed + 65);
    std::vector<int32_t> ids(T * K);
    std::uniform_int_distribution<int32_t> u(0, int32_t(E - 1)), third(0, 2);  // ids outside [0, E) are refused
    for (auto& v : ids) v = third(rng) == 0 ? 13 : u(rng);
    const int64_t R = check_permute(T, K, H, E, begin, EL, ids, rng,
                                    {{"n_experts", std::to_string(E)}, {"expert_begin", std::to_string(begin)},
                                     {"expert_end", std::to_string(begin + EL)}},
                                    how);
    CHECK(R > T * K / 3);  // the skewed expert alone has about a third of the slots
  }
}

TEST_CASE("moe_permute: DeepSeek-V3 routing size (T=4096, K=8, E=256, H=7168)") {
  std::mt19937 rng(g_seed + 60);
  const int64_t T = 4096, K = 8, H = 7168, E = 256, EL = 256;
  std::vector<int32_t> ids(T * K);
  for (int64_t t = 0; t < T; ++t) {  // K distinct experts per token, as a router gives
    std::vector<int32_t> all(E);
    for (int i = 0; i < E; ++i) all[i] = i;
    for (int64_t k = 0; k < K; ++k) {
      std::uniform_int_distribution<int64_t> u(k, E - 1);
      std::swap(all[k], all[u(rng)]);
      ids[t * K + k] = all[k];
    }
  }
  // Every slot is local (EL = E): R = T * K, so permuted is checked in full.
  for (const char* how : kPermuteWays) {
    CAPTURE(how);
    CHECK(check_permute(T, K, H, E, 0, EL, ids, rng, {}, how) == T * K);
  }
}

TEST_CASE("moe_combine: every contract case") {
  int n = 0;
  for (auto& c : ops::find_contract("moe_combine")->cases) {
    CAPTURE(c.text);
    std::mt19937 rng(g_seed + 70 + n++);
    int64_t T = c.dims.at("T"), K = c.dims.at("K"), H = c.dims.at("H"), R = c.dims.at("R");
    auto eo = uniform_bf16(R * H, -2, 2, rng);
    auto w = uniform(T * K, 0, 1, rng);
    std::vector<int32_t> s2r(T * K);
    std::uniform_int_distribution<int32_t> u(-1, 7);
    for (auto& v : s2r) v = u(rng);
    Tensors t{{"expert_out", upload(ops::DType::bf16, {R, H}, eo)},
              {"topk_weights", upload(ops::DType::f32, {T, K}, w)},
              {"slot_to_row", upload(ops::DType::i32, {T, K}, s2r)},
              {"out", output(ops::DType::bf16, {T, H})}};
    ok(ops::run_op(device(), stream(), "moe_combine", t));
    std::vector<uint16_t> want(T * H);
    ok(ref::moe_combine(reinterpret_cast<const ref::bf16*>(eo.data()), R, w.data(), s2r.data(), T, K, H,
                        reinterpret_cast<ref::bf16*>(want.data())));
    check_close("out", widen_bf16(download<uint16_t>(t["out"])), widen_bf16(want), tol_of("moe_combine", "out"));
  }
}

// Grouped GEMM check. rows: which rows to compare (all when empty); the reference is computed
// per expert on those rows only. capacity > offsets[EL] checks that rows past the last
// segment are left untouched.
void grouped_case(bool swiglu, int64_t R, int64_t H, int64_t I, int64_t EL, uint32_t seed, int64_t used = -1,
                  int64_t sample_rows = 0) {
  std::mt19937 rng(seed);
  const int64_t Kd = swiglu ? H : I, Nd = swiglu ? I : H, ldb = swiglu ? 2 * I : H;
  const int64_t live = used < 0 ? R : used;
  auto a = uniform_bf16(R * Kd, -1, 1, rng);
  auto w = uniform_bf16(EL * Kd * ldb, -1, 1, rng);
  auto off = random_offsets(live, EL, rng);
  const char* op = swiglu ? "moe_grouped_gemm_swiglu" : "moe_grouped_gemm";
  ops::Tensor ta = upload(ops::DType::bf16, {R, Kd}, a), tw = upload(ops::DType::bf16, {EL, Kd, ldb}, w),
             toff = upload(ops::DType::i32, {EL + 1}, off);
  // The TMA kernel needs 16-byte aligned rows (and a device that makes tensor maps: sm_90).
  const bool tma = Kd % 8 == 0 && ldb % 8 == 0 && Nd % 8 == 0;
  for (auto& impl : ptx_variants(op, [&](const std::string& n) { return n == "sm80" || tma; })) {
    CAPTURE(impl.impl);
    CAPTURE(code_name(impl.code));
    Tensors t{{"a", ta}, {swiglu ? "w_gate_up" : "w", tw}, {"expert_offsets", toff}, {"out", output(ops::DType::bf16, {R, Nd})}};
    run_impl(impl, op, t);
    auto out = download<uint16_t>(t["out"]);
    std::vector<double> got, want;
    for (int64_t e = 0; e < EL; ++e) {
      int64_t r0 = off[e], r1 = off[e + 1];
      if (r1 <= r0) continue;
      if (sample_rows > 0 && (e % 5 == 0 || e == EL - 1)) {  // a few experts; rows at the start, around row 128, at the end
        std::vector<std::pair<int64_t, int64_t>> picks{{r0, std::min(r1, r0 + sample_rows)}};
        if (r1 - r0 > 136) picks.push_back({r0 + 124, r0 + 132});
        if (r1 - r0 > sample_rows) picks.push_back({std::max(r0 + sample_rows, r1 - 2), r1});
        for (auto [b, end] : picks) {
          int32_t seg[2] = {0, int32_t(end - b)};
          std::vector<uint16_t> o((end - b) * Nd);
          const auto* we = reinterpret_cast<const ref::bf16*>(w.data() + e * Kd * ldb);
          const auto* ae = reinterpret_cast<const ref::bf16*>(a.data() + b * Kd);
          if (swiglu)
            ok(ref::moe_grouped_gemm_swiglu(ae, we, seg, 2, 1, end - b, H, I, reinterpret_cast<ref::bf16*>(o.data())));
          else
            ok(ref::moe_grouped_gemm(ae, we, seg, 2, 1, end - b, I, H, reinterpret_cast<ref::bf16*>(o.data())));
          for (int64_t i = 0; i < (end - b) * Nd; ++i) {
            got.push_back(bf(out[b * Nd + i]));
            want.push_back(bf(o[i]));
          }
        }
      }
    }
    if (sample_rows == 0) {
      std::vector<uint16_t> o(R * Nd, 0);
      std::vector<int32_t> full = off;
      full[EL] = int32_t(live);
      if (swiglu)
        ok(ref::moe_grouped_gemm_swiglu(reinterpret_cast<const ref::bf16*>(a.data()),
                                        reinterpret_cast<const ref::bf16*>(w.data()), full.data(), EL + 1, EL, live, H, I,
                                        reinterpret_cast<ref::bf16*>(o.data())));
      else
        ok(ref::moe_grouped_gemm(reinterpret_cast<const ref::bf16*>(a.data()), reinterpret_cast<const ref::bf16*>(w.data()),
                                 full.data(), EL + 1, EL, live, I, H, reinterpret_cast<ref::bf16*>(o.data())));
      for (int64_t i = 0; i < live * Nd; ++i) {
        got.push_back(bf(out[i]));
        want.push_back(bf(o[i]));
      }
    }
    check_close("out", got, want, tol_of(op, "out"));
    if (live < R) check_rows_untouched(out, live, R, Nd);
  }
}

TEST_CASE("moe_grouped_gemm_swiglu: every contract case") {
  int n = 0;
  for (auto& c : ops::find_contract("moe_grouped_gemm_swiglu")->cases) {
    CAPTURE(c.text);
    grouped_case(true, c.dims.at("R"), c.dims.at("H"), c.dims.at("I"), c.dims.at("EL"), g_seed + 100 + n++);
  }
  SUBCASE("aligned, several tiles and experts") { grouped_case(true, 700, 256, 192, 5, g_seed + 120); }
  SUBCASE("capacity rows past offsets[EL]") { grouped_case(true, 300, 128, 64, 3, g_seed + 121, 200); }
  SUBCASE("k, columns and rows that end inside a 64-wide box") { grouped_case(true, 333, 200, 72, 4, g_seed + 122); }
  SUBCASE("one expert of 700 rows (three 256-row chunks)") { grouped_case(true, 700, 128, 64, 1, g_seed + 123); }
}

TEST_CASE("moe_grouped_gemm: every contract case") {
  int n = 0;
  for (auto& c : ops::find_contract("moe_grouped_gemm")->cases) {
    CAPTURE(c.text);
    grouped_case(false, c.dims.at("R"), c.dims.at("H"), c.dims.at("I"), c.dims.at("EL"), g_seed + 200 + n++);
  }
  SUBCASE("aligned, several tiles and experts") { grouped_case(false, 700, 384, 256, 5, g_seed + 220); }
  SUBCASE("capacity rows past offsets[EL]") { grouped_case(false, 300, 128, 64, 3, g_seed + 221, 200); }
  SUBCASE("k, columns and rows that end inside a 64-wide box") { grouped_case(false, 333, 72, 200, 4, g_seed + 222); }
  SUBCASE("one expert of 700 rows (three 256-row chunks)") { grouped_case(false, 700, 64, 128, 1, g_seed + 223); }
}

TEST_CASE("grouped GEMMs: DeepSeek-V3 expert shape (R=32768, H=7168, I=2048), 16 experts, sampled rows") {
  // 16 of the 256 experts keep host memory and reference time small; the kernel's tile walk
  // is the same for 256 (the benchmark runs that).
  grouped_case(true, 32768 / 16, 7168, 2048, 16, g_seed + 300, -1, 8);
  grouped_case(false, 32768 / 16, 7168, 2048, 16, g_seed + 301, -1, 8);
}

// moe_grouped_gemm_swiglu_gather: row r reads x[row_to_slot[r] / topk]. The reference is the
// plain SwiGLU GEMM's on a copy of x permuted on the host, so the two ops must agree. Kernels:
// the portable mma.sync one ("sm80") and the warp-specialized swap-AB gather kernel (sm_90a,
// "sm90.swapw": from its cubin and JIT-compiled).
void gather_case(int64_t T, int64_t topk, int64_t R, int64_t H, int64_t I, int64_t EL, uint32_t seed,
                 int64_t used = -1, int64_t sample_rows = 0) {
  std::mt19937 rng(seed);
  const int64_t live = used < 0 ? R : used;
  auto x = uniform_bf16(T * H, -1, 1, rng);
  auto w = uniform_bf16(EL * H * 2 * I, -1, 1, rng);
  auto off = random_offsets(live, EL, rng);
  std::vector<int32_t> rts(R);
  std::uniform_int_distribution<int32_t> slot(0, int32_t(T * topk - 1));
  for (auto& v : rts) v = slot(rng);
  const char* op = "moe_grouped_gemm_swiglu_gather";
  ops::Tensor tx = upload(ops::DType::bf16, {T, H}, x), tw = upload(ops::DType::bf16, {EL, H, 2 * I}, w),
             toff = upload(ops::DType::i32, {EL + 1}, off), trts = upload(ops::DType::i32, {R}, rts);
  std::vector<int64_t> rows;  // the rows compared
  for (int64_t e = 0; e < EL; ++e) {
    const int64_t r0 = off[e], r1 = off[e + 1];
    for (int64_t r = r0; r < r1; ++r)
      if (sample_rows == 0 || r < r0 + sample_rows || r >= r1 - 2 || (r >= r0 + 124 && r < r0 + 132) ||
          (r >= r0 + 172 && r < r0 + 180))
        rows.push_back(r);
  }
  std::vector<uint16_t> want(rows.size() * I);
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    const int64_t e = std::upper_bound(off.begin(), off.end(), int32_t(r)) - off.begin() - 1;
    const int32_t seg[2] = {0, 1};
    ok(ref::moe_grouped_gemm_swiglu(reinterpret_cast<const ref::bf16*>(x.data() + (rts[r] / topk) * H),
                                    reinterpret_cast<const ref::bf16*>(w.data() + e * H * 2 * I), seg, 2, 1, 1, H, I,
                                    reinterpret_cast<ref::bf16*>(want.data() + i * I)));
  }
  const bool tma = H % 8 == 0 && I % 8 == 0;
  for (auto& v : ptx_variants(op, [&](const std::string& n) { return n == "sm80" || tma; })) {
    CAPTURE(v.impl);
    CAPTURE(code_name(v.code));
    Tensors t{{"x", tx}, {"w_gate_up", tw}, {"expert_offsets", toff}, {"row_to_slot", trts},
              {"out", output(ops::DType::bf16, {R, I})}};
    run_impl(v, op, t, {{"topk", std::to_string(topk)}});
    auto out = download<uint16_t>(t["out"]);
    std::vector<double> got;
    for (int64_t r : rows)
      for (int64_t j = 0; j < I; ++j) got.push_back(bf(out[r * I + j]));
    check_close("out", got, widen_bf16(want), tol_of(op, "out"));
    if (live < R) check_rows_untouched(out, live, R, I);
  }
}

TEST_CASE("moe_grouped_gemm_swiglu_gather: every contract case, and tile-crossing shapes") {
  int n = 0;
  for (auto& c : ops::find_contract("moe_grouped_gemm_swiglu_gather")->cases) {
    CAPTURE(c.text);
    const int64_t topk = c.params.count("topk") ? std::stoll(c.params.at("topk")) : 8;
    gather_case(c.dims.at("T"), topk, c.dims.at("R"), c.dims.at("H"), c.dims.at("I"), c.dims.at("EL"),
                g_seed + 400 + n++);
  }
  SUBCASE("aligned, several tiles and experts, tiles of 176 tokens split") { gather_case(90, 8, 700, 256, 192, 3, g_seed + 420); }
  SUBCASE("capacity rows past offsets[EL]") { gather_case(50, 6, 300, 128, 64, 3, g_seed + 421, 200); }
  SUBCASE("k and columns that end inside a 64-wide box") { gather_case(40, 8, 333, 200, 72, 4, g_seed + 422); }
  SUBCASE("one expert of 700 rows, few tokens (rows repeat)") { gather_case(7, 2, 700, 128, 64, 1, g_seed + 423); }
}

TEST_CASE("moe_grouped_gemm_swiglu_gather: DeepSeek-V3 shape (T=4096, top-8, H=7168, I=2048), 16 experts, sampled rows") {
  gather_case(4096, 8, 32768 / 16, 7168, 2048, 16, g_seed + 430, -1, 8);
}

int main(int argc, char** argv) {
  auto dev = Device::open("cuda:0");
  if (!dev) {
    std::printf("SKIPPED: no CUDA device can be opened: %s\n", dev.error().to_string().c_str());
    return 77;
  }
  auto info = dev->info();
  if (info) std::printf("testing on %s: %s (%s, %u SMs), seed %u\n", info->uri, info->name, info->arch,
                        info->compute_units, g_seed);
  for (const char* op : {"vector_add", "row_softmax", "gemm_bf16", "moe_gate", "moe_permute", "moe_grouped_gemm_swiglu",
                         "moe_grouped_gemm_swiglu_gather", "moe_grouped_gemm", "moe_combine"}) {
    std::string why;
    const ops::OpImpl* impl = ops::select_impl(*dev, op, &why);
    std::printf("  %-32s -> %s\n", op, impl ? fmt::format("{} (ptx {}, priority {})", impl->name, impl->target,
                                                           impl->priority).c_str()
                                            : why.c_str());
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
