// The communicator (hal.h "Communicators") on the CPU backend: 1, 2 and 4 processes forked
// from the test, meeting in POSIX shared memory.
#include <halcyon/halcyon.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <numeric>

#include "a2a_layout.hpp"
#include "fork_ranks.hpp"

using halcyon::Comm;
using halcyon::Device;

namespace {

struct Rank {
  Device dev;
  Comm comm;
};

std::string join(uint32_t rank, uint32_t size, const std::string& name, Rank* out, uint32_t timeout_ms = 20000) {
  auto dev = Device::open("cpu:0");
  RANK_TRY(dev);
  auto comm = Comm::create(*dev, {rank, size, name, timeout_ms});
  RANK_TRY(comm);
  out->dev = *dev;
  out->comm = *comm;
  return {};
}

// Bytes rank `from` sends to rank `to`: uneven, one pair empty, some past one staging round.
uint64_t pair_bytes(uint32_t from, uint32_t to, uint32_t size) {
  if (from == 1 && to == 0) return 0;
  return 1000 + 337 * from + 91 * to + ((from + to) % size == 0 ? (uint64_t(3) << 19) : 0);
}

std::string collectives(uint32_t rank, uint32_t size, const std::string& name) {
  Rank r;
  if (auto e = join(rank, size, name, &r); !e.empty()) return e;
  auto info = r.comm.info();
  RANK_TRY(info);
  RANK_CHECK(info->rank == rank && info->size == size, "info says rank {} size {}", info->rank, info->size);
  RANK_CHECK(std::string(info->transport) == "shm", "transport '{}'", info->transport);
  RANK_TRY(r.comm.barrier());
  // all_gather: three words per rank.
  std::vector<uint32_t> mine{rank, rank * 10 + 1, 0xabc0u + rank};
  auto all = r.comm.all_gather_values(mine);
  RANK_TRY(all);
  for (uint32_t p = 0; p < size; ++p)
    RANK_CHECK((*all)[3 * p] == p && (*all)[3 * p + 1] == p * 10 + 1 && (*all)[3 * p + 2] == 0xabc0u + p,
               "all_gather entry of rank {}", p);
  // all_to_all with uneven sizes and gaps between the ranges.
  const test::A2aLayout a2a(rank, size, [size](uint32_t from, uint32_t to) { return pair_bytes(from, to, size); });
  auto send = r.dev.allocate(a2a.send_total);
  auto recv = r.dev.allocate(a2a.recv_total);
  RANK_TRY(send);
  RANK_TRY(recv);
  auto* rp = static_cast<uint8_t*>(recv->host_pointer());
  std::memset(rp, test::A2aLayout::kUnwritten, a2a.recv_total);
  a2a.fill_send(rank, static_cast<uint8_t*>(send->host_pointer()));
  auto stream = r.dev.create_stream();
  RANK_TRY(stream);
  RANK_TRY(r.comm.all_to_all(*stream, *send, a2a.send_offsets, a2a.send_sizes, *recv, a2a.recv_offsets,
                             a2a.recv_sizes));
  RANK_TRY(stream->synchronize());
  if (std::string e = a2a.check_recv(rank, rp); !e.empty()) return "check failed: " + e;
  return {};
}

std::string peer_memory(uint32_t rank, uint32_t size, const std::string& name) {
  Rank r;
  if (auto e = join(rank, size, name, &r); !e.empty()) return e;
  const uint64_t words = 1024;
  auto local = r.comm.buffer(words * size * sizeof(uint32_t));
  RANK_TRY(local);
  auto* mine = static_cast<uint32_t*>(local->host_pointer());
  std::fill(mine, mine + words * size, 0u);
  auto peers = r.comm.share(*local);
  RANK_TRY(peers);
  RANK_CHECK(peers->size() == size, "{} buffers", peers->size());
  // Every rank writes its block of every peer's buffer straight through the mapping.
  for (uint32_t p = 0; p < size; ++p) {
    auto* dst = static_cast<uint32_t*>((*peers)[p].host_pointer());
    RANK_CHECK((*peers)[p].size() == words * size * sizeof(uint32_t), "peer {} buffer size {}", p, (*peers)[p].size());
    for (uint64_t i = 0; i < words; ++i) dst[rank * words + i] = rank * 100000 + p * 1000 + uint32_t(i);
  }
  RANK_TRY(r.comm.barrier());
  for (uint32_t from = 0; from < size; ++from)
    for (uint64_t i = 0; i < words; ++i)
      RANK_CHECK(mine[from * words + i] == from * 100000 + rank * 1000 + uint32_t(i), "word {} written by rank {} is {}",
                 i, from, mine[from * words + i]);
  RANK_TRY(r.comm.barrier());
  return {};
}

std::string bad_calls(uint32_t rank, uint32_t size, const std::string& name) {
  Rank r;
  if (auto e = join(rank, size, name, &r); !e.empty()) return e;
  auto expect = [](hal_error* e, hal_status status, const char* needle) -> std::string {
    if (!e) return fmt::format("expected {} ('{}'), got success", hal_status_name(status), needle);
    std::string msg = hal_error_message(e);
    hal_status got = hal_error_status(e);
    hal_error_free(e);
    if (got != status || msg.find(needle) == std::string::npos)
      return fmt::format("expected {} with '{}', got {}: {}", hal_status_name(status), needle, hal_status_name(got), msg);
    return {};
  };
  auto plain = r.dev.allocate(64);
  RANK_TRY(plain);
  hal_comm_handle h{};
  if (auto e = expect(hal_comm_buffer_export(r.comm.get(), plain->get(), &h), HAL_INVALID_ARGUMENT, "hal_comm_buffer_create");
      !e.empty())
    return e;
  auto shared = r.comm.buffer(64);
  RANK_TRY(shared);
  RANK_TRY(r.comm.export_buffer(*shared));
  hal_buffer out = nullptr;
  if (auto e = expect(hal_comm_buffer_import(r.comm.get(), rank, &h, &out), HAL_INVALID_ARGUMENT, "is this rank"); !e.empty())
    return e;
  if (auto e = expect(hal_comm_buffer_import(r.comm.get(), size, &h, &out), HAL_INVALID_ARGUMENT, "not a rank"); !e.empty())
    return e;
  const uint32_t peer = (rank + 1) % size;
  hal_comm_handle garbage{};
  if (auto e = expect(hal_comm_buffer_import(r.comm.get(), peer, &garbage, &out), HAL_INVALID_ARGUMENT, "not made by"); !e.empty())
    return e;
  // A handle whose owner released the buffer before the import.
  auto gone = r.comm.buffer(128);
  RANK_TRY(gone);
  auto gone_handle = r.comm.export_buffer(*gone);
  RANK_TRY(gone_handle);
  auto handles = r.comm.all_gather_values(std::vector<hal_comm_handle>{*gone_handle});
  RANK_TRY(handles);
  gone->reset();
  RANK_TRY(r.comm.barrier());
  if (auto e = expect(hal_comm_buffer_import(r.comm.get(), peer, &(*handles)[peer], &out), HAL_NOT_FOUND, "not found");
      !e.empty())
    return e;
  // all_to_all where rank 0 expects one byte more from rank 1 than rank 1 sends: every rank
  // reports the same disagreement.
  auto send = r.dev.allocate(64);
  auto recv = r.dev.allocate(64);
  auto stream = r.dev.create_stream();
  RANK_TRY(send);
  RANK_TRY(recv);
  RANK_TRY(stream);
  std::vector<uint64_t> zeros(size, 0), sizes(size, 4), rsizes(size, 4), offs(size);
  for (uint32_t p = 0; p < size; ++p) offs[p] = 8 * p;
  if (rank == 0) rsizes[1] = 5;
  if (auto e = expect(hal_comm_all_to_all(r.comm.get(), stream->get(), send->get(), offs.data(), sizes.data(), recv->get(),
                                          offs.data(), rsizes.data()),
                      HAL_INVALID_ARGUMENT, "rank 0 expects 5 bytes from rank 1, which sends it 4");
      !e.empty())
    return e;
  std::vector<uint64_t> far(size, 1000);
  if (auto e = expect(hal_comm_all_to_all(r.comm.get(), stream->get(), send->get(), far.data(), sizes.data(), recv->get(),
                                          offs.data(), rsizes.data()),
                      HAL_OUT_OF_RANGE, "past the end");
      !e.empty())
    return e;
  uint64_t too_big[2048 / 8 * 4];
  if (auto e = expect(hal_comm_all_gather(r.comm.get(), too_big, 8192, too_big), HAL_OUT_OF_RANGE, "max_all_gather_bytes");
      !e.empty())
    return e;
  RANK_TRY(r.comm.barrier());  // still usable after the errors
  return {};
}

}  // namespace

TEST_CASE("comm: collectives and all-to-all over shared memory, 1, 2 and 4 processes") {
  for (uint32_t n : {1u, 2u, 4u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "coll", collectives) == "");
  }
}

TEST_CASE("comm: peer-mapped buffers (export, import, direct writes), 2 and 4 processes") {
  for (uint32_t n : {2u, 4u}) {
    CAPTURE(n);
    CHECK(test::run_ranks(n, "peer", peer_memory) == "");
  }
}

TEST_CASE("comm: bad calls are errors naming the value, on every rank") {
  CHECK(test::run_ranks(2, "bad", bad_calls) == "");
}

TEST_CASE("comm: a rank that never comes, a rank taken twice, a bad rendezvous") {
  // Only rank 0 of 2 joins: it gives up after its timeout, saying so.
  CHECK(test::run_ranks(1, "lonely", [](uint32_t, uint32_t, const std::string& name) -> std::string {
          auto dev = Device::open("cpu:0");
          RANK_TRY(dev);
          auto comm = Comm::create(*dev, {0, 2, name, 300});
          RANK_CHECK(!comm, "a 2-rank communicator formed with one rank");
          RANK_CHECK(comm.error().status() == HAL_UNAVAILABLE && comm.error().message().find("waited 300 ms") != std::string::npos &&
                         comm.error().message().find("1 had joined") != std::string::npos,
                     "{}", comm.error().to_string());
          return {};
        }) == "");
  // Two processes both claim rank 0: one is refused at once.
  CHECK(test::run_ranks(2, "twice", [](uint32_t rank, uint32_t, const std::string& name) -> std::string {
          auto dev = Device::open("cpu:0");
          RANK_TRY(dev);
          if (rank == 1) usleep(50000);  // the other claims it first
          auto comm = Comm::create(*dev, {0, 2, name, 400});
          RANK_CHECK(!comm, "rank 0 taken twice went through");
          if (rank == 1)
            RANK_CHECK(comm.error().message().find("already taken") != std::string::npos, "{}", comm.error().to_string());
          return {};
        }) == "");
  auto dev = Device::open("cpu:0");
  REQUIRE(dev);
  for (const char* bad : {"", "has space", "slash/inside"}) {
    CAPTURE(bad);
    auto comm = Comm::create(*dev, {0, 1, bad, 100});
    REQUIRE(!comm);
    CHECK(comm.error().status() == HAL_INVALID_ARGUMENT);
    CHECK(comm.error().message().find("rendezvous") != std::string::npos);
  }
  auto comm = Comm::create(*dev, {2, 2, "rank-past-size", 100});
  REQUIRE(!comm);
  CHECK(comm.error().message().find("rank 2 is not below size 2") != std::string::npos);
}

TEST_CASE("comm: a rank released late does not remove the next communicator of the same name") {
  // Rank 1 releases 0.3 s after rank 0, which meanwhile starts joining a second communicator
  // under the same name. Rank 1 used to unlink the control segment at its release, splitting
  // the second join into two segments (both timed out).
  CHECK(test::run_ranks(2, "reuse", [](uint32_t rank, uint32_t size, const std::string& name) -> std::string {
          {
            Rank r;
            if (auto e = join(rank, size, name, &r, 5000); !e.empty()) return e;
            RANK_TRY(r.comm.barrier());
            if (rank == 1) usleep(300000);
          }
          if (rank == 1) usleep(300000);
          Rank again;
          if (auto e = join(rank, size, name, &again, 5000); !e.empty()) return e;
          RANK_TRY(again.comm.barrier());
          return {};
        }) == "");
}

TEST_CASE("comm: a rendezvous segment open to other users is refused") {
  // Someone made /dev/shm/halcyon.<name> readable and writable by all before the job: it would
  // see the NCCL id and the peer-memory handles, and could change them.
  const std::string name = test::fresh_rendezvous("open");
  const std::string shm = "/halcyon." + name;
  int fd = shm_open(shm.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(fchmod(fd, 0666) == 0);
  close(fd);
  auto dev = Device::open("cpu:0");
  REQUIRE(dev);
  auto comm = Comm::create(*dev, {0, 1, name, 200});
  shm_unlink(shm.c_str());
  REQUIRE_FALSE(comm);
  CHECK_MESSAGE(comm.error().message().find("with mode 0666: not this user's private object") != std::string::npos,
                comm.error().to_string());
}
