// The HIP communicator against the fake HIP runtime: ranks forked from the test (each its own
// process, as a multi-process job runs), rank r on hip:(r % 2). Peer buffers travel as HIP IPC
// handles (the fake's memfds, mapped by the peer), and the all-to-all is staged through host
// memory (no RCCL here), so every HIP call of backends/hip's communicator runs. Then the
// expert-parallel MoE layer over it, on the GCN kernels, against the single-rank layer.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <halcyon/halcyon.hpp>

#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "a2a_layout.hpp"
#include "fork_ranks.hpp"
#include "moe_ep_support.hpp"

using halcyon::Comm;
using halcyon::Device;

namespace {

struct Rank {
  Device dev;
  Comm comm;
  halcyon::Stream stream;
};

// In the rank's own process: hal_init with the fake runtime, its device, the communicator.
std::string join(uint32_t rank, uint32_t size, const std::string& name, Rank* out) {
  auto st = halcyon::init(0, nullptr, (std::string("hip.library=") + FAKE_HIP).c_str());
  RANK_TRY(st);
  auto dev = Device::open(fmt::format("hip:{}", rank % 2).c_str());
  RANK_TRY(dev);
  RANK_CHECK(dev->has("comm"), "hip:{} does not advertise 'comm'", rank % 2);
  auto comm = Comm::create(*dev, {rank, size, name, 20000});
  RANK_TRY(comm);
  auto stream = dev->create_stream();
  RANK_TRY(stream);
  out->dev = *dev;
  out->comm = *comm;
  out->stream = *stream;
  return {};
}

// Uneven bytes from rank `from` to rank `to`, one pair empty.
uint64_t pair_bytes(uint32_t from, uint32_t to) { return from == 1 && to == 0 ? 0 : 1000 + 337 * from + 91 * to; }

std::string all_to_all(uint32_t rank, uint32_t size, const std::string& name) {
  Rank r;
  if (auto e = join(rank, size, name, &r); !e.empty()) return e;
  auto info = r.comm.info();
  RANK_TRY(info);
  RANK_CHECK(std::string(info->transport) == "shm+hipipc", "transport '{}'", info->transport);
  const test::A2aLayout a2a(rank, size, pair_bytes);
  std::vector<uint8_t> send_host(a2a.send_total, 0), recv_host(a2a.recv_total, test::A2aLayout::kUnwritten);
  a2a.fill_send(rank, send_host.data());
  auto send = r.dev.allocate(a2a.send_total);
  auto recv = r.dev.allocate(a2a.recv_total);
  RANK_TRY(send);
  RANK_TRY(recv);
  RANK_TRY(r.stream.write(*send, 0, send_host.data(), a2a.send_total));
  RANK_TRY(r.stream.write(*recv, 0, recv_host.data(), a2a.recv_total));
  RANK_TRY(r.comm.all_to_all(r.stream, *send, a2a.send_offsets, a2a.send_sizes, *recv, a2a.recv_offsets,
                             a2a.recv_sizes));
  RANK_TRY(r.stream.read(*recv, 0, recv_host.data(), a2a.recv_total));
  RANK_TRY(r.stream.synchronize());
  if (std::string e = a2a.check_recv(rank, recv_host.data()); !e.empty()) return "check failed: " + e;
  return {};
}

// Every rank writes its block of every peer's buffer through the peer's IPC mapping (a copy
// into device memory of another process), then reads its own buffer back.
std::string peer_buffers(uint32_t rank, uint32_t size, const std::string& name) {
  Rank r;
  if (auto e = join(rank, size, name, &r); !e.empty()) return e;
  const uint64_t words = 512, bytes = words * size * 4;
  auto local = r.comm.buffer(bytes);
  RANK_TRY(local);
  std::vector<uint32_t> zeros(words * size, 0);
  RANK_TRY(r.stream.write(*local, 0, zeros.data(), bytes));
  RANK_TRY(r.comm.barrier());  // every buffer cleared before anyone writes into it
  auto peers = r.comm.share(*local);
  RANK_TRY(peers);
  RANK_CHECK(peers->size() == size, "{} buffers", peers->size());
  std::vector<uint32_t> block(words);
  for (uint32_t p = 0; p < size; ++p) {
    RANK_CHECK((*peers)[p].size() == bytes, "peer {}'s buffer has {} bytes", p, (*peers)[p].size());
    for (uint64_t i = 0; i < words; ++i) block[i] = rank * 100000 + p * 1000 + uint32_t(i);
    RANK_TRY(r.stream.write((*peers)[p], rank * words * 4, block.data(), words * 4));
  }
  RANK_TRY(r.comm.barrier());
  std::vector<uint32_t> mine(words * size);
  RANK_TRY(r.stream.read(*local, 0, mine.data(), bytes));
  RANK_TRY(r.stream.synchronize());
  for (uint32_t from = 0; from < size; ++from)
    for (uint64_t i = 0; i < words; ++i)
      RANK_CHECK(mine[from * words + i] == from * 100000 + rank * 1000 + uint32_t(i), "word {} from rank {} is {}", i,
                 from, mine[from * words + i]);
  peers->clear();  // the peers' mappings closed (hipIpcCloseMemHandle) before the owners free
  RANK_TRY(r.comm.barrier());
  return {};
}

}  // namespace

TEST_CASE("hip communicator: all-to-all staged through host memory, 1, 2 and 3 processes") {
  for (uint32_t n : {1u, 2u, 3u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "hip-a2a", all_to_all) == "");
  }
}

TEST_CASE("hip communicator: peer buffers through HIP IPC, written across processes, 2 and 3 processes") {
  for (uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "hip-peer", peer_buffers) == "");
  }
}

TEST_CASE("the expert-parallel MoE layer on the GCN kernels over the HIP communicator equals the single-rank layer") {
  using namespace test::ep;
  const Problem p = make_problem(64, 32, 16, 4, 4, 2);
  for (EpTransport t : {EpTransport::kAllToAll, EpTransport::kPeerWrite})
    for (uint32_t n : {2u, 3u}) {
      CAPTURE(n);
      CAPTURE(int(t));
      CHECK(test::run_ranks(n, "hip-ep", [&](uint32_t r, uint32_t size, const std::string& name) -> std::string {
              auto st = halcyon::init(0, nullptr, (std::string("hip.library=") + FAKE_HIP).c_str());
              RANK_TRY(st);
              return ep_rank(p, r, size, name, r % 2 ? "hip:1" : "hip:0", true, 0, t);
            }) == "");
    }
}
