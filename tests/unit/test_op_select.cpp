// Choosing an implementation: the registry's choice through format, target (hal_device_can_run)
// and each implementation's predicates; the caller's explicit choice through RunOptions, and
// the errors that name the implementations and why each was refused.
#include <halcyon/ops/op.hpp>

#include "test_support.hpp"

#include <atomic>
#include <string>
#include <tuple>
#include <vector>

using namespace halcyon::ops;
using halcyon::Result;
using halcyon::Status;
using test::unwrap;

namespace {

// Test implementations of vector_add on the cpu backend. They apply only to N = 7 and N = 9, a
// length no other test uses, so that the cpu's own host implementation keeps every other call.
std::atomic<int> g_ran{0};  // which test implementation ran last: 1 = "test.wide", 2 = "test.narrow", 3 = "test.named"
Status ran(int which) {
  g_ran = which;
  return {};
}
bool odd_length(const ApplyContext& c, std::string* why) {
  if (!c.has_call() || c.dim("N") == 7 || c.dim("N") == 9) return true;
  if (why) *why = "only for N = 7 or 9";
  return false;
}
bool wide_preferred(const ApplyContext& c, std::string* why) {
  if (!c.has_call() || c.dim("N") == 9) return true;
  if (why) *why = "only N = 9 is worth it";
  return false;
}
RegisterOpImpl t1({"vector_add", HAL_MODULE_HOST, "host", "cpu", 30, [](OpContext&) { return ran(1); }, "test.wide",
                   odd_length, wide_preferred, true, nullptr, "test: applies to N = 7, 9; preferred for 9"});
RegisterOpImpl t2({"vector_add", HAL_MODULE_HOST, "host", "cpu", 20, [](OpContext&) { return ran(2); }, "test.narrow",
                   odd_length, nullptr, true, nullptr, "test: applies to N = 7, 9"});
RegisterOpImpl t3({"vector_add", HAL_MODULE_HOST, "host", "cpu", 40, [](OpContext&) { return ran(3); }, "test.named",
                   nullptr, nullptr, false, nullptr, "test: only when named"});
RegisterOpImpl t4({"vector_add", HAL_MODULE_HOST, "gfx942", "", 50, [](OpContext&) { return ran(4); }, "test.foreign",
                   nullptr, nullptr, true, nullptr, "test: host code for another arch"});

struct Call {
  halcyon::Device dev = unwrap(halcyon::Device::open("cpu"));
  halcyon::Stream s = unwrap(dev.create_stream());
  std::map<std::string, Tensor, std::less<>> t;
  explicit Call(int64_t n) {
    t["a"] = unwrap(make_tensor(dev, DType::f32, {n}));
    t["b"] = unwrap(make_tensor(dev, DType::f32, {n}));
    unwrap(allocate_outputs(dev, "vector_add", t));
  }
  // Which test implementation ran (0: none, the cpu's own host one).
  Result<int> run(const RunOptions& o = {}) {
    g_ran = 0;
    auto st = run_op(dev, s, "vector_add", t, {}, o);
    if (!st) return st.error();
    unwrap(s.synchronize());
    return g_ran.load();
  }
};

}  // namespace

TEST_CASE("select: names default to the target; impls_of lists the highest rank first") {
  auto v = impls_of("vector_add");
  REQUIRE(v.size() >= 5);
  CHECK(v[0].backend == "cpu");  // backend-specific ones rank first
  bool host = false;
  for (auto& i : v) host = host || (i.name == "host" && i.target == "host" && i.backend.empty());
  CHECK(host);
}

TEST_CASE("select: the registry chooses through predicates, highest priority first") {
  CHECK(unwrap(Call(9).run()) == 1);   // test.wide applies and is preferred
  CHECK(unwrap(Call(7).run()) == 2);   // test.wide applies but is passed over: test.narrow
  CHECK(unwrap(Call(16).run()) == 0);  // neither applies: the cpu's host implementation
  // test.named outranks them all but is never the registry's choice; test.foreign is host
  // code for gfx942, which the cpu does not run (hal_device_can_run).
  Call c(7);
  auto facts = unwrap(device_facts(c.dev));
  auto verdicts = judge_impls(c.dev, "vector_add");
  for (auto& v : verdicts) {
    CAPTURE(v.impl.name);
    if (v.impl.name == "test.foreign") {
      CHECK_FALSE(v.usable);
      CHECK(v.why.find("host code for gfx942 does not run") != std::string::npos);
    }
    if (v.impl.name == "test.named") CHECK(v.why == "only when named");
    if (v.impl.name == "test.wide") CHECK(v.chosen);  // without a call, shape rules pass
  }
}

TEST_CASE("select: select_impl_for_call names what run_op runs for the call, and its errors") {
  for (auto [n, want] : {std::pair<int64_t, const char*>{9, "test.wide"}, {7, "test.narrow"}}) {
    Call c(n);
    CHECK(std::string(unwrap(select_impl_for_call(c.dev, "vector_add", c.t))->name) == want);
    CHECK(std::string(unwrap(select_impl_for_call(c.dev, "vector_add", c.t, {}, {"test.named"}))->name) == "test.named");
  }
  Call c(9);
  c.t.erase("c");
  auto r = select_impl_for_call(c.dev, "vector_add", c.t);
  REQUIRE_FALSE(r);
  CHECK(r.error().message() == "vector_add: output 'c' is missing");
  CHECK_FALSE(select_impl_for_call(c.dev, "no_such_op", c.t));
}

TEST_CASE("select: an explicit choice runs that implementation, even one the registry passes over") {
  CHECK(unwrap(Call(7).run({"test.wide"})) == 1);
  CHECK(unwrap(Call(16).run({"test.named"})) == 3);
  CHECK(unwrap(Call(9).run({"host"})) == 0);
  CHECK(unwrap(Call(9).run({"test.narrow"})) == 2);
}

TEST_CASE("select: naming an unknown or unusable implementation is an error listing each and why") {
  auto unknown = Call(7).run({"no.such"});
  REQUIRE(!unknown.ok());
  CHECK(unknown.error().status() == HAL_NOT_FOUND);
  const std::string& m = unknown.error().message();
  CHECK(m.find("vector_add: no implementation named 'no.such'") != std::string::npos);
  CHECK(m.find("test.wide (host host): passed over: only N = 9 is worth it") != std::string::npos);
  CHECK(m.find("test.narrow (host host): the registry's choice") != std::string::npos);
  CHECK(m.find("test.named (host host): only when named") != std::string::npos);
  CHECK(m.find("test.foreign (host gfx942): ") != std::string::npos);
  CHECK(m.find("host (host host)") != std::string::npos);

  auto refused = Call(16).run({"test.narrow"});
  REQUIRE(!refused.ok());
  CHECK(refused.error().status() == HAL_UNSUPPORTED);
  CHECK(refused.error().message().find("implementation 'test.narrow' cannot run on cpu:0") != std::string::npos);
  CHECK(refused.error().message().find("only for N = 7 or 9") != std::string::npos);

  auto foreign = Call(7).run({"test.foreign"});
  REQUIRE(!foreign.ok());
  CHECK(foreign.error().message().find("host code for gfx942 does not run") != std::string::npos);

  // The device-level choice: select_impl with a name, without a call.
  auto dev = unwrap(halcyon::Device::open("cpu"));
  CHECK(unwrap(select_impl(dev, "vector_add", RunOptions{"test.named"}))->name == "test.named");
  CHECK(!select_impl(dev, "vector_add", RunOptions{"test.foreign"}).ok());
}

TEST_CASE("select: RunOptions::sm_trace on an implementation that does not record it is an error") {
  Call c(7);
  Tensor trace = unwrap(make_tensor(c.dev, DType::i32, {4}));
  RunOptions o;
  o.sm_trace = &trace;
  auto r = c.run(o);
  REQUIRE(!r.ok());
  CHECK(r.error().status() == HAL_UNSUPPORTED);
  CHECK(r.error().message().find("does not record the units it runs on") != std::string::npos);
}

namespace {

// The predicates of a registered implementation, asked about a call of `op` with these dims
// and params on a device of these facts (no device: predicates that need one, the cubin
// question, are not asked here). Tensors are absent: addresses read as 0, i.e. aligned.
struct Ask {
  DeviceFacts facts;
  Binding binding;
  const OpImpl* impl = nullptr;
  std::vector<OpImpl> impls;
  Ask(const char* op, const char* name, DeviceFacts f, const std::map<std::string, int64_t>& dims,
      const std::map<std::string, std::string>& params = {})
      : facts(std::move(f)), binding(unwrap(bind(*find_contract(op), params, dims, {}))), impls(impls_of(op)) {
    for (auto& i : impls)
      if (i.name == name) impl = &i;
  }
  ApplyContext ctx() const { return ApplyContext{facts, nullptr, &binding, nullptr}; }
  // A name that is not registered fails the test case (REQUIRE) instead of dereferencing null.
  const OpImpl& get() const {
    REQUIRE_MESSAGE(impl != nullptr, "no implementation of that name is registered");
    return *impl;
  }
  bool applies(std::string* why = nullptr) const { return !get().applies || get().applies(ctx(), why); }
  bool preferred(std::string* why = nullptr) const { return !get().preferred || get().preferred(ctx(), why); }
};

DeviceFacts hopper() {  // an H100 SXM as the CUDA backend describes it
  DeviceFacts f;
  f.uri = "cuda:0";
  f.arch = "sm_90a";
  f.capabilities = "module.ptx module.cubin tensor_map";
  f.compute_units = 132;
  f.max_shared_per_block = 232448;
  f.memory_bytes_per_s = 3'352'320'000'000ull;
  return f;
}

}  // namespace

TEST_CASE("select: the PTX variants' predicates keep the Hopper defaults (no GPU needed)") {
  if (Ask("gemm_bf16", "sm90.splitk", hopper(), {{"M", 8}, {"N", 8}, {"K", 8}}).impl == nullptr) {
    MESSAGE("the sm_90a PTX implementations are not built here");
    return;
  }
  std::string why;
  // gemm_bf16: split-K for the router GEMM (32 tiles on 132 SMs), not for a GEMM that fills the GPU.
  const std::map<std::string, int64_t> router{{"M", 4096}, {"N", 256}, {"K", 7168}}, big{{"M", 8192}, {"N", 8192}, {"K", 1024}};
  CHECK(Ask("gemm_bf16", "sm90.splitk", hopper(), router).applies());
  CHECK(Ask("gemm_bf16", "sm90.splitk", hopper(), router).preferred());
  CHECK_FALSE(Ask("gemm_bf16", "sm90.splitk", hopper(), big).preferred(&why));
  CHECK(why.find("fill the GPU") != std::string::npos);
  CHECK(Ask("gemm_bf16", "sm90.splitk3", hopper(), big).applies());  // a named split runs any aligned shape
  CHECK_FALSE(Ask("gemm_bf16", "sm90.splitk3", hopper(), big).impl->automatic);
  CHECK_FALSE(Ask("gemm_bf16", "sm90.basic", hopper(), {{"M", 5}, {"N", 7}, {"K", 8}}).applies());  // unaligned: sm80
  DeviceFacts no_maps = hopper();
  no_maps.capabilities = "module.ptx module.cubin";
  CHECK_FALSE(Ask("gemm_bf16", "sm90.splitk", no_maps, router).applies(&why));
  CHECK(why.find("makes no tensor maps") != std::string::npos);

  // The grouped GEMMs: the 256-thread swap-AB kernel only for the down GEMM above 64 rows per
  // expert (where the warp-specialized build's cubin does not run), the row tiles otherwise.
  const std::map<std::string, int64_t> many{{"R", 32768}, {"H", 7168}, {"I", 2048}, {"EL", 256}},
      few{{"R", 1024}, {"H", 7168}, {"I", 2048}, {"EL", 256}};
  for (const char* op : {"moe_grouped_gemm", "moe_grouped_gemm_swiglu"})
    for (const char* name : {"sm90.swapw", "sm90.swap", "sm90.tma", "sm90.basic"}) {
      CAPTURE(op);
      CAPTURE(name);
      CHECK(Ask(op, name, hopper(), many).applies());
    }
  CHECK(Ask("moe_grouped_gemm", "sm90.swap", hopper(), many).preferred());
  CHECK_FALSE(Ask("moe_grouped_gemm", "sm90.swap", hopper(), few).preferred());
  CHECK_FALSE(Ask("moe_grouped_gemm_swiglu", "sm90.swap", hopper(), many).preferred());
  CHECK_FALSE(Ask("moe_grouped_gemm", "sm90.swapw", hopper(), many).preferred(&why));  // no device: no cubin
  CHECK_FALSE(Ask("moe_grouped_gemm", "sm90.tma", hopper(), {{"R", 64}, {"H", 7168}, {"I", 2044}, {"EL", 2}}).applies(&why));
  CHECK(why.find("not 16-byte aligned") != std::string::npos);

  // moe_gate: the fast path for DeepSeek-V3 (sigmoid, 256 experts in 8 groups, top-8).
  const std::map<std::string, std::string> ds{{"score", "sigmoid"}, {"n_groups", "8"}, {"topk_groups", "4"}, {"topk", "8"}};
  CHECK(Ask("moe_gate", "sm80.fast", hopper(), {{"T", 4096}, {"E", 256}}, ds).applies());
  auto softmax = ds;
  softmax["score"] = "softmax";
  CHECK_FALSE(Ask("moe_gate", "sm80.fast", hopper(), {{"T", 4096}, {"E", 256}}, softmax).applies(&why));
  CHECK(why == "softmax scores");

  // moe_permute: the fused plan where rows are written and H % 8 == 0.
  const std::map<std::string, std::string> perm{{"n_experts", "256"}, {"expert_begin", "0"}, {"expert_end", "256"}};
  CHECK(Ask("moe_permute", "sm80.fused", hopper(), {{"T", 4096}, {"K", 8}, {"H", 7168}}, perm).applies());
  auto plan_only = perm;
  plan_only["write_permuted"] = "false";
  CHECK_FALSE(Ask("moe_permute", "sm80.fused", hopper(), {{"T", 4096}, {"K", 8}, {"H", 7168}}, plan_only).applies());
  CHECK(Ask("moe_permute", "sm80.spread", hopper(), {{"T", 4096}, {"K", 8}, {"H", 7168}}, plan_only).applies());
  CHECK_FALSE(Ask("moe_permute", "sm80.two", hopper(), {{"T", 4096}, {"K", 8}, {"H", 7168}}, perm).impl->automatic);
}

TEST_CASE("select: the sm_90a MLA kernels ask for the shared memory they launch with (no GPU needed)") {
  const std::map<std::string, int64_t> dims{{"B", 64}, {"Sq", 1}, {"Hq", 128}, {"NB", 8192}, {"BS", 64}, {"MB", 128}};
  if (Ask("attention_mla_decode", "sm90", hopper(), dims).impl == nullptr) {
    MESSAGE("the sm_90a PTX implementations are not built here");
    return;
  }
  std::string why;
  CHECK(Ask("attention_mla_decode", "sm90", hopper(), dims).applies());
  CHECK(Ask("attention_mla_decode", "sm90.ws", hopper(), dims).applies());
  auto smaller = hopper();
  smaller.max_shared_per_block = 232192;  // sm90's 232192 bytes fit; sm90.ws needs 232272
  CHECK(Ask("attention_mla_decode", "sm90", smaller, dims).applies());
  CHECK_FALSE(Ask("attention_mla_decode", "sm90.ws", smaller, dims).applies(&why));
  CHECK(why.find("232272 bytes of shared memory") != std::string::npos);
  // The TMA build: a tile of 64 keys must lie in one cache block.
  CHECK(Ask("attention_mla_decode", "sm90.ws.tma", hopper(), dims).applies());
  auto small_blocks = dims;
  small_blocks["BS"] = 16;
  small_blocks["MB"] = 512;
  CHECK_FALSE(Ask("attention_mla_decode", "sm90.ws.tma", hopper(), small_blocks).applies(&why));
  CHECK(why == "BS = 16 is not a multiple of 64");
  CHECK(Ask("attention_mla_decode", "sm90.ws", hopper(), small_blocks).applies());
  auto no_maps = hopper();
  no_maps.capabilities = "module.ptx module.cubin";
  CHECK_FALSE(Ask("attention_mla_decode", "sm90.ws.tma", no_maps, dims).applies());
  // By pairs of tiles: as sm90.ws.tma, and the registry's choice from 256 query rows a sequence.
  CHECK(Ask("attention_mla_decode", "sm90.pair", hopper(), dims).applies());
  CHECK_FALSE(Ask("attention_mla_decode", "sm90.pair", hopper(), small_blocks).applies());
  CHECK_FALSE(Ask("attention_mla_decode", "sm90.pair", hopper(), dims).preferred(&why));
  CHECK(why == "Sq x Hq = 128 query rows a sequence: below 256 the other build is faster");
  auto mtp = dims;
  mtp["Sq"] = 2;
  CHECK_FALSE(Ask("attention_mla_decode", "sm90.pair.blk", hopper(), mtp).preferred(&why));
  CHECK(why == "Sq x Hq = 256 query rows a sequence: from 256 the other build is faster");
  why.clear();
  Ask("attention_mla_decode", "sm90.pair", hopper(), mtp).preferred(&why);  // no cubin without a GPU
  CHECK(why.find("query rows") == std::string::npos);
}

TEST_CASE("select: paged decode takes 128-key tiles at d128, head pairs or the 64-key kernel at d64 (no GPU needed)") {
  std::map<std::string, int64_t> dims{{"B", 64}, {"Sq", 1}, {"Hq", 16}, {"Hkv", 2}, {"D", 128},
                                      {"NB", 8192}, {"BS", 64}, {"MB", 128}};
  if (Ask("attention_decode", "sm90.tma.k128", hopper(), dims).impl == nullptr) {
    MESSAGE("the sm_90a PTX implementations are not built here");
    return;
  }
  auto h200 = hopper();  // 4.8 TB/s: above tma_pays' 28 GB/s an SM (the H100's 25 GB/s is below)
  h200.memory_bytes_per_s = 4'800'000'000'000ull;
  std::string why;
  CHECK(Ask("attention_decode", "sm90.tma.k128", h200, dims).applies());
  CHECK(Ask("attention_decode", "sm90.tma.k128", h200, dims).preferred());
  CHECK(Ask("attention_decode", "sm90.tma", h200, dims).preferred());  // ranked below k128
  CHECK(Ask("attention_decode", "sm90.tma.k128", h200, dims).impl->priority >
        Ask("attention_decode", "sm90.tma", h200, dims).impl->priority);
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128", hopper(), dims).preferred(&why));  // the H100: cp.async keeps up
  dims["D"] = 64;
  CHECK(Ask("attention_decode", "sm90.tma.k128", h200, dims).applies());  // runs by name at d64
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128", h200, dims).preferred(&why));
  CHECK(why == "D = 64: within 1.5% of sm90.tma there (which, or the head pairs, takes it)");
  CHECK(Ask("attention_decode", "sm90.tma", h200, dims).preferred());
  // d64 with an even Hkv: two KV heads a CTA where the pairs fill a wave (b64 Hkv 16: 512 pairs),
  // not at b64 Hkv 2 (64 pairs); never at d128 or an odd Hkv.
  CHECK(Ask("attention_decode", "sm90.tma.k128.pair", h200, dims).applies());
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128.pair", h200, dims).preferred(&why));
  CHECK(why == "64 head pairs fill less than a wave of 132 SMs (measured slower there)");
  dims["Hkv"] = 16;
  CHECK(Ask("attention_decode", "sm90.tma.k128.pair", h200, dims).preferred());
  CHECK(Ask("attention_decode", "sm90.tma.k128.pair", h200, dims).impl->priority >
        Ask("attention_decode", "sm90.tma.k128", h200, dims).impl->priority);
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128.pair", hopper(), dims).preferred());  // the H100: cp.async
  dims["Hq"] = 48, dims["Hkv"] = 3;
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128.pair", h200, dims).applies(&why));
  CHECK(why == "Hkv = 3 is odd: no head pairs");
  dims["Hq"] = 16, dims["Hkv"] = 2, dims["Sq"] = 2;  // 2 x 16 rows a pair
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128.pair", h200, dims).applies(&why));
  CHECK(why == "Sq x 2 Hq / Hkv = 32 query rows a head pair, more than its 16");
  dims["Sq"] = 1, dims["D"] = 128, dims["Hkv"] = 16;
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128.pair", h200, dims).applies(&why));
  CHECK(why == "D = 128: head pairs are of d64 heads");
  dims["D"] = 64, dims["Hkv"] = 2;
  // Its 197 KiB of shared memory: not on a part with less.
  auto small = h200;
  small.max_shared_per_block = 101 * 1024;
  dims["D"] = 128;
  CHECK_FALSE(Ask("attention_decode", "sm90.tma.k128", small, dims).applies(&why));
  CHECK(why.find("bytes of shared memory a block") != std::string::npos);
}

TEST_CASE("select: the FP8 grouped GEMMs take swapw, wide or tall tiles by rows an expert (no GPU needed)") {
  const std::map<std::string, int64_t> probe{{"R", 64}, {"H", 128}, {"I", 128}, {"EL", 1}};
  if (Ask("moe_grouped_gemm_fp8", "sm90.tall", hopper(), probe).impl == nullptr) {
    MESSAGE("the sm_90a PTX implementations are not built here");
    return;
  }
  // ops/ptx/moe_fp8_ops.cpp's fp8_choice: swapw up to 56 rows an expert, wide up to 88, tall tiles
  // above (the down GEMM's with the staged epilogue), in 2-CTA clusters from 128 rows.
  const std::vector<std::pair<int64_t, const char*>> rule{
      {32, "sm90.swapw"}, {56, "sm90.swapw"}, {57, "sm90.wide"},     {64, "sm90.wide"},
      {88, "sm90.wide"},  {89, "sm90.tall"},  {127, "sm90.tall"},    {128, "sm90.tallmc"}, {256, "sm90.tallmc"}};
  for (const char* op : {"moe_grouped_gemm_fp8_swiglu", "moe_grouped_gemm_fp8"}) {
    const bool down = std::string(op) == "moe_grouped_gemm_fp8";
    const std::vector<const char*> names =
        down ? std::vector<const char*>{"sm90.swapw", "sm90.wide", "sm90.tall", "sm90.talls", "sm90.tallmc", "sm90.tallsmc"}
             : std::vector<const char*>{"sm90.swapw", "sm90.wide", "sm90.tall", "sm90.tallmc"};
    for (auto [rows, want] : rule) {
      if (down && std::string(want) == "sm90.tallmc") want = "sm90.tallsmc";
      if (down && std::string(want) == "sm90.tall") want = "sm90.talls";
      const std::map<std::string, int64_t> dims{{"R", rows * 256}, {"H", 7168}, {"I", 2048}, {"EL", 256}};
      for (const char* name : names) {
        CAPTURE(op);
        CAPTURE(rows);
        CAPTURE(name);
        std::string why;
        CHECK(Ask(op, name, hopper(), dims).applies());
        CHECK(Ask(op, name, hopper(), dims).preferred(&why) == (std::string(name) == want));
        if (std::string(name) != want) CHECK(why.find(want) != std::string::npos);
      }
    }
  }
  // The staged epilogue copies whole 16-byte pieces of output rows: with H % 8 != 0 the down
  // GEMM's tall tiles are sm90.tallmc's (56 n-tiles: an even count).
  const std::map<std::string, int64_t> ragged{{"R", 128 * 256}, {"H", 7164}, {"I", 2048}, {"EL", 256}};
  std::string why;
  CHECK_FALSE(Ask("moe_grouped_gemm_fp8", "sm90.talls", hopper(), ragged).applies(&why));
  CHECK(why.find("N % 8 == 0") != std::string::npos);
  CHECK_FALSE(Ask("moe_grouped_gemm_fp8", "sm90.tallsmc", hopper(), ragged).applies());
  CHECK(Ask("moe_grouped_gemm_fp8", "sm90.tallmc", hopper(), ragged).preferred());
  // The clusters take n-tiles in pairs: with an odd count the unclustered builds take the call
  // (SwiGLU I = 2112: 33 n-tiles of 64 outputs; down H = 7296: 57 of 128).
  for (auto [op, plain, I, H] : {std::tuple<const char*, const char*, int64_t, int64_t>{"moe_grouped_gemm_fp8_swiglu", "sm90.tall", 2112, 7168},
                                 {"moe_grouped_gemm_fp8", "sm90.talls", 2048, 7296}}) {
    CAPTURE(op);
    const std::map<std::string, int64_t> odd_tiles{{"R", 128 * 256}, {"H", H}, {"I", I}, {"EL", 256}};
    CHECK_FALSE(Ask(op, "sm90.tallmc", hopper(), odd_tiles).applies(&why));
    CHECK(why.find("n-tiles is odd") != std::string::npos);
    CHECK(Ask(op, plain, hopper(), odd_tiles).preferred());
  }
  // SwiGLU takes the staged build by name only.
  CHECK_FALSE(Ask("moe_grouped_gemm_fp8_swiglu", "sm90.talls", hopper(), ragged).impl->automatic);
  // Tall tiles need I % 64 == 0 in the SwiGLU GEMM: there wide takes the experts above 88 rows too.
  const std::map<std::string, int64_t> odd{{"R", 128 * 256}, {"H", 7168}, {"I", 2080}, {"EL", 256}};
  CHECK_FALSE(Ask("moe_grouped_gemm_fp8_swiglu", "sm90.tall", hopper(), odd).applies());
  CHECK(Ask("moe_grouped_gemm_fp8_swiglu", "sm90.wide", hopper(), odd).preferred());
  CHECK_FALSE(Ask("moe_grouped_gemm_fp8_swiglu", "sm90.swapw", hopper(), odd).preferred());
  // The gather form chooses only swapw (its wide build was slower; no tall build).
  CHECK_FALSE(Ask("moe_grouped_gemm_fp8_swiglu_gather", "sm90.wide", hopper(), {{"R", 64 * 256}, {"T", 2048}, {"H", 7168},
                                                                                {"I", 2048}, {"EL", 256}},
                  {{"topk", "8"}})
                  .impl->automatic);
  // The quantizing SwiGLU GEMM (sm90.tallmc with h quantized in its epilogue): it runs what the
  // clustered build runs with I % 128 == 0, and its fused_pays says no (measured slower than
  // the GEMM + moe_quantize_fp8 on the H200), so the layer runs it only where named.
  const std::map<std::string, int64_t> ds{{"R", 128 * 256}, {"H", 7168}, {"I", 2048}, {"EL", 256}};
  const Ask q("moe_grouped_gemm_fp8_swiglu_quant", "sm90.tallmc", hopper(), ds);
  CHECK(q.applies());
  REQUIRE(bool(q.get().fused_pays));
  CHECK_FALSE(q.get().fused_pays(q.ctx(), &why));
  CHECK(why.find("measured slower") != std::string::npos);
  CHECK_FALSE(Ask("moe_grouped_gemm_fp8_swiglu_quant", "sm90.tallmc", hopper(),
                  {{"R", 128 * 256}, {"H", 7168}, {"I", 2112}, {"EL", 256}})
                  .applies(&why));
  CHECK(why.find("I % 128 == 0") != std::string::npos);
}

TEST_CASE("select: fused_pays_for_call asks the chosen implementation with the call's shapes") {
  auto dev = unwrap(halcyon::Device::open("cpu"));
  const int64_t R = 8, H = 128, I = 128, EL = 2;
  std::map<std::string, Tensor, std::less<>> t;
  t["a"] = unwrap(make_tensor(dev, DType::e4m3, {R, H}));
  t["a_scale"] = unwrap(make_tensor(dev, DType::f32, {R, 1}));
  t["w_gate_up"] = unwrap(make_tensor(dev, DType::e4m3, {EL, 2 * I, H}));
  t["w_scale"] = unwrap(make_tensor(dev, DType::f32, {EL, 2, 1}));
  t["expert_offsets"] = unwrap(make_tensor(dev, DType::i32, {EL + 1}));
  t["q"] = unwrap(make_tensor(dev, DType::e4m3, {R, I}));
  t["q_scale"] = unwrap(make_tensor(dev, DType::f32, {R, 1}));
  std::string why;
  // The host form has no fused_pays (measured level with the pair on the CPU).
  CHECK_FALSE(fused_pays_for_call(dev, "moe_grouped_gemm_fp8_swiglu_quant", t, {}, {}, &why));
  CHECK(why.find("has not been shown") != std::string::npos);
  // Named: chosen.
  RunOptions named;
  named.impl = "host";
  CHECK(fused_pays_for_call(dev, "moe_grouped_gemm_fp8_swiglu_quant", t, {}, named));
  // A malformed call: no, and why.
  t["q"] = unwrap(make_tensor(dev, DType::e4m3, {R, I + 1}));
  CHECK_FALSE(fused_pays_for_call(dev, "moe_grouped_gemm_fp8_swiglu_quant", t, {}, {}, &why));
  CHECK(why.find("output 'q' has shape [8, 129], expected [8, 128]") != std::string::npos);
  CHECK_FALSE(fused_pays_for_call(dev, "no_such_op", t, {}, {}, &why));
  CHECK(why.find("unknown operator") != std::string::npos);
}
