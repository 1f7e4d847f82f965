// The gather form of the SwiGLU grouped GEMM and moe_permute's write_permuted through run_op
// on the CPU device: the contracts' names, the same bits as permute + swiglu, and bad calls
// refused with messages that name the tensor.
#include <halcyon/ops/op.hpp>

#include <random>

#include "runtime_test_support.hpp"


using namespace halcyon::ops;
using test::random_bf16;
using test::unwrap;
using test::download;
using test::upload;

namespace {

using Tensors = std::map<std::string, Tensor, std::less<>>;

Tensor poisoned(const halcyon::Device& d, const halcyon::Stream& s, DType dt, std::vector<int64_t> shape) {
  auto t = unwrap(make_tensor(d, dt, std::move(shape)));
  unwrap(s.fill(t.buffer, 0, t.bytes(), uint8_t(0xFF)));
  return t;
}

bool all_poison(const std::vector<uint16_t>& v) {
  for (uint16_t x : v)
    if (x != 0xFFFF) return false;
  return true;
}

}  // namespace

TEST_CASE("moe contracts: the gather op and moe_permute's write_permuted") {
  const Contract* g = find_contract("moe_grouped_gemm_swiglu_gather");
  REQUIRE(g);
  REQUIRE(g->inputs.size() == 4);
  const char* names[] = {"x", "w_gate_up", "expert_offsets", "row_to_slot"};
  const DType dtypes[] = {DType::bf16, DType::bf16, DType::i32, DType::i32};
  const std::vector<std::string> dims[] = {{"T", "H"}, {"EL", "H", "I2"}, {"EL1"}, {"R"}};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(g->inputs[i].name == names[i]);
    CHECK(g->inputs[i].dtype == dtypes[i]);
    CHECK(g->inputs[i].dims == dims[i]);
  }
  REQUIRE(g->outputs.size() == 1);
  CHECK(g->outputs[0].name == "out");
  CHECK(g->outputs[0].dims == std::vector<std::string>{"R", "I"});
  CHECK(g->outputs[0].tolerance.rel == doctest::Approx(1e-2));
  REQUIRE(g->find_param("topk"));
  CHECK(std::get<int64_t>(g->find_param("topk")->default_value) == 8);
  REQUIRE(g->find_defined_rows("out"));
  CHECK(g->find_defined_rows("out")->count_tensor == "expert_offsets");
  CHECK(g->find_defined_rows("out")->index == -1);
  REQUIRE(g->find_generator("row_to_slot"));
  CHECK(g->find_generator("row_to_slot")->kind == "bounds");
  CHECK(g->find_bounds("row_to_slot")->hi == "T*topk");
  // The cases reach T * topk < R (slots must repeat), an expert-free H = 7168 and a single row.
  bool repeats = false, wide = false, single = false;
  for (auto& cs : g->cases) {
    auto b = unwrap(bind(*g, cs.params, cs.dims, {}));
    repeats |= b.dim("T") * b.params.i("topk") < b.dim("R");
    wide |= b.dim("H") == 7168;
    single |= b.dim("R") == 1;
  }
  CHECK(repeats);
  CHECK(wide);
  CHECK(single);

  const Contract* p = find_contract("moe_permute");
  REQUIRE(p);
  REQUIRE(p->find_param("write_permuted"));
  CHECK(p->find_param("write_permuted")->type == ParamType::Bool);
  CHECK(std::get<bool>(p->find_param("write_permuted")->default_value));
  REQUIRE(p->find_defined_if("permuted"));
  CHECK(p->find_defined_if("permuted")->param == "write_permuted");
  bool has_false_case = false;
  for (auto& cs : p->cases) has_false_case |= cs.params.count("write_permuted") && cs.params.at("write_permuted") == "false";
  CHECK(has_false_case);
}

TEST_CASE("moe_grouped_gemm_swiglu_gather on the cpu: the same bits as moe_permute + moe_grouped_gemm_swiglu") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  const int64_t T = 19, K = 3, H = 24, I = 10, E = 12, e0 = 2, e1 = 9, EL = e1 - e0, TK = T * K;
  std::mt19937 rng(3);
  std::vector<int32_t> ids(static_cast<size_t>(TK));
  for (auto& id : ids) id = std::uniform_int_distribution<int32_t>(0, int32_t(E - 1))(rng);
  Tensors t{{"x", upload(dev, s, DType::bf16, {T, H}, random_bf16(size_t(T * H), 1.0f, rng))},
            {"topk_ids", upload(dev, s, DType::i32, {T, K}, ids)},
            {"w_gate_up", upload(dev, s, DType::bf16, {EL, H, 2 * I}, random_bf16(size_t(EL * H * 2 * I), 1.0f, rng))}};
  const std::map<std::string, std::string> permute_params{
      {"n_experts", std::to_string(E)}, {"expert_begin", std::to_string(e0)}, {"expert_end", std::to_string(e1)}};
  auto permute = [&](bool write) {
    Tensors call{{"x", t["x"]}, {"topk_ids", t["topk_ids"]}};
    for (auto [name, dt, shape] : {std::tuple<const char*, DType, std::vector<int64_t>>{"permuted", DType::bf16, {TK, H}},
                                   {"expert_counts", DType::i32, {EL}},
                                   {"expert_offsets", DType::i32, {EL + 1}},
                                   {"row_to_slot", DType::i32, {TK}},
                                   {"slot_to_row", DType::i32, {T, K}},
                                   {"num_rows", DType::i32, {1}}})
      call[name] = poisoned(dev, s, dt, shape);
    auto params = permute_params;
    if (!write) params["write_permuted"] = "false";
    unwrap(run_op(dev, s, "moe_permute", call, params));
    return call;
  };
  Tensors with = permute(true), without = permute(false);
  for (const char* n : {"expert_counts", "expert_offsets", "slot_to_row", "num_rows"})
    CHECK_MESSAGE(download<int32_t>(s, with[n]) == download<int32_t>(s, without[n]), n);
  const int32_t R = download<int32_t>(s, with["num_rows"])[0];
  REQUIRE(R > 0);
  REQUIRE(R < TK);
  auto r2s_with = download<int32_t>(s, with["row_to_slot"]), r2s_without = download<int32_t>(s, without["row_to_slot"]);
  CHECK(std::equal(r2s_with.begin(), r2s_with.begin() + R, r2s_without.begin()));
  CHECK(all_poison(download<uint16_t>(s, without["permuted"])));  // never written

  Tensors up{{"a", with["permuted"]},
             {"w_gate_up", t["w_gate_up"]},
             {"expert_offsets", with["expert_offsets"]},
             {"out", poisoned(dev, s, DType::bf16, {TK, I})}};
  unwrap(run_op(dev, s, "moe_grouped_gemm_swiglu", up));
  Tensors gather{{"x", t["x"]},
                 {"w_gate_up", t["w_gate_up"]},
                 {"expert_offsets", without["expert_offsets"]},
                 {"row_to_slot", without["row_to_slot"]},
                 {"out", poisoned(dev, s, DType::bf16, {TK, I})}};
  unwrap(run_op(dev, s, "moe_grouped_gemm_swiglu_gather", gather, {{"topk", std::to_string(K)}}));
  auto want = download<uint16_t>(s, up["out"]), got = download<uint16_t>(s, gather["out"]);
  CHECK(got == want);  // rows past R are poison in both
  CHECK(all_poison(std::vector<uint16_t>(got.begin() + R * I, got.end())));
  CHECK_FALSE(all_poison(std::vector<uint16_t>(got.begin(), got.begin() + R * I)));
}

TEST_CASE("moe_grouped_gemm_swiglu_gather on the cpu: bad calls are refused and name the tensor") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  const int64_t T = 3, K = 2, H = 8, I = 4, EL = 2, R = 5;
  std::mt19937 rng(1);
  Tensors t{{"x", upload(dev, s, DType::bf16, {T, H}, random_bf16(size_t(T * H), 1.0f, rng))},
            {"w_gate_up", upload(dev, s, DType::bf16, {EL, H, 2 * I}, random_bf16(size_t(EL * H * 2 * I), 1.0f, rng))},
            {"expert_offsets", upload(dev, s, DType::i32, {EL + 1}, std::vector<int32_t>{0, 2, 4})},
            {"row_to_slot", upload(dev, s, DType::i32, {R}, std::vector<int32_t>{5, 0, 3, 3, -1})},
            {"out", poisoned(dev, s, DType::bf16, {R, I})}};
  const std::map<std::string, std::string> topk{{"topk", std::to_string(K)}};
  auto refused = [&](Tensors call, const std::string& why, const std::map<std::string, std::string>& params) {
    auto st = run_op(dev, s, "moe_grouped_gemm_swiglu_gather", call, params);
    REQUIRE(!st.ok());
    CHECK_MESSAGE(st.error().message().find(why) != std::string::npos, st.error().message());
  };
  {
    Tensors bad = t;
    bad["row_to_slot"].dtype = DType::f32;
    refused(bad, "'row_to_slot' is f32, the contract says i32", topk);
    bad = t;
    bad["x"] = unwrap(make_tensor(dev, DType::f32, {T, H}));
    refused(bad, "'x' is f32, the contract says bf16", topk);
    bad = t;
    bad["row_to_slot"] = upload(dev, s, DType::i32, {R + 1}, std::vector<int32_t>(size_t(R + 1), 0));
    refused(bad, "output 'out' has shape [5, 4], expected [6, 4]", topk);
    bad = t;
    bad["expert_offsets"] = upload(dev, s, DType::i32, {EL + 2}, std::vector<int32_t>{0, 1, 2, 4});
    refused(bad, "dimension EL1 is 4, but the contract says EL1 = EL+1 = 3", topk);
    bad = t;
    bad["x"] = upload(dev, s, DType::bf16, {T, H + 1}, std::vector<uint16_t>(size_t(T * (H + 1)), 0));
    refused(bad, "input 'w_gate_up' dimension 1 (H) is 8, expected 9", topk);
    bad = t;
    bad.erase("row_to_slot");
    refused(bad, "input 'row_to_slot' is missing", topk);
    refused(t, "topk = 0 must be >= 1", {{"topk", "0"}});
    refused(t, "parameter 'topk': 'two' is not an integer", {{"topk", "two"}});
  }
  // A slot outside [0, T * topk) cannot be returned from the queued kernel: the reference
  // refuses the call before writing, so out keeps what it held. Row 4 (-1) is capacity past
  // expert_offsets[EL] = 4 and is never read, but row 0 holds slot 5 of 6: fine; slot 6 is not.
  unwrap(run_op(dev, s, "moe_grouped_gemm_swiglu_gather", t, topk));
  auto ok = download<uint16_t>(s, t["out"]);
  CHECK_FALSE(all_poison(std::vector<uint16_t>(ok.begin(), ok.begin() + 4 * I)));
  CHECK(all_poison(std::vector<uint16_t>(ok.begin() + 4 * I, ok.end())));
  Tensors bad = t;
  bad["row_to_slot"] = upload(dev, s, DType::i32, {R}, std::vector<int32_t>{0, 1, 6, 2, 0});
  bad["out"] = poisoned(dev, s, DType::bf16, {R, I});
  unwrap(run_op(dev, s, "moe_grouped_gemm_swiglu_gather", bad, topk));
  CHECK(all_poison(download<uint16_t>(s, bad["out"])));
}
