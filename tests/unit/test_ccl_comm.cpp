// The communicators' NCCL/RCCL side (backends/comm_common/ccl_comm), as the HIP backend uses
// it over RCCL, without a GPU: ranks are forked processes meeting in shared memory
// (fork_ranks.hpp), the library is a stand-in that records its calls
// (plugins/fake_ccl_recorder.cpp), and each rank checks exactly what it asked of it.
#include "ccl_comm.hpp"

#include <doctest/doctest.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fork_ranks.hpp"

using namespace halcyon;

namespace {

// The recorder's log in this process (the library must still be loaded).
std::string recorder_log() {
  void* dl = dlopen(HALCYON_FAKE_CCL_RECORDER, RTLD_NOW | RTLD_NOLOAD);
  if (!dl) return "(the recorder is not loaded)";
  auto fn = reinterpret_cast<const char* (*)()>(dlsym(dl, "fake_ccl_log"));
  std::string log = fn ? fn() : "(no fake_ccl_log)";
  dlclose(dl);
  return log;
}

std::string ptr(uint64_t a) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", reinterpret_cast<void*>(a));
  return b;
}

// In a rank: joins the group and starts the library side; *why gets start()'s answer.
std::string start(uint32_t rank, uint32_t size, const std::string& name, uint64_t key, const char* library,
                  std::unique_ptr<comm::ShmGroup>* group, std::unique_ptr<ccl::Comm>* c, std::string* why) {
  if (auto e = comm::ShmGroup::join(name, rank, size, 20000, group); !e.empty()) return "join: " + e;
  *why = ccl::Comm::start(ccl::Flavor::kRccl, **group, key, library, c);
  return {};
}

}  // namespace

TEST_CASE("ccl comm: two ranks share rank 0's unique id and queue one send/recv group on the stream") {
  auto rank_fn = [](uint32_t r, uint32_t n, const std::string& name) -> std::string {
    void* keep = dlopen(HALCYON_FAKE_CCL_RECORDER, RTLD_NOW | RTLD_LOCAL);  // the log outlives the Comm
    RANK_CHECK(keep, "dlopen {}", HALCYON_FAKE_CCL_RECORDER);
    std::unique_ptr<comm::ShmGroup> group;
    std::unique_ptr<ccl::Comm> c;
    std::string why;
    if (auto e = start(r, n, name, 0xA0 + r, HALCYON_FAKE_CCL_RECORDER, &group, &c, &why); !e.empty()) return e;
    RANK_CHECK(why.empty(), "start: {}", why);
    // Rank r sends 16 * (p + 1) bytes to each peer p and receives 16 * (r + 1) from each; zero
    // sizes (rank 1 to itself) are left out of the group.
    uint64_t so[2] = {0, 64}, ss[2] = {16, 32}, ro[2] = {0, 128}, rs[2] = {16 * (r + 1), 16 * (r + 1)};
    if (r == 1) ss[1] = rs[1] = 0;
    auto stream = reinterpret_cast<ccl::StreamHandle>(uintptr_t(0x5700 + r));
    if (auto e = c->all_to_all(0x10000, so, ss, 0x90000, ro, rs, stream); !e.empty()) return "all_to_all: " + e;
    c.reset();  // ncclCommDestroy is part of the log
    // Every rank passed rank 0's id, which names rank 0's pid.
    char mine[64] = {}, all[2][64] = {};
    std::snprintf(mine, sizeof mine, "id-of-pid-%d", int(getpid()));
    RANK_CHECK(group->all_gather(mine, sizeof mine, all).empty(), "all_gather");
    const std::string s = ptr(0x5700 + r);
    std::string expected = r == 0 ? "ncclGetUniqueId\n" : "";
    expected += "ncclCommInitRank nranks=2 rank=" + std::to_string(r) + " id=" + all[0] + "\n";
    expected += "ncclGroupStart\n";
    expected += "ncclSend buf=" + ptr(0x10000) + " count=16 type=1 peer=0 ours=1 stream=" + s + "\n";
    expected += "ncclRecv buf=" + ptr(0x90000) + " count=" + std::to_string(16 * (r + 1)) +
                " type=1 peer=0 ours=1 stream=" + s + "\n";
    if (r == 0) {
      expected += "ncclSend buf=" + ptr(0x10000 + 64) + " count=32 type=1 peer=1 ours=1 stream=" + s + "\n";
      expected += "ncclRecv buf=" + ptr(0x90000 + 128) + " count=16 type=1 peer=1 ours=1 stream=" + s + "\n";
    }
    expected += "ncclGroupEnd\nncclCommDestroy ours=1\n";
    std::string log = recorder_log();
    RANK_CHECK(log == expected, "the library saw\n{}instead of\n{}", log, expected);
    return {};
  };
  CHECK(test::run_ranks(2, "ccl", rank_fn) == "");
}

TEST_CASE("ccl comm: every rank gets the same reason not to use the library, and no library call") {
  // keys: each rank's device identity; library: what start() is given; reason(rank): expected.
  auto check = [](uint32_t n, std::vector<uint64_t> keys, const char* library, std::string reason, std::string own) {
    return test::run_ranks(n, "cclno", [=](uint32_t r, uint32_t size, const std::string& name) -> std::string {
      void* keep = dlopen(library, RTLD_NOW | RTLD_LOCAL);
      std::unique_ptr<comm::ShmGroup> group;
      std::unique_ptr<ccl::Comm> c;
      std::string why;
      if (auto e = start(r, size, name, keys[r], library, &group, &c, &why); !e.empty()) return e;
      RANK_CHECK(!c, "started");
      RANK_CHECK(why.rfind(reason, 0) == 0, "reason '{}', not '{}'", why, reason);
      if (r == 0) RANK_CHECK(why.find(own) != std::string::npos, "rank 0's reason '{}' lacks '{}'", why, own);
      if (r != 0) RANK_CHECK(why == reason, "rank {}'s reason '{}'", r, why);
      if (keep) RANK_CHECK(recorder_log().empty(), "the library was called: {}", recorder_log());
      return {};
    });
  };
  CHECK(check(2, {0xA0, 0xA0}, HALCYON_FAKE_CCL_RECORDER, "ranks 0 and 1 share one GPU", "") == "");
  CHECK(check(3, {1, 2, 3}, "/nonexistent/librccl.so.1", "rank 0 could not load /nonexistent/librccl.so.1",
              "(/nonexistent/librccl.so.1 not found") == "");
  CHECK(check(1, {1}, HALCYON_FAKE_CCL_RECORDER, "one rank", "") == "");
}

// The host-staged fallback moves real bytes: three ranks, rank r sends r + p + 1 bytes of value
// 16 * r + p to each peer p (itself too), at scattered offsets; the copies are plain memcpy.
TEST_CASE("ccl comm: staged_all_to_all delivers every peer's bytes, each side ending with a wait") {
  auto rank_fn = [](uint32_t r, uint32_t n, const std::string& name) -> std::string {
    std::unique_ptr<comm::ShmGroup> group;
    if (auto e = comm::ShmGroup::join(name, r, n, 20000, &group); !e.empty()) return "join: " + e;
    std::vector<uint64_t> ss(n), so(n), rs(n), ro(n);
    std::vector<unsigned char> send(256, 0xee), recv(256, 0xee);
    for (uint32_t p = 0; p < n; ++p) {
      ss[p] = r + p + 1;
      so[p] = 64 * p + 3;
      rs[p] = p + r + 1;
      ro[p] = 80 * p + 5;
      std::memset(send.data() + so[p], int(16 * r + p), ss[p]);
    }
    int waits = 0;
    comm::StagedCopies copies{
        [&](uint32_t p, char* h) { return std::memcpy(h, send.data() + so[p], ss[p]), std::string(); },
        [&](uint32_t p, const char* h) { return std::memcpy(recv.data() + ro[p], h, rs[p]), std::string(); },
        [&] { return ++waits, std::string(); }};
    if (auto e = comm::staged_all_to_all(*group, ss.data(), rs.data(), copies); !e.empty()) return e;
    for (uint32_t p = 0; p < n; ++p)
      for (uint64_t i = 0; i < rs[p]; ++i)
        RANK_CHECK(recv[ro[p] + i] == (unsigned char)(16 * p + r), "byte {} from rank {}: {}", i, p, recv[ro[p] + i]);
    RANK_CHECK(recv[ro[0] + rs[0]] == 0xee, "a byte past rank 0's range was written");
    RANK_CHECK(waits == 2, "{} waits", waits);
    return {};
  };
  CHECK(test::run_ranks(3, "staged", rank_fn) == "");
}
