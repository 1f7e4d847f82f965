// The MoeLayer object with FP8 experts on cuda:0 (issue 19). The FP8 operators have their own
// GPU tests (test_ptx_fp8.cpp); this one runs the layer that composes them, as a user calls it:
// quantize-first copy path (token rows quantized, their e4m3 rows and scales permuted as bf16
// views) and the gather path, at token counts that make the registry take each FP8 GEMM build
// (64-token, 128-token and tall tiles). After each forward() every stage is checked against the
// CPU reference fed with the GPU's own input to that stage (the workspace holds them all):
// quantizations and the permuted copy bit for bit, the GEMMs and the combine within their
// contracts' tolerances; then the GPU layer's output against the CPU device's FP8 layer on the
// same weights, token by token where both routed alike. Exits 77 (skipped) without a device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halcyon/kernels/reference/moe_fp8.hpp>
#include <halcyon/ops/contract.hpp>
#include <halcyon/runtime/moe_layer.hpp>
#include <halcyon/runtime/moe_reference.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime_test_support.hpp"

namespace ref = halcyon::ref;
using namespace halcyon::rt;
using halcyon::Device;
using halcyon::ops::DType;
using test::download;
using test::unwrap;
using test::upload;

namespace {

// H = 1024 (8 scale groups), I = 256 (I % 64 == 0: the tall builds take the SwiGLU GEMM),
// 16 experts, top-4 of 4 groups (top 2).
MoeLayerConfig config() {
  MoeLayerConfig c;
  c.hidden = 1024;
  c.inter = 256;
  c.experts = 16;
  c.topk = 4;
  c.n_groups = 4;
  c.topk_groups = 2;
  return c;
}

struct HostLayer {
  std::vector<uint16_t> w_router, x;
  std::vector<float> bias;
  MoeHostFp8Weights fp8;  // e4m3 bits and block scales
};

HostLayer random_layer(const MoeLayerConfig& c, int64_t T, std::mt19937& rng) {
  const int64_t H = c.hidden, I = c.inter, E = c.experts;
  HostLayer h;
  h.w_router = test::random_bf16(size_t(H * E), 0.1f, rng);
  h.x = test::random_bf16(size_t(T * H), 1.0f, rng);
  h.bias.resize(size_t(E));
  for (auto& b : h.bias) b = std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng);
  std::uniform_real_distribution<float> u(-448.f, 448.f), sc(0.0002f, 0.0006f);
  MoeHostFp8Weights& f = h.fp8;
  f.w_gate_up.resize(size_t(E * 2 * I * H));
  f.w_down.resize(size_t(E * H * I));
  for (auto& v : f.w_gate_up) v = ref::float_to_e4m3(u(rng)).bits;
  for (auto& v : f.w_down) v = ref::float_to_e4m3(u(rng)).bits;
  f.w_gate_up_scale.resize(size_t(E * ref::fp8_groups(2 * I) * ref::fp8_groups(H)));
  f.w_down_scale.resize(size_t(E * ref::fp8_groups(H) * ref::fp8_groups(I)));
  for (auto& v : f.w_gate_up_scale) v = sc(rng);
  for (auto& v : f.w_down_scale) v = sc(rng);
  return h;
}

// FP8 experts only: the layer has no bf16 expert weights to fall back on.
MoeLayerWeights upload_weights(const Device& d, const halcyon::Stream& s, const MoeLayerConfig& c, const HostLayer& h) {
  const int64_t H = c.hidden, I = c.inter, E = c.experts;
  MoeLayerWeights w;
  w.w_router = upload(d, s, DType::bf16, {H, E}, h.w_router);
  w.bias = upload(d, s, DType::f32, {E}, h.bias);
  const MoeHostFp8Weights& f = h.fp8;
  w.fp8 = MoeFp8Weights{upload(d, s, DType::e4m3, {E, 2 * I, H}, f.w_gate_up),
                        upload(d, s, DType::f32, {E, ref::fp8_groups(2 * I), ref::fp8_groups(H)}, f.w_gate_up_scale),
                        upload(d, s, DType::e4m3, {E, H, I}, f.w_down),
                        upload(d, s, DType::f32, {E, ref::fp8_groups(H), ref::fp8_groups(I)}, f.w_down_scale)};
  return w;
}

struct LayerRun {
  std::vector<uint16_t> out;
  std::vector<int32_t> ids;
};

// One forward() of a fresh layer on `d` (output poisoned with NaN first); `check` sees the layer
// and its stream after the call.
template <typename Check>
// quant_impl: an implementation of moe_grouped_gemm_fp8_swiglu_quant to name (the copy path then
// quantizes h in the SwiGLU GEMM's epilogue; unnamed, the layer takes it only where it pays).
LayerRun run_layer(const Device& d, const MoeLayerConfig& c, const HostLayer& h, int64_t T, MoePath path, Check check,
                   const std::string& quant_impl = "") {
  auto s = unwrap(d.create_stream());
  MoeLayerOptions o;
  o.path = path;
  if (!quant_impl.empty()) o.impl["moe_grouped_gemm_fp8_swiglu_quant"] = quant_impl;
  auto layer = unwrap(MoeLayer::create(d, c, upload_weights(d, s, c, h), o));
  REQUIRE(layer.runs_fp8());
  CHECK(layer.gathers_rows() == (path == MoePath::kGather));
  auto x = upload(d, s, DType::bf16, {T, c.hidden}, h.x);
  auto out = unwrap(halcyon::ops::make_tensor(d, DType::bf16, {T, c.hidden}));
  unwrap(s.fill<uint16_t>(out.buffer, 0, out.bytes(), 0x7FC1));
  MoeStageTimes times;
  unwrap(layer.forward(s, x, out, &times));
  CHECK(times.up > 0);
  CHECK(times.down > 0);
  CHECK(times.quant >= 0);
  CHECK(layer.quantized_in_up_gemm() == (!quant_impl.empty() && path == MoePath::kCopy));
  check(layer, s);
  return {download<uint16_t>(s, out), download<int32_t>(s, layer.workspace().at("topk_ids"))};
}

template <typename T>
std::vector<T> rows_of(const halcyon::Stream& s, const halcyon::ops::Tensor& t, int64_t rows) {
  std::vector<T> v = download<T>(s, t);
  const size_t n = size_t(rows) * size_t(t.shape.size() > 1 ? t.shape[1] : 1);
  REQUIRE(v.size() >= n);
  v.resize(n);
  return v;
}

const ref::e4m3* e4(const std::vector<uint8_t>& v) { return reinterpret_cast<const ref::e4m3*>(v.data()); }
ref::e4m3* e4(std::vector<uint8_t>& v) { return reinterpret_cast<ref::e4m3*>(v.data()); }
std::vector<ref::bf16> bf(const std::vector<uint16_t>& v) {
  std::vector<ref::bf16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i].bits = v[i];
  return b;
}
std::vector<uint16_t> bits(const std::vector<ref::bf16>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
  return b;
}

// ||got - want|| / ||want|| over bf16 values, and whether any got is not finite.
double rel_error(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, bool* finite) {
  REQUIRE(got.size() == want.size());
  double num = 0, den = 0;
  *finite = true;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = ref::bf16_to_float({got[i]}), w = ref::bf16_to_float({want[i]});
    if (!std::isfinite(g)) *finite = false;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// ||got - want|| / ||want|| of two value lists (both finite).
double rel_error_of(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// A bf16 stage output against the reference at the contract's tolerance for `op`'s `out`.
void check_stage(const char* op, const std::vector<uint16_t>& got, const std::vector<ref::bf16>& want,
                 const std::string& what) {
  const double tol = halcyon::ops::find_contract(op)->find_tensor("out")->tolerance.rel;
  bool finite = false;
  const double e = rel_error(got, bits(want), &finite);
  std::printf("  %-52s rel err %.3g (contract %.3g)\n", what.c_str(), e, tol);
  CHECK_MESSAGE(finite, what, ": non-finite output");
  CHECK_MESSAGE(e <= tol, what);
}

// Every stage of the FP8 experts after one forward(), from the layer's workspace.
void check_stages(const MoeLayer& layer, const halcyon::Stream& s, const MoeLayerConfig& c, const HostLayer& h,
                  int64_t T, const std::string& tag) {
  const auto& ws = layer.workspace();
  const int64_t H = c.hidden, I = c.inter, E = c.experts, K = c.topk, HG = ref::fp8_groups(H), IG = ref::fp8_groups(I);
  const std::vector<int32_t> offsets = download<int32_t>(s, ws.at("expert_offsets"));
  const int64_t R = offsets.back();
  REQUIRE(R > 0);
  REQUIRE(R <= T * K);
  const std::vector<int32_t> r2s = rows_of<int32_t>(s, ws.at("row_to_slot"), R);
  // 1. The token rows quantized by the reference (the gather path's a_q holds them).
  const bool gather = layer.gathers_rows();
  std::vector<uint8_t> tq(size_t(T * H));
  std::vector<float> ts(size_t(T * HG));
  REQUIRE(ref::moe_quantize_fp8(bf(h.x).data(), T, H, e4(tq), ts.data()));
  if (gather) {
    CHECK_MESSAGE(rows_of<uint8_t>(s, ws.at("a_q"), T) == tq, tag, ": a_q differs from the reference");
    CHECK_MESSAGE(rows_of<float>(s, ws.at("a_scale"), T) == ts, tag, ": a_scale differs from the reference");
  }
  // 2. The copy path's permuted e4m3 rows and scales (moe_permute_fp8): row r holds token
  // row_to_slot[r] / K quantized.
  std::vector<uint8_t> aq;
  std::vector<float> as;
  if (!gather) {
    aq = rows_of<uint8_t>(s, ws.at("a_q"), R);
    as = rows_of<float>(s, ws.at("a_scale"), R);
    int64_t bad = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r2s[size_t(r)] / K;
      REQUIRE((t >= 0 && t < T));
      bad += std::memcmp(&aq[size_t(r * H)], &tq[size_t(t * H)], size_t(H)) != 0 ||
             std::memcmp(&as[size_t(r * HG)], &ts[size_t(t * HG)], size_t(HG) * 4) != 0;
    }
    CHECK_MESSAGE(bad == 0, tag, ": ", bad, " permuted rows are not their token's quantized row");
  }
  // 3. The SwiGLU GEMM from the GPU's quantized rows.
  std::vector<ref::bf16> want_h(size_t(R * I));
  if (gather)
    REQUIRE(ref::moe_grouped_gemm_fp8_swiglu_gather(e4(tq), ts.data(), T, K, r2s.data(), e4(h.fp8.w_gate_up), h.fp8.w_gate_up_scale.data(),
                                                    offsets.data(), E + 1, E, R, H, I, want_h.data()));
  else
    REQUIRE(ref::moe_grouped_gemm_fp8_swiglu(e4(aq), as.data(), e4(h.fp8.w_gate_up), h.fp8.w_gate_up_scale.data(), offsets.data(), E + 1, E, R, H,
                                             I, want_h.data()));
  std::vector<uint8_t> hq(size_t(R * I));
  std::vector<float> hs(size_t(R * IG));
  if (!layer.quantized_in_up_gemm()) {
    const std::vector<uint16_t> hidden = rows_of<uint16_t>(s, ws.at("hidden"), R);
    check_stage(gather ? "moe_grouped_gemm_fp8_swiglu_gather" : "moe_grouped_gemm_fp8_swiglu", hidden, want_h,
                tag + ": SwiGLU GEMM");
    // 4. The SwiGLU output quantized, from the GPU's hidden rows.
    REQUIRE(ref::moe_quantize_fp8(bf(hidden).data(), R, I, e4(hq), hs.data()));
    CHECK_MESSAGE(rows_of<uint8_t>(s, ws.at("hidden_q"), R) == hq, tag, ": hidden_q differs from the reference");
    CHECK_MESSAGE(rows_of<float>(s, ws.at("hidden_scale"), R) == hs, tag, ": hidden_scale differs from the reference");
  } else {
    // 3-4 fused (moe_grouped_gemm_fp8_swiglu_quant): h quantized in the GEMM's epilogue, against
    // the reference quantization of the reference h at the contract's tolerances.
    std::vector<uint8_t> want_q(size_t(R * I));
    std::vector<float> want_s(size_t(R * IG));
    REQUIRE(ref::moe_quantize_fp8(want_h.data(), R, I, e4(want_q), want_s.data()));
    hq = rows_of<uint8_t>(s, ws.at("hidden_q"), R);
    hs = rows_of<float>(s, ws.at("hidden_scale"), R);
    const auto* contract = halcyon::ops::find_contract("moe_grouped_gemm_fp8_swiglu_quant");
    // The contract's `steps n abs a`: each code within n codes (+0 and -0 one value) or a in value.
    const auto& tq = contract->find_tensor("q")->tolerance;
    auto rank = [](uint8_t c) { return c < 0x80 ? int(c) : -int(c - 0x80); };
    size_t far = 0;
    for (size_t i = 0; i < hq.size(); ++i)
      far += std::abs(rank(hq[i]) - rank(want_q[i])) > tq.steps &&
             std::fabs(ref::e4m3_to_float({hq[i]}) - ref::e4m3_to_float({want_q[i]})) > tq.abs;
    const double es = rel_error_of(std::vector<double>(hs.begin(), hs.end()),
                                   std::vector<double>(want_s.begin(), want_s.end()));
    std::printf("  %-52s %zu q codes beyond the contract's tolerance, scales rel err %.3g\n",
                (tag + ": SwiGLU GEMM, quantized").c_str(), far, es);
    CHECK_MESSAGE(far == 0, tag, ": hidden_q");
    CHECK_MESSAGE(es <= contract->find_tensor("q_scale")->tolerance.rel, tag, ": hidden_scale");
  }
  // 5. The down GEMM from the GPU's quantized hidden rows.
  std::vector<ref::bf16> want_y(size_t(R * H));
  REQUIRE(ref::moe_grouped_gemm_fp8(e4(hq), hs.data(), e4(h.fp8.w_down), h.fp8.w_down_scale.data(), offsets.data(), E + 1, E, R, I, H,
                                    want_y.data()));
  const std::vector<uint16_t> y = rows_of<uint16_t>(s, ws.at("expert_out"), R);
  check_stage("moe_grouped_gemm_fp8", y, want_y, tag + ": down GEMM");
}

}  // namespace

TEST_CASE("MoeLayer with FP8 experts on cuda:0: every stage against the reference, both paths, each GEMM build") {
  const MoeLayerConfig c = config();
  auto gpu = unwrap(Device::open("cuda:0"));
  auto cpu = unwrap(Device::open("cpu"));
  // 40 tokens: ~10 rows an expert (64-token tiles); 300: ~75 (128-token tiles); 500: ~125 (tall);
  // 640: 160 (2-CTA clusters), run again with the quantizing SwiGLU GEMM named.
  for (int64_t T : {40, 300, 500, 640, -640}) {
    const bool named_quant = T < 0;
    T = std::abs(T);
    std::mt19937 rng(uint32_t(11 + T));
    const HostLayer h = random_layer(c, T, rng);
    for (MoePath path : {MoePath::kCopy, MoePath::kGather}) {
      if (named_quant && path != MoePath::kCopy) continue;
      const std::string tag = fmt::format("T={} {}{}", T, path == MoePath::kCopy ? "copy" : "gather",
                                          named_quant ? " (quantizing SwiGLU GEMM)" : "");
      CAPTURE(tag);
      std::vector<ref::bf16> want_out;
      LayerRun g = run_layer(gpu, c, h, T, path, [&](const MoeLayer& layer, const halcyon::Stream& s) {
        check_stages(layer, s, c, h, T, tag);
        // 6. The combine, from the GPU's expert rows and routing (compared below with the output).
        const auto& ws = layer.workspace();
        const int64_t R = download<int32_t>(s, ws.at("expert_offsets")).back();
        const auto y = rows_of<uint16_t>(s, ws.at("expert_out"), R);
        const auto tw = download<float>(s, ws.at("topk_weights"));
        const auto s2r = download<int32_t>(s, ws.at("slot_to_row"));
        want_out.resize(size_t(T * c.hidden));
        REQUIRE(ref::moe_combine(bf(y).data(), R, tw.data(), s2r.data(), T, c.topk, c.hidden, want_out.data()));
      }, named_quant ? "sm90.tallmc" : "");
      check_stage("moe_combine", g.out, want_out, tag + ": combine");
      // 7. The whole layer against the CPU device's, where both routed a token alike. The two
      // SwiGLU outputs differ within a bf16 rounding, which can move an e4m3 code of hidden_q by
      // one (up to 2^-3 of the value), so the bound is looser than one GEMM's.
      LayerRun r = run_layer(cpu, c, h, T, path, [](const MoeLayer&, const halcyon::Stream&) {});
      double num = 0, den = 0;
      int64_t same = 0;
      bool finite = true;
      for (int64_t t = 0; t < T; ++t) {
        const auto a = std::set<int32_t>(g.ids.begin() + t * c.topk, g.ids.begin() + (t + 1) * c.topk);
        const auto b = std::set<int32_t>(r.ids.begin() + t * c.topk, r.ids.begin() + (t + 1) * c.topk);
        for (int64_t i = 0; i < c.hidden; ++i) finite = finite && std::isfinite(ref::bf16_to_float({g.out[size_t(t * c.hidden + i)]}));
        if (a != b) continue;
        ++same;
        for (int64_t i = 0; i < c.hidden; ++i) {
          const double gv = ref::bf16_to_float({g.out[size_t(t * c.hidden + i)]});
          const double wv = ref::bf16_to_float({r.out[size_t(t * c.hidden + i)]});
          num += (gv - wv) * (gv - wv);
          den += wv * wv;
        }
      }
      const double e = den > 0 ? std::sqrt(num / den) : 0;
      std::printf("  %-52s %lld of %lld tokens routed alike, rel err %.3g against the CPU layer\n", tag.c_str(),
                  (long long)same, (long long)T, e);
      CHECK(finite);
      CHECK(same * 10 >= T * 9);
      CHECK(e <= 3e-2);
    }
  }
}

int main(int argc, char** argv) {
  auto dev = Device::open("cuda:0");
  if (!dev) {
    std::printf("SKIPPED: no CUDA device can be opened: %s\n", dev.error().to_string().c_str());
    return 77;
  }
  auto info = dev->info();
  if (info) std::printf("testing on %s: %s (%s, %u SMs)\n", info->uri, info->name, info->arch, info->compute_units);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
