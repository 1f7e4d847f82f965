// The communicators' NCCL/RCCL side (backends/comm_common/ccl_comm), as the HIP backend uses
// it over RCCL, without a GPU: ranks are forked processes meeting in shared memory, the
// library is a stand-in that records its calls (plugins/fake_ccl_recorder.cpp), and the test
// reads back exactly what each rank asked of it.
#include "ccl_comm.hpp"

#include <doctest/doctest.h>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace halcyon;

namespace {

// What one rank saw: its start() answer, then the recorder's log.
struct RankResult {
  std::string start_error;
  std::string log;
};

std::string recorder_log() {
  void* dl = dlopen(HALCYON_FAKE_CCL_RECORDER, RTLD_NOW | RTLD_NOLOAD);
  if (!dl) return "(the recorder is not loaded)";
  auto fn = reinterpret_cast<const char* (*)()>(dlsym(dl, "fake_ccl_log"));
  std::string log = fn ? fn() : "(no fake_ccl_log)";
  dlclose(dl);
  return log;
}

// Forks `n` ranks; each joins the group, starts the library side with its device key and the
// given library, runs `body` when it started, and writes what it saw to a pipe.
std::vector<RankResult> run_ranks(uint32_t n, const std::vector<uint64_t>& keys, const char* library,
                                  const std::function<std::string(const ccl::Comm&, uint32_t)>& body) {
  static int round = 0;
  std::string name = "cclcomm" + std::to_string(getpid()) + "_" + std::to_string(round++);
  std::vector<int> fds(n);
  std::vector<pid_t> pids(n);
  for (uint32_t r = 0; r < n; ++r) {
    int p[2];
    REQUIRE(pipe(p) == 0);
    pids[r] = fork();
    REQUIRE(pids[r] >= 0);
    if (pids[r] == 0) {
      close(p[0]);
      // Held open here, so that the log outlives the Comm's own dlclose (null for a missing file).
      void* keep = dlopen(library, RTLD_NOW | RTLD_LOCAL);
      std::string out;
      std::unique_ptr<comm::ShmGroup> group;
      std::string e = comm::ShmGroup::join(name, r, n, 20000, &group);
      if (e.empty()) {
        std::unique_ptr<ccl::Comm> c;
        e = ccl::Comm::start(ccl::Flavor::kRccl, *group, keys[r], library, &c);
        if (e.empty()) e = body(*c, r);
        c.reset();  // ncclCommDestroy is part of the log
      }
      out = e + "\x1f" + (keep ? recorder_log() : std::string());
      ssize_t w = write(p[1], out.data(), out.size());
      _exit(w == ssize_t(out.size()) ? 0 : 3);
    }
    close(p[1]);
    fds[r] = p[0];
  }
  std::vector<RankResult> results(n);
  for (uint32_t r = 0; r < n; ++r) {
    std::string all;
    char buf[4096];
    for (ssize_t got; (got = read(fds[r], buf, sizeof buf)) > 0;) all.append(buf, size_t(got));
    close(fds[r]);
    int status = 0;
    waitpid(pids[r], &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    size_t sep = all.find('\x1f');
    REQUIRE(sep != std::string::npos);
    results[r] = {all.substr(0, sep), all.substr(sep + 1)};
  }
  return results;
}

std::string ptr(uint64_t a) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", reinterpret_cast<void*>(a));
  return b;
}

}  // namespace

TEST_CASE("ccl comm: two ranks share rank 0's unique id and queue one send/recv group on the stream") {
  // Rank r sends 16 * (p + 1) bytes to each peer p and receives 16 * (r + 1) from each; zero
  // sizes (to itself on rank 1) are left out of the group.
  auto body = [](const ccl::Comm& c, uint32_t r) {
    uint64_t so[2] = {0, 64}, ss[2] = {16, 32}, ro[2] = {0, 128}, rs[2] = {uint64_t(16 * (r + 1)), uint64_t(16 * (r + 1))};
    if (r == 1) ss[1] = rs[1] = 0;
    return c.all_to_all(0x10000, so, ss, 0x90000, ro, rs, reinterpret_cast<ccl::StreamHandle>(uintptr_t(0x5700 + r)));
  };
  auto res = run_ranks(2, {0xA0, 0xB0}, HALCYON_FAKE_CCL_RECORDER, body);
  for (uint32_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CAPTURE(res[r].log);
    CHECK(res[r].start_error == "");
    const std::string s = ptr(0x5700 + r);
    std::string expected = r == 0 ? "ncclGetUniqueId\n" : "";
    // Rank 0's pid is in the id both ranks pass.
    size_t at = res[0].log.find("id=id-of-pid-");
    REQUIRE(at != std::string::npos);
    std::string id = res[0].log.substr(at + 3, res[0].log.find('\n', at) - at - 3);
    expected += "ncclCommInitRank nranks=2 rank=" + std::to_string(r) + " id=" + id + "\n";
    expected += "ncclGroupStart\n";
    expected += "ncclSend buf=" + ptr(0x10000) + " count=16 type=1 peer=0 ours=1 stream=" + s + "\n";
    expected += "ncclRecv buf=" + ptr(0x90000) + " count=" + std::to_string(16 * (r + 1)) +
                " type=1 peer=0 ours=1 stream=" + s + "\n";
    if (r == 0) {
      expected += "ncclSend buf=" + ptr(0x10000 + 64) + " count=32 type=1 peer=1 ours=1 stream=" + s + "\n";
      expected += "ncclRecv buf=" + ptr(0x90000 + 128) + " count=16 type=1 peer=1 ours=1 stream=" + s + "\n";
    }
    expected += "ncclGroupEnd\nncclCommDestroy ours=1\n";
    CHECK(res[r].log == expected);
  }
}

TEST_CASE("ccl comm: every rank gets the same reason not to use the library, and no library call") {
  auto never = [](const ccl::Comm&, uint32_t) { return std::string("body ran"); };
  SUBCASE("two ranks on one GPU") {
    auto res = run_ranks(2, {0xA0, 0xA0}, HALCYON_FAKE_CCL_RECORDER, never);
    for (auto& r : res) {
      CHECK(r.start_error == "ranks 0 and 1 share one GPU");
      CHECK(r.log == "");  // not even a unique id was made
    }
  }
  SUBCASE("the library cannot be loaded") {
    auto res = run_ranks(3, {1, 2, 3}, "/nonexistent/librccl.so.1", never);
    for (auto& r : res) CHECK(r.start_error.find("rank 0 could not load /nonexistent/librccl.so.1") == 0);
    CHECK(res[0].start_error.find("(/nonexistent/librccl.so.1 not found") != std::string::npos);  // its detail
    CHECK(res[1].start_error == "rank 0 could not load /nonexistent/librccl.so.1");
  }
  SUBCASE("one rank") {
    auto res = run_ranks(1, {1}, HALCYON_FAKE_CCL_RECORDER, never);
    CHECK(res[0].start_error == "one rank");
  }
}

// The host-staged fallback moves real bytes: three ranks, rank r sends r + p + 1 bytes of value
// 16 * r + p to each peer p (itself too), at scattered offsets; the copies are plain memcpy.
TEST_CASE("ccl comm: staged_all_to_all delivers every peer's bytes, each side ending with a wait") {
  static int round = 0;
  const uint32_t n = 3;
  std::string name = "staged" + std::to_string(getpid()) + "_" + std::to_string(round++);
  std::vector<pid_t> pids(n);
  for (uint32_t r = 0; r < n; ++r) {
    pids[r] = fork();
    REQUIRE(pids[r] >= 0);
    if (pids[r] > 0) continue;
    std::unique_ptr<comm::ShmGroup> group;
    if (!comm::ShmGroup::join(name, r, n, 20000, &group).empty()) _exit(2);
    uint64_t ss[n], so[n], rs[n], ro[n];
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
    if (!comm::staged_all_to_all(*group, ss, rs, copies).empty()) _exit(3);
    for (uint32_t p = 0; p < n; ++p)
      for (uint64_t i = 0; i < rs[p]; ++i)
        if (recv[ro[p] + i] != (unsigned char)(16 * p + r)) _exit(4);  // peer p's bytes for us
    if (recv[ro[0] + rs[0]] != 0xee) _exit(5);  // nothing past the range
    _exit(waits == 2 ? 0 : 6);
  }
  for (uint32_t r = 0; r < n; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    CAPTURE(r);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}
