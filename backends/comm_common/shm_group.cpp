#include "shm_group.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>

namespace halcyon::comm {

namespace {
std::string errno_text(const char* call, const std::string& name) {
  return std::string(call) + "(" + name + "): " + std::strerror(errno);
}
std::string fmt_mode(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "0%03o", unsigned(m & 0777));
  return b;
}
}  // namespace

ShmSegment::~ShmSegment() {
  if (data_) munmap(data_, size_);
  if (owner_) shm_unlink(name_.c_str());
}

void ShmSegment::unlink_now() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

// A segment another user made, or one open to other users, could be read or altered by them
// (it carries the NCCL id and peer-memory handles): refused. Ours are always 0600.
static std::string check_private(int fd, const std::string& name) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return errno_text("fstat", name);
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0)
    return "shared-memory object /dev/shm" + name + " belongs to uid " + std::to_string(st.st_uid) + " with mode " +
           fmt_mode(st.st_mode) + ": not this user's private object (remove it, or use another rendezvous name)";
  return {};
}

std::string ShmSegment::create(const std::string& name, size_t size, bool exclusive, std::unique_ptr<ShmSegment>* out) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | (exclusive ? O_EXCL : 0), 0600);
  if (fd < 0) return errno_text("shm_open", name);
  if (auto e = check_private(fd, name); !e.empty()) {
    close(fd);
    return e;
  }
  // ftruncate to the same size by several ranks is harmless; the pages stay zero until written.
  if (ftruncate(fd, off_t(size)) != 0) {
    std::string e = errno_text("ftruncate", name);
    close(fd);
    if (exclusive) shm_unlink(name.c_str());
    return e;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (exclusive) shm_unlink(name.c_str());
    return errno_text("mmap", name);
  }
  auto s = std::make_unique<ShmSegment>();
  s->data_ = p;
  s->size_ = size;
  s->name_ = name;
  s->owner_ = true;
  *out = std::move(s);
  return {};
}

std::string ShmSegment::open(const std::string& name, size_t expected_size, std::unique_ptr<ShmSegment>* out) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0)
    return errno == ENOENT ? "shared-memory object " + name + " not found (its owner released it, or never made it)"
                           : errno_text("shm_open", name);
  if (auto e = check_private(fd, name); !e.empty()) {
    close(fd);
    return e;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return errno_text("fstat", name);
  }
  size_t size = size_t(st.st_size);
  if (size == 0 || (expected_size != 0 && size != expected_size)) {
    close(fd);
    return "shared-memory object " + name + " has " + std::to_string(size) + " bytes, expected " +
           std::to_string(expected_size);
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return errno_text("mmap", name);
  auto s = std::make_unique<ShmSegment>();
  s->data_ = p;
  s->size_ = size;
  s->name_ = name;
  *out = std::move(s);
  return {};
}

// Lock-free 32-bit atomics work across processes on the same mapping.
struct ShmGroup::Control {
  std::atomic<uint32_t> size;       // set by the first rank to join (0 before)
  std::atomic<uint32_t> joined;
  std::atomic<uint32_t> staged;     // ranks that have mapped the staging segment
  std::atomic<uint32_t> barrier_count;
  std::atomic<uint32_t> barrier_gen;
  std::atomic<uint32_t> taken[kMaxRanks];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory barrier needs lock-free atomics");

namespace {
constexpr size_t kControlBytes = 4096;
static_assert(sizeof(uint32_t) * (5 + ShmGroup::kMaxRanks) <= kControlBytes);
constexpr size_t kSegmentBytes = kControlBytes + size_t(ShmGroup::kMaxRanks) * ShmGroup::kSlotBytes;

void pause_briefly(uint64_t spin) {
  if (spin < 64) return;
  if (spin < 2048) {
    sched_yield();
    return;
  }
  timespec ts{0, 20000};  // 20 us: ranks may outnumber cores
  nanosleep(&ts, nullptr);
}
}  // namespace

ShmGroup::Control* ShmGroup::ctl() const { return static_cast<Control*>(control_->data()); }
char* ShmGroup::slot(uint32_t r) const {
  return static_cast<char*>(control_->data()) + kControlBytes + size_t(r) * kSlotBytes;
}
char* ShmGroup::stage(uint32_t r) const { return static_cast<char*>(stage_->data()) + size_t(r) * kStageBytes; }

std::string ShmGroup::wait_for(const char* what, const void* word, uint32_t value, bool until_equal) {
  auto* w = static_cast<const std::atomic<uint32_t>*>(word);
  auto start = std::chrono::steady_clock::now();
  for (uint64_t spin = 0;; ++spin) {
    uint32_t v = w->load(std::memory_order_acquire);
    if ((v == value) == until_equal) return {};
    pause_briefly(spin);
    if ((spin & 63) == 0 && std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms_)) {
      return "rank " + std::to_string(rank_) + " of communicator '" + name_ + "' waited " +
             std::to_string(timeout_ms_) + " ms " + what + ": " +
             std::to_string(ctl()->barrier_count.load()) + " of " + std::to_string(size_) +
             " ranks had arrived at the last barrier, " + std::to_string(ctl()->joined.load()) +
             " had joined (a rank exited, or the ranks call collectives in different orders); the communicator "
             "is unusable now";
    }
  }
}

std::string ShmGroup::join(const std::string& rendezvous, uint32_t rank, uint32_t size, uint32_t timeout_ms,
                           std::unique_ptr<ShmGroup>* out) {
  if (size > kMaxRanks)
    return "size " + std::to_string(size) + " is more than the " + std::to_string(kMaxRanks) +
           " ranks a shared-memory communicator takes";
  std::unique_ptr<ShmGroup> g(new ShmGroup);
  g->name_ = rendezvous;
  g->rank_ = rank;
  g->size_ = size;
  g->timeout_ms_ = timeout_ms;
  const std::string base = "/halcyon." + rendezvous;
  if (auto e = ShmSegment::create(base, kSegmentBytes, false, &g->control_); !e.empty()) return e;
  Control* c = g->ctl();
  uint32_t expected = 0;
  if (!c->size.compare_exchange_strong(expected, size) && expected != size)
    return "rank " + std::to_string(rank) + " joins '" + rendezvous + "' with size " + std::to_string(size) +
           ", but rank(s) already there said " + std::to_string(expected);
  if (c->taken[rank].exchange(1) != 0)
    return "rank " + std::to_string(rank) + " of '" + rendezvous +
           "' is already taken (two processes passed the same rank, or /dev/shm" + base +
           " is left from a crashed job: remove it or use another rendezvous name)";
  c->joined.fetch_add(1, std::memory_order_acq_rel);
  if (auto e = g->wait_for("for every rank to join", &c->joined, size, true); !e.empty()) return e;
  // Everyone has the control segment mapped: its name can go, once, by rank 0. The others
  // must not unlink it at release: by then the name may be a new job's segment.
  if (rank == 0) g->control_->unlink_now();
  else g->control_->disown();
  const std::string stage_name = base + ".stage";
  const size_t stage_bytes = size_t(size) * kStageBytes;
  if (rank == 0) {
    if (auto e = ShmSegment::create(stage_name, stage_bytes, true, &g->stage_); !e.empty()) return e;
    c->staged.fetch_add(1, std::memory_order_acq_rel);
  } else {
    if (auto e = g->wait_for("for rank 0 to make the staging segment", &c->staged, 0, false); !e.empty()) return e;
    if (auto e = ShmSegment::open(stage_name, stage_bytes, &g->stage_); !e.empty()) return e;
    c->staged.fetch_add(1, std::memory_order_acq_rel);
  }
  if (auto e = g->wait_for("for every rank to map the staging segment", &c->staged, size, true); !e.empty()) return e;
  if (rank == 0) g->stage_->unlink_now();
  *out = std::move(g);
  return {};
}

ShmGroup::~ShmGroup() = default;

std::string ShmGroup::barrier() {
  Control* c = ctl();
  uint32_t gen = c->barrier_gen.load(std::memory_order_acquire);
  if (c->barrier_count.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
    c->barrier_count.store(0, std::memory_order_relaxed);
    c->barrier_gen.fetch_add(1, std::memory_order_release);
    return {};
  }
  return wait_for("at a barrier", &c->barrier_gen, gen, false);
}

std::string ShmGroup::all_gather(const void* send, size_t bytes, void* recv) {
  if (bytes > kSlotBytes)
    return std::to_string(bytes) + " bytes per rank is more than an all-gather slot (" + std::to_string(kSlotBytes) + ")";
  if (bytes) std::memcpy(slot(rank_), send, bytes);
  if (auto e = barrier(); !e.empty()) return e;
  for (uint32_t r = 0; r < size_; ++r)
    if (bytes) std::memcpy(static_cast<char*>(recv) + size_t(r) * bytes, slot(r), bytes);
  return barrier();  // nobody rewrites a slot before every rank has read it
}

std::string ShmGroup::all_to_all(const char* send, const uint64_t* send_offsets, const uint64_t* send_sizes, char* recv,
                                 const uint64_t* recv_offsets, const uint64_t* recv_sizes) {
  const uint64_t chunk = uint64_t(kStageBytes / size_) / 64 * 64;
  uint64_t most = 0;
  for (uint32_t p = 0; p < size_; ++p)
    if (p != rank_) most = std::max({most, send_sizes[p], recv_sizes[p]});
  // Every rank must run the same number of rounds: the largest over all pairs.
  uint64_t rounds_mine = (most + chunk - 1) / chunk, all[kMaxRanks];
  if (auto e = all_gather(&rounds_mine, sizeof rounds_mine, all); !e.empty()) return e;
  const uint64_t rounds = *std::max_element(all, all + size_);
  if (send_sizes[rank_] && recv_sizes[rank_])
    std::memmove(recv + recv_offsets[rank_], send + send_offsets[rank_], std::min(send_sizes[rank_], recv_sizes[rank_]));
  for (uint64_t round = 0; round < rounds; ++round) {
    const uint64_t at = round * chunk;
    for (uint32_t p = 0; p < size_; ++p)
      if (p != rank_ && send_sizes[p] > at)
        std::memcpy(stage(rank_) + p * chunk, send + send_offsets[p] + at, std::min(chunk, send_sizes[p] - at));
    if (auto e = barrier(); !e.empty()) return e;
    for (uint32_t p = 0; p < size_; ++p)
      if (p != rank_ && recv_sizes[p] > at)
        std::memcpy(recv + recv_offsets[p] + at, stage(p) + rank_ * chunk, std::min(chunk, recv_sizes[p] - at));
    if (auto e = barrier(); !e.empty()) return e;
  }
  return {};
}

std::string ShmGroup::segment_name(const char* what) {
  return "/halcyon." + name_ + ".r" + std::to_string(rank_) + "." + what + std::to_string(counter_++);
}

}  // namespace halcyon::comm
