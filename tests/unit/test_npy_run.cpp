// .npy files and `halcyon run` end to end: the user's tensors in, one .npy per output out,
// and bad input refused with a clear message before anything runs.
#include <halcyon/runtime/npy.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "runtime_test_support.hpp"

using namespace halcyon::rt;

using test::npy_bytes;
using test::unwrap;

namespace {
std::string parse_error(const std::vector<unsigned char>& file) {
  auto r = parse_npy(file.data(), file.size(), "f.npy");
  return r.ok() ? std::string("(accepted)") : r.error().message();
}

std::string tmp(const std::string& name) { return std::string(HALCYON_TEST_TMP) + "/" + name; }

// Runs a command, returns its exit status and everything it printed.
int run(const std::string& cmd, std::string* output) {
  std::string full = cmd + " > " + tmp("run_out.txt") + " 2>&1";
  int rc = std::system(full.c_str());
  std::ifstream f(tmp("run_out.txt"));
  output->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
}  // namespace

TEST_CASE("npy: write and read back scalars, vectors and matrices") {
  REQUIRE(std::system(("mkdir -p " + std::string(HALCYON_TEST_TMP)).c_str()) == 0);
  std::vector<float> m = {1, 2, 3, 4, 5, 6};
  unwrap(write_npy(tmp("m.npy"), "<f4", {2, 3}, m.data(), m.size() * 4));
  auto a = unwrap(read_npy(tmp("m.npy")));
  CHECK(a.descr == "<f4");
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.item_size() == 4);
  REQUIRE(a.data.size() == 24);
  CHECK(std::memcmp(a.data.data(), m.data(), 24) == 0);
  int32_t s = 42;
  unwrap(write_npy(tmp("s.npy"), "<i4", {}, &s, 4));
  auto b = unwrap(read_npy(tmp("s.npy")));
  CHECK(b.shape.empty());
  CHECK(b.numel() == 1);
  std::vector<int64_t> v = {7, -8, 9};
  unwrap(write_npy(tmp("v.npy"), "<i8", {3}, v.data(), 24));
  CHECK(unwrap(read_npy(tmp("v.npy"))).shape == std::vector<int64_t>{3});
}

TEST_CASE("npy: malformed files are refused with the reason") {
  std::ofstream(tmp("bad.npy")) << "not numpy at all";
  auto r = read_npy(tmp("bad.npy"));
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("bad magic") != std::string::npos);
  std::vector<float> m(6, 1.0f);
  unwrap(write_npy(tmp("short.npy"), "<f4", {2, 3}, m.data(), 12));  // half the data
  r = read_npy(tmp("short.npy"));
  REQUIRE(!r.ok());
  CHECK_MESSAGE(r.error().message().find("holds 12 data bytes") != std::string::npos, r.error().message());
  r = read_npy(tmp("missing.npy"));
  REQUIRE(!r.ok());
  CHECK(r.error().status() == HAL_NOT_FOUND);
}

TEST_CASE("halcyon run: an operator on the user's .npy tensors") {
  std::vector<float> a = {1, 2, 3, 4, 5}, b = {0.5f, 0.25f, -1, 8, 0};
  unwrap(write_npy(tmp("a.npy"), "<f4", {5}, a.data(), 20));
  unwrap(write_npy(tmp("b.npy"), "<f4", {5}, b.data(), 20));
  std::string out;
  int rc = run(std::string(HALCYON_CLI) + " run vector_add --device cpu --in a=" + tmp("a.npy") + " --in b=" +
                   tmp("b.npy") + " --out " + tmp("va"),
               &out);
  REQUIRE_MESSAGE(rc == 0, out);
  auto c = unwrap(read_npy(tmp("va/c.npy")));
  REQUIRE(c.numel() == 5);
  for (int i = 0; i < 5; ++i) {
    float v;
    std::memcpy(&v, &c.data[size_t(i) * 4], 4);
    CHECK(v == a[size_t(i)] + b[size_t(i)]);
  }
  // Shapes, dtypes, unknown parameters and out-of-bounds ids are refused before running.
  rc = run(std::string(HALCYON_CLI) + " run vector_add --in a=" + tmp("a.npy") + " --in b=" + tmp("m.npy") + " --out " + tmp("x"), &out);
  CHECK(rc != 0);
  CHECK_MESSAGE(out.find("'b' has 2 dimension(s)") != std::string::npos, out);
  std::vector<int32_t> ids = {0, 3, 1, 9};  // 9 is not an expert of 8
  unwrap(write_npy(tmp("ids.npy"), "<i4", {2, 2}, ids.data(), 16));
  std::vector<float> x(2 * 4, 0.5f);
  unwrap(write_npy(tmp("x.npy"), "<f4", {2, 4}, x.data(), 32));
  rc = run(std::string(HALCYON_CLI) + " run moe_permute --in x=" + tmp("x.npy") + " --in topk_ids=" + tmp("ids.npy") +
               " --set n_experts=8 --set expert_end=8 --out " + tmp("p"),
           &out);
  CHECK(rc != 0);
  CHECK_MESSAGE(out.find("element 3 is 9, outside [0, 8)") != std::string::npos, out);
  rc = run(std::string(HALCYON_CLI) + " run vector_add --in a=" + tmp("a.npy") + " --in b=" + tmp("b.npy") +
               " --set alpha=2 --out " + tmp("x"),
           &out);
  CHECK(rc != 0);
  CHECK_MESSAGE(out.find("no parameter 'alpha'") != std::string::npos, out);
  rc = run(std::string(HALCYON_CLI) + " run --list", &out);
  CHECK(rc == 0);
  CHECK(out.find("moe_grouped_gemm_swiglu") != std::string::npos);
  rc = run(std::string(HALCYON_CLI) + " run moe_gate --help", &out);
  CHECK(rc == 0);
  CHECK(out.find("routed_scale") != std::string::npos);
}

TEST_CASE("halcyon run: moe_grouped_gemm_swiglu_gather comes from its contract, its map is bounds-checked") {
  REQUIRE(std::system(("mkdir -p " + std::string(HALCYON_TEST_TMP)).c_str()) == 0);
  std::string out;
  int rc = run(std::string(HALCYON_CLI) + " run --list", &out);
  CHECK(rc == 0);
  CHECK(out.find("moe_grouped_gemm_swiglu_gather ") != std::string::npos);
  rc = run(std::string(HALCYON_CLI) + " run moe_grouped_gemm_swiglu_gather --help", &out);
  CHECK(rc == 0);
  for (const char* want : {"row_to_slot", "i32", "[R]", "topk", "default 8", "values of row_to_slot must lie in [0, T*topk)"})
    CHECK_MESSAGE(out.find(want) != std::string::npos, want, " in: ", out);
  rc = run(std::string(HALCYON_CLI) + " run moe_permute --help", &out);
  CHECK(rc == 0);
  CHECK_MESSAGE(out.find("write_permuted") != std::string::npos, out);
  CHECK_MESSAGE(out.find("permuted is written only when write_permuted is true") != std::string::npos, out);

  // T = 2 tokens, topk = 2: slots [0, 4). Two experts own rows [0, 1) and [1, 3).
  const int64_t T = 2, H = 3, I = 2;
  std::vector<float> x = {1, 0.5f, -1, 0.25f, 2, 1};
  std::vector<float> w(size_t(2 * H * 2 * I));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.125f * float(i % 7) - 0.375f;
  std::vector<int32_t> offsets = {0, 1, 3};
  unwrap(write_npy(tmp("gx.npy"), "<f4", {T, H}, x.data(), x.size() * 4));
  unwrap(write_npy(tmp("gw.npy"), "<f4", {2, H, 2 * I}, w.data(), w.size() * 4));
  unwrap(write_npy(tmp("goff.npy"), "<i4", {3}, offsets.data(), 12));
  auto gather = [&](std::vector<int32_t> map) {
    unwrap(write_npy(tmp("gmap.npy"), "<i4", {int64_t(map.size())}, map.data(), map.size() * 4));
    return run(std::string(HALCYON_CLI) + " run moe_grouped_gemm_swiglu_gather --in x=" + tmp("gx.npy") +
                   " --in w_gate_up=" + tmp("gw.npy") + " --in expert_offsets=" + tmp("goff.npy") +
                   " --in row_to_slot=" + tmp("gmap.npy") + " --set topk=2 --out " + tmp("g"),
               &out);
  };
  rc = gather({3, 0, 2});
  REQUIRE_MESSAGE(rc == 0, out);
  auto o = unwrap(read_npy(tmp("g/out.npy")));
  CHECK(o.shape == std::vector<int64_t>{3, I});
  rc = gather({3, 4, 2});
  CHECK(rc != 0);
  CHECK_MESSAGE(out.find("input 'row_to_slot': element 1 is 4, outside [0, 4)") != std::string::npos, out);
}

TEST_CASE("halcyon run: the attention operators, and their bad indices refused before launching") {
  REQUIRE(std::system(("mkdir -p " + std::string(HALCYON_TEST_TMP)).c_str()) == 0);
  std::string out;
  const std::string cli = std::string(HALCYON_CLI) + " run ";
  // Paged decode: B = 2, Sq = 1, Hq = 2, Hkv = 1, D = 64, BS = 16, NB = 3, MB = 2.
  std::vector<float> q(2 * 2 * 64), kv(3 * 16 * 64);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * float(i % 13) - 0.06f;
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = 0.02f * float(i % 11) - 0.1f;
  unwrap(write_npy(tmp("aq.npy"), "<f4", {2, 1, 2, 64}, q.data(), q.size() * 4));
  unwrap(write_npy(tmp("akv.npy"), "<f4", {3, 16, 1, 64}, kv.data(), kv.size() * 4));
  auto decode = [&](std::vector<int32_t> table, std::vector<int32_t> lens) {
    unwrap(write_npy(tmp("abt.npy"), "<i4", {2, 2}, table.data(), 16));
    unwrap(write_npy(tmp("asl.npy"), "<i4", {2}, lens.data(), 8));
    return run(cli + "attention_decode --in q=" + tmp("aq.npy") + " --in k_cache=" + tmp("akv.npy") +
                   " --in v_cache=" + tmp("akv.npy") + " --in block_table=" + tmp("abt.npy") +
                   " --in seq_lens=" + tmp("asl.npy") + " --out " + tmp("ad"),
               &out);
  };
  REQUIRE_MESSAGE(decode({2, 0, 1, 1}, {20, 3}) == 0, out);
  auto o = unwrap(read_npy(tmp("ad/out.npy")));
  CHECK(o.shape == std::vector<int64_t>{2, 1, 2, 64});
  CHECK(decode({2, 3, 1, 1}, {20, 3}) != 0);
  CHECK_MESSAGE(out.find("input 'block_table': element 1 is 3, outside [0, 3)") != std::string::npos, out);
  CHECK(decode({2, 0, 1, 1}, {20, 33}) != 0);
  CHECK_MESSAGE(out.find("input 'seq_lens': element 1 is 33, outside [1, 33)") != std::string::npos, out);
  // Prefill: offsets that decrease are refused, naming the tensor.
  std::vector<int32_t> bad = {0, 3, 2};
  unwrap(write_npy(tmp("acu.npy"), "<i4", {3}, bad.data(), 12));
  std::vector<float> x(3 * 2 * 64, 0.5f);
  unwrap(write_npy(tmp("ax.npy"), "<f4", {3, 2, 64}, x.data(), x.size() * 4));
  int rc = run(cli + "attention_prefill --in q=" + tmp("ax.npy") + " --in k=" + tmp("ax.npy") + " --in v=" +
                   tmp("ax.npy") + " --in cu_seqlens_q=" + tmp("acu.npy") + " --in cu_seqlens_k=" + tmp("acu.npy") +
                   " --out " + tmp("ap"),
               &out);
  CHECK(rc != 0);
  CHECK_MESSAGE(out.find("offsets 'cu_seqlens_") != std::string::npos, out);  // _q or _k: both are bad
  CHECK_MESSAGE(out.find("' decrease at 2 (2 after 3)") != std::string::npos, out);
}

// Issue 22: one strict reader. Every field is parsed whole and range-checked, and the data
// size is checked against the file before anything is allocated.
TEST_CASE("npy: the reader is strict about every header field") {
  auto h = [](const std::string& descr, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  };
  CHECK(parse_error(npy_bytes(h("<f4", "(2,)"), std::string(8, '\0'))) == "(accepted)");
  CHECK(parse_error(npy_bytes(h("<f4", "(2,)"), std::string(8, '\0'), 2)) == "(accepted)");
  CHECK(parse_error(npy_bytes(h("<f4", "()"), std::string(4, '\0'))) == "(accepted)");
  CHECK(parse_error(npy_bytes(h("<f4", "(2,)"), std::string(8, '\0'), 1, 1)).find("version 1.1") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(2,)"), std::string(8, '\0'), 4)).find("version 4.0") != std::string::npos);
  CHECK(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, }")).find("no 'shape'") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(-2,)"))).find("non-negative") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(2)"))).find("not a tuple") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(2, x)"))).find("non-negative") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(99999999999999999999,)"))).find("64 bits") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(4611686018427387904, 4)"))).find("more than 2^63 bytes") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(3037000500, 3037000500)"))).find("more than 2^63 bytes") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f99999999999999999999", "(2,)"))).find("not a little-endian") != std::string::npos);
  CHECK(parse_error(npy_bytes(h(">f4", "(2,)"))).find("not a little-endian") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(2,)") + "x")).find("after the header") != std::string::npos);
  CHECK(parse_error(npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "1234"))
            .find("repeated key 'descr'") != std::string::npos);
  CHECK(parse_error(npy_bytes(h("<f4", "(2,)"), std::string(9, '\0'))).find("holds 9 data bytes") != std::string::npos);
}

TEST_CASE("npy: e4m3 as NumPy writes ml_dtypes.float8_e4m3fn (|V1) runs like raw |u1 bytes") {
  auto h = [](const std::string& descr) { return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (3,), }"; };
  auto v1 = parse_npy(npy_bytes(h("|V1"), "abc").data(), npy_bytes(h("|V1"), "abc").size(), "v1.npy");
  REQUIRE_MESSAGE(v1.ok(), v1.error().message());
  CHECK(v1->descr == "|V1");
  CHECK(v1->item_size() == 1);
  CHECK(parse_error(npy_bytes(h("|V3"), "abcabcabc")).find("not a little-endian") != std::string::npos);
  // One expert, one row, H = I = 128: the same bytes given as |V1 and as |u1 give the same output.
  const int64_t H = 128, I = 128;
  std::vector<uint8_t> a(I), w(H * I);
  for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(0x30 + i % 16);         // small positive e4m3 values
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint8_t((i % 7) * 0x11 & 0x3F);  // and a few others
  std::vector<float> a_scale = {0.002f}, w_scale = {0.001f};
  std::vector<int32_t> offsets = {0, 1};
  unwrap(write_npy(tmp("fp8_as.npy"), "<f4", {1, 1}, a_scale.data(), 4));
  unwrap(write_npy(tmp("fp8_ws.npy"), "<f4", {1, 1, 1}, w_scale.data(), 4));
  unwrap(write_npy(tmp("fp8_off.npy"), "<i4", {2}, offsets.data(), 8));
  std::string out[2];
  for (int k = 0; k < 2; ++k) {
    const char* descr = k == 0 ? "|V1" : "|u1";
    unwrap(write_npy(tmp("fp8_a.npy"), descr, {1, I}, a.data(), a.size()));
    unwrap(write_npy(tmp("fp8_w.npy"), descr, {1, H, I}, w.data(), w.size()));
    std::string log;
    int rc = run(std::string(HALCYON_CLI) + " run moe_grouped_gemm_fp8 --device cpu --in a=" + tmp("fp8_a.npy") +
                     " --in a_scale=" + tmp("fp8_as.npy") + " --in w=" + tmp("fp8_w.npy") + " --in w_scale=" +
                     tmp("fp8_ws.npy") + " --in expert_offsets=" + tmp("fp8_off.npy") + " --out " + tmp(descr + 1),
                 &log);
    REQUIRE_MESSAGE(rc == 0, log);
    auto o = unwrap(read_npy(tmp(std::string(descr + 1) + "/out.npy")));
    out[k].assign(o.data.begin(), o.data.end());
  }
  CHECK(out[0] == out[1]);
  CHECK(out[0].find_first_not_of('\0') != std::string::npos);  // not all zeros
}

TEST_CASE("npy: a small file claiming a huge array is refused at once, without allocating it") {
  // 4 KB on disk, 5 GB claimed: the reader used to allocate 5 GB and read for seconds.
  auto file = npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1250000000,), }", std::string(4000, '\1'));
  {
    std::ofstream f(tmp("claims_5gb.npy"), std::ios::binary);
    f.write(reinterpret_cast<const char*>(file.data()), std::streamsize(file.size()));
  }
  auto t0 = std::chrono::steady_clock::now();
  auto r = read_npy(tmp("claims_5gb.npy"));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(!r.ok());
  CHECK_MESSAGE(r.error().message().find("holds 4000 data bytes") != std::string::npos, r.error().message());
  CHECK(s < 1.0);
  REQUIRE(std::system(("mkdir -p " + tmp("a_dir.npy")).c_str()) == 0);
  r = read_npy(tmp("a_dir.npy"));
  REQUIRE(!r.ok());
  CHECK(r.error().message().find("not a regular file") != std::string::npos);
}
