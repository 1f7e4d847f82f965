// ep_dispatch and ep_combine on the CPU device (the reference protocol in the contracts' world
// form): a layout worked out by hand, round trips over several generations, no tokens at all,
// and bad calls.
#include <doctest/doctest.h>

#include "ep_ops_checks.hpp"
#include "runtime_test_support.hpp"

using namespace test::ep_ops;

TEST_CASE("ep_dispatch: the layout worked out by hand") {
  auto d = test::unwrap(Device::open("cpu"));
  auto s = test::unwrap(d.create_stream());
  CHECK(layout_by_hand(d, s) == "");
}

TEST_CASE("ep_dispatch + ep_combine: round trips, 1 to 4 ranks, several generations on the same buffers") {
  auto d = test::unwrap(Device::open("cpu"));
  auto s = test::unwrap(d.create_stream());
  CHECK(round_trip(d, s, 1, 5, 2, 16, 4, 3, 2, 2, 1) == "");
  CHECK(round_trip(d, s, 2, 17, 4, 72, 8, 5, 3, 3, 2) == "");
  CHECK(round_trip(d, s, 3, 9, 3, 13, 7, 1, 1, 2, 3) == "");
  CHECK(round_trip(d, s, 4, 16, 8, 64, 32, 64, 16, 2, 4) == "");
  CHECK(round_trip(d, s, 2, 17, 4, 72, 8, 5, 3, 3, 2, "", "", false) == "");  // one row over the link per slot
  CHECK(round_trip(d, s, 3, 9, 6, 13, 7, 1, 1, 2, 3, "", "", false) == "");
}

TEST_CASE("ep_dispatch + ep_combine: every rank without tokens (T = 0), 1 to 3 ranks") {
  auto d = test::unwrap(Device::open("cpu"));
  auto s = test::unwrap(d.create_stream());
  CHECK(no_tokens(d, s, 1, 4) == "");
  CHECK(no_tokens(d, s, 2, 8) == "");
  CHECK(no_tokens(d, s, 3, 5) == "");
}

TEST_CASE("ep_dispatch: bad calls are refused naming the value") {
  auto d = test::unwrap(Device::open("cpu"));
  auto s = test::unwrap(d.create_stream());
  Tensors io;
  io["x"] = test::unwrap(put(d, s, DType::bf16, {2, 1, 8}, std::vector<uint16_t>(16, 0)));
  io["topk_ids"] = test::unwrap(put(d, s, DType::i32, {2, 1, 1}, std::vector<int32_t>{0, 1}));
  Params p{{"experts", "2"}, {"capacity", "2"}, {"generation", "0"}};
  test::unwrap(halcyon::ops::allocate_outputs(d, "ep_dispatch", io, p));
  auto r = halcyon::ops::run_op(d, s, "ep_dispatch", io, p);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("generation = 0") != std::string::npos);
  p["generation"] = "1";
  p["chunk_rows"] = "0";
  r = halcyon::ops::run_op(d, s, "ep_dispatch", io, p);
  REQUIRE_FALSE(r.ok());
  // chunk_rows = 0 leaves C = ceil(T*K / chunk_rows) undefined: refused while binding.
  CHECK(r.error().message().find("dimension C of 'chunk_flags'") != std::string::npos);
  // RunOptions::ep_peers with a world-form call (P = 2) is refused.
  halcyon::ops::EpPeers peers;
  peers.ranks.resize(2);
  halcyon::ops::RunOptions o;
  o.ep_peers = &peers;
  p["chunk_rows"] = "1";
  r = halcyon::ops::run_op(d, s, "ep_dispatch", io, p, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message().find("P = 1") != std::string::npos);
}
