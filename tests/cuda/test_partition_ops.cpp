// Operators on compute partitions (cuda:0): the DeepSeek-V3 split, "comm" = 20 SMs and
// "compute" = the rest, made in one call; the grouped GEMM on the compute partition while
// comm_dispatch moves rows on the comm partition, both compared with the CPU backend's
// results for the same inputs. The PTX launchers size their persistent grids from the
// stream's partition (hal_stream_get_info), so this is the path every partitioned run takes.
// Exits with 77 (CTest: skipped) when no CUDA device or no green contexts.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <halcyon/ops/op.hpp>

#include "test_support.hpp"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include <cstdio>
#include <random>
#include <set>

namespace ops = halcyon::ops;
using Tensors = std::map<std::string, ops::Tensor, std::less<>>;

namespace {

struct Host {
  ops::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

ops::Tensor put(const halcyon::Device& d, const halcyon::Stream& s, const Host& h) {
  ops::Tensor t = test::unwrap(ops::make_tensor(d, h.dtype, h.shape));
  if (t.bytes()) test::unwrap(s.write(t.buffer, t.offset, h.bytes.data(), t.bytes()));
  return t;
}
std::vector<uint8_t> get(const halcyon::Stream& s, const ops::Tensor& t) {
  std::vector<uint8_t> v(t.bytes());
  if (t.bytes()) test::unwrap(s.read(t.buffer, t.offset, v.data(), t.bytes()));
  test::unwrap(s.synchronize());
  return v;
}

Host bf16_random(std::mt19937& rng, std::vector<int64_t> shape) {
  Host h{ops::DType::bf16, shape, {}};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::uniform_real_distribution<float> u(-1, 1);
  h.bytes.resize(size_t(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    float f = u(rng);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    uint16_t v = uint16_t(b >> 16);
    std::memcpy(h.bytes.data() + 2 * i, &v, 2);
  }
  return h;
}
Host i32(std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  Host h{ops::DType::i32, shape, std::vector<uint8_t>(v.size() * 4)};
  std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
  return h;
}

// Runs `op` on (device, stream) with `inputs`, returns each output's bytes.
std::map<std::string, std::vector<uint8_t>> run(const halcyon::Device& d, const halcyon::Stream& s,
                                                const std::string& op, const std::map<std::string, Host>& inputs,
                                                const std::map<std::string, std::string>& params) {
  Tensors t;
  for (auto& [name, h] : inputs) t[name] = put(d, s, h);
  test::unwrap(ops::allocate_outputs(d, op, t, params));
  test::unwrap(ops::run_op(d, s, op, t, params));
  std::map<std::string, std::vector<uint8_t>> out;
  for (auto& spec : ops::find_contract(op)->outputs) out[spec.name] = get(s, t.at(spec.name));
  return out;
}

double bf16_rel_err(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i + 1 < a.size(); i += 2) {
    uint16_t x, y;
    std::memcpy(&x, &a[i], 2);
    std::memcpy(&y, &b[i], 2);
    uint32_t bx = uint32_t(x) << 16, by = uint32_t(y) << 16;
    float fx, fy;
    std::memcpy(&fx, &bx, 4);
    std::memcpy(&fy, &by, 4);
    if (!std::isfinite(fx)) return INFINITY;
    num += double(fx - fy) * (fx - fy);
    den += double(fy) * fy;
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace

TEST_CASE("the grouped GEMM on the compute partition beside comm_dispatch on the comm partition") {
  auto dev = test::unwrap(halcyon::Device::open("cuda:0"));
  auto cpu = test::unwrap(halcyon::Device::open("cpu"));
  auto cpu_stream = test::unwrap(cpu.create_stream());
  auto parts = test::unwrap(dev.split_n({{"comm", 20}, {"compute", 0}}, HAL_PARTITION_FINE_GRAINED));
  auto comm_stream = test::unwrap(dev.create_stream(&parts[0]));
  auto compute_stream = test::unwrap(dev.create_stream(&parts[1]));
  const auto comm_info = test::unwrap(comm_stream.info()), compute_info = test::unwrap(compute_stream.info());
  MESSAGE("comm " << comm_info.units << " SMs, compute " << compute_info.units << " SMs");
  CHECK(comm_info.units + compute_info.units == test::unwrap(dev.info()).compute_units);

  std::mt19937 rng(20261124);
  // Grouped GEMM: 8 experts, uneven rows (one empty), K 512, N 384.
  const int64_t E = 8, K = 512, N = 384;
  std::vector<int32_t> offsets{0, 37, 37, 200, 333, 334, 500, 640, 777};
  const int64_t R = offsets.back();
  std::map<std::string, Host> gemm_in{{"a", bf16_random(rng, {R, K})},
                                      {"w", bf16_random(rng, {E, K, N})},
                                      {"expert_offsets", i32({E + 1}, offsets)}};
  // comm_dispatch: 4096 destination rows of 7168 taken from 512 tokens.
  const int64_t T = 512, H = 7168, D = 4096;
  std::vector<int32_t> src(D);
  for (auto& v : src) v = int32_t(rng() % T);
  std::map<std::string, Host> comm_in{{"x", bf16_random(rng, {T, H})}, {"src_row", i32({D}, src)}};
  const std::map<std::string, std::string> comm_params{{"chunk_rows", "64"}};

  // Both queued before either is read: they run at once, one per partition.
  Tensors g, c;
  for (auto& [n, h] : gemm_in) g[n] = put(dev, compute_stream, h);
  for (auto& [n, h] : comm_in) c[n] = put(dev, comm_stream, h);
  test::unwrap(ops::allocate_outputs(dev, "moe_grouped_gemm", g));
  test::unwrap(ops::allocate_outputs(dev, "comm_dispatch", c, comm_params));
  test::unwrap(ops::run_op(dev, compute_stream, "moe_grouped_gemm", g));
  test::unwrap(ops::run_op(dev, comm_stream, "comm_dispatch", c, comm_params));
  auto gemm_out = get(compute_stream, g.at("out"));
  auto comm_out = get(comm_stream, c.at("out"));

  auto gemm_ref = run(cpu, cpu_stream, "moe_grouped_gemm", gemm_in, {});
  auto comm_ref = run(cpu, cpu_stream, "comm_dispatch", comm_in, comm_params);
  const double err = bf16_rel_err(gemm_out, gemm_ref.at("out"));
  MESSAGE("grouped GEMM on the compute partition: rel err " << err);
  CHECK(err < 1e-2);
  CHECK(comm_out == comm_ref.at("out"));
}

// Issue 16: the grouped GEMM's own blocks record %smid (RunOptions::sm_trace). On the 112-SM
// compute partition (comm = 20 on an H100's 132) they must never touch an SM that the same
// GEMM reaches on the comm partition, and the persistent grid must be sized to the partition.
std::set<int32_t> gemm_sms(const halcyon::Device& dev, const halcyon::Stream& s, Tensors& g, int64_t* blocks) {
  const int64_t n = 1024;
  ops::Tensor trace = test::unwrap(ops::make_tensor(dev, ops::DType::i32, {n}));
  test::unwrap(s.fill<uint32_t>(trace.buffer, trace.offset, n * 4, 0xFFFFFFFFu));
  ops::RunOptions opt;
  opt.impl = "sm90.swapw";
  opt.sm_trace = &trace;
  test::unwrap(ops::run_op(dev, s, "moe_grouped_gemm", g, {}, opt));
  std::vector<int32_t> ids(n);
  test::unwrap(s.read(trace.buffer, trace.offset, ids.data(), n * 4));
  test::unwrap(s.synchronize());
  std::set<int32_t> used;
  *blocks = 0;
  for (int32_t v : ids)
    if (v != -1) {
      used.insert(v);
      ++*blocks;
    }
  return used;
}

TEST_CASE("the grouped GEMM's own %smid: on the compute partition it never runs on the comm partition's SMs") {
  auto dev = test::unwrap(halcyon::Device::open("cuda:0"));
  if (!ops::select_impl(dev, "moe_grouped_gemm", ops::RunOptions{"sm90.swapw"}).ok()) {
    MESSAGE("sm90.swapw cannot run here (not sm_90a, or its cubin does not load): nothing to trace");
    return;
  }
  auto parts = test::unwrap(dev.split_n({{"comm", 20}, {"compute", 0}}, HAL_PARTITION_FINE_GRAINED));
  auto comm_stream = test::unwrap(dev.create_stream(&parts[0]));
  auto compute_stream = test::unwrap(dev.create_stream(&parts[1]));
  const uint32_t comm_units = test::unwrap(comm_stream.info()).units,
                 compute_units = test::unwrap(compute_stream.info()).units;
  MESSAGE("comm " << comm_units << " SMs, compute " << compute_units << " SMs");
  // Enough tiles for a full persistent grid: 8 experts of 512 rows, K 1024, N 2048.
  std::mt19937 rng(7);
  const int64_t E = 8, K = 1024, N = 2048, R = 4096;
  std::vector<int32_t> offsets(E + 1);
  for (int64_t e = 0; e <= E; ++e) offsets[size_t(e)] = int32_t(e * R / E);
  std::map<std::string, Host> in{{"a", bf16_random(rng, {R, K})},
                                 {"w", bf16_random(rng, {E, K, N})},
                                 {"expert_offsets", i32({E + 1}, offsets)}};
  Tensors g;
  for (auto& [n, h] : in) g[n] = put(dev, compute_stream, h);
  test::unwrap(ops::allocate_outputs(dev, "moe_grouped_gemm", g));
  int64_t compute_blocks = 0, comm_blocks = 0;
  const auto on_compute = gemm_sms(dev, compute_stream, g, &compute_blocks);
  const auto on_comm = gemm_sms(dev, comm_stream, g, &comm_blocks);
  MESSAGE("GEMM blocks: " << compute_blocks << " on " << on_compute.size() << " SMs (compute), " << comm_blocks
                          << " on " << on_comm.size() << " SMs (comm)");
  CHECK(compute_blocks == compute_units);  // the persistent grid is the partition's size
  CHECK(comm_blocks == comm_units);
  CHECK(on_compute.size() <= compute_units);
  CHECK(on_comm.size() <= comm_units);
  for (int32_t sm : on_compute) CHECK_MESSAGE(on_comm.count(sm) == 0, "SM " << sm << " is in both partitions");
  // Asking an implementation that does not record is an error, never a silent no-op.
  ops::Tensor trace = test::unwrap(ops::make_tensor(dev, ops::DType::i32, {16}));
  ops::RunOptions opt;
  opt.impl = "sm80";
  opt.sm_trace = &trace;
  auto r = ops::run_op(dev, compute_stream, "moe_grouped_gemm", g, {}, opt);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().status() == HAL_UNSUPPORTED);
}

int main(int argc, char** argv) {
  auto dev = halcyon::Device::open("cuda:0");
  if (!dev) {
    std::printf("skipped: %s\n", dev.error().to_string().c_str());
    return 77;
  }
  if (!dev->has("partition.green_context")) {
    std::printf("skipped: cuda:0 has no green contexts\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
