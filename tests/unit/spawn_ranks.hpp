// Runs N copies of this program, one rank each, as fresh processes (posix_spawn of
// /proc/self/exe with "--rank R --ranks N --rendezvous NAME" appended): for GPU ranks, whose
// driver state does not survive a fork. Returns how many ranks failed (-1: could not start).
#pragma once

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

extern char** environ;

namespace test {

inline int spawn_ranks(const std::vector<std::string>& base_args, uint32_t ranks, const std::string& rendezvous) {
  std::vector<pid_t> pids;
  for (uint32_t r = 0; r < ranks; ++r) {
    std::vector<std::string> args = base_args;
    for (const std::string& a : {std::string("--rank"), std::to_string(r), std::string("--ranks"), std::to_string(ranks),
                                 std::string("--rendezvous"), rendezvous})
      args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -1;
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed;
}

}  // namespace test
