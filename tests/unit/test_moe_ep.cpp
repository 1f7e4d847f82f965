// The expert-parallel MoE layer (runtime/moe_ep_layer) on the CPU communicator: 2, 3 and 4
// processes, each with its own tokens, against the single-rank layer with all experts run on
// the same tokens. The same operators on the same rows: the outputs must be the same bits.
#include <doctest/doctest.h>

#include "moe_ep_support.hpp"

using namespace test::ep;

TEST_CASE("moe_ep: the expert-parallel layer equals the single-rank layer, 2, 3 and 4 processes, both transports") {
  const Problem p = make_problem(64, 32, 16, 4, 4, 2);
  for (EpTransport t : {EpTransport::kAllToAll, EpTransport::kPeerWrite})
    for (uint32_t n : {2u, 3u, 4u}) {
      CAPTURE(n);
      CAPTURE(int(t));
      CHECK(test::run_ranks(n, "ep", [&](uint32_t r, uint32_t size, const std::string& name) {
              return ep_rank(p, r, size, name, "cpu:0", true, 0, t);
            }) == "");
    }
}

TEST_CASE("moe_ep: the dispatch/combine kernels (kPeerKernel) equal the single-rank layer, 2 and 4 processes") {
  const Problem p = make_problem(64, 32, 16, 4, 4, 2);
  EpOptions ep;
  ep.max_tokens = 32;
  ep.dispatch_chunk_rows = 5;  // several chunks per rank, the last one short
  ep.combine_chunk_rows = 3;
  ep.timeout_ms = 20000;
  for (uint32_t n : {1u, 2u, 4u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "ep-kernel", [&](uint32_t r, uint32_t size, const std::string& name) {
            return ep_rank(p, r, size, name, "cpu:0", true, 0, EpTransport::kPeerKernel, ep);
          }) == "");
  }
  // More ranks than experts: ranks 1 and 3 own none and still take part in every exchange.
  const Problem few = make_problem(24, 16, 3, 2, 1, 1);
  CHECK(test::run_ranks(4, "ep-kernel-few", [&](uint32_t r, uint32_t size, const std::string& name) {
          return ep_rank(few, r, size, name, "cpu:0", true, 0, EpTransport::kPeerKernel, ep);
        }) == "");
}

TEST_CASE("moe_ep: more ranks than experts (a rank owns none), and one rank") {
  const Problem p = make_problem(24, 16, 3, 2, 1, 1);
  for (uint32_t n : {1u, 4u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "ep-few", [&](uint32_t r, uint32_t size, const std::string& name) {
            return ep_rank(p, r, size, name, "cpu:0", true, 0, n == 4 ? EpTransport::kPeerWrite : EpTransport::kAllToAll);
          }) == "");
  }
}

TEST_CASE("moe_ep: expert ranges and owners") {
  for (int64_t experts : {1, 3, 16, 256})
    for (uint32_t ranks : {1u, 2u, 3u, 4u, 7u, 8u}) {
      int64_t next = 0;
      for (uint32_t r = 0; r < ranks; ++r) {
        auto range = ep_expert_range(experts, r, ranks);
        CHECK(range.first == next);
        CHECK(range.count() >= experts / ranks);
        CHECK(range.count() <= experts / ranks + 1);
        for (int64_t e = range.first; e < range.end; ++e) CHECK(ep_owner(experts, ranks, e) == r);
        next = range.end;
      }
      CHECK(next == experts);
    }
}

TEST_CASE("moe_ep: a config naming other local experts than the rank owns is an error") {
  CHECK(test::run_ranks(2, "ep-bad", [](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          const Problem p = make_problem(16, 8, 4, 2, 1, 1);
          RankEnv env;
          if (auto e = open_rank(rank, size, name, &env); !e.empty()) return e;
          auto w = weights(env.dev, env.s, p, ep_expert_range(4, rank, size));
          RANK_TRY(w);
          MoeLayerConfig c = p.c;
          c.expert_begin = 3;
          c.local_experts = 1;
          auto layer = MoeEpLayer::create(env.dev, env.comm, c, *w);
          RANK_CHECK(!layer, "accepted");
          RANK_CHECK(layer.error().message().find(fmt::format("rank {} of 2 owns", rank)) != std::string::npos, "{}",
                     layer.error().to_string());
          return {};
        }) == "");
}
