// Ranks of one job on one host meeting in POSIX shared memory: the CPU backend's communicator
// (its whole transport) and the bootstrap of the GPU backends' ones (exchanging NCCL's unique
// id and peer-memory handles). No environment variable is read: the rendezvous name comes
// through hal_comm_desc.
//
// Layout: a control segment "/halcyon.<name>" (rank table, barrier, one all-gather slot per
// rank) that every rank creates-or-opens, and a staging segment "/halcyon.<name>.stage" (one
// area per rank for all-to-all rounds) that rank 0 creates once the ranks agree on the size.
// Both names are unlinked as soon as every rank has mapped them, so a job that crashes later
// leaves nothing in /dev/shm.
//
// Errors are strings (empty = success): the caller wraps them in its backend's error type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace halcyon::comm {

// A mapped POSIX shared-memory object. The creator unlinks the name when it goes (unless
// unlink_now() did it already); an opener only unmaps.
class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();
  // exclusive: fail when the name exists. Otherwise create-or-open at `size` bytes.
  static std::string create(const std::string& name, size_t size, bool exclusive, std::unique_ptr<ShmSegment>* out);
  // Opens an existing object; `expected_size` (0: any) must match its size.
  static std::string open(const std::string& name, size_t expected_size, std::unique_ptr<ShmSegment>* out);
  void unlink_now();
  // The name is someone else's to unlink now (a create-or-open segment every rank made):
  // this object only unmaps, so it never removes a later segment of the same name.
  void disown() { owner_ = false; }
  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;
};

class ShmGroup {
 public:
  static constexpr uint32_t kMaxRanks = 64;
  static constexpr size_t kSlotBytes = 4096;        // per rank, one all-gather
  static constexpr size_t kStageBytes = size_t(1) << 20;  // per rank, one all-to-all round

  // Collective: returns once all `size` ranks have joined `rendezvous`, or an error after
  // timeout_ms (naming how many arrived), or at once for a rank already taken or a size
  // that disagrees with the first rank's.
  static std::string join(const std::string& rendezvous, uint32_t rank, uint32_t size, uint32_t timeout_ms,
                          std::unique_ptr<ShmGroup>* out);
  ~ShmGroup();

  std::string barrier();
  // recv gets size * bytes: every rank's `bytes`, in rank order. bytes <= kSlotBytes.
  std::string all_gather(const void* send, size_t bytes, void* recv);
  // Host memory all-to-all through the staging areas, in rounds of kStageBytes / size bytes
  // per pair. Every rank's sizes must agree with its peers' (the caller has checked).
  std::string all_to_all(const char* send, const uint64_t* send_offsets, const uint64_t* send_sizes, char* recv,
                         const uint64_t* recv_offsets, const uint64_t* recv_sizes);
  // A fresh name for a segment of this rank: "/halcyon.<name>.r<rank>.<what><counter>".
  std::string segment_name(const char* what);

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }
  const std::string& rendezvous() const { return name_; }

 private:
  struct Control;
  ShmGroup() = default;
  Control* ctl() const;
  char* slot(uint32_t r) const;
  char* stage(uint32_t r) const;
  std::string wait_for(const char* what, const void* word, uint32_t value, bool until_equal);
  std::unique_ptr<ShmSegment> control_, stage_;
  std::string name_;
  uint32_t rank_ = 0, size_ = 1, timeout_ms_ = 30000;
  uint64_t counter_ = 0;
};

}  // namespace halcyon::comm
