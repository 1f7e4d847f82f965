// A fixed set of worker threads, optionally pinned to given CPUs, that runs parallel-for jobs.
// A compute partition of the CPU device is one of these over a disjoint set of cores.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace halcyon::cpu {

class ThreadPool {
 public:
  // cpus: the cores to pin to (one thread each); empty = `threads` unpinned workers.
  ThreadPool(unsigned threads, std::vector<int> cpus);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Runs body(i, worker) for i in [0, n) across the workers; returns when all are done.
  // Calls are serialised: one job at a time runs on a pool.
  void parallel_for(uint64_t n, const std::function<void(uint64_t, unsigned)>& body);
  unsigned size() const { return unsigned(workers_.size()); }
  bool pinned() const { return pinned_; }
  const std::vector<int>& cpus() const { return cpus_; }

 private:
  void worker_main(unsigned index);

  std::vector<std::thread> workers_;
  std::vector<int> cpus_;
  bool pinned_ = false;
  std::mutex job_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(uint64_t, unsigned)>* body_ = nullptr;
  uint64_t n_ = 0, next_ = 0;
  unsigned running_ = 0;
  uint64_t job_id_ = 0;
  bool stop_ = false;
};

}  // namespace halcyon::cpu
