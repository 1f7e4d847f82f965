// A communicator's NCCL / RCCL side, for any GPU backend: the collective decision to use the
// library, the unique id's exchange through the shared-memory group, ncclCommInitRank, and
// the all-to-all as ncclSend/ncclRecv between ncclGroupStart/ncclGroupEnd on a stream.
// GPU-agnostic: device addresses are integers and the stream is the backend's own handle
// (hipStream_t, CUstream), so it is unit-tested with a recording stand-in for the library
// (tests/unit/plugins/fake_ccl_recorder.cpp) and no GPU. The HIP backend uses it over RCCL.
// Also the host-staged all-to-all that a GPU backend falls back to without the library.
// Errors are strings (empty = success), as in shm_group.hpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ccl_library.hpp"
#include "shm_group.hpp"

namespace halcyon::ccl {

class Comm {
 public:
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();  // ncclCommDestroy

  // Collective over `group`: every rank calls it with its device's identity (`device_key`,
  // e.g. its PCI address) and gets the same answer. Uses the library (`path`, null = the
  // flavor's soname) only when there are two ranks or more, every rank loaded it and no two
  // ranks share a device (NCCL and RCCL refuse that); otherwise returns why not, and the
  // caller stages through host memory. The backend makes its device current first.
  static std::string start(Flavor flavor, comm::ShmGroup& group, uint64_t device_key, const char* path,
                           std::unique_ptr<Comm>* out);

  // Queues rank p's bytes [send + send_offsets[p], +send_sizes[p]) to p and receives
  // [recv + recv_offsets[p], +recv_sizes[p]) from p, every p with a non-zero size, as one group
  // on `stream`. No host wait.
  std::string all_to_all(uint64_t send, const uint64_t* send_offsets, const uint64_t* send_sizes, uint64_t recv,
                         const uint64_t* recv_offsets, const uint64_t* recv_sizes, StreamHandle stream) const;

  const Library& library() const { return *lib_; }
  uint32_t size() const { return size_; }

 private:
  Comm() = default;
  std::unique_ptr<Library> lib_;
  CommHandle comm_ = nullptr;
  uint32_t size_ = 0;
};

}  // namespace halcyon::ccl

namespace halcyon::comm {

// The all-to-all staged through host memory, for a GPU backend without the library (one rank,
// ranks sharing a GPU, the library missing): every send range is copied to a packed host area
// (`download(peer, host)`), the ranks exchange through `group`, and every receive range is
// copied back (`upload(peer, host)`); `wait()` (the stream's synchronize) follows each side, so
// this blocks the calling thread. Correct everywhere, not fast. The callbacks return "" or
// what failed.
struct StagedCopies {
  std::function<std::string(uint32_t peer, char* host)> download;    // send range of `peer` -> host
  std::function<std::string(uint32_t peer, const char* host)> upload;  // host -> receive range of `peer`
  std::function<std::string()> wait;
};
std::string staged_all_to_all(ShmGroup& group, const uint64_t* send_sizes, const uint64_t* recv_sizes,
                              const StagedCopies& copies);

}  // namespace halcyon::comm
