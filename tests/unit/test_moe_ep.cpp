// The expert-parallel MoE layer (runtime/moe_ep_layer) on the CPU communicator: 2, 3 and 4
// processes, each with its own tokens, against the single-rank layer with all experts run on
// the same tokens. The same operators on the same rows: the outputs must be the same bits, with
// the dispatch/combine kernels in micro-batches too. And EpExchange with a rank without tokens.
#include <doctest/doctest.h>
#include <sys/mman.h>

#include <chrono>
#include <filesystem>

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

// kPeerKernel's options of the cases below: several chunks per rank, the last one short.
EpOptions kernel_options(int64_t micro_batches) {
  EpOptions ep;
  ep.max_tokens = 32;
  ep.dispatch_chunk_rows = 5;
  ep.combine_chunk_rows = 3;
  ep.timeout_ms = 20000;
  ep.micro_batches = micro_batches;
  return ep;
}

TEST_CASE("moe_ep: micro-batches (kPeerKernel, 2 and 3) equal the single-rank layer, 1, 2 and 4 processes") {
  const Problem p = make_problem(64, 32, 16, 4, 4, 2);
  for (int64_t mb : {2, 3})
    for (uint32_t n : {1u, 2u, 4u}) {
      CAPTURE(mb);
      CAPTURE(n);
      const EpOptions ep = kernel_options(mb);
      CHECK(test::run_ranks(n, "ep-mb", [&](uint32_t r, uint32_t size, const std::string& name) {
              return ep_rank(p, r, size, name, "cpu:0", true, 0, EpTransport::kPeerKernel, ep);
            }) == "");
    }
  // Every exchange on the comm stream (edge_exchanges_on_caller off), and one row per slot.
  for (bool edges : {false, true})
    for (uint32_t n : {2u, 4u}) {
      CAPTURE(edges);
      CAPTURE(n);
      EpOptions ep = kernel_options(2);
      ep.edge_exchanges_on_caller = edges;
      ep.dedup = edges;
      CHECK(test::run_ranks(n, "ep-mb-edges", [&](uint32_t r, uint32_t size, const std::string& name) {
              return ep_rank(p, r, size, name, "cpu:0", true, 0, EpTransport::kPeerKernel, ep);
            }) == "");
    }
  // Fewer tokens than micro-batches: rank 0 holds one token, so two of its three slices are
  // empty (T = 0) while the other ranks' are not; every exchange still runs on every rank.
  const EpOptions ep = kernel_options(3);
  for (uint32_t n : {2u, 4u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "ep-mb-one", [&](uint32_t r, uint32_t size, const std::string& name) {
            return ep_rank(p, r, size, name, "cpu:0", true, 0, EpTransport::kPeerKernel, ep, 1);
          }) == "");
  }
  // More ranks than experts (ranks 1 and 3 own none) and more micro-batches than rank 0's tokens.
  const Problem few = make_problem(24, 16, 3, 2, 1, 1);
  CHECK(test::run_ranks(4, "ep-mb-few", [&](uint32_t r, uint32_t size, const std::string& name) {
          return ep_rank(few, r, size, name, "cpu:0", true, 0, EpTransport::kPeerKernel, ep, 2);
        }) == "");
}

// A rank of the refusal cases: its environment and its experts' weights of a small problem.
struct SmallRank {
  Problem p = make_problem(16, 8, 4, 2, 1, 1);
  RankEnv env;
  MoeLayerWeights w;
};
std::string small_rank(uint32_t rank, uint32_t size, const std::string& name, SmallRank* r) {
  if (auto e = open_rank(rank, size, name, &r->env); !e.empty()) return e;
  auto w = weights(r->env.dev, r->env.s, r->p, ep_expert_range(r->p.c.experts, rank, size));
  RANK_TRY(w);
  r->w = *w;
  return {};
}

TEST_CASE("moe_ep: micro_batches = 0, and options that differ between ranks, are refused on every rank") {
  CHECK(test::run_ranks(2, "ep-mb-bad", [](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          SmallRank r;
          if (auto e = small_rank(rank, size, name, &r); !e.empty()) return e;
          auto refused = [&](EpOptions ep, const std::string& says) -> std::string {
            auto layer = MoeEpLayer::create(r.env.dev, r.env.comm, r.p.c, r.w, {}, EpTransport::kPeerKernel, ep);
            RANK_CHECK(!layer, "accepted, expected \"{}\"", says);
            RANK_CHECK(layer.error().message().find(says) != std::string::npos, "{}", layer.error().to_string());
            return {};
          };
          EpOptions ep = kernel_options(0);
          if (auto e = refused(ep, "EpOptions::micro_batches = 0 must be >= 1"); !e.empty()) return e;
          ep.micro_batches = rank == 0 ? 2 : 3;
          if (auto e = refused(ep, "rank 1 has EpOptions::micro_batches = 3, rank 0 has 2"); !e.empty()) return e;
          ep.micro_batches = 1;
          ep.max_tokens = rank == 0 ? 32 : 16;
          return refused(ep, "EpExchange: rank 1 has EpOptions::max_tokens = 16, rank 0 has 32");
        }) == "");
}

// EpExchange with a rank that has no tokens (T = 0, what a layer's empty micro-batch sends):
// the experts are the identity (outputs = the rows as they landed), so every token's combined
// row is its own row weighed by the sum of its weights, summed as ep_combine sums. Rank 0 has no
// tokens in generations 1 and 3 and some in 2, on the same buffers.
std::string exchange_rank(uint32_t rank, uint32_t size, const std::string& name) {
  RankEnv env;
  if (auto e = open_rank(rank, size, name, &env); !e.empty()) return e;
  const int64_t E = 6, K = 2, H = 16;
  EpOptions o = kernel_options(1);
  o.max_tokens = 4;
  auto ex = EpExchange::create(env.dev, env.comm, E, K, H, o);
  RANK_TRY(ex);
  std::mt19937 rng(7 + rank);
  std::uniform_real_distribution<float> w01(0, 1);
  for (int g = 1; g <= 3; ++g) {
    const int64_t T = rank == 0 && g != 2 ? 0 : 1 + (rank + g) % 4;
    const auto x = random_bf16(size_t(T * H), 1.0f, rng);
    std::vector<int32_t> ids(size_t(T * K));
    std::vector<float> w(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i / K + rank + 3 * (i % K)) % E), w[i] = w01(rng);
    // Buffers of at least one row (a backend need not allocate 0 bytes), T rows seen.
    auto xt = upload(env.dev, env.s, DType::bf16, {std::max<int64_t>(T, 1), H}, x.data(), x.size());
    auto it = upload(env.dev, env.s, DType::i32, {std::max<int64_t>(T, 1), K}, ids.data(), ids.size());
    auto wt = upload(env.dev, env.s, DType::f32, {std::max<int64_t>(T, 1), K}, w.data(), w.size());
    auto out = make_tensor(env.dev, DType::bf16, {std::max<int64_t>(T, 1), H});
    for (auto* t : {&xt, &it, &wt, &out}) {
      RANK_TRY(*t);
      (*t)->shape[0] = T;
    }
    RANK_TRY(ex->dispatch(env.s, *xt, *it));
    const Tensor recv = ex->received(), eout = ex->expert_outputs();
    RANK_TRY(env.s.copy(eout.buffer, eout.offset, recv.buffer, recv.offset, recv.bytes()));
    RANK_TRY(ex->combine(env.s, *wt, *out));
    RANK_CHECK(ex->generation() == g, "generation {} after {} dispatches", ex->generation(), g);
    std::vector<uint16_t> got(size_t(T * H));
    RANK_TRY(env.s.read(out->buffer, out->offset, got.data(), got.size() * 2));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += double(w[size_t(t * K + k)]) * halcyon::ref::bf16_to_float(halcyon::ref::bf16{x[size_t(t * H + h)]});
        const uint16_t want = halcyon::ref::float_to_bf16(float(acc)).bits;
        RANK_CHECK(got[size_t(t * H + h)] == want, "generation {}: out[{}, {}] = {:#06x}, expected {:#06x}", g, t, h,
                   got[size_t(t * H + h)], want);
      }
  }
  return {};
}

TEST_CASE("moe_ep: EpExchange with a rank that has no tokens (T = 0), 2 and 3 processes") {
  for (uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "ep-exchange-empty", exchange_rank) == "");
  }
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

// The ranges of `experts` over `ranks` tile [0, experts), sizes differing by at most 1, and
// ep_owner names each range's rank: for every expert, or (counts near 2^63) its first and last.
void check_ranges(int64_t experts, uint32_t ranks, bool every_expert) {
  CAPTURE(experts);
  CAPTURE(ranks);
  int64_t next = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    auto range = ep_expert_range(experts, r, ranks);
    REQUIRE(range.first == next);
    CHECK(range.count() >= experts / ranks);
    CHECK(range.count() <= experts / ranks + 1);
    if (every_expert)
      for (int64_t e = range.first; e < range.end; ++e) CHECK(ep_owner(experts, ranks, e) == r);
    else if (range.count() > 0)
      CHECK((ep_owner(experts, ranks, range.first) == r && ep_owner(experts, ranks, range.end - 1) == r));
    next = range.end;
  }
  CHECK(next == experts);
}

TEST_CASE("moe_ep: expert ranges and owners") {
  for (int64_t experts : {1, 3, 16, 256})
    for (uint32_t ranks : {1u, 2u, 3u, 4u, 7u, 8u}) check_ranges(experts, ranks, true);
}

TEST_CASE("moe_ep: a config naming other local experts than the rank owns is an error") {
  CHECK(test::run_ranks(2, "ep-bad", [](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          SmallRank r;
          if (auto e = small_rank(rank, size, name, &r); !e.empty()) return e;
          MoeLayerConfig c = r.p.c;
          c.expert_begin = 3;
          c.local_experts = 1;
          auto layer = MoeEpLayer::create(r.env.dev, r.env.comm, c, r.w);
          RANK_CHECK(!layer, "accepted");
          RANK_CHECK(layer.error().message().find(fmt::format("rank {} of 2 owns", rank)) != std::string::npos, "{}",
                     layer.error().to_string());
          return {};
        }) == "");
}

// ---- Refusals that every rank reaches together --------------------------------------------
// A collective create used to return early on the rank whose check failed, and its peers then
// waited for it in the next collective until the communicator's 30 s timeout (open_rank's).

// Runs `make` (a collective create) on this rank and checks that it failed well within that
// timeout (10 s): on rank `bad` with "rank <bad> failed: ... <reason>", on the others with
// "<who>: rank <bad> refused: see its error".
template <typename Make>
std::string fails_together(uint32_t rank, uint32_t bad, const char* who, const std::string& reason, Make&& make) {
  const auto t0 = std::chrono::steady_clock::now();
  auto made = make();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RANK_CHECK(!made, "accepted, expected rank {} to fail with \"{}\"", bad, reason);
  RANK_CHECK(took < 10, "took {:.1f} s to fail: {}", took, made.error().to_string());
  const std::string& m = made.error().message();
  if (rank == bad) {
    RANK_CHECK(m.find(fmt::format("rank {} failed: ", bad)) != std::string::npos && m.find(reason) != std::string::npos,
               "{} (expected \"rank {} failed: ... {}\")", made.error().to_string(), bad, reason);
  } else {
    const std::string want = fmt::format("{}: rank {} refused: see its error", who, bad);
    RANK_CHECK(m.find(want) != std::string::npos, "{} (expected \"{}\")", made.error().to_string(), want);
  }
  return {};
}

TEST_CASE("moe_ep: EpExchange::create with a bad max_tokens or chunk size on one rank fails on every rank at once") {
  struct Bad {
    const char* what;
    void (*set)(EpOptions&);
    const char* reason;
  };
  const Bad bad[] = {
      {"max_tokens 0", [](EpOptions& o) { o.max_tokens = 0; }, "EpOptions max_tokens 0"},
      {"dispatch_chunk_rows 0", [](EpOptions& o) { o.dispatch_chunk_rows = 0; }, "dispatch_chunk_rows 0"},
      {"combine_chunk_rows -1", [](EpOptions& o) { o.combine_chunk_rows = -1; }, "combine_chunk_rows -1"},
  };
  for (const Bad& b : bad)
    for (uint32_t n : {2u, 3u}) {
      CAPTURE(b.what);
      CAPTURE(n);
      CHECK(test::run_ranks(n, "ep-ex-bad", [&](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
              RankEnv env;
              if (auto e = open_rank(rank, size, name, &env); !e.empty()) return e;
              EpOptions o = kernel_options(1);
              if (rank == 1) b.set(o);
              return fails_together(rank, 1, "EpExchange", b.reason,
                                    [&] { return EpExchange::create(env.dev, env.comm, 6, 2, 16, o); });
            }) == "");
    }
}

TEST_CASE("moe_ep: MoeEpLayer::create checks on every rank, experts or none, and all ranks fail together") {
  // 3 experts on 4 ranks: rank 0 owns none ([0, 0)) and used not to check anything; its
  // router of the wrong shape was accepted there and refused on no rank.
  const Problem few = make_problem(24, 16, 3, 2, 1, 1);
  CHECK(test::run_ranks(4, "ep-bad-router", [&](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          RankEnv env;
          if (auto e = open_rank(rank, size, name, &env); !e.empty()) return e;
          auto w = weights(env.dev, env.s, few, ep_expert_range(few.c.experts, rank, size));
          RANK_TRY(w);
          if (rank == 0) {
            RANK_CHECK(ep_expert_range(few.c.experts, rank, size).count() == 0, "rank 0 owns experts");
            auto router = make_tensor(env.dev, DType::bf16, {few.c.hidden + 1, few.c.experts});
            RANK_TRY(router);
            w->w_router = *router;
          }
          return fails_together(rank, 0, "MoeEpLayer", "MoeLayer: w_router is bf16 [25, 3], expected bf16 [24, 3]",
                                [&] { return MoeEpLayer::create(env.dev, env.comm, few.c, *w); });
        }) == "");
  // kPeerKernel: rank 1 (owning experts) refuses its expert weights, or a local_experts below
  // -1; rank 0 used to wait for it in the exchanges' first collective.
  for (int bad_case = 0; bad_case < 2; ++bad_case) {
    CAPTURE(bad_case);
    CHECK(test::run_ranks(2, "ep-bad-kernel", [&](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
            SmallRank r;
            if (auto e = small_rank(rank, size, name, &r); !e.empty()) return e;
            MoeLayerConfig c = r.p.c;
            std::string reason = "local_experts -2 is below -1";
            if (rank == 1 && bad_case == 0) {
              auto down = make_tensor(r.env.dev, DType::bf16, {2, r.p.c.inter, r.p.c.hidden + 1});
              RANK_TRY(down);
              r.w.w_down = *down;
            }
            if (bad_case == 0) reason = "w_down is bf16 [2, 8, 17], expected bf16 [2, 8, 16]";
            if (rank == 1 && bad_case == 1) c.local_experts = -2;
            return fails_together(rank, 1, "MoeEpLayer", reason, [&] {
              return MoeEpLayer::create(r.env.dev, r.env.comm, c, r.w, {}, EpTransport::kPeerKernel, kernel_options(1));
            });
          }) == "");
  }
}

TEST_CASE("moe_ep: Comm::share with a failed export or import on one rank fails on every rank at once") {
  // Export: rank 1 passes a plain device buffer, which peers cannot map.
  CHECK(test::run_ranks(3, "ep-share-export", [](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          RankEnv env;
          if (auto e = open_rank(rank, size, name, &env); !e.empty()) return e;
          auto buf = rank == 1 ? env.dev.allocate(256) : env.comm.buffer(256);
          RANK_TRY(buf);
          return fails_together(rank, 1, "Comm::share", "not made by hal_comm_buffer_create",
                                [&] { return env.comm.share(*buf); });
        }) == "");
  // Import: rank 1's buffer is exported, but the name of its shared-memory segment is gone (as
  // if its owner had released it: the CPU communicator's segments are /dev/shm/halcyon.<the
  // rendezvous>.r<rank>.*), so rank 0's import fails while rank 1's import of rank 0's works.
  CHECK(test::run_ranks(2, "ep-share-import", [](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          RankEnv env;
          if (auto e = open_rank(rank, size, name, &env); !e.empty()) return e;
          auto buf = env.comm.buffer(256);
          RANK_TRY(buf);
          if (rank == 1) {
            const std::string prefix = "halcyon." + name + ".r1.";
            int unlinked = 0;
            for (const auto& f : std::filesystem::directory_iterator("/dev/shm")) {
              const std::string file = f.path().filename().string();
              if (file.rfind(prefix, 0) == 0) unlinked += shm_unlink(("/" + file).c_str()) == 0;
            }
            RANK_CHECK(unlinked == 1, "unlinked {} segments named /dev/shm/{}*, expected 1", unlinked, prefix);
          }
          return fails_together(rank, 0, "Comm::share", "importing rank 1's buffer",
                                [&] { return env.comm.share(*buf); });
        }) == "");
}

// ---- Sizes that overflow -------------------------------------------------------------------

TEST_CASE("moe_ep: exchange sizes past int64 or the kernels' i32 row index are refused, not wrapped") {
  CHECK(test::run_ranks(2, "ep-overflow", [](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          RankEnv env;
          if (auto e = open_rank(rank, size, name, &env); !e.empty()) return e;
          auto refused = [&](int64_t max_tokens, int64_t hidden, hal_status status, const std::string& says) -> std::string {
            EpOptions o = kernel_options(1);
            o.max_tokens = max_tokens;
            auto ex = EpExchange::create(env.dev, env.comm, 6, 2, hidden, o);
            RANK_CHECK(!ex, "max_tokens {}, hidden {}: accepted", max_tokens, hidden);
            RANK_CHECK(ex.error().status() == status && ex.error().message().find(says) != std::string::npos,
                       "max_tokens {}, hidden {}: {} (expected \"{}\")", max_tokens, hidden, ex.error().to_string(), says);
            return {};
          };
          // 2 ranks x max_tokens x min(topk 2, 3 experts per rank) passes int64.
          for (int64_t t : {int64_t(1) << 62, INT64_MAX})
            if (auto e = refused(t, 16, HAL_OUT_OF_RANGE, "EpExchange: the receive capacity ranks x EpOptions::max_tokens");
                !e.empty())
              return e;
          // 2 x 2^29 x 2 rows of capacity: 2^31 row indices, past slot_dest's i32.
          if (auto e = refused(int64_t(1) << 29, 16, HAL_OUT_OF_RANGE, "past the kernels' i32 row index"); !e.empty())
            return e;
          // A capacity within i32 whose rows of `hidden` pass 2^63 bytes.
          if (auto e = refused(1024, int64_t(1) << 60, HAL_OUT_OF_RANGE, "EpExchange: the received rows:"); !e.empty())
            return e;
          // The layer: max_tokens split into micro-batches (max_tokens + n - 1 used to wrap).
          SmallRank r;
          r.env = env;
          auto w = weights(env.dev, env.s, r.p, ep_expert_range(r.p.c.experts, rank, size));
          RANK_TRY(w);
          EpOptions o = kernel_options(3);
          o.max_tokens = INT64_MAX;
          auto layer = MoeEpLayer::create(env.dev, env.comm, r.p.c, *w, {}, EpTransport::kPeerKernel, o);
          RANK_CHECK(!layer, "max_tokens INT64_MAX: accepted");
          RANK_CHECK(layer.error().message().find("EpExchange: the receive capacity") != std::string::npos, "{}",
                     layer.error().to_string());
          return {};
        }) == "");
}

// experts * rank used to pass int64 here (and expert * ranks in ep_owner).
TEST_CASE("moe_ep: expert ranges and owners of expert counts near 2^63") {
  for (int64_t experts : {INT64_MAX, INT64_MAX - 6, int64_t(1) << 62})
    for (uint32_t ranks : {2u, 3u, 7u, 8u, 1000u}) check_ranges(experts, ranks, false);
}
