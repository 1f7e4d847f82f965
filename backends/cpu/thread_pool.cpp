#include "thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

namespace halcyon::cpu {

ThreadPool::ThreadPool(unsigned threads, std::vector<int> cpus) : cpus_(std::move(cpus)) {
  unsigned n = cpus_.empty() ? threads : unsigned(cpus_.size());
  if (n == 0) n = 1;
  pinned_ = !cpus_.empty();
  for (unsigned i = 0; i < n; ++i) {
    workers_.emplace_back([this, i] { worker_main(i); });
    if (!cpus_.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpus_[i], &set);
      if (pthread_setaffinity_np(workers_.back().native_handle(), sizeof set, &set) != 0) pinned_ = false;
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(uint64_t n, const std::function<void(uint64_t, unsigned)>& body) {
  if (n == 0) return;
  std::lock_guard job(job_mu_);
  std::unique_lock lock(mu_);
  body_ = &body;
  n_ = n;
  next_ = 0;
  running_ = unsigned(workers_.size());
  ++job_id_;
  cv_start_.notify_all();
  cv_done_.wait(lock, [&] { return running_ == 0; });
  body_ = nullptr;
}

void ThreadPool::worker_main(unsigned index) {
  uint64_t seen = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_start_.wait(lock, [&] { return stop_ || job_id_ != seen; });
    if (stop_) return;
    seen = job_id_;
    while (next_ < n_) {
      uint64_t i = next_++;
      lock.unlock();
      (*body_)(i, index);
      lock.lock();
    }
    if (--running_ == 0) cv_done_.notify_all();
  }
}

}  // namespace halcyon::cpu
