// ep_dispatch and ep_combine's PTX kernels (kernels/ptx/comm/ep_exchange.cu) on cuda:0 in the
// contracts' world form: every rank's blocks in one grid, every rank's memory a slice of the
// stacked tensors, flags in device memory. A layout worked out by hand, round trips over
// several generations on the same buffers (the flags are never reset), ranks without tokens
// (T = 0, what a layer's empty micro-batch runs), and the same on a 16-SM communication
// partition (green contexts) as the layer runs them. The exact comparison
// with the CPU reference is the conformance suite's (`halcyon cts --filter 'numeric.ep_*'`).
// Exits with 77 (CTest: skipped) without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "ep_ops_checks.hpp"
#include "test_support.hpp"

#include <cstdio>

using namespace test::ep_ops;

TEST_CASE("ptx ep_dispatch: the layout worked out by hand") {
  auto d = test::unwrap(Device::open("cuda:0"));
  auto s = test::unwrap(d.create_stream());
  CHECK(layout_by_hand(d, s) == "");
}

TEST_CASE("ptx ep_dispatch + ep_combine: round trips over generations") {
  auto d = test::unwrap(Device::open("cuda:0"));
  auto s = test::unwrap(d.create_stream());
  CHECK(round_trip(d, s, 1, 5, 2, 16, 4, 3, 2, 2, 1) == "");
  CHECK(round_trip(d, s, 2, 17, 4, 72, 8, 5, 3, 3, 2) == "");
  CHECK(round_trip(d, s, 3, 9, 3, 13, 7, 1, 1, 2, 3) == "");     // H not a multiple of 8: the scalar paths
  CHECK(round_trip(d, s, 4, 64, 8, 256, 32, 16, 4, 3, 4) == "");
  CHECK(round_trip(d, s, 8, 16, 8, 128, 256, 8, 2, 2, 5) == "");  // the most ranks, DeepSeek's expert count
  CHECK(round_trip(d, s, 2, 17, 4, 72, 8, 5, 3, 3, 2, "", "", false) == "");  // dedup off: one row a slot
  CHECK(round_trip(d, s, 3, 9, 6, 13, 7, 1, 1, 2, 3, "", "", false) == "");   // ... and the scalar paths
}

TEST_CASE("ptx ep_dispatch + ep_combine: every rank without tokens (T = 0)") {
  auto d = test::unwrap(Device::open("cuda:0"));
  auto s = test::unwrap(d.create_stream());
  CHECK(no_tokens(d, s, 1, 4) == "");
  CHECK(no_tokens(d, s, 3, 5) == "");
}

TEST_CASE("ptx ep_dispatch + ep_combine: DeepSeek-V3 rows, 2 ranks") {
  auto d = test::unwrap(Device::open("cuda:0"));
  auto s = test::unwrap(d.create_stream());
  CHECK(round_trip(d, s, 2, 256, 8, 7168, 256, 64, 8, 2, 6) == "");
}

TEST_CASE("ptx ep_dispatch + ep_combine on a 16-SM communication partition") {
  auto d = test::unwrap(Device::open("cuda:0"));
  if (!d.has("partition.green_context")) {
    MESSAGE("cuda:0 has no green contexts: partition case not run");
    return;
  }
  auto parts = test::unwrap(d.split_n({{"comm", 16}, {"compute", 0}}, HAL_PARTITION_FINE_GRAINED));
  auto comm = test::unwrap(d.create_stream(&parts[0]));
  MESSAGE("comm partition: " << test::unwrap(comm.info()).units << " SMs");
  CHECK(round_trip(d, comm, 4, 64, 8, 512, 32, 16, 4, 3, 7) == "");
  CHECK(round_trip(d, comm, 2, 128, 8, 2048, 64, 32, 8, 2, 8) == "");
}

// The sm_90a build whose rows leave through bulk copies (ep_dispatch "sm90.tma"), named.
TEST_CASE("ptx ep_dispatch sm90.tma: the layout by hand, round trips, DeepSeek-V3 rows, a partition") {
  auto d = test::unwrap(Device::open("cuda:0"));
  if (!test::unwrap(d.can_run(HAL_MODULE_PTX, "sm_90a"))) {
    MESSAGE("cuda:0 does not run sm_90a: sm90.tma not run");
    return;
  }
  auto s = test::unwrap(d.create_stream());
  CHECK(layout_by_hand(d, s, "sm90.tma") == "");
  CHECK(round_trip(d, s, 2, 17, 4, 72, 8, 5, 3, 3, 2, "sm90.tma") == "");
  CHECK(round_trip(d, s, 3, 9, 3, 13, 7, 1, 1, 2, 3, "sm90.tma") == "");  // H % 8 != 0: the lanes' stores
  CHECK(round_trip(d, s, 8, 16, 8, 128, 256, 8, 2, 2, 5, "sm90.tma") == "");
  CHECK(round_trip(d, s, 2, 256, 8, 7168, 256, 64, 8, 2, 6, "sm90.tma") == "");
  CHECK(round_trip(d, s, 2, 100, 8, 1800, 64, 7, 3, 3, 9, "sm90.tma") == "");  // rows of 3600 bytes: a short piece
  if (d.has("partition.green_context")) {
    auto parts = test::unwrap(d.split_n({{"comm", 16}, {"compute", 0}}, HAL_PARTITION_FINE_GRAINED));
    auto comm = test::unwrap(d.create_stream(&parts[0]));
    CHECK(round_trip(d, comm, 4, 64, 8, 512, 32, 16, 4, 3, 7, "sm90.tma") == "");
  }
}

// ep_combine "wide" (1024 threads, one piece each), named.
TEST_CASE("ptx ep_combine wide: round trips, DeepSeek-V3 rows, a partition") {
  auto d = test::unwrap(Device::open("cuda:0"));
  auto s = test::unwrap(d.create_stream());
  CHECK(round_trip(d, s, 2, 17, 4, 72, 8, 5, 3, 3, 2, "", "wide") == "");
  CHECK(round_trip(d, s, 3, 9, 3, 13, 7, 1, 1, 2, 3, "", "wide") == "");  // H % 8 != 0: the scalar path
  CHECK(round_trip(d, s, 8, 16, 8, 128, 256, 8, 2, 2, 5, "", "wide") == "");
  CHECK(round_trip(d, s, 2, 256, 8, 7168, 256, 64, 8, 2, 6, "", "wide") == "");
  CHECK(round_trip(d, s, 2, 40, 12, 64, 16, 5, 3, 2, 4, "", "wide") == "");  // K > kCombineDepth
  if (d.has("partition.green_context")) {
    auto parts = test::unwrap(d.split_n({{"comm", 16}, {"compute", 0}}, HAL_PARTITION_FINE_GRAINED));
    auto comm = test::unwrap(d.create_stream(&parts[0]));
    CHECK(round_trip(d, comm, 4, 64, 8, 512, 32, 16, 4, 3, 7, "", "wide") == "");
  }
}

int main(int argc, char** argv) {
  auto dev = halcyon::Device::open("cuda:0");
  if (!dev) {
    std::printf("skipped: %s\n", dev.error().to_string().c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
