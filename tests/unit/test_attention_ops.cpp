// The attention operators through run_op on the CPU device: decode over a scrambled paged
// cache gives the same bits as prefill on the gathered keys (two references, one answer), a
// single visible key returns its v row and lse = the scaled score, and shape errors name the
// dimension and its value before anything runs.
#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/ops/op.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "runtime_test_support.hpp"

using namespace halcyon::ops;
using test::random_bf16;
using test::unwrap;
using test::download;
using test::upload;

namespace {

using Tensors = std::map<std::string, Tensor, std::less<>>;

}  // namespace

TEST_CASE("attention_decode over a scrambled paged cache = attention_prefill on the gathered keys") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::mt19937 rng(7);
  const int64_t B = 3, Sq = 2, Hq = 6, Hkv = 2, D = 64, BS = 16, MB = 5, NB = B * MB;
  const std::vector<int32_t> lens{70, 2, 33};
  std::vector<int32_t> table(static_cast<size_t>(NB));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  auto q = random_bf16(size_t(B * Sq * Hq * D), 2.f, rng);
  auto kc = random_bf16(size_t(NB * BS * Hkv * D), 2.f, rng);
  auto vc = random_bf16(size_t(NB * BS * Hkv * D), 2.f, rng);
  Tensors d{{"q", upload(dev, s, DType::bf16, {B, Sq, Hq, D}, q)},
            {"k_cache", upload(dev, s, DType::bf16, {NB, BS, Hkv, D}, kc)},
            {"v_cache", upload(dev, s, DType::bf16, {NB, BS, Hkv, D}, vc)},
            {"block_table", upload(dev, s, DType::i32, {B, MB}, table)},
            {"seq_lens", upload(dev, s, DType::i32, {B}, lens)}};
  unwrap(allocate_outputs(dev, "attention_decode", d));
  unwrap(run_op(dev, s, "attention_decode", d));
  // The same keys gathered into packed sequences; the queries as prefill's [Tq, Hq, D].
  std::vector<uint16_t> k, v;
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < lens[size_t(b)]; ++j) {
      const int64_t row = (int64_t(table[size_t(b * MB + j / BS)]) * BS + j % BS) * Hkv * D;
      k.insert(k.end(), kc.begin() + row, kc.begin() + row + Hkv * D);
      v.insert(v.end(), vc.begin() + row, vc.begin() + row + Hkv * D);
    }
    cu_q.push_back(int32_t((b + 1) * Sq));
    cu_k.push_back(cu_k.back() + lens[size_t(b)]);
  }
  const int64_t Tk = cu_k.back();
  Tensors p{{"q", upload(dev, s, DType::bf16, {B * Sq, Hq, D}, q)},
            {"k", upload(dev, s, DType::bf16, {Tk, Hkv, D}, k)},
            {"v", upload(dev, s, DType::bf16, {Tk, Hkv, D}, v)},
            {"cu_seqlens_q", upload(dev, s, DType::i32, {B + 1}, cu_q)},
            {"cu_seqlens_k", upload(dev, s, DType::i32, {B + 1}, cu_k)}};
  unwrap(allocate_outputs(dev, "attention_prefill", p, {{"causal", "true"}}));
  unwrap(run_op(dev, s, "attention_prefill", p, {{"causal", "true"}}));
  CHECK(download<uint16_t>(s, d["out"]) == download<uint16_t>(s, p["out"]));
  CHECK(download<float>(s, d["lse"]) == download<float>(s, p["lse"]));
}

TEST_CASE("a prepared attention_decode reads each run's lengths and table, as run_op does") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::mt19937 rng(11);
  const int64_t B = 2, Sq = 1, Hq = 4, Hkv = 2, D = 64, BS = 16, MB = 4, NB = B * MB;
  std::vector<int32_t> table(static_cast<size_t>(NB)), lens{50, 9};
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  Tensors d{{"q", upload(dev, s, DType::bf16, {B, Sq, Hq, D}, random_bf16(size_t(B * Sq * Hq * D), 2.f, rng))},
            {"k_cache", upload(dev, s, DType::bf16, {NB, BS, Hkv, D}, random_bf16(size_t(NB * BS * Hkv * D), 2.f, rng))},
            {"v_cache", upload(dev, s, DType::bf16, {NB, BS, Hkv, D}, random_bf16(size_t(NB * BS * Hkv * D), 2.f, rng))},
            {"block_table", upload(dev, s, DType::i32, {B, MB}, table)},
            {"seq_lens", upload(dev, s, DType::i32, {B}, lens)}};
  unwrap(allocate_outputs(dev, "attention_decode", d));
  auto prepared = unwrap(prepare_op(dev, "attention_decode", d, {{"scale", "0.125"}}));
  CHECK(prepared.impl().name == "host");
  Tensors fresh = d;  // run_op's outputs apart from the prepared call's
  fresh["out"] = unwrap(make_tensor(dev, DType::bf16, {B, Sq, Hq, D}));
  fresh["lse"] = unwrap(make_tensor(dev, DType::f32, {B, Sq, Hq}));
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {  // the next decode step: longer sequences, another block order
      lens = {64, 30};
      std::shuffle(table.begin(), table.end(), rng);
      unwrap(s.write(d["seq_lens"].buffer, 0, lens.data(), lens.size() * 4));
      unwrap(s.write(d["block_table"].buffer, 0, table.data(), table.size() * 4));
    }
    unwrap(prepared.run(s));
    unwrap(run_op(dev, s, "attention_decode", fresh, {{"scale", "0.125"}}));
    CHECK(download<uint16_t>(s, d["out"]) == download<uint16_t>(s, fresh["out"]));
    CHECK(download<float>(s, d["lse"]) == download<float>(s, fresh["lse"]));
  }
  // Checked at prepare, with run_op's messages; RunOptions that point at the caller's objects refused.
  Tensors bad = d;
  bad["out"] = unwrap(make_tensor(dev, DType::bf16, {B, Sq, Hq, D - 1}));
  auto e = prepare_op(dev, "attention_decode", bad);
  REQUIRE_FALSE(e);
  CHECK(e.error().message().find("output 'out' has shape") != std::string::npos);
  const Tensor trace = unwrap(make_tensor(dev, DType::i32, {4}));
  RunOptions traced;
  traced.sm_trace = &trace;
  auto t = prepare_op(dev, "attention_decode", d, {}, traced);
  REQUIRE_FALSE(t);
  CHECK(t.error().message().find("sm_trace") != std::string::npos);
  auto n = prepare_op(dev, "attention_decode", d, {}, RunOptions{"no_such_impl"});  // (builds without PTX too)
  REQUIRE_FALSE(n);
  CHECK(n.error().status() == HAL_NOT_FOUND);
  CHECK(n.error().message().find("no implementation named 'no_such_impl'") != std::string::npos);
}

TEST_CASE("attention_mla_decode: one visible key returns its latent row and lse = the scaled score") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::mt19937 rng(3);
  const int64_t Hq = 16, BS = 16, NB = 3;
  auto q = random_bf16(size_t(Hq * 576), 1.f, rng);
  auto kv = random_bf16(size_t(NB * BS * 576), 1.f, rng);
  Tensors t{{"q", upload(dev, s, DType::bf16, {1, 1, Hq, 576}, q)},
            {"kv_cache", upload(dev, s, DType::bf16, {NB, BS, 576}, kv)},
            {"block_table", upload(dev, s, DType::i32, {1, 1}, std::vector<int32_t>{2})},
            {"seq_lens", upload(dev, s, DType::i32, {1}, std::vector<int32_t>{1})}};
  unwrap(allocate_outputs(dev, "attention_mla_decode", t, {{"scale", "0.5"}}));
  unwrap(run_op(dev, s, "attention_mla_decode", t, {{"scale", "0.5"}}));
  auto out = download<uint16_t>(s, t["out"]);
  auto lse = download<float>(s, t["lse"]);
  const uint16_t* row = kv.data() + 2 * BS * 576;  // block 2, slot 0
  auto f = [](uint16_t b) { return double(halcyon::ref::bf16_to_float({b})); };
  for (int64_t h = 0; h < Hq; ++h) {
    CHECK(std::equal(row, row + 512, out.begin() + h * 512));
    double dot = 0;
    for (int d = 0; d < 576; ++d) dot += f(q[size_t(h * 576 + d)]) * f(row[d]);
    CHECK(lse[size_t(h)] == doctest::Approx(0.5 * dot).epsilon(1e-6));
  }
}

TEST_CASE("attention: shape errors name the dimension before anything runs") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  auto call = [&](const char* op, std::map<std::string, std::vector<int64_t>> shapes) {
    Tensors t;
    for (auto& [name, shape] : shapes)
      t[name] = unwrap(make_tensor(dev, find_contract(op)->find_tensor(name)->dtype, shape));
    unwrap(allocate_outputs(dev, op, t));
    auto st = run_op(dev, s, op, t);
    REQUIRE(!st);
    return st.error().message();
  };
  CHECK(call("attention_prefill", {{"q", {4, 6, 64}}, {"k", {4, 4, 64}}, {"v", {4, 4, 64}}, {"cu_seqlens_q", {2}},
                                   {"cu_seqlens_k", {2}}})
            .find("Hq = 6 (heads of q) is not a multiple of Hkv = 4") != std::string::npos);
  CHECK(call("attention_prefill", {{"q", {4, 2, 96}}, {"k", {4, 1, 96}}, {"v", {4, 1, 96}}, {"cu_seqlens_q", {2}},
                                   {"cu_seqlens_k", {2}}})
            .find("head dim D = 96 is not supported") != std::string::npos);
  CHECK(call("attention_decode", {{"q", {1, 1, 2, 64}}, {"k_cache", {2, 8, 1, 64}}, {"v_cache", {2, 8, 1, 64}},
                                  {"block_table", {1, 1}}, {"seq_lens", {1}}})
            .find("block size BS = 8") != std::string::npos);
  CHECK(call("attention_mla_decode", {{"q", {1, 1, 129, 576}}, {"kv_cache", {1, 16, 576}}, {"block_table", {1, 1}},
                                      {"seq_lens", {1}}})
            .find("Hq = 129") != std::string::npos);
}

TEST_CASE("RunOptions::impl: the caller's choice of implementation, refused where it cannot run") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  auto s = unwrap(dev.create_stream());
  std::mt19937 rng(5);
  Tensors t{{"q", upload(dev, s, DType::bf16, {3, 2, 64}, random_bf16(3 * 2 * 64, 1.f, rng))},
            {"k", upload(dev, s, DType::bf16, {4, 1, 64}, random_bf16(4 * 64, 1.f, rng))},
            {"v", upload(dev, s, DType::bf16, {4, 1, 64}, random_bf16(4 * 64, 1.f, rng))},
            {"cu_seqlens_q", upload(dev, s, DType::i32, {2}, std::vector<int32_t>{0, 3})},
            {"cu_seqlens_k", upload(dev, s, DType::i32, {2}, std::vector<int32_t>{0, 4})}};
  unwrap(allocate_outputs(dev, "attention_prefill", t));
  bool ran_host = false;
  for (const OpImpl& impl : impls_of("attention_prefill")) {
    auto st = run_op(dev, s, "attention_prefill", t, {}, RunOptions{impl.name});
    if (impl.format == HAL_MODULE_HOST) {
      CHECK(st.ok());
      ran_host = true;
    } else {
      REQUIRE(!st);
      CHECK(st.error().status() == HAL_UNSUPPORTED);
      CHECK(st.error().message().find(impl.name) != std::string::npos);
    }
  }
  CHECK(ran_host);
  unwrap(s.synchronize());
}
