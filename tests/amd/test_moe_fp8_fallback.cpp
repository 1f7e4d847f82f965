// A MoE layer given only FP8 experts on the simulated GCN targets. Both run the FP8 path (the
// grouped GEMMs on gfx942's FP8 MFMA, on gfx90a e4m3 decoded to bf16 for its bf16 MFMA; the
// quantization on integers): against the host FP8 reference layer; the C ABI's request to
// dequantize elsewhere (hrt_moe_fp8_weights.dequantize_elsewhere) changes nothing there. No
// simulated device lacks FP8 GEMM kernels any more, so the fallback is tested by naming
// gfx90a.none for moe_grouped_gemm_fp8 (MoeLayerOptions::impl; it stands for a device without
// one): create() fails with the reason, or, with MoeFp8Fallback::kDequantize, dequantizes the
// weights once and runs the bf16 GCN experts, which then match the host reference layer on the
// same dequantized weights; through the C ABI the same, gfx90a.none named by an
// hrt_moe_layer_impls (ABI 1.10).
#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/kernels/reference/e4m3.hpp>
#include <halcyon/runtime.h>
#include <halcyon/runtime/moe_layer.hpp>
#include <halcyon/runtime/moe_reference.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "sim_harness.hpp"

using namespace amdtest;
using namespace halcyon::rt;
namespace ref = halcyon::ref;
using halcyon::ops::DType;

namespace {

// The test's own dequantization (the oracle's weights): q [N, K] with scales [ceil(N/128),
// ceil(K/128)] -> bf16 [K, N], each weight e4m3 x scale in fp32, rounded once.
void dequantize_into(const std::vector<uint8_t>& q, const std::vector<float>& s, int64_t EL, int64_t N, int64_t K,
                     std::vector<uint16_t>* out) {
  const int64_t NB = (N + 127) / 128, KB = (K + 127) / 128;
  out->assign(size_t(EL * N * K), 0);
  for (int64_t e = 0; e < EL; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float v = ref::e4m3_to_float({q[size_t((e * N + n) * K + k)]}) * s[size_t((e * NB + n / 128) * KB + k / 128)];
        (*out)[size_t((e * K + k) * N + n)] = ref::float_to_bf16(v).bits;
      }
}

// The test's layer: 8 experts of H 256, I 128, its FP8 weights, router and 12 tokens, on the host
// and (upload) on a simulated device.
struct Fp8Layer {
  MoeLayerConfig c;
  int64_t H = 256, I = 128, E = 8, T = 12;
  MoeHostFp8Weights f;
  MoeHostWeights hw;
  std::vector<uint16_t> x;
  Fp8Layer() {
    c.hidden = H, c.inter = I, c.experts = E, c.topk = 2, c.n_groups = 1, c.topk_groups = 1;
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> code(-448.f, 448.f), scale(0.0002f, 0.0006f);
    f.w_gate_up.resize(size_t(E * 2 * I * H));
    f.w_down.resize(size_t(E * H * I));
    for (auto* v : {&f.w_gate_up, &f.w_down})
      for (auto& b : *v) b = ref::float_to_e4m3(code(rng)).bits;
    f.w_gate_up_scale.resize(size_t(E * 2 * 2));  // [E, ceil(2I/128) = 2, ceil(H/128) = 2]
    f.w_down_scale.resize(size_t(E * 2 * 1));     // [E, ceil(H/128) = 2, ceil(I/128) = 1]
    for (auto* v : {&f.w_gate_up_scale, &f.w_down_scale})
      for (auto& s : *v) s = scale(rng);
    for (float v : random_floats(size_t(H * E), 11, -0.1f, 0.1f)) hw.w_router.push_back(to_bf16(v));
    hw.bias = random_floats(size_t(E), 12, -0.05f, 0.05f);
    for (float v : random_floats(size_t(T * H), 13)) x.push_back(to_bf16(v));
  }
  template <typename V>
  halcyon::ops::Tensor tensor(Sim& sim, const V& host, DType dt, std::vector<int64_t> shape) const {
    return halcyon::ops::Tensor{sim.upload(host), 0, dt, std::move(shape)};
  }
  MoeLayerWeights upload(Sim& sim) const {
    MoeLayerWeights w;
    w.w_router = tensor(sim, hw.w_router, DType::bf16, {H, E});
    w.bias = tensor(sim, hw.bias, DType::f32, {E});
    w.fp8 = MoeFp8Weights{tensor(sim, f.w_gate_up, DType::e4m3, {E, 2 * I, H}),
                          tensor(sim, f.w_gate_up_scale, DType::f32, {E, 2, 2}),
                          tensor(sim, f.w_down, DType::e4m3, {E, H, I}), tensor(sim, f.w_down_scale, DType::f32, {E, 2, 1})};
    return w;
  }
  // The layer's forward on the device, downloaded.
  std::vector<uint16_t> forward(Sim& sim, MoeLayer& layer) const {
    auto tx = tensor(sim, x, DType::bf16, {T, H});
    halcyon::ops::Tensor out{sim.poisoned<uint16_t>(size_t(T * H)), 0, DType::bf16, {T, H}};
    must(layer.forward(sim.stream, tx, out), "forward");
    return sim.download<uint16_t>(out.buffer, size_t(T * H));
  }
};

// The relative (Frobenius) error of got against want; every value of got finite.
double relative_error(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = from_bf16(got[i]), e = from_bf16(want[i]);
    REQUIRE(std::isfinite(g));
    num += (g - e) * (g - e);
    den += e * e;
  }
  REQUIRE(den > 0);
  return std::sqrt(num / den);
}

// The layer through the C ABI: the FP8 weights with `dequantize` as dequantize_elsewhere, and
// `impls` as an hrt_moe_layer_impls (none when empty). Returns the create's error (the caller
// frees it), else runs the layer: *info and *out.
hal_error* c_abi_layer(Sim& sim, const Fp8Layer& L, const MoeLayerWeights& w, uint32_t dequantize,
                       const std::vector<hrt_op_impl>& impls, hrt_moe_layer_info* info, std::vector<uint16_t>* out) {
  hrt_moe_layer_impls named{HRT_MOE_LAYER_IMPLS_SIZE, nullptr, HRT_EXTENSION_MOE_LAYER_IMPLS, uint32_t(impls.size()),
                            impls.data()};
  hrt_moe_fp8_weights f8{HRT_MOE_FP8_WEIGHTS_SIZE, impls.empty() ? nullptr : &named, HRT_EXTENSION_MOE_FP8_WEIGHTS,
                         w.fp8->w_gate_up.buffer.get(), w.fp8->w_gate_up_scale.buffer.get(), w.fp8->w_down.buffer.get(),
                         w.fp8->w_down_scale.buffer.get(), dequantize};
  hrt_moe_layer_desc d{};
  d.struct_size = HRT_MOE_LAYER_DESC_SIZE;
  d.next = &f8;
  const MoeLayerConfig& c = L.c;
  d.hidden = L.H, d.inter = L.I, d.experts = L.E, d.topk = c.topk, d.n_groups = c.n_groups;
  d.topk_groups = c.topk_groups, d.local_experts = -1, d.normalize = c.normalize, d.routed_scale = c.routed_scale;
  d.softmax = c.score == "softmax";
  d.w_router = w.w_router.buffer.get();
  d.bias = w.bias->buffer.get();
  hrt_moe_layer cl = nullptr;
  if (hal_error* err = hrt_moe_layer_create(sim.dev.get(), &d, &cl)) return err;
  info->struct_size = HRT_MOE_LAYER_INFO_SIZE;
  REQUIRE(hrt_moe_layer_get_info(cl, info) == nullptr);
  auto tx = L.tensor(sim, L.x, DType::bf16, {L.T, L.H});
  halcyon::ops::Tensor out_c{sim.poisoned<uint16_t>(size_t(L.T * L.H)), 0, DType::bf16, {L.T, L.H}};
  REQUIRE(hrt_moe_layer_forward(cl, sim.stream.get(), tx.buffer.get(), out_c.buffer.get(), L.T) == nullptr);
  *out = sim.download<uint16_t>(out_c.buffer, size_t(L.T * L.H));
  hrt_moe_layer_destroy(cl);
  return nullptr;
}

// The C ABI with dequantize_elsewhere = 1 where FP8 runs: FP8 experts, the same bits as \p want.
void c_abi_same(Sim& sim, const Fp8Layer& L, const MoeLayerWeights& w, const std::vector<uint16_t>& want) {
  hrt_moe_layer_info info{};
  std::vector<uint16_t> got;
  hal_error* err = c_abi_layer(sim, L, w, 1, {}, &info, &got);
  REQUIRE_MESSAGE(err == nullptr, hal_error_message(err));
  CHECK(info.fp8_experts == 1);
  CHECK(info.fp8_dequantized == 0);
  CHECK(got == want);
}

}  // namespace

TEST_CASE("FP8 experts on the simulated gfx942 and gfx90a: the FP8 path, against the host FP8 reference layer") {
  const Fp8Layer L;
  std::vector<uint16_t> want;
  must(moe_layer_reference_fp8(L.c, L.hw, L.f, L.x, L.T, &want), "reference");
  for (const std::string arch : {"gfx942", "gfx90a"}) {
    CAPTURE(arch);
    Sim sim(arch);
    MoeLayerOptions o;
    o.fp8_fallback = MoeFp8Fallback::kDequantize;  // not taken: every FP8 operator the layer runs has a kernel
    const MoeLayerWeights w = L.upload(sim);
    auto layer = must(MoeLayer::create(sim.dev, L.c, w, o), "create");
    CHECK(layer.runs_fp8());
    CHECK_FALSE(layer.dequantized_fp8());
    const std::vector<uint16_t> got = L.forward(sim, layer);
    // The reference sums in fp64 and the kernels in fp32 per group, so h (quantized to e4m3 for the
    // down GEMM) may round one code apart: the same bound as the demo's check.
    CHECK_MESSAGE(relative_error(got, want) <= 1e-2, "relative error " << relative_error(got, want));
    c_abi_same(sim, L, w, got);
  }
}

TEST_CASE("FP8 experts without an FP8 GEMM kernel (gfx90a.none named): refused with the reason, or dequantized to bf16 on request") {
  Sim sim("gfx90a");
  const Fp8Layer L;
  const MoeLayerConfig& c = L.c;
  const int64_t H = L.H, I = L.I, E = L.E, T = L.T;
  const MoeHostFp8Weights& f = L.f;
  MoeHostWeights hw = L.hw;
  MoeLayerWeights w = L.upload(sim);
  MoeLayerOptions o;
  o.impl = {{"moe_grouped_gemm_fp8", "gfx90a.none"}};
  auto refused = MoeLayer::create(sim.dev, c, w, o);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().status() == HAL_UNSUPPORTED);
  CHECK_MESSAGE(refused.error().message().find("no FP8 GEMM kernel in gfx90a.none") != std::string::npos,
                refused.error().message());
  CHECK(refused.error().message().find("fp8_fallback") != std::string::npos);

  o.fp8_fallback = MoeFp8Fallback::kDequantize;
  auto layer = must(MoeLayer::create(sim.dev, c, w, o), "create with kDequantize");
  CHECK(layer.dequantized_fp8());
  CHECK_FALSE(layer.runs_fp8());
  const std::vector<uint16_t> got = L.forward(sim, layer);

  // The host reference layer on the test's own dequantization of the same weights.
  dequantize_into(f.w_gate_up, f.w_gate_up_scale, E, 2 * I, H, &hw.w_gate_up);
  dequantize_into(f.w_down, f.w_down_scale, E, H, I, &hw.w_down);
  std::vector<uint16_t> want;
  must(moe_layer_reference(c, hw, L.x, T, &want), "reference");
  CHECK_MESSAGE(relative_error(got, want) <= 1e-2, "relative error " << relative_error(got, want));

  // The same through the C ABI (hrt_moe_layer_impls, ABI 1.10): refused without
  // dequantize_elsewhere, and with it the same bits as the C++ layer's.
  const std::vector<hrt_op_impl> none{{"moe_grouped_gemm_fp8", "gfx90a.none"}};
  hrt_moe_layer_info info{};
  std::vector<uint16_t> from_c;
  hal_error* err = c_abi_layer(sim, L, w, 0, none, &info, &from_c);
  REQUIRE(err != nullptr);
  CHECK(hal_error_status(err) == HAL_UNSUPPORTED);
  CHECK_MESSAGE(std::string(hal_error_message(err)).find("no FP8 GEMM kernel in gfx90a.none") != std::string::npos,
                hal_error_message(err));
  hal_error_free(err);
  err = c_abi_layer(sim, L, w, 1, none, &info, &from_c);
  REQUIRE_MESSAGE(err == nullptr, hal_error_message(err));
  CHECK(info.fp8_experts == 0);
  CHECK(info.fp8_dequantized == 1);
  CHECK(from_c == got);
}
