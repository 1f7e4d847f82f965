// The hand-written kernels of kernels/gcn, from the embedded registry, on amdgpu-sim for both
// gfx942 and gfx90a against CPU references, on awkward shapes (1, primes, non-multiples of
// the block or tile), outputs poisoned before the run.
#include <halcyon/gcn/kernels.hpp>
#include <halcyon/kernels/reference/attention.hpp>
#include <halcyon/ops/op.hpp>

#include "hsaco.hpp"

#include <elf.h>

#include <cstddef>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "sim_harness.hpp"

using namespace amdtest;

namespace {

const char* const kArchs[] = {"gfx942", "gfx90a"};

halcyon::Kernel registry_kernel(Sim& sim, const char* name, halcyon::Module* keep) {
  const halcyon::gcn::KernelImage* img = halcyon::gcn::find(name, sim.arch);
  REQUIRE_MESSAGE(img != nullptr, name << " is not embedded for " << sim.arch);
  *keep = must(sim.dev.load_module(HAL_MODULE_HSACO, img->target.c_str(), img->data, img->size, name), "load");
  return must(keep->kernel(name), "kernel");
}

}  // namespace

TEST_CASE("the registry holds every hand-written kernel for both targets, with checked metadata") {
  const char* const names[] = {"halcyon_vector_add_f32",   "halcyon_softmax_rows_f32", "halcyon_gemm_bf16_tile",
                               "halcyon_moe_combine_bf16", "halcyon_moe_permute_plan", "halcyon_moe_permute_rows",
                               "halcyon_moe_gate_f32", "halcyon_moe_grouped_gemm_bf16", "halcyon_comm_dispatch_bf16",
                               "halcyon_attention_decode_bf16", "halcyon_attention_prefill_bf16",
                               "halcyon_attention_mla_decode_bf16", "halcyon_moe_quantize_fp8",
                               "halcyon_moe_grouped_gemm_fp8"};
  for (const char* name : names)
    for (const char* arch : kArchs) {
      CAPTURE(name);
      CAPTURE(arch);
      const auto* img = halcyon::gcn::find(name, arch);
      REQUIRE(img != nullptr);
      halcyon::hsaco::CodeObject code;
      std::string err;
      REQUIRE_MESSAGE(halcyon::hsaco::parse(img->data, img->size, &code, &err), err);
      CHECK(code.arch == arch);
      REQUIRE(code.find(name) != nullptr);
      CHECK(code.find(name)->wavefront_size == 64);
      CHECK(img->contract.find(std::string("kernel ") + name) != std::string::npos);
    }
  CHECK(halcyon::gcn::find("halcyon_vector_add_f32", "gfx1100") == nullptr);
  CHECK(halcyon::gcn::kernels().size() == 2 * std::size(names));
}

// The FP8 MoE operator without a GCN kernel, the quantizing SwiGLU GEMM, on both targets: the
// registry refuses it with the reason, and an explicit run says it is unsupported. The three other
// FP8 GEMMs run on both (gfx90a: e4m3 decoded to bf16); gfx90a.none, which stands for a device
// without them in the layer's fallback test, is only chosen by name and then refuses with its
// reason. The quantizing operators run on both (test_gcn_fp8_quantize.cpp, the conformance suite).
TEST_CASE("FP8 operators without a GCN kernel are refused with the reason") {
  const char* const gemms[] = {"moe_grouped_gemm_fp8_swiglu", "moe_grouped_gemm_fp8_swiglu_gather",
                               "moe_grouped_gemm_fp8"};
  for (const char* arch : kArchs) {
    CAPTURE(arch);
    Sim sim(arch);
    const std::string quant_reason = std::string("no GCN kernel for the quantizing FP8 SwiGLU GEMM on ") + arch;
    std::string why;
    CHECK(halcyon::ops::select_impl(sim.dev, "moe_grouped_gemm_fp8_swiglu_quant", &why) == nullptr);
    CHECK_MESSAGE(why.find(quant_reason) != std::string::npos, why);
    halcyon::ops::RunOptions named;
    named.impl = std::string(arch) + ".none";
    auto chosen = halcyon::ops::select_impl(sim.dev, "moe_grouped_gemm_fp8_swiglu_quant", named);
    REQUIRE_FALSE(chosen.ok());
    CHECK_MESSAGE(chosen.error().message().find(quant_reason) != std::string::npos, chosen.error().message());
    for (const char* op : gemms) {
      CAPTURE(op);
      const auto* impl = halcyon::ops::select_impl(sim.dev, op, &why);
      REQUIRE_MESSAGE(impl != nullptr, why);
      CHECK(impl->name == arch);
      auto none = halcyon::ops::select_impl(sim.dev, op, named);
      if (std::string(arch) == "gfx942") {
        CHECK_FALSE(none.ok());  // no such implementation
        continue;
      }
      REQUIRE_FALSE(none.ok());
      CHECK_MESSAGE(none.error().message().find("no FP8 GEMM kernel in gfx90a.none, named only") != std::string::npos,
                    none.error().message());
    }
  }
}

// Regression (tests/fuzz/fuzz_hsaco): a section header table at an offset of the wrong
// alignment was read in place, misaligned (UBSan); it is refused now. An image that merely
// starts at an odd address (an embedded byte array) still parses.
TEST_CASE("hsaco: misaligned ELF structures are refused, misaligned images are not") {
  const halcyon::gcn::KernelImage* img = halcyon::gcn::find("halcyon_vector_add_f32", "gfx942");
  REQUIRE(img != nullptr);
  std::vector<unsigned char> bytes(img->data, img->data + img->size);
  halcyon::hsaco::CodeObject code;
  std::string err;
  uint64_t shoff = 0;
  std::memcpy(&shoff, bytes.data() + offsetof(Elf64_Ehdr, e_shoff), 8);
  shoff -= 4;  // still inside the file, no longer 8-byte aligned
  std::memcpy(bytes.data() + offsetof(Elf64_Ehdr, e_shoff), &shoff, 8);
  CHECK_FALSE(halcyon::hsaco::parse(bytes.data(), bytes.size(), &code, &err));
  CHECK_MESSAGE(err.find("is not 8-byte aligned") != std::string::npos, err);

  std::vector<unsigned char> odd(img->size + 1);
  std::memcpy(odd.data() + 1, img->data, img->size);
  CHECK_MESSAGE(halcyon::hsaco::parse(odd.data() + 1, img->size, &code, &err), err);
}

// Regression (a crafted code object crashed amdgpu-sim): an argument past the kernarg segment
// was written there at launch (a hidden one at offset 2^28 overflowed the host heap). The
// metadata's .kernarg_segment_size is shrunk in place (a msgpack fixint) below the last argument.
TEST_CASE("hsaco: an argument outside the kernarg segment is refused") {
  const halcyon::gcn::KernelImage* img = halcyon::gcn::find("halcyon_vector_add_f32", "gfx942");
  REQUIRE(img != nullptr);
  std::vector<unsigned char> bytes(img->data, img->data + img->size);
  const std::string name = ".kernarg_segment_size";
  std::vector<unsigned char> key{0xb5};  // msgpack fixstr of 21 bytes (unsigned: bytes compare as bytes)
  key.insert(key.end(), name.begin(), name.end());
  auto at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  REQUIRE(at != bytes.end());
  unsigned char& value = *(at + std::ptrdiff_t(key.size()));
  REQUIRE(value <= 0x7f);  // a positive fixint: the size itself
  halcyon::hsaco::CodeObject code;
  std::string err;
  REQUIRE_MESSAGE(halcyon::hsaco::parse(bytes.data(), bytes.size(), &code, &err), err);
  value = 8;  // the pointers a and b fit, c and n do not
  CHECK_FALSE(halcyon::hsaco::parse(bytes.data(), bytes.size(), &code, &err));
  CHECK_MESSAGE(err.find("runs past its .kernarg_segment_size 8") != std::string::npos, err);
}

TEST_CASE("gcn vector add") {
  for (const char* arch : kArchs)
    for (uint32_t n : {1u, 255u, 256u, 1000u, 4097u}) {
      CAPTURE(arch);
      CAPTURE(n);
      Sim sim(arch);
      halcyon::Module mod;
      auto k = registry_kernel(sim, "halcyon_vector_add_f32", &mod);
      auto a = random_floats(n, 10 + n), b = random_floats(n, 20 + n);
      auto da = sim.upload(a), db = sim.upload(b);
      auto dc = sim.poisoned<float>(n);
      halcyon::ArgPack args;
      args.pointer(da).pointer(db).pointer(dc).value(n);
      must(sim.stream.launch(k, {(n + 255) / 256}, {256}, args), "launch");
      auto c = sim.download<float>(dc, n);
      for (uint32_t i = 0; i < n; ++i) REQUIRE(c[i] == a[i] + b[i]);
    }
}

TEST_CASE("gcn row softmax") {
  struct Shape {
    uint32_t rows, cols;
  };
  for (const char* arch : kArchs)
    for (Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{5, 256}, Shape{4, 257}, Shape{2, 1000}}) {
      CAPTURE(arch);
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      Sim sim(arch);
      halcyon::Module mod;
      auto k = registry_kernel(sim, "halcyon_softmax_rows_f32", &mod);
      auto x = random_floats(size_t(s.rows) * s.cols, 30 + s.cols, -8.0f, 8.0f);
      auto dx = sim.upload(x);
      auto dy = sim.poisoned<float>(x.size());
      halcyon::ArgPack args;
      args.pointer(dx).pointer(dy).value(s.rows).value(s.cols);
      must(sim.stream.launch(k, {s.rows}, {256}, args), "launch");
      auto y = sim.download<float>(dy, x.size());
      for (uint32_t r = 0; r < s.rows; ++r) {
        double mx = -INFINITY, sum = 0;
        for (uint32_t j = 0; j < s.cols; ++j) mx = std::max(mx, double(x[r * s.cols + j]));
        for (uint32_t j = 0; j < s.cols; ++j) sum += std::exp(double(x[r * s.cols + j]) - mx);
        std::vector<float> out(y.begin() + r * s.cols, y.begin() + (r + 1) * s.cols);
        std::vector<double> ref(s.cols);
        for (uint32_t j = 0; j < s.cols; ++j) ref[j] = std::exp(double(x[r * s.cols + j]) - mx) / sum;
        CAPTURE(r);
        CHECK(rel_error(out, ref) < 1e-5);
      }
    }
}

TEST_CASE("gcn bf16 GEMM tile on MFMA, including shapes that are not multiples of the tile") {
  struct Shape {
    int m, n, k;
  };
  for (const char* arch : kArchs)
    for (Shape s : {Shape{1, 1, 1}, Shape{32, 32, 8}, Shape{33, 17, 19}, Shape{7, 130, 37}, Shape{64, 96, 40},
                    Shape{96, 32, 128}}) {
      CAPTURE(arch);
      CAPTURE(s.m);
      CAPTURE(s.n);
      CAPTURE(s.k);
      Sim sim(arch);
      halcyon::Module mod;
      auto kern = registry_kernel(sim, "halcyon_gemm_bf16_tile", &mod);
      auto fa = random_floats(size_t(s.m) * s.k, 40 + s.k), fb = random_floats(size_t(s.k) * s.n, 50 + s.n);
      std::vector<uint16_t> a(fa.size()), b(fb.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = to_bf16(fa[i]);
      for (size_t i = 0; i < b.size(); ++i) b[i] = to_bf16(fb[i]);
      auto da = sim.upload(a), db = sim.upload(b);
      auto dc = sim.poisoned<float>(size_t(s.m) * s.n);
      halcyon::ArgPack args;
      args.pointer(da).pointer(db).pointer(dc).value(s.m).value(s.n).value(s.k);
      CHECK(must(kern.info(), "info").args_size == args.size());
      must(sim.stream.launch(kern, {uint32_t(s.n + 31) / 32, uint32_t(s.m + 31) / 32}, {64}, args), "launch");
      auto c = sim.download<float>(dc, size_t(s.m) * s.n);
      auto ref = gemm_ref(a, b, s.m, s.n, s.k, from_bf16);
      CHECK(rel_error(c, ref) < 1e-5);
      for (size_t i = 0; i < c.size(); ++i) REQUIRE(std::fabs(c[i] - ref[i]) < 1e-4);
    }
}

// The contract's caller errors (block numbers outside [0, NB), sequence lengths past the table's
// capacity or below Sq) leave a sequence's result unspecified but must never reach outside the
// tensors: the simulator faults on any such access, so the call succeeding is the check. The
// valid sequence beside them is still right against the reference.
TEST_CASE("gcn attention decode never reads outside its tensors on a caller's bad table or lengths") {
  using halcyon::ops::DType;
  using halcyon::ops::Tensor;
  namespace ref = halcyon::ref;
  const int64_t B = 3, Sq = 1, Hq = 4, Hkv = 2, D = 64, BS = 16, NB = 3, MB = 2;
  std::vector<int32_t> table{5, -1, 0, 2, 1, 9}, lens{1000, 20, -4};
  std::vector<uint16_t> q(size_t(B * Sq * Hq * D)), kc(size_t(NB * BS * Hkv * D)), vc(kc.size());
  auto fill = [](std::vector<uint16_t>& v, uint32_t seed) {
    auto f = random_floats(v.size(), seed);
    for (size_t i = 0; i < v.size(); ++i) v[i] = to_bf16(f[i]);
  };
  fill(q, 1), fill(kc, 2), fill(vc, 3);
  // Sequence 1 alone (20 keys over blocks 0 and 2) through the reference.
  std::vector<ref::bf16> want(size_t(Hq * D));
  std::vector<float> want_lse(static_cast<size_t>(Hq));
  const ref::AttentionDecodeShape one{1, Sq, Hq, Hkv, D, NB, BS, MB, 0};
  REQUIRE(ref::attention_decode(reinterpret_cast<const ref::bf16*>(q.data()) + Hq * D,
                                reinterpret_cast<const ref::bf16*>(kc.data()), reinterpret_cast<const ref::bf16*>(vc.data()),
                                table.data() + MB, lens.data() + 1, one, want.data(), want_lse.data())
              .ok());
  for (const char* arch : kArchs) {
    CAPTURE(arch);
    Sim sim(arch);
    std::map<std::string, Tensor, std::less<>> t{
        {"q", Tensor{sim.upload(q), 0, DType::bf16, {B, Sq, Hq, D}}},
        {"k_cache", Tensor{sim.upload(kc), 0, DType::bf16, {NB, BS, Hkv, D}}},
        {"v_cache", Tensor{sim.upload(vc), 0, DType::bf16, {NB, BS, Hkv, D}}},
        {"block_table", Tensor{sim.upload(table), 0, DType::i32, {B, MB}}},
        {"seq_lens", Tensor{sim.upload(lens), 0, DType::i32, {B}}},
        {"out", Tensor{sim.poisoned<uint16_t>(q.size()), 0, DType::bf16, {B, Sq, Hq, D}}},
        {"lse", Tensor{sim.poisoned<float>(size_t(B * Sq * Hq)), 0, DType::f32, {B, Sq, Hq}}}};
    must(halcyon::ops::run_op(sim.dev, sim.stream, "attention_decode", t), "attention_decode");
    auto out = sim.download<uint16_t>(t["out"].buffer, q.size());
    auto lse = sim.download<float>(t["lse"].buffer, size_t(B * Sq * Hq));
    for (int64_t i = 0; i < Hq * D; ++i) {
      const float w = from_bf16(want[size_t(i)].bits), g = from_bf16(out[size_t(Hq * D + i)]);
      REQUIRE(std::fabs(g - w) <= 2e-2f * (1.0f + std::fabs(w)));
    }
    for (int64_t h = 0; h < Hq; ++h) REQUIRE(std::fabs(lse[size_t(Hq + h)] - want_lse[size_t(h)]) <= 1e-4f * (1.0f + std::fabs(want_lse[size_t(h)])));
  }
}
