// Trust in the simulator: kernels written in HIP C++ and compiled by clang-19 for gfx942 and
// gfx90a (instruction selection, register allocation and code-object layout all by LLVM, none
// by hand) run on amdgpu-sim and must match CPU references.
#include "sim_harness.hpp"

using namespace amdtest;

namespace {

const char* const kArchs[] = {"gfx942", "gfx90a"};

}  // namespace

TEST_CASE("clang-compiled vector add matches the CPU and leaves the tail alone") {
  for (const char* arch : kArchs) {
    CAPTURE(arch);
    Sim sim(arch);
    auto co = test_object("vector_ops", arch);
    auto mod = sim.load(co, "vector_ops");
    auto k = must(mod.kernel("vector_add"), "kernel");
    const uint32_t n = 1000, cap = 1024;
    auto a = random_floats(n, 1), b = random_floats(n, 2);
    auto da = sim.upload(a), db = sim.upload(b);
    auto dc = sim.poisoned<float>(cap);
    halcyon::ArgPack args;
    args.pointer(da).pointer(db).pointer(dc).value(n);
    CHECK(must(k.info(), "info").args_size == args.size());
    must(sim.stream.launch(k, {(n + 255) / 256}, {256}, args), "launch");
    auto c = sim.download<float>(dc, cap);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(c[i] == a[i] + b[i]);
    uint32_t poison;
    for (uint32_t i = n; i < cap; ++i) {
      std::memcpy(&poison, &c[i], 4);
      REQUIRE(poison == 0x7fc0deadu);
    }
  }
}

TEST_CASE("clang-compiled f16, bf16 and integer conversions match the CPU") {
  for (const char* arch : kArchs) {
    CAPTURE(arch);
    Sim sim(arch);
    auto co = test_object("vector_ops", arch);
    auto mod = sim.load(co, "vector_ops");
    auto k = must(mod.kernel("convert_mix"), "kernel");
    const uint32_t n = 300;
    auto a = random_floats(n, 3, -4.0f, 4.0f), b = random_floats(n, 4, -4.0f, 4.0f);
    auto da = sim.upload(a), db = sim.upload(b);
    auto dh = sim.poisoned<uint16_t>(n), dbf = sim.poisoned<uint16_t>(n), dq = sim.poisoned<int32_t>(n);
    halcyon::ArgPack args;
    args.pointer(da).pointer(db).pointer(dh).pointer(dbf).pointer(dq).value(n);
    must(sim.stream.launch(k, {(n + 63) / 64}, {64}, args), "launch");
    auto h = sim.download<uint16_t>(dh, n);
    auto bf = sim.download<uint16_t>(dbf, n);
    auto q = sim.download<int32_t>(dq, n);
    for (uint32_t i = 0; i < n; ++i) {
      CAPTURE(i);
      float x = from_f16(to_f16(a[i])), y = from_f16(to_f16(b[i]));
      float want_h = from_f16(to_f16(float(double(x) * y + 1.0)));
      float ulp = std::fabs(want_h) * 0x1p-10f + 0x1p-24f;  // one f16 ulp (or a subnormal step)
      REQUIRE(std::fabs(from_f16(h[i]) - want_h) <= ulp);
      REQUIRE(bf[i] == to_bf16(a[i] * b[i]));
      REQUIRE(q[i] == (int32_t(a[i] * 8.0f) >> 1));
    }
  }
}

TEST_CASE("clang-compiled LDS tree reduction with barriers over a 2-D block matches the CPU") {
  for (const char* arch : kArchs) {
    CAPTURE(arch);
    Sim sim(arch);
    auto co = test_object("lds_reduce", arch);
    auto mod = sim.load(co, "lds_reduce");
    auto k = must(mod.kernel("block_sum"), "kernel");
    CHECK(must(k.info(), "info").static_shared_bytes == 1024);
    const uint32_t n = 5000, per_block = 256, blocks = (n + per_block - 1) / per_block;
    auto x = random_floats(n, 5);
    auto dx = sim.upload(x);
    auto dp = sim.poisoned<float>(blocks);
    halcyon::ArgPack args;
    args.pointer(dx).pointer(dp).value(n);
    must(sim.stream.launch(k, {blocks}, {32, 8}, args), "launch");
    auto p = sim.download<float>(dp, blocks);
    for (uint32_t blk = 0; blk < blocks; ++blk) {
      double want = 0;
      for (uint32_t i = blk * per_block; i < std::min(n, (blk + 1) * per_block); ++i) want += x[i];
      CAPTURE(blk);
      REQUIRE(std::fabs(p[blk] - want) <= 1e-5 * (1 + std::fabs(want)) * 16);
    }
  }
}

TEST_CASE("clang-compiled MFMA GEMMs (bf16 and f16, 32x32x8 and 16x16x16) match the CPU") {
  struct Variant {
    const char* kernel;
    int tile;
    bool bf16;
  };
  const Variant variants[] = {{"gemm_bf16_32x32x8", 32, true},
                              {"gemm_bf16_16x16x16", 16, true},
                              {"gemm_f16_32x32x8", 32, false},
                              {"gemm_f16_16x16x16", 16, false}};
  const int M = 64, N = 96, K = 64;
  for (const char* arch : kArchs) {
    Sim sim(arch);
    auto co = test_object("mfma_gemm", arch);
    auto mod = sim.load(co, "mfma_gemm");
    for (const auto& v : variants) {
      CAPTURE(arch);
      CAPTURE(v.kernel);
      auto k = must(mod.kernel(v.kernel), "kernel");
      auto fa = random_floats(size_t(M) * K, 6), fb = random_floats(size_t(K) * N, 7);
      std::vector<uint16_t> a(fa.size()), b(fb.size());
      for (size_t i = 0; i < a.size(); ++i) a[i] = v.bf16 ? to_bf16(fa[i]) : to_f16(fa[i]);
      for (size_t i = 0; i < b.size(); ++i) b[i] = v.bf16 ? to_bf16(fb[i]) : to_f16(fb[i]);
      auto da = sim.upload(a), db = sim.upload(b);
      auto dc = sim.poisoned<float>(size_t(M) * N);
      halcyon::ArgPack args;
      args.pointer(da).pointer(db).pointer(dc).value(M).value(N).value(K);
      must(sim.stream.launch(k, {uint32_t(N / v.tile), uint32_t(M / v.tile)}, {64}, args), "launch");
      auto c = sim.download<float>(dc, size_t(M) * N);
      auto ref = v.bf16 ? gemm_ref(a, b, M, N, K, from_bf16) : gemm_ref(a, b, M, N, K, from_f16);
      CHECK(rel_error(c, ref) < 1e-5);
      // Element-wise too: a misplaced element would barely move the norm of a large matrix.
      for (size_t i = 0; i < c.size(); ++i) REQUIRE(std::fabs(c[i] - ref[i]) < 1e-4);
    }
  }
}

TEST_CASE("clang-compiled buffer loads and stores honour the resource's range") {
  for (const char* arch : kArchs) {
    CAPTURE(arch);
    Sim sim(arch);
    auto co = test_object("vector_ops", arch);
    auto mod = sim.load(co, "vector_ops");
    auto k = must(mod.kernel("buffer_scale"), "kernel");
    const uint32_t n = 100;
    std::vector<uint32_t> in(n);
    for (uint32_t i = 0; i < n; ++i) in[i] = i + 1;
    auto din = sim.upload(in);
    auto dout = sim.poisoned<uint32_t>(n);  // exactly n elements: lanes past n must not write
    halcyon::ArgPack args;
    args.pointer(din).pointer(dout).value(n);
    must(sim.stream.launch(k, {2}, {64}, args), "launch");
    auto out = sim.download<uint32_t>(dout, n);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(out[i] == in[i] * 3 + 1);
  }
}
