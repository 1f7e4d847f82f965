// MoeLayer on the CPU against the layer computed directly with the reference code, and
// expert parallelism: two ranks' partial outputs add up to the whole layer.
#include <halcyon/runtime.h>
#include <halcyon/runtime/moe_layer.hpp>
#include <halcyon/runtime/moe_reference.hpp>
#include <halcyon/kernels/reference/moe_fp8.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "runtime_test_support.hpp"

using namespace halcyon::rt;
using namespace halcyon::ops;
using test::random_bf16;
using test::unwrap;
using test::upload;

namespace {

struct Setup {
  MoeLayerConfig c;
  MoeHostWeights w;
  std::vector<uint16_t> x;
  int64_t T = 37;
  // The default: hidden 96, inter 40, top-6 of 32 experts in 4 groups (top 2), 37 tokens.
  Setup() : Setup(96, 40, 32, 6, 37) {}
  Setup(int64_t hidden, int64_t inter, int64_t experts, int64_t topk, int64_t tokens) : T(tokens) {
    c.hidden = hidden;
    c.inter = inter;
    c.experts = experts;
    c.topk = topk;
    c.n_groups = 4;
    c.topk_groups = 2;
    std::mt19937 rng(7);
    w.w_router = random_bf16(size_t(c.hidden * c.experts), 0.1f, rng);
    w.bias.resize(size_t(c.experts));
    for (auto& b : w.bias) b = std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng);
    w.w_gate_up = random_bf16(size_t(c.experts * c.hidden * 2 * c.inter), 0.1f, rng);
    w.w_down = random_bf16(size_t(c.experts * c.inter * c.hidden), 0.1f, rng);
    x = random_bf16(size_t(T * c.hidden), 1.0f, rng);
  }
  // A layer on `dev` for all experts.
  MoeLayer layer(const halcyon::Device& dev, const halcyon::Stream& s) {
    MoeLayerWeights lw;
    lw.w_router = upload(dev, s, DType::bf16, {c.hidden, c.experts}, w.w_router);
    lw.bias = upload(dev, s, DType::f32, {c.experts}, w.bias);
    lw.w_gate_up = upload(dev, s, DType::bf16, {c.experts, c.hidden, 2 * c.inter}, w.w_gate_up);
    lw.w_down = upload(dev, s, DType::bf16, {c.experts, c.inter, c.hidden}, w.w_down);
    return unwrap(MoeLayer::create(dev, c, lw));
  }
  // Runs the layer on `dev` for the local experts [begin, begin + local).
  std::vector<uint16_t> run(const halcyon::Device& dev, int64_t begin, int64_t local, bool* gathered = nullptr,
                            const MoeLayerOptions& options = {}) {
    auto s = unwrap(dev.create_stream());
    MoeLayerConfig cc = c;
    cc.expert_begin = begin;
    cc.local_experts = local;
    const size_t per_gu = size_t(c.hidden * 2 * c.inter), per_d = size_t(c.inter * c.hidden);
    std::vector<uint16_t> gu(w.w_gate_up.begin() + begin * per_gu, w.w_gate_up.begin() + (begin + local) * per_gu);
    std::vector<uint16_t> dn(w.w_down.begin() + begin * per_d, w.w_down.begin() + (begin + local) * per_d);
    MoeLayerWeights lw;
    lw.w_router = upload(dev, s, DType::bf16, {c.hidden, c.experts}, w.w_router);
    lw.bias = upload(dev, s, DType::f32, {c.experts}, w.bias);
    lw.w_gate_up = upload(dev, s, DType::bf16, {local, c.hidden, 2 * c.inter}, gu);
    lw.w_down = upload(dev, s, DType::bf16, {local, c.inter, c.hidden}, dn);
    auto layer = unwrap(MoeLayer::create(dev, cc, lw, options));
    auto tx = upload(dev, s, DType::bf16, {T, c.hidden}, x);
    auto out = unwrap(make_tensor(dev, DType::bf16, {T, c.hidden}));
    unwrap(s.fill<uint16_t>(out.buffer, 0, out.bytes(), 0x7FC1));
    MoeStageTimes times;
    unwrap(layer.forward(s, tx, out, &times));
    CHECK(times.total() > 0);
    if (gathered) *gathered = layer.gathers_rows();
    // The gather path has no permuted copy of x.
    CHECK(layer.workspace().count("permuted") == (layer.gathers_rows() ? 0u : 1u));
    std::vector<uint16_t> y(size_t(T * c.hidden));
    unwrap(s.read(out.buffer, 0, y.data(), y.size() * 2));
    unwrap(s.synchronize());
    return y;
  }
};

float f(uint16_t b) { return halcyon::ref::bf16_to_float({b}); }

}  // namespace

TEST_CASE("moe layer: the cpu layer equals the direct reference composition") {
  Setup su;
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto got = su.run(dev, 0, su.c.experts);
  std::vector<uint16_t> want;
  unwrap(moe_layer_reference(su.c, su.w, su.x, su.T, &want));
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE_MESSAGE(got[i] == want[i], "element ", i);
}

TEST_CASE("moe layer: the gather path and the permuted-copy path (MoePath::kCopy) give the same output") {
  Setup su;
  auto dev = unwrap(halcyon::Device::open("cpu"));
  // The CPU implements moe_grouped_gemm_swiglu_gather, so the layer takes the gather path.
  REQUIRE(select_impl(dev, "moe_grouped_gemm_swiglu_gather"));
  MoeLayerOptions gather_opt, copy_opt, forced;
  copy_opt.path = MoePath::kCopy;
  forced.path = MoePath::kGather;
  CHECK(moe_gather_path(dev));
  CHECK(moe_gather_path(dev, forced));
  CHECK_FALSE(moe_gather_path(dev, copy_opt));
  bool gathered = false, copied = true;
  auto gather = su.run(dev, 0, su.c.experts, &gathered, gather_opt);
  auto gather_ep = su.run(dev, 5, 11);
  auto copy = su.run(dev, 0, su.c.experts, &copied, copy_opt);
  auto copy_ep = su.run(dev, 5, 11, nullptr, copy_opt);
  CHECK(gathered);
  CHECK_FALSE(copied);
  CHECK(gather == copy);
  CHECK(gather_ep == copy_ep);
  std::vector<uint16_t> want;
  unwrap(moe_layer_reference(su.c, su.w, su.x, su.T, &want));
  CHECK(gather == want);
}

TEST_CASE("moe layer: options name implementations per op; unknown names are refused at create") {
  Setup su;
  auto dev = unwrap(halcyon::Device::open("cpu"));
  MoeLayerOptions o;
  o.impl["moe_gate"] = "host";
  o.impl["gemm_bf16"] = "host";
  std::vector<uint16_t> want;
  unwrap(moe_layer_reference(su.c, su.w, su.x, su.T, &want));
  CHECK(su.run(dev, 0, su.c.experts, nullptr, o) == want);
  auto s = unwrap(dev.create_stream());
  MoeLayerConfig c = su.c;
  MoeLayerWeights w;
  w.w_router = unwrap(make_tensor(dev, DType::bf16, {c.hidden, c.experts}));
  w.w_gate_up = unwrap(make_tensor(dev, DType::bf16, {c.experts, c.hidden, 2 * c.inter}));
  w.w_down = unwrap(make_tensor(dev, DType::bf16, {c.experts, c.inter, c.hidden}));
  o.impl["moe_permute"] = "sm80.fused";  // a PTX implementation: the cpu cannot run it
  auto l = MoeLayer::create(dev, c, w, o);
  REQUIRE(!l.ok());
  const std::string& m = l.error().message();
  const bool refused = m.find("MoeLayer: moe_permute: implementation 'sm80.fused' cannot run on cpu:0") != std::string::npos ||
                       m.find("no implementation named 'sm80.fused'") != std::string::npos;
  CHECK_MESSAGE(refused, m);
  o.impl.erase("moe_permute");
  o.impl.emplace("no_such_op", "x");  // not operator[] = "x": GCC 12 -O3 warns -Wrestrict on it (GCC bug 105329)
  l = MoeLayer::create(dev, c, w, o);
  REQUIRE(!l.ok());
  CHECK(l.error().message().find("'no_such_op', which has no implementations") != std::string::npos);
}

TEST_CASE("moe layer: where the gather path is taken by default (the implementations' fused_pays)") {
  // The H100 SXM's peak (2619 MHz x 5120 bits x 2) and about the H200's (`halcyon info`: 4.81
  // TB/s); 132 SMs each.
  const uint64_t h100 = 3'352'320'000'000ull, h200 = 4'810'000'000'000ull;
  auto facts = [](uint64_t bw, uint32_t sms) {
    DeviceFacts f;
    f.memory_bytes_per_s = bw;
    f.compute_units = sms;
    return f;
  };
  const OpImpl *host = nullptr, *hopper = nullptr, *portable = nullptr;
  const auto impls = impls_of("moe_grouped_gemm_swiglu_gather");
  for (auto& i : impls) {
    if (i.name == "host") host = &i;
    if (i.name == "sm90.swapw") hopper = &i;
    if (i.name == "sm80") portable = &i;
  }
  REQUIRE(host);
  CHECK(moe_gather_pays(*host, facts(0, 0)));  // the CPU: always
  if (!hopper || !portable) {
    MESSAGE("the PTX implementations are not built here: their rules were not checked");
    return;
  }
  std::string why;
  CHECK(moe_gather_pays(*hopper, facts(h100, 132)));
  CHECK_FALSE(moe_gather_pays(*hopper, facts(h200, 132), &why));
  CHECK(why.find("36.4 GB/s of peak memory bandwidth per SM > 28") != std::string::npos);
  CHECK(moe_gather_pays(*hopper, facts(28'000'000'000ull * 100, 100)));  // the threshold itself
  CHECK_FALSE(moe_gather_pays(*hopper, facts(28'000'000'001ull * 100, 100)));
  CHECK_FALSE(moe_gather_pays(*hopper, facts(0, 132)));   // bandwidth unknown: keep the copy
  CHECK_FALSE(moe_gather_pays(*hopper, facts(h100, 0)));  // no compute units reported
  CHECK_FALSE(moe_gather_pays(*portable, facts(h100, 132), &why));  // not measured against the copy
  CHECK(why.find("has not been shown to beat the permuted copy") != std::string::npos);
}

TEST_CASE("moe layer: expert-parallel ranks add up to the whole layer") {
  Setup su;
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto whole = su.run(dev, 0, su.c.experts);
  auto lo = su.run(dev, 0, 12), hi = su.run(dev, 12, su.c.experts - 12);
  double num = 0, den = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    REQUIRE(std::isfinite(f(lo[i])));
    REQUIRE(std::isfinite(f(hi[i])));
    double d = double(f(lo[i])) + f(hi[i]) - f(whole[i]);
    num += d * d;
    den += double(f(whole[i])) * f(whole[i]);
  }
  // Each rank rounds its partial sum to bf16 once: a few bf16 ulps apart at most.
  CHECK(std::sqrt(num / den) < 1e-2);
  CHECK(std::sqrt(num / den) > 0);  // ranks really computed partial sums, not copies
}

TEST_CASE("moe layer: bad configurations and weights are refused") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  MoeLayerConfig c;
  c.hidden = 8;
  c.inter = 4;
  c.experts = 8;
  c.topk = 2;
  c.n_groups = 1;
  c.topk_groups = 1;
  MoeLayerWeights w;
  w.w_router = unwrap(make_tensor(dev, DType::bf16, {8, 8}));
  w.w_gate_up = unwrap(make_tensor(dev, DType::bf16, {8, 8, 8}));
  w.w_down = unwrap(make_tensor(dev, DType::bf16, {8, 4, 9}));
  auto l = MoeLayer::create(dev, c, w);
  REQUIRE(!l.ok());
  CHECK(l.error().message().find("w_down is bf16 [8, 4, 9], expected bf16 [8, 4, 8]") != std::string::npos);
  c.expert_begin = 6;
  c.local_experts = 4;
  l = MoeLayer::create(dev, c, w);
  REQUIRE(!l.ok());
  CHECK(l.error().message().find("[6, 10) do not lie within [0, 8)") != std::string::npos);
  // expert_begin + local_experts past int64 wrapped negative and passed the range check.
  c.expert_begin = c.local_experts = int64_t(1) << 62;
  l = MoeLayer::create(dev, c, w);
  REQUIRE(!l.ok());
  CHECK_MESSAGE(l.error().message().find("[4611686018427387904, past 2^63) do not lie within [0, 8)") != std::string::npos,
                l.error().message());
  c.expert_begin = 0;
  c.local_experts = -1;
  // A weight of the right shape in a buffer too small for it (a view at an offset): named, at
  // create, not by the first operator to read past it.
  w.w_down = unwrap(make_tensor(dev, DType::bf16, {8, 4, 8}));
  Tensor shifted = w.w_down;
  shifted.offset = 2;
  MoeLayerWeights sw = w;
  sw.w_down = shifted;
  l = MoeLayer::create(dev, c, sw);
  REQUIRE(!l.ok());
  CHECK(l.error().status() == HAL_OUT_OF_RANGE);
  CHECK_MESSAGE(l.error().message().find("MoeLayer: w_down: bf16 [8, 4, 8] needs 512 bytes at offset 2, its buffer has 512") !=
                    std::string::npos, l.error().message());
  sw.w_down.offset = UINT64_MAX - 255;  // offset + bytes wraps to 256
  l = MoeLayer::create(dev, c, sw);
  REQUIRE(!l.ok());
  CHECK(l.error().status() == HAL_OUT_OF_RANGE);
  // Dimensions whose products overflow, each refused naming the weight (or field) before any
  // size is computed from them.
  for (auto [field, value, needle] : {std::tuple{"hidden", int64_t(1) << 60, "w_router [hidden, experts]"},
                                      std::tuple{"inter", int64_t(1) << 62, "w_gate_up [local experts, hidden, 2 * inter]"},
                                      std::tuple{"inter", INT64_MAX, "w_gate_up"},
                                      std::tuple{"experts", INT64_MAX, "w_router"}}) {
    CAPTURE(field);
    MoeLayerConfig big = c;
    (std::string_view(field) == "hidden" ? big.hidden : std::string_view(field) == "inter" ? big.inter : big.experts) = value;
    auto checked = check_moe_config(big);
    REQUIRE(!checked.ok());
    CHECK(checked.error().status() == HAL_OUT_OF_RANGE);
    CHECK_MESSAGE(checked.error().message().find(needle) != std::string::npos, checked.error().message());
  }
  MoeLayerConfig many = c;
  many.topk = 9;
  auto checked = check_moe_config(many);
  REQUIRE(!checked.ok());
  CHECK(checked.error().message().find("topk 9 is more than experts 8") != std::string::npos);
}

// local_experts below -1 used to be taken as "all experts", and the gate's settings were
// checked only by the first forward's moe_gate: both are refused at create now, naming the
// value, by the C++ layer and by the C ABI (which checks through check_moe_config).
TEST_CASE("moe layer: local_experts below -1 and bad gate settings are refused at create") {
  Setup su(64, 32, 16, 4, 5);  // 16 experts in 4 groups, top 2 groups
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  MoeLayerWeights w;
  w.w_router = upload(dev, s, DType::bf16, {64, 16}, su.w.w_router);
  w.bias = upload(dev, s, DType::f32, {16}, su.w.bias);
  w.w_gate_up = upload(dev, s, DType::bf16, {16, 64, 64}, su.w.w_gate_up);
  w.w_down = upload(dev, s, DType::bf16, {16, 32, 64}, su.w.w_down);
  unwrap(MoeLayer::create(dev, su.c, w));  // the valid config
  auto refused = [&](const MoeLayerConfig& c, const std::string& needle) {
    auto l = MoeLayer::create(dev, c, w);
    REQUIRE(!l.ok());
    CHECK(l.error().status() == HAL_INVALID_ARGUMENT);
    CHECK_MESSAGE(l.error().message().find(needle) != std::string::npos, l.error().message());
  };
  for (int64_t local : {int64_t(-2), int64_t(-16), INT64_MIN}) {
    MoeLayerConfig c = su.c;
    c.local_experts = local;
    refused(c, fmt::format("local_experts {} is below -1", local));
  }
  struct Bad {
    const char* what;
    void (*set)(MoeLayerConfig&);
    const char* needle;
  };
  const Bad bad[] = {
      {"score", [](MoeLayerConfig& c) { c.score = "relu"; }, "score 'relu' must be sigmoid or softmax"},
      {"n_groups 3", [](MoeLayerConfig& c) { c.n_groups = 3; }, "experts 16 are not divisible into n_groups 3"},
      {"n_groups 0", [](MoeLayerConfig& c) { c.n_groups = 0; }, "experts 16 are not divisible into n_groups 0"},
      {"topk_groups 0", [](MoeLayerConfig& c) { c.topk_groups = 0; }, "topk_groups 0 is not in [1, n_groups 4]"},
      {"topk_groups 5", [](MoeLayerConfig& c) { c.topk_groups = 5; }, "topk_groups 5 is not in [1, n_groups 4]"},
      {"topk 9", [](MoeLayerConfig& c) { c.topk = 9; }, "topk 9 is more than the 8 experts of the topk_groups 2"},
      {"routed_scale inf", [](MoeLayerConfig& c) { c.routed_scale = INFINITY; }, "routed_scale inf is not a finite f32"},
      {"routed_scale nan", [](MoeLayerConfig& c) { c.routed_scale = NAN; }, "routed_scale nan is not a finite f32"},
      {"routed_scale 1e39", [](MoeLayerConfig& c) { c.routed_scale = 1e39; }, "is not a finite f32"},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.what);
    MoeLayerConfig c = su.c;
    b.set(c);
    refused(c, b.needle);
    std::vector<uint16_t> out;  // the host reference checks the config alike
    auto r = moe_layer_reference(c, su.w, su.x, su.T, &out);
    REQUIRE(!r.ok());
    CHECK_MESSAGE(r.error().message().find(b.needle) != std::string::npos, r.error().message());
  }
  // The C ABI: the same checks, at hrt_moe_layer_create.
  hrt_moe_layer_desc d{};
  d.struct_size = HRT_MOE_LAYER_DESC_SIZE;
  d.hidden = 64, d.inter = 32, d.experts = 16, d.topk = 4, d.n_groups = 4, d.topk_groups = 2;
  d.local_experts = -1, d.normalize = 1, d.routed_scale = 2.5;
  d.w_router = w.w_router.buffer.get();
  d.w_gate_up = w.w_gate_up.buffer.get();
  d.w_down = w.w_down.buffer.get();
  hrt_moe_layer cl = nullptr;
  test::expect_ok(hrt_moe_layer_create(dev.get(), &d, &cl));
  hrt_moe_layer_destroy(cl);
  d.local_experts = -3;
  test::expect_error(hrt_moe_layer_create(dev.get(), &d, &cl), HAL_INVALID_ARGUMENT, "local_experts -3 is below -1");
  d.local_experts = -1;
  d.n_groups = 5;
  test::expect_error(hrt_moe_layer_create(dev.get(), &d, &cl), HAL_INVALID_ARGUMENT,
                     "experts 16 are not divisible into n_groups 5");
  d.n_groups = 4;
  d.topk = 12;
  test::expect_error(hrt_moe_layer_create(dev.get(), &d, &cl), HAL_INVALID_ARGUMENT, "topk 12 is more than the 8");
}

TEST_CASE("moe layer: a workspace whose size overflows is refused, not allocated small") {
  Setup su(64, 32, 16, 4, 8);
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  auto layer = su.layer(dev, s);
  // Rounding up to the 128-token step overflowed; T * K, and the bytes of T * K rows of H.
  for (int64_t tokens : {INT64_MAX, INT64_MAX - 100, int64_t(1) << 62, int64_t(1) << 56}) {
    CAPTURE(tokens);
    auto r = layer.reserve(tokens);
    REQUIRE(!r.ok());
    CHECK(r.error().status() == HAL_OUT_OF_RANGE);
    CHECK_MESSAGE(r.error().message().find("MoeLayer: a workspace for") != std::string::npos, r.error().message());
  }
  CHECK(layer.workspace_capacity() == -1);  // nothing was allocated
  unwrap(layer.reserve(1000));
  CHECK(layer.workspace_capacity() == 1024);
}

TEST_CASE("moe reference: arrays of the wrong size and bad configurations are refused, naming them") {
  Setup su(64, 32, 16, 4, 5);
  std::vector<uint16_t> out;
  unwrap(moe_layer_reference(su.c, su.w, su.x, su.T, &out));
  auto refused = [&](const MoeLayerConfig& c, const MoeHostWeights& w, const std::string& needle) {
    auto r = moe_layer_reference(c, w, su.x, su.T, &out);
    REQUIRE(!r.ok());
    CHECK_MESSAGE(r.error().message().find(needle) != std::string::npos, r.error().message());
  };
  auto shorter = [&](std::vector<uint16_t> MoeHostWeights::*field) {
    MoeHostWeights w = su.w;
    (w.*field).pop_back();
    return w;
  };
  refused(su.c, shorter(&MoeHostWeights::w_router), "w_router has 1023 values, not the 1024 of bf16 64 x 16");
  refused(su.c, shorter(&MoeHostWeights::w_gate_up), "w_gate_up has 65535 values");
  refused(su.c, shorter(&MoeHostWeights::w_down), "w_down has 32767 values");
  MoeHostWeights w = su.w;
  w.bias.resize(3);
  refused(su.c, w, "bias has 3 values, not the 16");
  w.bias.clear();  // no bias: allowed
  unwrap(moe_layer_reference(su.c, w, su.x, su.T, &out));
  MoeLayerConfig c = su.c;
  c.expert_begin = 12;  // [12, 28) of 16 experts
  refused(c, su.w, "local experts [12, 28) do not lie within [0, 16)");
  c = su.c;
  c.hidden = int64_t(1) << 60;
  refused(c, su.w, "w_router [hidden, experts]");
  // The routing alone checks its inputs as well.
  std::vector<int32_t> ids;
  std::vector<float> weights;
  auto r = moe_routing_reference(su.c, shorter(&MoeHostWeights::w_router), su.x, su.T, &ids, &weights);
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("w_router has 1023 values") != std::string::npos);
  r = moe_routing_reference(su.c, su.w, su.x, -1, &ids, &weights);
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("tokens -1 is negative") != std::string::npos);
}

TEST_CASE("moe layer: token counts 7, 4096, 1, 300 in turn each match the reference; the workspace only grows") {
  const int64_t kMax = 4096;
  Setup su(64, 32, 16, 4, kMax);  // small enough that 4096 tokens take well under a second
  const MoeLayerConfig& c = su.c;
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  auto layer = su.layer(dev, s);
  CHECK(layer.workspace_capacity() == -1);
  // x and out: views of the first T rows of buffers for kMax tokens.
  auto x_all = upload(dev, s, DType::bf16, {kMax, c.hidden}, su.x);
  auto out_all = unwrap(make_tensor(dev, DType::bf16, {kMax, c.hidden}));

  hal_buffer ws_after_max = nullptr;
  uint64_t ws_address = 0;
  for (int64_t T : {7, 4096, 1, 300}) {
    CAPTURE(T);
    Tensor tx = x_all, to = out_all;
    tx.shape = to.shape = {T, c.hidden};
    unwrap(s.fill<uint16_t>(to.buffer, 0, to.bytes(), 0x7FC1));  // poison: NaN where unwritten
    unwrap(layer.forward(s, tx, to));
    std::vector<uint16_t> got(size_t(T * c.hidden));
    unwrap(s.read(to.buffer, 0, got.data(), got.size() * 2));
    unwrap(s.synchronize());
    std::vector<uint16_t> want;
    std::vector<uint16_t> xt(su.x.begin(), su.x.begin() + T * c.hidden);
    unwrap(moe_layer_reference(c, su.w, xt, T, &want));
    REQUIRE(got.size() == want.size());
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
    CHECK(bad == 0);

    const auto& ws = layer.workspace();
    CHECK(ws.at("logits").shape == std::vector<int64_t>{T, c.experts});
    CHECK(ws.at("expert_out").shape == std::vector<int64_t>{T * c.topk, c.hidden});
    if (T == 7) CHECK(layer.workspace_capacity() == 128);  // rounded up to a step of 128 tokens
    if (T == kMax) {
      CHECK(layer.workspace_capacity() == kMax);
      ws_after_max = ws.at("logits").buffer.get();
      ws_address = ws.at("logits").buffer.address();
    } else if (ws_after_max) {  // smaller calls after the largest: the same buffer, not shrunk
      CHECK(layer.workspace_capacity() == kMax);
      CHECK(ws.at("logits").buffer.get() == ws_after_max);
      CHECK(ws.at("logits").buffer.address() == ws_address);
    }
    // Every region is one buffer's, 256-byte aligned, and no two overlap.
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (const auto& [name, t] : ws) {
      CHECK(t.buffer.get() == ws.at("logits").buffer.get());
      CHECK(t.offset % 256 == 0);
      spans.push_back({t.offset, t.offset + t.bytes()});
    }
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].second <= spans[i].first);
  }
}

TEST_CASE("moe layer: reserve() sizes the workspace ahead and never shrinks it") {
  Setup su;
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  auto layer = su.layer(dev, s);
  unwrap(layer.reserve(1000));
  CHECK(layer.workspace_capacity() == 1024);
  unwrap(layer.reserve(10));
  CHECK(layer.workspace_capacity() == 1024);
  auto tx = upload(dev, s, DType::bf16, {su.T, su.c.hidden}, su.x);
  auto out = unwrap(make_tensor(dev, DType::bf16, {su.T, su.c.hidden}));
  unwrap(layer.forward(s, tx, out));
  CHECK(layer.workspace_capacity() == 1024);
  unwrap(s.synchronize());
}

// ---- FP8 experts ----------------------------------------------------------------------------
namespace {
// Random e4m3 weights (never NaN) and positive block scales for `local` experts of the setup.
MoeHostFp8Weights random_fp8(const MoeLayerConfig& c, int64_t local, std::mt19937& rng) {
  const int64_t H = c.hidden, I = c.inter, HG = (H + 127) / 128, IG = (I + 127) / 128, I2B = (2 * I + 127) / 128;
  std::uniform_real_distribution<float> u(-448.f, 448.f), sc(0.0002f, 0.0006f);
  MoeHostFp8Weights f;
  f.w_gate_up.resize(size_t(local * 2 * I * H));
  f.w_down.resize(size_t(local * H * I));
  for (auto& v : f.w_gate_up) v = halcyon::ref::float_to_e4m3(u(rng)).bits;
  for (auto& v : f.w_down) v = halcyon::ref::float_to_e4m3(u(rng)).bits;
  f.w_gate_up_scale.resize(size_t(local * I2B * HG));
  f.w_down_scale.resize(size_t(local * HG * IG));
  for (auto& v : f.w_gate_up_scale) v = sc(rng);
  for (auto& v : f.w_down_scale) v = sc(rng);
  return f;
}
MoeFp8Weights upload_fp8(const halcyon::Device& dev, const halcyon::Stream& s, const MoeLayerConfig& c, int64_t local,
                         const MoeHostFp8Weights& f) {
  const int64_t H = c.hidden, I = c.inter, HG = (H + 127) / 128, IG = (I + 127) / 128, I2B = (2 * I + 127) / 128;
  return {upload(dev, s, DType::e4m3, {local, 2 * I, H}, f.w_gate_up),
          upload(dev, s, DType::f32, {local, I2B, HG}, f.w_gate_up_scale), upload(dev, s, DType::e4m3, {local, H, I}, f.w_down),
          upload(dev, s, DType::f32, {local, HG, IG}, f.w_down_scale)};
}
}  // namespace

TEST_CASE("moe layer: FP8 experts on the cpu equal the reference composition, on both paths and with h quantized in "
          "the up GEMM") {
  Setup su(160, 72, 32, 6, 29);  // H = 160: a short last scale group; I = 72: 2I = 144 rows span two scale blocks
  namespace ref = halcyon::ref;
  std::mt19937 rng(21);
  const auto& c = su.c;
  const int64_t H = c.hidden, I = c.inter, E = c.experts, K = c.topk, T = su.T, HG = 2, IG = 1, TK = T * K;
  const MoeHostFp8Weights f = random_fp8(c, E, rng);
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::vector<uint16_t> outs[3];
  // 0: gather, 1: copy, 2: copy with moe_grouped_gemm_fp8_swiglu_quant named (the GEMM and the
  // quantize of h as one operator).
  for (int path = 0; path < 3; ++path) {
    MoeLayerOptions o;
    o.path = path ? MoePath::kCopy : MoePath::kGather;
    if (path == 2) o.impl["moe_grouped_gemm_fp8_swiglu_quant"] = "host";
    MoeLayerWeights lw;
    lw.w_router = upload(dev, s, DType::bf16, {H, E}, su.w.w_router);
    lw.bias = upload(dev, s, DType::f32, {E}, su.w.bias);
    lw.fp8 = upload_fp8(dev, s, c, E, f);  // FP8 only: no bf16 expert weights
    auto layer = unwrap(MoeLayer::create(dev, c, lw, o));
    CHECK(layer.runs_fp8());
    CHECK(layer.gathers_rows() == (path == 0));
    auto tx = upload(dev, s, DType::bf16, {T, H}, su.x);
    auto out = unwrap(make_tensor(dev, DType::bf16, {T, H}));
    MoeStageTimes times;
    unwrap(layer.forward(s, tx, out, &times));
    CHECK(layer.quantized_in_up_gemm() == (path == 2));
    if (path < 2) CHECK(times.quant > 0);
    outs[path] = test::download<uint16_t>(s, out);
    // The reference composition from the layer's own routing (its workspace after the call).
    const auto& ws = layer.workspace();
    auto offsets = test::download<int32_t>(s, ws.at("expert_offsets"));
    auto r2s = test::download<int32_t>(s, ws.at("row_to_slot"));
    auto s2r = test::download<int32_t>(s, ws.at("slot_to_row"));
    auto tw = test::download<float>(s, ws.at("topk_weights"));
    const int64_t R = offsets[size_t(E)];
    std::vector<ref::bf16> x(su.x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i].bits = su.x[i];
    std::vector<ref::e4m3> xq(size_t(T * H)), hq(size_t(TK * I));
    std::vector<float> xs(size_t(T * HG)), hs(size_t(TK * IG));
    REQUIRE(ref::moe_quantize_fp8(x.data(), T, H, xq.data(), xs.data()));
    std::vector<ref::bf16> hidden(size_t(TK * I)), y(size_t(TK * H)), want(size_t(T * H));
    auto e4 = [](const std::vector<uint8_t>& v) { return reinterpret_cast<const ref::e4m3*>(v.data()); };
    REQUIRE(ref::moe_grouped_gemm_fp8_swiglu_gather(xq.data(), xs.data(), T, K, r2s.data(), e4(f.w_gate_up), f.w_gate_up_scale.data(),
                                                    offsets.data(), E + 1, E, TK, H, I, hidden.data()));
    REQUIRE(ref::moe_quantize_fp8(hidden.data(), TK, I, hq.data(), hs.data(), {0, R}));
    REQUIRE(ref::moe_grouped_gemm_fp8(hq.data(), hs.data(), e4(f.w_down), f.w_down_scale.data(), offsets.data(), E + 1, E, TK, I, H,
                                      y.data()));
    REQUIRE(ref::moe_combine(y.data(), TK, tw.data(), s2r.data(), T, K, H, want.data()));
    size_t nonzero = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      REQUIRE_MESSAGE(outs[path][i] == want[i].bits, "path ", path, " element ", i);
      nonzero += (want[i].bits & 0x7fff) != 0;
    }
    CHECK(nonzero > want.size() / 2);
  }
  CHECK(outs[0] == outs[1]);
  CHECK(outs[0] == outs[2]);
  // The runtime's oracle (its own routing, the gather-form composition) gives the same bits.
  std::vector<uint16_t> oracle;
  unwrap(moe_layer_reference_fp8(c, su.w, f, su.x, T, &oracle));
  CHECK(oracle == outs[0]);
}

TEST_CASE("moe layer: FP8 weights of the wrong shape or dtype are refused, naming them") {
  Setup su;
  const auto& c = su.c;
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::mt19937 rng(4);
  MoeLayerWeights lw;
  lw.w_router = upload(dev, s, DType::bf16, {c.hidden, c.experts}, su.w.w_router);
  lw.fp8 = upload_fp8(dev, s, c, c.experts, random_fp8(c, c.experts, rng));
  lw.fp8->w_down_scale.shape = {c.experts, 2, 1};  // [EL, ceil(96 / 128) = 1, ceil(40 / 128) = 1] expected
  auto bad = MoeLayer::create(dev, c, lw);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message().find("fp8.w_down_scale") != std::string::npos);
}

TEST_CASE("moe layer: FP8 weights through the C ABI (an hrt_moe_layer_desc extension) give the C++ layer's bits") {
  Setup su(160, 72, 32, 6, 29);
  const auto& c = su.c;
  const int64_t H = c.hidden, E = c.experts, T = su.T;
  std::mt19937 rng(8);
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  MoeLayerWeights lw;
  lw.w_router = upload(dev, s, DType::bf16, {H, E}, su.w.w_router);
  lw.bias = upload(dev, s, DType::f32, {E}, su.w.bias);
  lw.fp8 = upload_fp8(dev, s, c, E, random_fp8(c, E, rng));
  auto tx = upload(dev, s, DType::bf16, {T, H}, su.x);
  auto want = unwrap(make_tensor(dev, DType::bf16, {T, H}));
  auto layer = unwrap(MoeLayer::create(dev, c, lw));
  unwrap(layer.forward(s, tx, want));

  // An extension type this runtime does not know comes first in the chain: it is skipped.
  hrt_moe_fp8_weights f8{HRT_MOE_FP8_WEIGHTS_SIZE, nullptr, HRT_EXTENSION_MOE_FP8_WEIGHTS, lw.fp8->w_gate_up.buffer.get(),
                         lw.fp8->w_gate_up_scale.buffer.get(), lw.fp8->w_down.buffer.get(),
                         lw.fp8->w_down_scale.buffer.get(), 0};
  hal_extension other{sizeof(hal_extension), reinterpret_cast<const hal_extension*>(&f8), 0x7fff0001u};
  hrt_moe_layer_desc d{};
  d.struct_size = HRT_MOE_LAYER_DESC_SIZE;
  d.next = &other;
  d.hidden = H, d.inter = c.inter, d.experts = E, d.topk = c.topk, d.n_groups = c.n_groups;
  d.topk_groups = c.topk_groups, d.local_experts = -1, d.normalize = c.normalize, d.routed_scale = c.routed_scale;
  d.softmax = c.score == "softmax";
  d.w_router = lw.w_router.buffer.get();
  d.bias = lw.bias->buffer.get();  // no bf16 experts: w_gate_up = w_down = NULL
  hrt_moe_layer cl = nullptr;
  test::expect_ok(hrt_moe_layer_create(dev.get(), &d, &cl));
  REQUIRE(cl != nullptr);
  hrt_moe_layer_info info{};
  info.struct_size = HRT_MOE_LAYER_INFO_SIZE;
  test::expect_ok(hrt_moe_layer_get_info(cl, &info));
  CHECK(info.fp8_experts == 1);
  CHECK(info.gather == (layer.gathers_rows() ? 1u : 0u));
  auto got = unwrap(make_tensor(dev, DType::bf16, {T, H}));
  test::expect_ok(hrt_moe_layer_forward(cl, s.get(), tx.buffer.get(), got.buffer.get(), T));
  CHECK(test::download<uint16_t>(s, got) == test::download<uint16_t>(s, want));
  // An older caller's info struct (header only) gets nothing written past it.
  hrt_moe_layer_info old{};
  old.struct_size = HRT_MOE_LAYER_INFO_MIN_SIZE;
  old.fp8_experts = 7;
  test::expect_ok(hrt_moe_layer_get_info(cl, &old));
  CHECK(old.fp8_experts == 7);
  hrt_moe_layer_destroy(cl);

  // Refusals, each naming what is wrong: no bf16 experts and no FP8 extension; an FP8 buffer
  // too small for its shape; an extension shorter than its struct.
  d.next = nullptr;
  test::expect_error(hrt_moe_layer_create(dev.get(), &d, &cl), HAL_INVALID_HANDLE, "w_gate_up");
  d.next = &f8;
  REQUIRE(lw.fp8->w_down_scale.bytes() < lw.fp8->w_gate_up_scale.bytes());  // [32, 2, 1] and [32, 2, 2] f32
  f8.w_gate_up_scale = lw.fp8->w_down_scale.buffer.get();
  test::expect_error(hrt_moe_layer_create(dev.get(), &d, &cl), HAL_OUT_OF_RANGE,
                     "fp8.w_gate_up_scale: f32 [32, 2, 2] needs 512 bytes at offset 0");
  f8.w_gate_up_scale = lw.fp8->w_gate_up_scale.buffer.get();
  f8.struct_size = HRT_MOE_FP8_WEIGHTS_MIN_SIZE - 8;
  test::expect_error(hrt_moe_layer_create(dev.get(), &d, &cl), HAL_VERSION_MISMATCH, "hrt_moe_fp8_weights.struct_size");
  CHECK(cl == nullptr);
}
