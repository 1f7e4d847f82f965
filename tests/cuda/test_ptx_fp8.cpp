// GPU tests of the FP8 MoE kernels (ops/ptx/moe_fp8_ops.cpp, kernels/ptx/moe/gemm_sm90_fp8.cu)
// against the CPU reference, at shapes the conformance cases do not reach: DeepSeek-V3's hidden
// size (K = 7168, 56 scale groups) and experts of 0, 1, 15, 16, 17, 63, 64, 65, 130 and 200 rows
// (every token-tile width, several tiles per expert), both GEMMs and the gather form, plus
// moe_quantize_fp8 (bit-exact) over 4096 x 7168 and over every bf16 value, moe_permute_fp8
// (bit-exact) at 4096 tokens, and moe_grouped_gemm_fp8_swiglu_quant (bit-exact against the
// GPU's own SwiGLU GEMM + moe_quantize_fp8). Each op runs on cuda:0 (the registry's choice, which must be the
// sm_90a kernel on an sm_90a device) and on the CPU device with the same inputs; outputs are
// poisoned first; bf16 outputs compare by ||out - ref|| / ||ref|| within the contract's
// tolerance, and none may be NaN. Exits 77 (skipped) without a device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/kernels/reference/e4m3.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace ops = halcyon::ops;
namespace ref = halcyon::ref;
using halcyon::Device;
using Bytes = std::vector<uint8_t>;
using HostTensors = std::map<std::string, std::pair<ops::DType, std::pair<std::vector<int64_t>, Bytes>>>;

namespace {

template <typename T>
T ok(halcyon::Result<T> r) {
  if (!r) FAIL(r.error().to_string());
  return std::move(r).value();
}
void ok(const halcyon::Status& s) {
  if (!s) FAIL(s.error().to_string());
}

Device& gpu() {
  static Device d = std::move(Device::open("cuda:0")).value();
  return d;
}
Device& cpu() {
  static Device d = std::move(Device::open("cpu")).value();
  return d;
}

template <typename T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Runs `op` on `dev` with the inputs; returns every output's bytes. Outputs are poisoned (0xff).
std::map<std::string, Bytes> run(Device& dev, const char* op, const HostTensors& in,
                                 const std::map<std::string, std::string>& params, std::string* impl_name,
                                 const std::string& impl = "", std::string* refusal = nullptr) {
  auto s = ok(dev.create_stream());
  std::map<std::string, ops::Tensor, std::less<>> t;
  for (auto& [name, v] : in) {
    auto x = ok(ops::make_tensor(dev, v.first, v.second.first));
    if (x.bytes()) ok(s.write(x.buffer, x.offset, v.second.second.data(), x.bytes()));
    t[name] = std::move(x);
  }
  ok(ops::allocate_outputs(dev, op, t, params));
  const ops::Contract* c = ops::find_contract(op);
  for (auto& o : c->outputs)
    if (t[o.name].bytes()) ok(s.fill(t[o.name].buffer, t[o.name].offset, t[o.name].bytes(), uint8_t(0xff)));
  if (impl_name) {
    // The registry's choice for this call (its shapes reach the predicates).
    std::map<std::string, std::vector<int64_t>> shapes;
    for (auto& [name, tensor] : t) shapes[name] = tensor.shape;
    const ops::Binding b = ok(ops::bind(*ops::find_contract(op), params, {}, shapes));
    const ops::DeviceFacts facts = ok(ops::device_facts(dev));
    const ops::ApplyContext call{facts, &dev, &b, &t};
    *impl_name = !impl.empty() ? impl : ok(ops::select_impl(dev, op, ops::RunOptions{}, &call))->name;
  }
  ops::RunOptions options;
  options.impl = impl;
  std::map<std::string, Bytes> out;
  if (refusal) {  // the caller expects a refusal: its text, no outputs
    const halcyon::Status st = ops::run_op(dev, s, op, t, params, options);
    *refusal = st ? "" : st.error().to_string();
    return out;
  }
  ok(ops::run_op(dev, s, op, t, params, options));
  for (auto& o : c->outputs) {
    Bytes b(t[o.name].bytes());
    if (!b.empty()) ok(s.read(t[o.name].buffer, t[o.name].offset, b.data(), b.size()));
    out[o.name] = std::move(b);
  }
  ok(s.synchronize());
  return out;
}

std::vector<uint8_t> random_e4m3(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-448.f, 448.f);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = ref::float_to_e4m3(u(rng)).bits;
  return v;
}
std::vector<float> random_scales(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0005f, 0.004f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}
// Experts of 0, 1, 15, 16, 17, 63, 64, 65, 130, 200, 300, 530 rows (the tall builds split an
// expert of over 256 rows evenly, in multiples of 16: 300 = tiles of 160 and 140 rows, whose
// consumers take turns; 530 = 192, 192 and 146, the first two on the box-by-box path).
std::vector<int32_t> offsets_of(const std::vector<int32_t>& counts) {
  std::vector<int32_t> o{0};
  for (int32_t c : counts) o.push_back(o.back() + c);
  return o;
}
const std::vector<int32_t> kCounts{0, 1, 15, 16, 17, 63, 64, 65, 130, 200, 300, 530};

// Compares bf16 outputs over the first `rows` rows of `cols` columns.
void check_bf16(const char* what, const Bytes& got, const Bytes& want, size_t n, double tol) {
  REQUIRE(got.size() >= n * 2);
  double num = 0, den = 0;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t g, w;
    std::memcpy(&g, &got[2 * i], 2);
    std::memcpy(&w, &want[2 * i], 2);
    const double gv = ref::bf16_to_float({g}), wv = ref::bf16_to_float({w});
    if (!std::isfinite(gv)) {
      ++bad;
      continue;
    }
    num += (gv - wv) * (gv - wv);
    den += wv * wv;
  }
  const double e = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf("  %-44s rel err %.3g (tolerance %.3g), %zu non-finite of %zu\n", what, e, tol, bad, n);
  CHECK(bad == 0);
  CHECK(e <= tol);
}

// How many of the first n e4m3 codes of `got` lie beyond a contract's `steps n abs a` tolerance
// of `want`'s (more than n codes apart, +0 and -0 one value, and more than a apart in value).
size_t e4m3_beyond(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t n,
                   const ops::Tolerance& tol) {
  auto rank = [](uint8_t c) { return c < 0x80 ? int(c) : -int(c - 0x80); };
  size_t far = 0;
  for (size_t i = 0; i < n; ++i)
    far += std::abs(rank(got[i]) - rank(want[i])) > tol.steps &&
           !(tol.abs >= 0 && std::fabs(ref::e4m3_to_float({got[i]}) - ref::e4m3_to_float({want[i]})) <= tol.abs);
  return far;
}

double tol_of(const char* op) { return ops::find_contract(op)->find_tensor("out")->tolerance.rel; }

bool is_sm90a() {
  auto info = gpu().info();
  return info && std::string(info->arch) == "sm_90a";
}
// The registry's choice on sm_90a (never other than swapw for the gather form): tall tiles where
// experts average more than 88 rows and every weight box lies in one scale block (`tall_fits`:
// not the SwiGLU GEMM with I % 64 != 0), in 2-CTA clusters from 128 rows where the n-tile count
// is even (`mc_fits`), with the staged epilogue in the down GEMM (`down`, sizes here all take it);
// 128-token tiles where they average 57-88 rows (or more, where tall does not fit), 64-token
// tiles else.
void expect_sm90(const std::string& impl, int64_t R, int64_t EL, bool gather, bool tall_fits = true, bool down = false,
                 bool mc_fits = true) {
  if (!is_sm90a()) return;
  const bool mc = mc_fits && R >= 128 * EL;  // clusters from 128 rows an expert
  const char* tall = down ? (mc ? "sm90.tallsmc" : "sm90.talls") : mc ? "sm90.tallmc" : "sm90.tall";
  const char* want = gather || R <= 56 * EL ? "sm90.swapw" : tall_fits && R > 88 * EL ? tall : "sm90.wide";
  CHECK(impl == want);
}
// The registry's choice, and on sm_90a the variants by name too (the gather form has no tall
// build; the tall builds refuse a SwiGLU GEMM with I % 64 != 0, the cluster builds an odd
// n-tile count: `mc_fits`; both refusals are checked below).
std::vector<std::string> variants(bool gather = false, bool tall_fits = true, bool mc_fits = true) {
  if (!is_sm90a()) return {""};
  if (gather) return {"", "sm90.swapw5", "sm90.wide"};
  if (!tall_fits) return {"", "sm90.swapw", "sm90.swapw5", "sm90.wide"};
  std::vector<std::string> v{"", "sm90.swapw", "sm90.swapw5", "sm90.wide", "sm90.tall", "sm90.tallpf", "sm90.talls"};
  if (mc_fits) v.insert(v.end(), {"sm90.tallmc", "sm90.tallsmc"});
  return v;
}

TEST_CASE("moe_quantize_fp8 4096 x 7168 matches the reference bit for bit") {
  std::mt19937 rng(7);
  const int64_t R = 4096, K = 7168;
  std::vector<uint16_t> x(size_t(R * K));
  std::normal_distribution<float> n(0.f, 1.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = ref::float_to_bf16(n(rng) * ((i / 128) % 7 == 3 ? 0.f : 1.f)).bits;
  HostTensors in{{"x", {ops::DType::bf16, {{R, K}, bytes_of(x)}}}};
  std::string impl;
  auto g = run(gpu(), "moe_quantize_fp8", in, {}, &impl);
  auto w = run(cpu(), "moe_quantize_fp8", in, {}, nullptr);
  CHECK(impl != "sm80.none");
  size_t qdiff = 0, sdiff = 0;
  for (size_t i = 0; i < g["q"].size(); ++i) qdiff += g["q"][i] != w["q"][i];
  for (size_t i = 0; i < g["scale"].size(); ++i) sdiff += g["scale"][i] != w["scale"][i];
  std::printf("  moe_quantize_fp8 (%s): %zu q bytes and %zu scale bytes differ\n", impl.c_str(), qdiff, sdiff);
  CHECK(qdiff == 0);
  CHECK(sdiff == 0);
}

// Every finite bf16 value below each of several group maxima, quantized on the GPU and the CPU:
// each row is one group of 128 holding the maximum A and 127 values v with |v| <= A, so that
// every quotient v / s (e4m3 normals and subnormals, saturation, an s that is an fp32
// subnormal) is compared bit for bit.
TEST_CASE("moe_quantize_fp8: every bf16 value under several maxima, bit for bit") {
  std::vector<uint16_t> x;
  for (float A : {1.f, 3.f, 448.f, 0.0013f, 0x1p-118f, 0x1.8p-126f, 0x1p100f}) {
    const uint16_t a = ref::float_to_bf16(A).bits;
    std::vector<uint16_t> under;
    for (uint32_t b = 0; b < 65536; ++b) {
      const float v = ref::bf16_to_float({uint16_t(b)});
      if (std::isfinite(v) && std::fabs(v) <= ref::bf16_to_float({a})) under.push_back(uint16_t(b));
    }
    for (size_t i = 0; i < under.size(); i += 127) {
      x.push_back(a);
      for (size_t j = 0; j < 127; ++j) x.push_back(under[(i + j) % under.size()]);
    }
  }
  const int64_t K = 128, R = int64_t(x.size()) / K;
  HostTensors in{{"x", {ops::DType::bf16, {{R, K}, bytes_of(x)}}}};
  std::string impl;
  auto g = run(gpu(), "moe_quantize_fp8", in, {}, &impl);
  auto w = run(cpu(), "moe_quantize_fp8", in, {}, nullptr);
  size_t qdiff = 0, sdiff = 0;
  for (size_t i = 0; i < g["q"].size(); ++i) qdiff += g["q"][i] != w["q"][i];
  for (size_t i = 0; i < g["scale"].size(); ++i) sdiff += g["scale"][i] != w["scale"][i];
  std::printf("  moe_quantize_fp8 (%s), %lld groups: %zu q bytes and %zu scale bytes differ\n", impl.c_str(),
              (long long)R, qdiff, sdiff);
  CHECK(qdiff == 0);
  CHECK(sdiff == 0);
}

// moe_permute_fp8 against the CPU on every output byte (rows past R stay poisoned on both): the
// DeepSeek-V3 shape (4096 tokens, 8 of 256 experts, H = 7168: the 16-byte form), a local
// expert range (expert parallelism), and an H that is not a multiple of 8 (the scalar form).
// Inputs hold zero groups and magnitudes from 2^-100 to 2^100.
TEST_CASE("moe_permute_fp8 matches the reference bit for bit") {
  struct Shape {
    int64_t T, K, H, E, begin, end;
  };
  for (const Shape& sh : {Shape{4096, 8, 7168, 256, 0, 256}, Shape{1000, 8, 2048, 256, 64, 128},
                          Shape{300, 6, 100, 64, 0, 64}, Shape{77, 3, 136, 16, 3, 11}}) {
    CAPTURE(sh.T);
    CAPTURE(sh.H);
    std::mt19937 rng(uint32_t(sh.T + sh.H));
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<uint16_t> x(size_t(sh.T * sh.H));
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t g = i / 128;
      const float mag = g % 11 == 5 ? 0.f : g % 13 == 7 ? 0x1p-100f : g % 17 == 3 ? 0x1p100f : 1.f;
      x[i] = ref::float_to_bf16(n(rng) * mag).bits;
    }
    std::vector<int32_t> ids(size_t(sh.T * sh.K));
    std::uniform_int_distribution<int32_t> pick(0, int32_t(sh.E - 1));
    for (int64_t t = 0; t < sh.T; ++t)
      for (int64_t k = 0; k < sh.K; ++k) {
        int32_t e;
        do e = pick(rng);
        while (std::find(&ids[size_t(t * sh.K)], &ids[size_t(t * sh.K + k)], e) != &ids[size_t(t * sh.K + k)]);
        ids[size_t(t * sh.K + k)] = e;
      }
    HostTensors in{{"x", {ops::DType::bf16, {{sh.T, sh.H}, bytes_of(x)}}},
                   {"topk_ids", {ops::DType::i32, {{sh.T, sh.K}, bytes_of(ids)}}}};
    const std::map<std::string, std::string> params{{"n_experts", std::to_string(sh.E)},
                                                    {"expert_begin", std::to_string(sh.begin)},
                                                    {"expert_end", std::to_string(sh.end)}};
    std::string impl;
    auto g = run(gpu(), "moe_permute_fp8", in, params, &impl);
    auto w = run(cpu(), "moe_permute_fp8", in, params, nullptr);
    if (is_sm90a()) CHECK(impl == "sm90");
    int32_t R = 0;
    std::memcpy(&R, w["num_rows"].data(), 4);
    CHECK(R > 0);
    for (auto& [name, want] : w) {
      size_t diff = 0;
      REQUIRE(g[name].size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) diff += g[name][i] != want[i];
      std::printf("  moe_permute_fp8 T=%lld H=%lld (%s) %-14s %zu of %zu bytes differ\n", (long long)sh.T,
                  (long long)sh.H, impl.c_str(), name.c_str(), diff, want.size());
      CHECK_MESSAGE(diff == 0, name);
    }
  }
}

// The three GEMMs at K = 7168 (SwiGLU) or N = 7168 (down) with kCounts rows per expert.
TEST_CASE("moe_grouped_gemm_fp8_swiglu and its gather form, H = 7168") {
  std::mt19937 rng(11);
  const auto off = offsets_of(kCounts);
  const int64_t EL = int64_t(kCounts.size()), R = off.back() + 5, H = 7168, HG = 56;
  for (int64_t I : {256, 192, 72}) {
    const int64_t NB = (2 * I + 127) / 128;
    HostTensors w{{"w_gate_up", {ops::DType::e4m3, {{EL, 2 * I, H}, random_e4m3(size_t(EL * 2 * I * H), rng)}}},
                  {"w_scale", {ops::DType::f32, {{EL, NB, HG}, bytes_of(random_scales(size_t(EL * NB * HG), rng))}}},
                  {"expert_offsets", {ops::DType::i32, {{EL + 1}, bytes_of(off)}}}};
    HostTensors plain = w;
    plain["a"] = {ops::DType::e4m3, {{R, H}, random_e4m3(size_t(R * H), rng)}};
    plain["a_scale"] = {ops::DType::f32, {{R, HG}, bytes_of(random_scales(size_t(R * HG), rng))}};
    std::string impl;
    auto r = run(cpu(), "moe_grouped_gemm_fp8_swiglu", plain, {}, nullptr);
    const bool tall_fits = I % 64 == 0, mc_fits = (I + 63) / 64 % 2 == 0;  // 64 outputs an n-tile
    for (const std::string& v : variants(false, tall_fits, mc_fits)) {
      auto g = run(gpu(), "moe_grouped_gemm_fp8_swiglu", plain, {}, &impl, v);
      if (v.empty()) expect_sm90(impl, R, EL, false, tall_fits, false, mc_fits);
      check_bf16(fmt::format("fp8_swiglu I={} ({})", I, impl).c_str(), g["out"], r["out"], size_t(off.back() * I),
                 tol_of("moe_grouped_gemm_fp8_swiglu"));
    }
    if (is_sm90a() && !tall_fits) {  // the tall builds by name refuse, and say why
      std::string why;
      run(gpu(), "moe_grouped_gemm_fp8_swiglu", plain, {}, nullptr, "sm90.tall", &why);
      std::printf("  sm90.tall, I=%lld: %s\n", (long long)I, why.c_str());
      CHECK(why.find("not a multiple of 64") != std::string::npos);
    }
    if (is_sm90a() && tall_fits && !mc_fits) {  // the cluster builds refuse an odd n-tile count
      std::string why;
      run(gpu(), "moe_grouped_gemm_fp8_swiglu", plain, {}, nullptr, "sm90.tallmc", &why);
      std::printf("  sm90.tallmc, I=%lld: %s\n", (long long)I, why.c_str());
      CHECK(why.find("is odd") != std::string::npos);
    }
    // Gather: 97 tokens, topk 8; row r reads token row_to_slot[r] / 8.
    const int64_t T = 97, topk = 8;
    std::uniform_int_distribution<int32_t> slot(0, int32_t(T * topk - 1));
    std::vector<int32_t> r2s(static_cast<size_t>(R));
    for (auto& s : r2s) s = slot(rng);
    HostTensors gat = w;
    gat["x"] = {ops::DType::e4m3, {{T, H}, random_e4m3(size_t(T * H), rng)}};
    gat["x_scale"] = {ops::DType::f32, {{T, HG}, bytes_of(random_scales(size_t(T * HG), rng))}};
    gat["row_to_slot"] = {ops::DType::i32, {{R}, bytes_of(r2s)}};
    auto rg = run(cpu(), "moe_grouped_gemm_fp8_swiglu_gather", gat, {{"topk", "8"}}, nullptr);
    for (const std::string& v : variants(true)) {
      auto gg = run(gpu(), "moe_grouped_gemm_fp8_swiglu_gather", gat, {{"topk", "8"}}, &impl, v);
      if (v.empty()) expect_sm90(impl, R, EL, true);
      check_bf16(fmt::format("fp8_swiglu_gather I={} ({})", I, impl).c_str(), gg["out"], rg["out"],
                 size_t(off.back() * I), tol_of("moe_grouped_gemm_fp8_swiglu_gather"));
    }
  }
}

// The quantizing SwiGLU GEMM: on sm_90a bit for bit sm90.tallmc followed by moe_quantize_fp8 (the
// same h, rounded to bf16 the same way; the group maxima exchanged between the cluster's CTAs),
// rows past the experts' untouched; against the CPU reference within the contract's tolerances.
// I = 2048 (DeepSeek-V3's) with several tiles a cluster, so that the exchange runs more than once
// per consumer; experts of 0, 1, 15-17 rows give consumers with no rows.
TEST_CASE("moe_grouped_gemm_fp8_swiglu_quant: sm90.tallmc + moe_quantize_fp8 bit for bit, H = 7168") {
  std::mt19937 rng(17);
  const int64_t H = 7168, HG = 56;
  for (auto [I, counts] : {std::pair<int64_t, std::vector<int32_t>>{256, kCounts}, {128, kCounts},
                           {2048, {0, 17, 130, 300, 256, 1}}}) {
    const auto off = offsets_of(counts);
    const int64_t EL = int64_t(counts.size()), R = off.back() + 5, NB = (2 * I + 127) / 128, IG = I / 128;
    CAPTURE(I);
    HostTensors in{{"w_gate_up", {ops::DType::e4m3, {{EL, 2 * I, H}, random_e4m3(size_t(EL * 2 * I * H), rng)}}},
                   {"w_scale", {ops::DType::f32, {{EL, NB, HG}, bytes_of(random_scales(size_t(EL * NB * HG), rng))}}},
                   {"expert_offsets", {ops::DType::i32, {{EL + 1}, bytes_of(off)}}},
                   {"a", {ops::DType::e4m3, {{R, H}, random_e4m3(size_t(R * H), rng)}}},
                   {"a_scale", {ops::DType::f32, {{R, HG}, bytes_of(random_scales(size_t(R * HG), rng))}}}};
    std::string impl;
    auto g = run(gpu(), "moe_grouped_gemm_fp8_swiglu_quant", in, {}, &impl);
    if (!is_sm90a()) {
      CHECK(impl == "sm80.none");
      continue;
    }
    CHECK(impl == "sm90.tallmc");
    const size_t used = size_t(off.back());
    // The composition on the GPU: the plain clustered build's bf16 h, then moe_quantize_fp8.
    auto h = run(gpu(), "moe_grouped_gemm_fp8_swiglu", in, {}, nullptr, "sm90.tallmc");
    h["out"].resize(used * size_t(I) * 2);
    auto q = run(gpu(), "moe_quantize_fp8", {{"x", {ops::DType::bf16, {{int64_t(used), I}, h["out"]}}}}, {}, nullptr);
    size_t qdiff = 0, sdiff = 0, touched = 0;
    for (size_t i = 0; i < used * size_t(I); ++i) qdiff += g["q"][i] != q["q"][i];
    for (size_t i = 0; i < used * size_t(IG) * 4; ++i) sdiff += g["q_scale"][i] != q["scale"][i];
    for (size_t i = used * size_t(I); i < g["q"].size(); ++i) touched += g["q"][i] != 0xff;
    for (size_t i = used * size_t(IG) * 4; i < g["q_scale"].size(); ++i) touched += g["q_scale"][i] != 0xff;
    std::printf("  fp8_swiglu_quant I=%lld (%s): %zu q bytes and %zu scale bytes differ from sm90.tallmc + "
                "moe_quantize_fp8; %zu bytes past the experts' rows written\n",
                (long long)I, impl.c_str(), qdiff, sdiff, touched);
    CHECK(qdiff == 0);
    CHECK(sdiff == 0);
    CHECK(touched == 0);
    if (I > 256) continue;  // the CPU reference at I = 2048 would take minutes
    auto r = run(cpu(), "moe_grouped_gemm_fp8_swiglu_quant", in, {}, nullptr);
    const ops::Contract* c = ops::find_contract("moe_grouped_gemm_fp8_swiglu_quant");
    double num = 0, den = 0;
    for (size_t i = 0; i < used * size_t(IG); ++i) {
      float gv, wv;
      std::memcpy(&gv, &g["q_scale"][4 * i], 4);
      std::memcpy(&wv, &r["q_scale"][4 * i], 4);
      num += double(gv - wv) * double(gv - wv);
      den += double(wv) * double(wv);
    }
    const size_t far = e4m3_beyond(g["q"], r["q"], used * size_t(I), c->find_tensor("q")->tolerance);
    const double es = std::sqrt(num / den);
    std::printf("  fp8_swiglu_quant I=%lld against the CPU: %zu q codes beyond the contract's tolerance, scales rel err "
                "%.3g (%.3g)\n",
                (long long)I, far, es, c->find_tensor("q_scale")->tolerance.rel);
    CHECK(far == 0);
    CHECK(es <= c->find_tensor("q_scale")->tolerance.rel);
  }
  // I % 128 != 0: the quantizing build refuses, and says why.
  if (is_sm90a()) {
    const int64_t I = 192, EL = 2, R = 64;
    const std::vector<int32_t> off{0, 30, 64};
    HostTensors in{{"w_gate_up", {ops::DType::e4m3, {{EL, 2 * I, H}, random_e4m3(size_t(EL * 2 * I * H), rng)}}},
                   {"w_scale", {ops::DType::f32, {{EL, 3, HG}, bytes_of(random_scales(size_t(EL * 3 * HG), rng))}}},
                   {"expert_offsets", {ops::DType::i32, {{EL + 1}, bytes_of(off)}}},
                   {"a", {ops::DType::e4m3, {{R, H}, random_e4m3(size_t(R * H), rng)}}},
                   {"a_scale", {ops::DType::f32, {{R, HG}, bytes_of(random_scales(size_t(R * HG), rng))}}}};
    std::string why;
    run(gpu(), "moe_grouped_gemm_fp8_swiglu_quant", in, {}, nullptr, "", &why);
    std::printf("  fp8_swiglu_quant I=192: %s\n", why.c_str());
    CHECK(why.find("I % 128 == 0") != std::string::npos);
  }
}

TEST_CASE("moe_grouped_gemm_fp8 (down), H = 7168 and odd sizes") {
  std::mt19937 rng(13);
  const auto off = offsets_of(kCounts);
  const int64_t EL = int64_t(kCounts.size()), R = off.back() + 3;
  for (auto [I, H] : {std::pair<int64_t, int64_t>{2048, 7168}, {336, 200}}) {
    const int64_t IG = (I + 127) / 128, HB = (H + 127) / 128;
    HostTensors in{{"a", {ops::DType::e4m3, {{R, I}, random_e4m3(size_t(R * I), rng)}}},
                   {"a_scale", {ops::DType::f32, {{R, IG}, bytes_of(random_scales(size_t(R * IG), rng))}}},
                   {"w", {ops::DType::e4m3, {{EL, H, I}, random_e4m3(size_t(EL * H * I), rng)}}},
                   {"w_scale", {ops::DType::f32, {{EL, HB, IG}, bytes_of(random_scales(size_t(EL * HB * IG), rng))}}},
                   {"expert_offsets", {ops::DType::i32, {{EL + 1}, bytes_of(off)}}}};
    std::string impl;
    auto r = run(cpu(), "moe_grouped_gemm_fp8", in, {}, nullptr);
    for (const std::string& v : variants()) {
      auto g = run(gpu(), "moe_grouped_gemm_fp8", in, {}, &impl, v);
      if (v.empty()) expect_sm90(impl, R, EL, false, true, true);
      check_bf16(fmt::format("fp8 down I={} H={} ({})", I, H, impl).c_str(), g["out"], r["out"],
                 size_t(off.back() * H), tol_of("moe_grouped_gemm_fp8"));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto dev = Device::open("cuda:0");
  if (!dev) {
    std::printf("SKIPPED: no CUDA device can be opened: %s\n", dev.error().to_string().c_str());
    return 77;
  }
  auto info = dev->info();
  if (info) std::printf("testing on %s: %s (%s, %u SMs)\n", info->uri, info->name, info->arch, info->compute_units);
  for (const char* op : {"moe_quantize_fp8", "moe_permute_fp8", "moe_grouped_gemm_fp8_swiglu",
                         "moe_grouped_gemm_fp8_swiglu_gather", "moe_grouped_gemm_fp8_swiglu_quant",
                         "moe_grouped_gemm_fp8"}) {
    std::string why;
    const ops::OpImpl* impl = ops::select_impl(*dev, op, &why);
    std::printf("  %-36s -> %s\n", op, impl ? impl->name.c_str() : why.c_str());
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
