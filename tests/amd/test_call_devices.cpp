// An operator call whose memory or stream belongs to another device is refused before anything
// is queued, with the tensor's name and both devices (ops/src/op.cpp, check_tensors_on and
// check_stream_on; MoeLayer: its weights at create, x and out at forward). Two devices without a
// GPU: the simulated gfx942 and gfx90a.
#include <halcyon/ops/op.hpp>
#include <halcyon/runtime/moe_layer.hpp>

#include <string>

#include "sim_harness.hpp"

using namespace amdtest;
using namespace halcyon::ops;

namespace {

using Tensors = std::map<std::string, Tensor, std::less<>>;

// vector_add's a, b and c, uploaded on `sim` (c poisoned).
Tensors vector_add_call(Sim& sim, int64_t n) {
  Tensors t;
  for (const char* name : {"a", "b"}) {
    auto v = random_floats(size_t(n), name[0] == 'a' ? 7 : 8);
    t[name] = Tensor{sim.upload(v), 0, DType::f32, {n}};
  }
  t["c"] = Tensor{sim.poisoned<float>(size_t(n)), 0, DType::f32, {n}};
  return t;
}

void expect_refused(const halcyon::Status& s, const std::string& text) {
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(s.error().message().find(text) != std::string::npos, s.error().message());
}

}  // namespace

TEST_CASE("an operator call refuses tensors and streams of another device, and runs once they match") {
  Sim mi300("gfx942"), mi250("gfx90a");
  const std::string uri300 = must(mi300.dev.info(), "info").uri, uri250 = must(mi250.dev.info(), "info").uri;
  REQUIRE(uri300 != uri250);
  CHECK(std::string(must(mi250.stream.info(), "stream info").device_uri) == uri250);

  // One input in the other device's memory: named, with both devices, whichever input it is.
  for (const char* foreign : {"a", "c"}) {
    CAPTURE(foreign);
    Tensors t = vector_add_call(mi300, 33);
    t[foreign] = vector_add_call(mi250, 33)[foreign];
    expect_refused(run_op(mi300.dev, mi300.stream, "vector_add", t),
                   "vector_add: tensor '" + std::string(foreign) + "' is in memory of " + uri250 + ", the call runs on " +
                       uri300);
    auto prepared = prepare_op(mi300.dev, "vector_add", t);
    REQUIRE_FALSE(prepared.ok());
    CHECK(prepared.error().message().find("tensor '" + std::string(foreign) + "'") != std::string::npos);
    // The tools' question (which implementation run_op takes) gets run_op's answer.
    auto chosen = select_impl_for_call(mi300.dev, "vector_add", t);
    REQUIRE_FALSE(chosen.ok());
    CHECK(chosen.error().message().find("tensor '" + std::string(foreign) + "'") != std::string::npos);
  }

  // The device's own tensors on the other device's stream.
  Tensors t = vector_add_call(mi300, 33);
  expect_refused(run_op(mi300.dev, mi250.stream, "vector_add", t),
                 "vector_add: the stream is on " + uri250 + ", the call runs on " + uri300);
  auto prepared = must(prepare_op(mi300.dev, "vector_add", t), "prepare");
  expect_refused(prepared.run(mi250.stream), "the stream is on " + uri250);

  // The same call with everything on one device runs, prepared too, after a refused stream.
  must(run_op(mi300.dev, mi300.stream, "vector_add", t), "run_op");
  must(prepared.run(mi300.stream), "prepared run");
  must(mi300.stream.synchronize(), "sync");
  auto a = mi300.download<float>(t["a"].buffer, 33), b = mi300.download<float>(t["b"].buffer, 33);
  auto c = mi300.download<float>(t["c"].buffer, 33);
  for (size_t i = 0; i < c.size(); ++i) REQUIRE(c[i] == a[i] + b[i]);
  // And a refusal after a run on the right stream (the prepared call re-checks a new stream).
  expect_refused(prepared.run(mi250.stream), "the stream is on " + uri250);
}

TEST_CASE("a MoE layer refuses weights in another device's memory when it is made, naming them") {
  Sim mi300("gfx942"), mi250("gfx90a");
  const std::string uri300 = must(mi300.dev.info(), "info").uri, uri250 = must(mi250.dev.info(), "info").uri;
  halcyon::rt::MoeLayerConfig c;
  c.hidden = 16, c.inter = 8, c.experts = 4, c.topk = 2, c.n_groups = 1, c.topk_groups = 1;
  auto weight = [](Sim& on, std::vector<int64_t> shape) {
    return must(make_tensor(on.dev, DType::bf16, std::move(shape)), "weight");
  };
  halcyon::rt::MoeLayerWeights w;
  w.w_router = weight(mi300, {16, 4});
  w.w_gate_up = weight(mi300, {4, 16, 16});
  w.w_down = weight(mi250, {4, 8, 16});
  auto layer = halcyon::rt::MoeLayer::create(mi300.dev, c, w);
  REQUIRE_FALSE(layer.ok());
  CHECK(layer.error().status() == HAL_INVALID_ARGUMENT);
  CHECK_MESSAGE(layer.error().message() == "MoeLayer: w_down is in memory of " + uri250 + ", the layer is on " + uri300,
                layer.error().message());

  // Made with its own weights, the layer refuses a call's x in the other device's memory.
  w.w_down = weight(mi300, {4, 8, 16});
  auto made = must(halcyon::rt::MoeLayer::create(mi300.dev, c, w), "create");
  Tensor x = weight(mi250, {3, 16}), out = weight(mi300, {3, 16});
  auto s = made.forward(mi300.stream, x, out);
  REQUIRE_FALSE(s.ok());
  CHECK_MESSAGE(s.error().message() == "MoeLayer: x is in memory of " + uri250 + ", the layer is on " + uri300,
                s.error().message());
}
