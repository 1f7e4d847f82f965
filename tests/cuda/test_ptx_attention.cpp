// GPU tests of the attention PTX kernels (kernels/ptx/attention, launchers in ops/ptx): shapes
// past the contract's cases (which the numeric CTS runs on cuda too) — long sequences that
// take several key tiles and the split-KV path with its combine kernel, GQA/MQA, the speculative
// Sq > 1, MLA with 128 heads — each run through ops::run_op on cuda:0 and on the CPU
// reference device with the same seeded inputs; outputs are poisoned first (NaN); errors by
// ||out - ref|| / ||ref|| within the contract's tolerance, -inf lse only where the reference
// has it. Also: shape errors come back before any launch, naming the dimension.
// Exits with 77 (CTest: skipped) when no CUDA device can be opened.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include "test_support.hpp"

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
using HostTensors = std::map<std::string, Bytes>;

namespace {

uint32_t g_seed = 20261124;

Device& gpu() {
  static Device d = std::move(Device::open("cuda:0")).value();
  return d;
}
Device& cpu() {
  static Device d = std::move(Device::open("cpu")).value();
  return d;
}

Bytes bf16_random(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Bytes out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    uint16_t b = ref::float_to_bf16(d(rng)).bits;
    std::memcpy(&out[2 * i], &b, 2);
  }
  return out;
}
Bytes i32(const std::vector<int32_t>& v) {
  Bytes out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Runs `op` on `dev` with the given inputs (shapes from `shapes`), outputs poisoned first;
// `impl` given: that implementation (by name, RunOptions::impl), else the one run_op selects.
// Empty result (no outputs) when the named implementation does not take the call (its
// predicate: HAL_UNSUPPORTED before any launch); any other failure fails the test.
HostTensors run(Device& dev, const std::string& op, const HostTensors& in,
                const std::map<std::string, std::vector<int64_t>>& shapes, const std::map<std::string, std::string>& params,
                const ops::OpImpl* impl = nullptr) {
  auto s = test::unwrap(dev.create_stream());
  std::map<std::string, ops::Tensor, std::less<>> t;
  for (auto& [name, bytes] : in) {
    const ops::TensorSpec* spec = ops::find_contract(op)->find_tensor(name);
    auto tensor = test::unwrap(ops::make_tensor(dev, spec->dtype, shapes.at(name)));
    REQUIRE(tensor.bytes() == bytes.size());
    if (!bytes.empty()) test::unwrap(s.write(tensor.buffer, tensor.offset, bytes.data(), bytes.size()));
    t[name] = std::move(tensor);
  }
  test::unwrap(ops::allocate_outputs(dev, op, t, params));
  for (auto& o : ops::find_contract(op)->outputs)
    if (t[o.name].bytes()) test::unwrap(s.fill(t[o.name].buffer, t[o.name].offset, t[o.name].bytes(), uint8_t(0xFF)));
  auto ran = ops::run_op(dev, s, op, t, params, ops::RunOptions{impl ? impl->name : std::string()});
  if (!ran && impl && ran.error().status() == HAL_UNSUPPORTED) {
    MESSAGE(fmt::format("{} ({}) does not take this call: {}", op, impl->name, ran.error().message().substr(0, 200)));
    return {};
  }
  test::unwrap(std::move(ran));
  HostTensors out;
  for (auto& o : ops::find_contract(op)->outputs) {
    Bytes b(t[o.name].bytes());
    if (!b.empty()) test::unwrap(s.read(t[o.name].buffer, t[o.name].offset, b.data(), b.size()));
    out[o.name] = std::move(b);
  }
  test::unwrap(s.synchronize());
  return out;
}

double value(ops::DType dt, const Bytes& b, size_t i) {
  if (dt == ops::DType::bf16) {
    ref::bf16 h;
    std::memcpy(&h.bits, &b[2 * i], 2);
    return ref::bf16_to_float(h);
  }
  float f;
  std::memcpy(&f, &b[4 * i], 4);
  return f;
}

// Every PTX implementation of `op` that runs on the GPU (each chosen explicitly, so that one
// registered below another is checked too).
std::vector<ops::OpImpl> gpu_impls(const std::string& op) {
  std::vector<ops::OpImpl> out;
  for (auto& impl : ops::impls_of(op)) {
    auto runs = gpu().can_run(impl.format, impl.target.c_str());  // hal_device_can_run's rule
    if (impl.format == HAL_MODULE_PTX && runs && *runs) out.push_back(impl);
  }
  return out;
}

// Runs on the GPU (every implementation) and on the CPU reference; checks every output
// against the contract.
void check(const std::string& op, const HostTensors& in, const std::map<std::string, std::vector<int64_t>>& shapes,
           const std::map<std::string, std::string>& params = {}) {
  HostTensors want = run(cpu(), op, in, shapes, params);
  auto impls = gpu_impls(op);
  REQUIRE(!impls.empty());
  int ran = 0;
  for (const ops::OpImpl& impl : impls) {
    INFO(op, " on ", impl.name, " (", impl.target, ")");
    HostTensors got = run(gpu(), op, in, shapes, params, &impl);
    if (got.empty()) continue;  // said why; the selected implementation always runs (REQUIRE below)
    ++ran;
    for (auto& o : ops::find_contract(op)->outputs) {
      const Bytes &g = got[o.name], &w = want[o.name];
      size_t n = g.size() / ops::dtype_size(o.dtype), bad = 0;
      double d2 = 0, r2 = 0;
      for (size_t i = 0; i < n; ++i) {
        double gv = value(o.dtype, g, i), wv = value(o.dtype, w, i);
        if (std::isinf(wv)) {
          bad += gv != wv;
          continue;
        }
        if (!std::isfinite(gv)) {
          if (bad++ == 0) MESSAGE(fmt::format("{}[{}] = {}, expected {}", o.name, i, gv, wv));
          continue;
        }
        d2 += (gv - wv) * (gv - wv);
        r2 += wv * wv;
      }
      const double rel = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
      MESSAGE(fmt::format("{} ({}) {}: rel err {:.3g} (tolerance {}), {} non-finite or wrong infinities", op,
                          impl.name, o.name, rel, o.tolerance.rel, bad));
      CHECK(bad == 0);
      CHECK(rel <= o.tolerance.rel);
    }
  }
  REQUIRE(ran > 0);
}

// cu_seqlens from lengths.
std::vector<int32_t> offsets(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  return cu;
}

// Scores that grow along the keys: key j of a sequence of `len` keys (its `width` values at
// element `at` of bf16 tensor t) scaled by 0.2 + ramp * j / len, so that each key tile's scores
// reach further than the last (by less or more than the 2^8 that the sm90.ws kernels let a row's
// max pass its reference max before they rescale O).
void ramp_key(Bytes& t, int64_t at, int64_t width, float ramp, int64_t j, int64_t len) {
  const float f = 0.2f + ramp * float(j) / float(len);
  auto* e = reinterpret_cast<uint16_t*>(t.data()) + at;
  for (int64_t x = 0; x < width; ++x) e[x] = ref::float_to_bf16(f * ref::bf16_to_float(ref::bf16{e[x]})).bits;
}

// ramp > 0: the keys' scores grow along each sequence (ramp_key).
void prefill(const std::vector<int32_t>& q_lens, const std::vector<int32_t>& k_lens, int64_t Hq, int64_t Hkv,
             int64_t D, bool causal, float ramp = 0) {
  std::mt19937 rng(g_seed);
  auto cq = offsets(q_lens), ck = offsets(k_lens);
  const int64_t Tq = cq.back(), Tk = ck.back(), B = int64_t(q_lens.size());
  HostTensors in{{"q", bf16_random(rng, size_t(Tq * Hq * D), -3, 3)},
                 {"k", bf16_random(rng, size_t(Tk * Hkv * D), -3, 3)},
                 {"v", bf16_random(rng, size_t(Tk * Hkv * D), -2, 2)},
                 {"cu_seqlens_q", i32(cq)},
                 {"cu_seqlens_k", i32(ck)}};
  for (int64_t b = 0; ramp > 0 && b < B; ++b)
    for (int64_t j = 0; j < k_lens[size_t(b)]; ++j)
      ramp_key(in["k"], (ck[size_t(b)] + j) * Hkv * D, Hkv * D, ramp, j, k_lens[size_t(b)]);
  check("attention_prefill", in,
        {{"q", {Tq, Hq, D}}, {"k", {Tk, Hkv, D}}, {"v", {Tk, Hkv, D}}, {"cu_seqlens_q", {B + 1}}, {"cu_seqlens_k", {B + 1}}},
        {{"causal", causal ? "true" : "false"}});
}

// Paged inputs: a scrambled permutation of the blocks, each sequence's table filled.
std::vector<int32_t> scrambled_table(std::mt19937& rng, int64_t B, int64_t MB, int64_t NB) {
  std::vector<int32_t> perm(static_cast<size_t>(NB));
  for (int64_t i = 0; i < NB; ++i) perm[size_t(i)] = int32_t(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(size_t(B * MB));
  for (size_t i = 0; i < table.size(); ++i) table[i] = perm[i % perm.size()];
  return table;
}

// poison: the cache rows of each sequence's blocks past its length hold NaN (a kernel that
// reads them must mask them out of P V too, where 0 x NaN is NaN).
void decode(int64_t B, int64_t Sq, int64_t Hq, int64_t Hkv, int64_t D, int64_t BS, const std::vector<int32_t>& lens,
            bool poison = false) {
  std::mt19937 rng(g_seed + 1);
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t MB = (max_len + BS - 1) / BS, NB = B * MB + 3;
  const std::vector<int32_t> table = scrambled_table(rng, B, MB, NB);
  HostTensors in{{"q", bf16_random(rng, size_t(B * Sq * Hq * D), -3, 3)},
                 {"k_cache", bf16_random(rng, size_t(NB * BS * Hkv * D), -3, 3)},
                 {"v_cache", bf16_random(rng, size_t(NB * BS * Hkv * D), -2, 2)},
                 {"block_table", i32(table)},
                 {"seq_lens", i32(lens)}};
  for (int64_t b = 0; poison && b < B; ++b)
    for (int64_t j = lens[size_t(b)]; j < MB * BS; ++j) {
      const int64_t row = int64_t(table[size_t(b * MB + j / BS)]) * BS + j % BS;
      for (const char* c : {"k_cache", "v_cache"}) {
        auto* e = reinterpret_cast<uint16_t*>(in[c].data()) + row * Hkv * D;
        std::fill(e, e + Hkv * D, uint16_t(0x7fc0));  // bf16 NaN
      }
    }
  check("attention_decode", in,
        {{"q", {B, Sq, Hq, D}}, {"k_cache", {NB, BS, Hkv, D}}, {"v_cache", {NB, BS, Hkv, D}}, {"block_table", {B, MB}},
         {"seq_lens", {B}}});
}

// ramp > 0: the keys' scores grow along each sequence (ramp_key), through its block table.
void mla(int64_t B, int64_t Sq, int64_t Hq, int64_t BS, const std::vector<int32_t>& lens, float ramp = 0.f) {
  std::mt19937 rng(g_seed + 2);
  const int64_t max_len = *std::max_element(lens.begin(), lens.end());
  const int64_t MB = (max_len + BS - 1) / BS, NB = B * MB + 1;
  const std::vector<int32_t> table = scrambled_table(rng, B, MB, NB);
  HostTensors in{{"q", bf16_random(rng, size_t(B * Sq * Hq * 576), -3, 3)},
                 {"kv_cache", bf16_random(rng, size_t(NB * BS * 576), -1, 1)},
                 {"block_table", i32(table)},
                 {"seq_lens", i32(lens)}};
  for (int64_t b = 0; ramp > 0 && b < B; ++b)
    for (int64_t j = 0; j < lens[size_t(b)]; ++j) {
      const int64_t row = int64_t(table[size_t(b * MB + j / BS)]) * BS + j % BS;
      ramp_key(in["kv_cache"], row * 576, 576, ramp, j, lens[size_t(b)]);
    }
  check("attention_mla_decode", in,
        {{"q", {B, Sq, Hq, 576}}, {"kv_cache", {NB, BS, 576}}, {"block_table", {B, MB}}, {"seq_lens", {B}}});
}

}  // namespace

TEST_CASE("attention_prefill: long sequences, several key tiles") {
  prefill({1000, 0, 333}, {1000, 17, 500}, 8, 2, 128, true);
  prefill({1000, 0, 333}, {1000, 17, 500}, 8, 2, 128, false);
  prefill({513, 64, 1}, {700, 64, 1}, 4, 4, 64, true);
  prefill({300}, {100}, 2, 1, 64, true);  // q_len > k_len: rows that see no key
}

TEST_CASE("attention_prefill: no keys at all (Tk = 0), and 128-row tiles past a short sequence") {
  prefill({5, 130}, {0, 0}, 2, 2, 128, false);
  prefill({129, 1, 127}, {3, 200, 130}, 6, 3, 128, true);
  prefill({129, 1, 127}, {3, 200, 130}, 6, 3, 64, false);
}

// More tiles than an H100/H200 has SMs (132): the persistent grid (sm90.ws without a causal
// mask; sm90.wsp always) walks 2-4 tiles a CTA, across sequences, heads, tile lengths and tiles
// that see no key, so the ring and the Q buffer are handed from one tile to the next.
TEST_CASE("attention_prefill: more tiles than SMs (the persistent walk)") {
  prefill({300, 1100, 1, 200, 640}, {300, 1500, 7, 0, 640}, 16, 4, 128, true);
  prefill({300, 1100, 1, 200, 640}, {300, 1500, 7, 0, 640}, 16, 4, 128, false);
  prefill({700, 129, 640}, {900, 129, 1}, 32, 8, 64, false);
}

// Scores that grow along the keys: a row's max passes its reference max by varying amounts from
// tile to tile (the D 128 kernel's skipped rescale, both sides of its 2^8 slack).
TEST_CASE("attention_prefill: scores growing along the keys") {
  prefill({1024, 300}, {1024, 900}, 4, 2, 128, false, 3.f);
  prefill({1024, 300}, {1024, 900}, 4, 2, 128, true, 3.f);
  prefill({700}, {700}, 2, 1, 64, true, 3.f);
}

// Hundreds of short sequences (empty ones among them): a tile finds its sequence by a binary
// search over cu_seqlens_q (find_seq_tile), with empty tile numbers between the sequences.
TEST_CASE("attention_prefill: hundreds of short sequences") {
  std::mt19937 rng(g_seed + 3);
  std::uniform_int_distribution<int32_t> len(0, 150);
  std::vector<int32_t> q_lens(257), k_lens(257);
  for (size_t i = 0; i < q_lens.size(); ++i) {
    q_lens[i] = i % 17 == 5 ? 0 : len(rng);
    k_lens[i] = q_lens[i] + (i % 3 == 0 ? len(rng) : 0);
  }
  prefill(q_lens, k_lens, 4, 2, 128, true);
  prefill(q_lens, k_lens, 4, 2, 128, false);
  prefill(q_lens, k_lens, 2, 1, 64, false);
}

TEST_CASE("attention_decode: split-KV over long contexts, GQA and MQA, speculative Sq") {
  decode(4, 1, 16, 2, 128, 64, {8192, 1, 4097, 3000});
  decode(3, 3, 8, 8, 128, 16, {5000, 3, 77});
  decode(2, 2, 32, 1, 64, 256, {2048, 1500});
  decode(64, 1, 16, 16, 128, 64, std::vector<int32_t>(64, 300));
  // The bench's grid for GQA (b x Hkv = 128 CTAs: the deep variants split by whole waves; on a
  // GPU of 128-142 SMs sm90.tma runs it as one unsplit wave of its deep build, one_full_wave).
  decode(64, 1, 16, 2, 128, 64, std::vector<int32_t>(64, 1100));
  decode(64, 1, 16, 2, 64, 64, std::vector<int32_t>(64, 700));
  decode(5, 2, 8, 1, 64, 32, {3000, 2, 64, 65, 700});
  // d64 with an even Hkv: the head-pair builds (two KV heads a CTA) too, with one query head a KV
  // head (2 rows a pair a step) and with GQA, speculative Sq, splits and short sequences.
  decode(4, 3, 16, 16, 64, 64, {5000, 3, 777, 64});
  decode(3, 2, 8, 4, 64, 32, {300, 2, 4097});
  // As many pairs as SMs on the H100/H200 (128 on 128-142): where sm90.tma takes its deep build,
  // its pair form keeps the shallow one (there is no deep pair build).
  decode(128, 1, 16, 2, 64, 64, std::vector<int32_t>(128, 200));
}

// Small cases (the sanitizer runs of bench/decode_gpu_run.sh take this one): length 1 (the
// contract's lengths are in [Sq, MB x BS]: no empty sequence), prime lengths that end mid-tile,
// Sq up to 4 (rows that see fewer keys), block sizes 16 to 256 (the contract's: multiples of 16;
// the TMA kernels' boxes are min(BS, 64) rows, 48 is refused by them and run by the others), D 64
// and 128, and NaN in the cache rows past every sequence's end.
TEST_CASE("attention_decode: edge cases, block sizes 16-256") {
  decode(4, 1, 16, 2, 128, 64, {1, 131, 1031, 64}, true);
  decode(3, 4, 8, 2, 128, 16, {4, 67, 5}, true);
  decode(3, 2, 4, 4, 64, 48, {97, 5, 191}, true);
  decode(2, 3, 6, 3, 128, 256, {263, 3}, true);
  decode(3, 1, 8, 1, 64, 128, {129, 1, 2}, true);
  decode(2, 1, 4, 2, 128, 32, {77, 1000}, true);
  decode(2, 2, 2, 2, 64, 16, {17, 100}, true);
}

TEST_CASE("attention_mla_decode: 128 heads, Sq 1 and 2, split-KV") {
  mla(2, 1, 128, 64, {2048, 700});
  mla(2, 2, 128, 64, {1500, 2});
  mla(3, 1, 16, 16, {4000, 1, 333});
}

// The 64-row kernels (sm_90a: a CTA's rows are 64 of one sequence's Sq x Hq, read with each KV
// tile once): row blocks that end inside an Sq step (Hq 48, 17), fewer rows than a block
// (Hq 16), 128 CTAs with no split (b64 Hq128: the bench's grid), long and 1-token sequences.
TEST_CASE("attention_mla_decode: 64-row blocks, Hq 16..128, Sq 1..4") {
  mla(64, 1, 128, 64, std::vector<int32_t>(64, 300));
  mla(4, 1, 128, 64, {8192, 64, 3001, 1});
  mla(3, 2, 64, 64, {777, 2, 4096});
  mla(2, 3, 48, 32, {1000, 3});
  mla(2, 4, 17, 48, {130, 4});
  mla(5, 1, 16, 64, {65, 63, 64, 1, 2000});
}

// Scores that grow along the keys: a row's max passes its reference max by varying amounts
// (the sm90.ws builds' skipped rescale, both sides of their 2^8 slack, in both warpgroups'
// hand-offs), with and without a split.
TEST_CASE("attention_mla_decode: scores growing along the keys") {
  mla(4, 1, 128, 64, {8192, 3001, 700, 64}, 4.f);
  mla(3, 2, 64, 64, {2048, 777, 2}, 6.f);
  mla(2, 1, 16, 16, {4000, 333}, 4.f);
}

TEST_CASE("attention: shape errors before any launch") {
  auto s = test::unwrap(gpu().create_stream());
  std::map<std::string, ops::Tensor, std::less<>> t;
  t["q"] = test::unwrap(ops::make_tensor(gpu(), ops::DType::bf16, {4, 6, 128}));
  t["k"] = test::unwrap(ops::make_tensor(gpu(), ops::DType::bf16, {4, 4, 128}));
  t["v"] = test::unwrap(ops::make_tensor(gpu(), ops::DType::bf16, {4, 4, 128}));
  t["cu_seqlens_q"] = test::unwrap(ops::make_tensor(gpu(), ops::DType::i32, {2}));
  t["cu_seqlens_k"] = test::unwrap(ops::make_tensor(gpu(), ops::DType::i32, {2}));
  test::unwrap(ops::allocate_outputs(gpu(), "attention_prefill", t));
  auto st = ops::run_op(gpu(), s, "attention_prefill", t);
  REQUIRE(!st);
  CHECK(st.error().message().find("Hq = 6") != std::string::npos);
}

// Runs every PTX implementation of `op` that takes the call on the same inputs, outputs
// unchecked (inputs out of range: only that nothing faults); how many ran.
int run_every_impl(const std::string& op, const HostTensors& in, const std::map<std::string, std::vector<int64_t>>& shapes,
                   const std::map<std::string, std::string>& params = {}) {
  int ran = 0;
  for (const ops::OpImpl& impl : gpu_impls(op)) {
    INFO(op, " on ", impl.name);
    ran += !run(gpu(), op, in, shapes, params, &impl).empty();
  }
  return ran;
}

// Offsets the device does not check (`halcyon run` does, on the host): far past T, negative,
// decreasing. Every implementation must clamp them and touch nothing outside its tensors (an
// offset of 2^30 rows addresses hundreds of GB away: a kernel that used it would fault, and
// compute-sanitizer memcheck sees smaller overruns); the outputs are unspecified. Last in the
// file with the next case: a fault leaves the CUDA context unusable for the cases after it.
TEST_CASE("attention_prefill: offsets out of range touch nothing outside the tensors") {
  const int64_t Tq = 300, Tk = 260, Hq = 4, Hkv = 2;
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> bad{
      {{1 << 30, (1 << 30) + 100, 300}, {0, 100, 260}},
      {{0, 200, 100, 300}, {0, 1 << 30, 5, 260}},
      {{-1000, 50, 300}, {-7, 20, 1 << 30}},
      {{0, 300, 300, -(1 << 30)}, {0, 260, 260, 260}}};
  for (int64_t D : {64, 128})
    for (const auto& [cq, ck] : bad) {
      std::mt19937 rng(g_seed + 4);
      HostTensors in{{"q", bf16_random(rng, size_t(Tq * Hq * D), -3, 3)},
                     {"k", bf16_random(rng, size_t(Tk * Hkv * D), -3, 3)},
                     {"v", bf16_random(rng, size_t(Tk * Hkv * D), -2, 2)},
                     {"cu_seqlens_q", i32(cq)},
                     {"cu_seqlens_k", i32(ck)}};
      const int64_t B = int64_t(cq.size()) - 1;
      int ran = 0;
      for (bool causal : {false, true}) {
        INFO("D ", D, " cu_q[0] ", cq[0], " causal ", causal);
        ran += run_every_impl("attention_prefill", in,
                              {{"q", {Tq, Hq, D}}, {"k", {Tk, Hkv, D}}, {"v", {Tk, Hkv, D}}, {"cu_seqlens_q", {B + 1}},
                               {"cu_seqlens_k", {B + 1}}},
                              {{"causal", causal ? "true" : "false"}});
      }
      CHECK(ran > 0);
    }
}

// Block tables and lengths the device does not check: block indices negative, past NB and 2^30
// blocks away, lengths negative and past the table's capacity. Every decode and MLA
// implementation must clamp them (a block outside [0, NB) reads block 0 or NB - 1, a length
// is cut to [0, MB x BS]) and touch nothing outside its tensors; the outputs are unspecified.
TEST_CASE("attention_decode, attention_mla_decode: tables and lengths out of range touch nothing outside the tensors") {
  const int64_t B = 3, BS = 64, MB = 4, NB = 9;
  const std::vector<int32_t> table{0, 1, -5, 2, 3, int32_t(NB) + 7, 4, 5, 1 << 30, 6, 7, -(1 << 30)};
  const std::vector<int32_t> lens{1 << 30, -3, 200};
  std::mt19937 rng(g_seed + 5);
  int ran = 0;
  for (int64_t D : {64, 128}) {
    const int64_t Sq = 2, Hq = 8, Hkv = 2;
    HostTensors in{{"q", bf16_random(rng, size_t(B * Sq * Hq * D), -3, 3)},
                   {"k_cache", bf16_random(rng, size_t(NB * BS * Hkv * D), -3, 3)},
                   {"v_cache", bf16_random(rng, size_t(NB * BS * Hkv * D), -2, 2)},
                   {"block_table", i32(table)},
                   {"seq_lens", i32(lens)}};
    INFO("decode D ", D);
    ran += run_every_impl("attention_decode", in,
                          {{"q", {B, Sq, Hq, D}}, {"k_cache", {NB, BS, Hkv, D}}, {"v_cache", {NB, BS, Hkv, D}},
                           {"block_table", {B, MB}}, {"seq_lens", {B}}});
  }
  for (int64_t Sq : {1, 2}) {
    const int64_t Hq = 128;
    HostTensors in{{"q", bf16_random(rng, size_t(B * Sq * Hq * 576), -3, 3)},
                   {"kv_cache", bf16_random(rng, size_t(NB * BS * 576), -1, 1)},
                   {"block_table", i32(table)},
                   {"seq_lens", i32(lens)}};
    INFO("mla Sq ", Sq);
    ran += run_every_impl("attention_mla_decode", in,
                          {{"q", {B, Sq, Hq, 576}}, {"kv_cache", {NB, BS, 576}}, {"block_table", {B, MB}}, {"seq_lens", {B}}});
  }
  CHECK(ran > 0);
}

int main(int argc, char** argv) {
  auto dev = Device::open("cuda:0");
  if (!dev) {
    std::printf("SKIPPED: no CUDA device can be opened: %s\n", dev.error().to_string().c_str());
    return 77;
  }
  auto info = dev->info();
  if (info) std::printf("testing on %s: %s (%s), seed %u\n", info->uri, info->name, info->arch, g_seed);
  for (const char* op : {"attention_prefill", "attention_decode", "attention_mla_decode"}) {
    std::string why;
    const ops::OpImpl* impl = ops::select_impl(*dev, op, &why);
    std::printf("  %-22s -> %s (all PTX ones are checked)\n", op,
                impl ? fmt::format("ptx {} (priority {})", impl->target, impl->priority).c_str() : why.c_str());
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
