#include "ccl_comm.hpp"

#include <cstring>
#include <string>
#include <vector>

namespace halcyon::ccl {

Comm::~Comm() {
  if (comm_) lib_->symbols().ncclCommDestroy(comm_);
}

std::string Comm::start(Flavor flavor, comm::ShmGroup& group, uint64_t device_key, const char* path,
                        std::unique_ptr<Comm>* out) {
  const uint32_t n = group.size();
  if (n < 2) return "one rank";
  std::unique_ptr<Library> lib;
  const std::string load_error = Library::open(flavor, &lib, path);
  // Every rank's facts, so that every rank takes the same decision for the same reason (the
  // rank that failed to load adds its own detail).
  struct Facts {
    uint64_t device_key;
    uint64_t loaded;
  } mine{device_key, load_error.empty() ? 1u : 0u};
  std::vector<Facts> all(n);
  if (auto e = group.all_gather(&mine, sizeof mine, all.data()); !e.empty()) return e;
  std::string why;
  for (uint32_t p = 0; p < n && why.empty(); ++p) {
    if (!all[p].loaded)
      why = "rank " + std::to_string(p) + " could not load " + (path ? path : flavor_info(flavor).soname) +
            (p == group.rank() ? " (" + load_error + ")" : "");
    for (uint32_t q = 0; q < p && why.empty(); ++q)
      if (all[p].device_key == all[q].device_key)
        why = "ranks " + std::to_string(q) + " and " + std::to_string(p) + " share one GPU";
  }
  if (!why.empty()) return why;
  // Rank 0's unique id reaches every rank; a rank 0 that failed to make one sends zeros, and
  // every rank's ncclCommInitRank then fails alike.
  UniqueId id{};
  Result made = group.rank() == 0 ? lib->symbols().ncclGetUniqueId(&id) : kSuccess;
  if (made != kSuccess) std::memset(&id, 0, sizeof id);
  std::vector<UniqueId> ids(n);
  if (auto e = group.all_gather(&id, sizeof id, ids.data()); !e.empty()) return e;
  std::unique_ptr<Comm> c(new Comm);
  Result r = lib->symbols().ncclCommInitRank(&c->comm_, int(n), ids[0], int(group.rank()));
  if (r != kSuccess) return lib->error_text("ncclCommInitRank", r);
  c->lib_ = std::move(lib);
  c->size_ = n;
  *out = std::move(c);
  return {};
}

std::string Comm::all_to_all(uint64_t send, const uint64_t* send_offsets, const uint64_t* send_sizes, uint64_t recv,
                             const uint64_t* recv_offsets, const uint64_t* recv_sizes, StreamHandle stream) const {
  const Symbols& f = lib_->symbols();
  Result r = f.ncclGroupStart();
  if (r != kSuccess) return lib_->error_text("ncclGroupStart", r);
  const char* failed = "";
  for (uint32_t p = 0; p < size_ && r == kSuccess; ++p) {
    if (send_sizes[p]) {
      r = f.ncclSend(reinterpret_cast<const void*>(send + send_offsets[p]), send_sizes[p], kUint8, int(p), comm_, stream);
      failed = "ncclSend";
    }
    if (r == kSuccess && recv_sizes[p]) {
      r = f.ncclRecv(reinterpret_cast<void*>(recv + recv_offsets[p]), recv_sizes[p], kUint8, int(p), comm_, stream);
      failed = "ncclRecv";
    }
  }
  Result end = f.ncclGroupEnd();  // always closes the group it opened
  if (r != kSuccess) return lib_->error_text(failed, r);
  if (end != kSuccess) return lib_->error_text("ncclGroupEnd", end);
  return {};
}

}  // namespace halcyon::ccl

namespace halcyon::comm {

std::string staged_all_to_all(ShmGroup& group, const uint64_t* send_sizes, const uint64_t* recv_sizes,
                              const StagedCopies& copies) {
  const uint32_t n = group.size();
  std::vector<uint64_t> so(n), ro(n);
  uint64_t st = 0, rt = 0;
  for (uint32_t p = 0; p < n; ++p) {
    so[p] = st;
    st += send_sizes[p];
    ro[p] = rt;
    rt += recv_sizes[p];
  }
  std::vector<char> hs(st ? st : 1), hr(rt ? rt : 1);
  // Each side ends with a wait even after a failure: a copy already queued may still use the
  // host areas, which go when this returns.
  auto waited = [&](std::string e) {
    std::string w = copies.wait();
    return e.empty() ? w : e;
  };
  std::string e;
  for (uint32_t p = 0; p < n && e.empty(); ++p)
    if (send_sizes[p]) e = copies.download(p, hs.data() + so[p]);
  if (!(e = waited(e)).empty()) return e;
  if (auto x = group.all_to_all(hs.data(), so.data(), send_sizes, hr.data(), ro.data(), recv_sizes); !x.empty()) return x;
  for (uint32_t p = 0; p < n && e.empty(); ++p)
    if (recv_sizes[p]) e = copies.upload(p, hr.data() + ro[p]);
  return waited(e);
}

}  // namespace halcyon::comm
