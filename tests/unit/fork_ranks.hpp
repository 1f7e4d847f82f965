// Runs one function per rank, each in its own forked process, the way a multi-process job
// runs: the communicator tests and the expert-parallel layer tests use it. The parent opens
// no device (a forked child inherits no threads), waits for every child, and reports each
// failing rank's message.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

// In a rank's function: a failed Result/Status, or a false condition, becomes its error.
#define RANK_TRY(expr)                                                    \
  do {                                                                    \
    auto&& r_ = (expr);                                                   \
    if (!r_) return fmt::format("{}: {}", #expr, r_.error().to_string()); \
  } while (0)
#define RANK_CHECK(cond, ...)                                                                  \
  do {                                                                                         \
    if (!(cond)) return fmt::format("check failed: {}: {}", #cond, fmt::format(__VA_ARGS__)); \
  } while (0)

namespace test {

// fn(rank, size, rendezvous) returns "" on success or what went wrong.
using RankFn = std::function<std::string(uint32_t rank, uint32_t size, const std::string& rendezvous)>;

// A rendezvous name unique to this process and call.
inline std::string fresh_rendezvous(const char* tag) {
  static int counter = 0;
  return std::string("test-") + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

// "" when every rank returned "", else one line per failing rank.
inline std::string run_ranks(uint32_t size, const char* tag, const RankFn& fn) {
  const std::string name = fresh_rendezvous(tag);
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < size; ++r) {
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) return "fork failed";
    if (pid == 0) {
      std::string e;
      try {
        e = fn(r, size, name);
      } catch (const std::exception& ex) {
        e = std::string("exception: ") + ex.what();
      }
      if (!e.empty()) std::fprintf(stderr, "[rank %u of %u] %s\n", r, size, e.c_str());
      std::fflush(nullptr);
      _exit(e.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::string failures;
  for (uint32_t r = 0; r < size; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failures += "rank " + std::to_string(r) + (WIFSIGNALED(status) ? " died of signal " + std::to_string(WTERMSIG(status))
                                                                      : " failed (its message is above)") + "\n";
  }
  return failures;
}

}  // namespace test
