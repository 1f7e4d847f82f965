// Two processes on ONE GPU sharing memory through IPC (hal_comm_buffer_create: cuMemCreate
// memory exported as a POSIX fd and passed over a unix socket), then the expert-parallel MoE
// layer on cuda:0 over that communicator against the single-rank layer, with the rows moved by
// the staged all-to-all, then written straight into the peers' mapped buffers, then by the
// ep_dispatch/ep_combine kernels (flags in peer memory, back-to-back generations; whole, then in
// 2 and 3 micro-batches). Exit 0: passed, 1: failed, 77: no CUDA device (CTest: skipped). Ranks are spawned, not forked (CUDA state does
// not survive a fork); `--rank R --ranks N --rendezvous NAME` runs one rank; `--ranks N --gpus G`
// spreads N ranks over G GPUs (rank r on cuda:r%G: the two-GPU machine's run).
#include <halcyon/halcyon.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include "moe_ep_support.hpp"
#include "spawn_ranks.hpp"

using namespace test::ep;

namespace {

// Rank r runs on cuda:(r % gpus); --gpus 1 (the default) puts every rank on cuda:0.
std::string g_uri = "cuda:0";

// Each rank copies its block into every peer's buffer through the peer mapping (a device copy
// whose destination is the imported buffer), then checks what the peers wrote into its own.
std::string peer_memory(uint32_t rank, uint32_t size, const std::string& name) {
  RankEnv env;
  if (auto e = open_rank(rank, size, name + "-peer", &env, g_uri.c_str()); !e.empty()) return e;
  auto info = env.comm.info();
  RANK_TRY(info);
  std::fprintf(stderr, "[rank %u] communicator transport '%s'\n", rank, info->transport);
  const uint64_t words = 1 << 16, block = words * 4;
  auto local = env.comm.buffer(block * size);
  RANK_TRY(local);
  RANK_TRY(env.s.fill<uint32_t>(*local, 0, block * size, 0u));
  RANK_TRY(env.s.synchronize());
  auto peers = env.comm.share(*local);
  RANK_TRY(peers);
  // Imported at the size its owner asked for (smaller than the 2 MiB granularity), not the
  // rounded one: the core refuses offsets past what the owner can use.
  for (uint32_t p = 0; p < size; ++p)
    RANK_CHECK((*peers)[p].size() == block * size, "rank {}'s buffer imports as {} bytes, not the {} asked for", p,
               (*peers)[p].size(), block * size);
  auto mine = env.dev.allocate(block);
  RANK_TRY(mine);
  std::vector<uint32_t> src(words);
  for (uint32_t p = 0; p < size; ++p) {
    for (uint64_t i = 0; i < words; ++i) src[i] = rank * 100000000u + p * 1000000u + uint32_t(i);
    RANK_TRY(env.s.write(*mine, 0, src.data(), block));
    RANK_TRY(env.s.copy((*peers)[p], rank * block, *mine, 0, block));
    RANK_TRY(env.s.synchronize());
  }
  RANK_TRY(env.comm.barrier());
  std::vector<uint32_t> got(words * size);
  RANK_TRY(env.s.read(*local, 0, got.data(), block * size));
  for (uint32_t from = 0; from < size; ++from)
    for (uint64_t i = 0; i < words; ++i)
      RANK_CHECK(got[from * words + i] == from * 100000000u + rank * 1000000u + uint32_t(i),
                 "word {} that rank {} wrote through its peer mapping is {}", i, from, got[from * words + i]);
  RANK_TRY(env.comm.barrier());
  std::fprintf(stderr, "[rank %u] peer-mapped writes of %zu bytes from every rank: OK\n", rank, size_t(block));
  return {};
}

int run_rank(uint32_t rank, uint32_t size, const std::string& name) {
  std::string e = peer_memory(rank, size, name);
  if (e.empty()) {
    // DeepSeek-like routing at a small size; GPU GEMMs may round rows differently from the
    // single-rank layer's tiles, so the check is a tolerance (and the count of differing values).
    const Problem p = make_problem(512, 256, 64, 8, 8, 4);
    e = ep_rank(p, rank, size, name + "-ep", g_uri.c_str(), false, 1e-2, EpTransport::kAllToAll);
    if (e.empty()) e = ep_rank(p, rank, size, name + "-ep-peer", g_uri.c_str(), false, 1e-2, EpTransport::kPeerWrite);
    if (e.empty()) {
      // The dispatch/combine kernels: flags in peer memory, no host wait, on a second stream.
      EpOptions o;
      o.max_tokens = 64;
      o.dispatch_chunk_rows = 16;
      o.combine_chunk_rows = 4;
      e = ep_rank(p, rank, size, name + "-ep-kernel", g_uri.c_str(), false, 1e-2, EpTransport::kPeerKernel, o);
      // In micro-batches: 2, then 3 with rank 0 holding one token (two of its slices empty: the
      // kernels run with T = 0 there while the other ranks' slices are not).
      o.micro_batches = 2;
      if (e.empty()) e = ep_rank(p, rank, size, name + "-ep-mb2", g_uri.c_str(), false, 1e-2, EpTransport::kPeerKernel, o);
      o.micro_batches = 3;
      if (e.empty())
        e = ep_rank(p, rank, size, name + "-ep-mb3", g_uri.c_str(), false, 1e-2, EpTransport::kPeerKernel, o, 1);
    }
  }
  if (!e.empty()) std::fprintf(stderr, "[rank %u of %u] FAILED: %s\n", rank, size, e.c_str());
  return e.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rank = -1, ranks = 2, gpus = 1;
  std::string name;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rank")) rank = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ranks")) ranks = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rendezvous")) name = argv[i + 1];
    else if (!std::strcmp(argv[i], "--gpus")) gpus = std::max<int64_t>(1, std::atoll(argv[i + 1]));
  }
  if (rank >= 0) {
    g_uri = fmt::format("cuda:{}", rank % gpus);
    return run_rank(uint32_t(rank), uint32_t(ranks), name);
  }
  // The parent touches no device; it only checks that one exists (in a child) by the ranks'
  // own result. A machine without CUDA: the first rank cannot open cuda:0.
  {
    auto dev = Device::open(g_uri.c_str());
    if (!dev) {
      std::fprintf(stderr, "no CUDA device: %s\n", dev.error().to_string().c_str());
      return 77;
    }
  }
  const std::string rendezvous = fmt::format("ep-ipc-{}", getpid());
  int failed = test::spawn_ranks({argv[0], "--gpus", std::to_string(gpus)}, uint32_t(ranks), rendezvous);
  std::printf("ep_ipc: %u ranks on %u GPU(s): %s\n", unsigned(ranks), unsigned(gpus), failed == 0 ? "PASSED" : "FAILED");
  return failed == 0 ? 0 : 1;
}
