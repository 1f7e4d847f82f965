// Communicators on NVIDIA GPUs (hal.h "Communicators", docs/expert_parallel.md).
//   - ranks meet, wait and all-gather through the shared-memory group (one host);
//   - peer-mappable buffers are cuMemCreate'd with a POSIX file descriptor as their shareable
//     handle; the handle that travels is (owner rank, buffer id, size), and the importer asks
//     the owner's unix socket (abstract namespace) for the descriptor, which comes back over
//     SCM_RIGHTS to a peer of the same uid only, then imports and maps it for its own device. Two processes on one GPU, or
//     on two GPUs of one host with peer access, share memory this way;
//   - all_to_all: grouped ncclSend/ncclRecv on the stream when every rank has its own GPU and
//     libnccl.so.2 loads (backends/comm_common/ccl_comm, as the HIP backend's RCCL; NCCL
//     refuses two ranks on one GPU); otherwise staged through host shared memory
//     (comm::staged_all_to_all: correct everywhere, not fast).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <thread>

#include "ccl_comm.hpp"
#include "cuda_internal.hpp"
#include "peer_cred.hpp"
#include "shm_group.hpp"

namespace halcyon::cuda {

struct CudaComm {
  CudaDevice* dv = nullptr;
  std::unique_ptr<comm::ShmGroup> group;
  std::string rendezvous;
  int listen_fd = -1;
  std::thread server;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::map<uint64_t, int> exported;  // buffer id -> its shareable fd (owned by the buffer)
  uint64_t next_id = 1;
  std::unique_ptr<ccl::Comm> nccl;  // set when the all-to-all runs over NCCL
};

namespace {

// What an exported buffer's handle holds.
struct FdHandle {
  uint32_t magic;
  uint32_t owner_rank;
  uint64_t id;
  uint64_t size;       // what the caller asked for
  uint64_t vmm_bytes;  // what was created (granularity-rounded)
};
static_assert(sizeof(FdHandle) <= HAL_COMM_HANDLE_BYTES);
constexpr uint32_t kFdHandleMagic = 0x43554648;  // "HFUC"

hal_error* comm_error(hal_status status, const std::string& what) { return error(status, "cuda communicator: " + what); }

// "halcyon-fd.<hash of the rendezvous>.<rank>": short whatever the rendezvous name's length
// (sun_path holds 108 bytes).
std::string socket_name(const std::string& rendezvous, uint32_t rank) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : rendezvous) h = (h ^ c) * 1099511628211ull;
  return fmt::format("halcyon-fd.{:016x}.{}", h, rank);
}

// The socket's name in the abstract namespace ("\0" first), so nothing is left on disk. Abstract
// sockets have no permissions: both ends check the other's uid (peer_cred.hpp).
socklen_t socket_address(const std::string& rendezvous, uint32_t rank, sockaddr_un* a) {
  *a = {};
  a->sun_family = AF_UNIX;
  std::string name = socket_name(rendezvous, rank);
  std::memcpy(a->sun_path + 1, name.data(), name.size());
  return socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

// Answers "the fd of buffer <id>" with one status byte and, when found, the fd.
void serve_one(CudaComm* c, int conn) {
  timeval tv{5, 0};
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  uint64_t id = 0;
  if (recv(conn, &id, sizeof id, MSG_WAITALL) != ssize_t(sizeof id)) return;
  int fd = -1;
  {
    std::lock_guard lock(c->mu);
    if (auto it = c->exported.find(id); it != c->exported.end()) fd = it->second;
  }
  char status = fd >= 0 ? 1 : 0;
  iovec iov{&status, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  }
  sendmsg(conn, &msg, MSG_NOSIGNAL);
}

void serve(CudaComm* c) {
  while (!c->stop.load()) {
    pollfd p{c->listen_fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    int conn = accept(c->listen_fd, nullptr, nullptr);
    if (conn < 0) continue;
    if (auto why = peer_refusal(conn); !why.empty())  // another user's process: no descriptor for it
      halcyon::plugin::log(HAL_LOG_WARNING, fmt::format("cuda communicator '{}': socket @{} refused a connection: {}",
                                                        c->rendezvous, socket_name(c->rendezvous, c->group->rank()), why));
    else
      serve_one(c, conn);
    close(conn);
  }
}

// Asks `peer`'s socket for the fd of buffer `id`.
std::string fetch_fd(CudaComm* c, uint32_t peer, uint64_t id, int* fd) {
  sockaddr_un a;
  socklen_t len = socket_address(c->rendezvous, peer, &a);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return fmt::format("socket: {}", std::strerror(errno));
  timeval tv{10, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string why;
  char status = 0;
  iovec iov{&status, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0)
    why = fmt::format("connecting to rank {}'s socket: {}", peer, std::strerror(errno));
  else if (auto refused = peer_refusal(s); !refused.empty())  // whoever holds the name is not our user
    why = fmt::format("rank {}'s socket @{}: {}; not asking it for a buffer", peer, socket_name(c->rendezvous, peer),
                      refused);
  else if (send(s, &id, sizeof id, MSG_NOSIGNAL) != ssize_t(sizeof id))
    why = fmt::format("asking rank {}: {}", peer, std::strerror(errno));
  else if (recvmsg(s, &msg, 0) != 1)
    why = fmt::format("no answer from rank {}", peer);
  else if (!status)
    why = fmt::format("rank {} has no exported buffer {} (released before the import?)", peer, id);
  else if (cmsghdr* cm = CMSG_FIRSTHDR(&msg); !cm || cm->cmsg_type != SCM_RIGHTS)
    why = fmt::format("rank {} answered without a file descriptor", peer);
  else
    std::memcpy(fd, CMSG_DATA(cm), sizeof(int));
  close(s);
  return why;
}

CUmemAllocationProp allocation_prop(const CudaDevice* dv) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dv->ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Maps allocation `h` of `bytes` for this device, read-write.
hal_error* map_for_device(CudaDevice* dv, CUmemGenericAllocationHandle h, uint64_t bytes, CUdeviceptr* out) {
  const Driver* d = dv->d;
  CUdeviceptr p = 0;
  CU_TRY(d, d->cuMemAddressReserve(&p, bytes, 0, 0, 0), dv->uri + ": cuMemAddressReserve");
  CUresult r = d->cuMemMap(p, bytes, 0, h, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = dv->ordinal;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d->cuMemSetAccess(p, bytes, &access, 1);
    if (r != CUDA_SUCCESS) d->cuMemUnmap(p, bytes);
  }
  if (r != CUDA_SUCCESS) {
    d->cuMemAddressFree(p, bytes);
    return cu_error(d, r, dv->uri + ": mapping peer-mappable memory");
  }
  *out = p;
  return nullptr;
}

}  // namespace

void cuda_vmm_release(CudaBuffer* b) {
  const Driver* d = b->device->d;
  ContextScope scope(d, b->device->ctx);
  d->cuMemUnmap(b->address, b->vmm_bytes);
  d->cuMemAddressFree(b->address, b->vmm_bytes);
  d->cuMemRelease(b->vmm);
  if (b->comm) {
    std::lock_guard lock(b->comm->mu);
    b->comm->exported.erase(b->export_id);
  }
  if (b->export_fd >= 0) close(b->export_fd);
}

namespace {

// NCCL for the all-to-all when every rank holds its own GPU (by PCI address) and the library
// loads (ccl::Comm::start, collective); otherwise the reason it is not used (logged) and the
// staged path.
std::string try_nccl(CudaComm* c) {
  CudaDevice* dv = c->dv;
  const uint64_t pci = uint64_t(attr(dv, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)) << 32 |
                       uint64_t(attr(dv, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)) << 8 |
                       uint64_t(attr(dv, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID));
  ContextScope scope(dv->d, dv->ctx);
  return ccl::Comm::start(ccl::Flavor::kNccl, *c->group, pci, nullptr, &c->nccl);
}

}  // namespace

hal_error* cuda_comm_create(CudaDevice* dv, const hal_comm_desc* desc, CudaComm** out, hal_comm_info* info) {
  HAL_BACKEND_GUARD({
    if (!dv->d->has_vmm())
      return comm_error(HAL_UNSUPPORTED, fmt::format("{}: the driver lacks the cuMem* virtual memory entries ({})",
                                                     dv->uri, dv->d->missing_optional));
    auto c = std::make_unique<CudaComm>();
    c->dv = dv;
    c->rendezvous = desc->rendezvous;
    // The socket first: a peer may ask for a buffer as soon as everyone has joined.
    c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->listen_fd < 0) return comm_error(HAL_UNAVAILABLE, fmt::format("socket: {}", std::strerror(errno)));
    sockaddr_un a;
    socklen_t len = socket_address(c->rendezvous, desc->rank, &a);
    if (bind(c->listen_fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(c->listen_fd, 64) != 0) {
      std::string e = std::strerror(errno);
      close(c->listen_fd);
      return comm_error(HAL_UNAVAILABLE, fmt::format("rank {} of '{}': its socket: {} (rank already taken?)",
                                                     desc->rank, c->rendezvous, e));
    }
    if (auto e = comm::ShmGroup::join(desc->rendezvous, desc->rank, desc->size, desc->timeout_ms, &c->group); !e.empty()) {
      close(c->listen_fd);
      return comm_error(HAL_UNAVAILABLE, e);
    }
    c->server = std::thread(serve, c.get());
    if (auto why = try_nccl(c.get()); !why.empty())
      halcyon::plugin::log(HAL_LOG_INFO, fmt::format("cuda communicator '{}': all-to-all staged through host memory, "
                                                     "not NCCL: {}", c->rendezvous, why));
    std::snprintf(info->transport, sizeof info->transport, "%s", c->nccl ? "nccl+cuipc" : "shm+cuipc");
    info->max_all_gather_bytes = comm::ShmGroup::kSlotBytes;
    info->max_ranks = comm::ShmGroup::kMaxRanks;
    *out = c.release();
    return nullptr;
  })
}

void cuda_comm_destroy(CudaComm* c) {
  c->nccl.reset();  // ncclCommDestroy
  c->stop.store(true);
  if (c->server.joinable()) c->server.join();
  if (c->listen_fd >= 0) close(c->listen_fd);
  delete c;
}

hal_error* cuda_comm_barrier(CudaComm* c) {
  HAL_BACKEND_GUARD({
    if (auto e = c->group->barrier(); !e.empty()) return comm_error(HAL_DEVICE_ERROR, e);
    return nullptr;
  })
}

hal_error* cuda_comm_all_gather(CudaComm* c, const void* send, uint64_t bytes, void* recv) {
  HAL_BACKEND_GUARD({
    if (auto e = c->group->all_gather(send, size_t(bytes), recv); !e.empty()) return comm_error(HAL_DEVICE_ERROR, e);
    return nullptr;
  })
}

hal_error* cuda_comm_buffer_create(CudaComm* c, uint64_t size, CudaBuffer** out, uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    CudaDevice* dv = c->dv;
    const Driver* d = dv->d;
    ContextScope scope(d, dv->ctx);
    CUmemAllocationProp prop = allocation_prop(dv);
    size_t granularity = 0;
    CU_TRY(d, d->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           dv->uri + ": cuMemGetAllocationGranularity");
    auto b = std::make_unique<CudaBuffer>();
    b->device = dv;
    b->vmm_asked = size;
    b->vmm_bytes = (size + granularity - 1) / granularity * granularity;
    CU_TRY(d, d->cuMemCreate(&b->vmm, b->vmm_bytes, &prop, 0),
           fmt::format("{}: cuMemCreate of {} bytes (POSIX fd shareable)", dv->uri, b->vmm_bytes));
    CUresult r = d->cuMemExportToShareableHandle(&b->export_fd, b->vmm, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    hal_error* e = r == CUDA_SUCCESS ? map_for_device(dv, b->vmm, b->vmm_bytes, &b->address)
                                     : cu_error(d, r, dv->uri + ": cuMemExportToShareableHandle");
    if (e) {
      if (b->export_fd >= 0) close(b->export_fd);
      d->cuMemRelease(b->vmm);
      return e;
    }
    {
      std::lock_guard lock(c->mu);
      b->export_id = c->next_id++;
      c->exported[b->export_id] = b->export_fd;
    }
    b->comm = c;
    *address = b->address;
    *host = nullptr;
    *out = b.release();
    return nullptr;
  })
}

hal_error* cuda_comm_buffer_export(CudaComm* c, CudaBuffer* b, hal_comm_handle* out) {
  // The importer's buffer has the size asked for, as the owner's: the core's range checks then
  // refuse offsets past it (the rounded tail is mapped, never handed out).
  FdHandle h{kFdHandleMagic, c->group->rank(), b->export_id, b->vmm_asked, b->vmm_bytes};
  std::memcpy(out->bytes, &h, sizeof h);
  return nullptr;
}

hal_error* cuda_comm_buffer_import(CudaComm* c, uint32_t peer, const hal_comm_handle* handle, CudaBuffer** out,
                                   uint64_t* size, uint64_t* address, void** host) {
  HAL_BACKEND_GUARD({
    FdHandle h;
    std::memcpy(&h, handle->bytes, sizeof h);
    if (h.magic != kFdHandleMagic)
      return comm_error(HAL_INVALID_ARGUMENT, "the handle was not made by hal_comm_buffer_export of a CUDA communicator");
    if (h.owner_rank != peer)
      return comm_error(HAL_INVALID_ARGUMENT, fmt::format("the handle was exported by rank {}, not by peer {}",
                                                         h.owner_rank, peer));
    if (h.size > h.vmm_bytes)
      return comm_error(HAL_INVALID_ARGUMENT, fmt::format("the handle's size {} exceeds its mapped {} bytes", h.size,
                                                         h.vmm_bytes));
    int fd = -1;
    if (auto e = fetch_fd(c, peer, h.id, &fd); !e.empty()) return comm_error(HAL_NOT_FOUND, e);
    CudaDevice* dv = c->dv;
    const Driver* d = dv->d;
    ContextScope scope(d, dv->ctx);
    auto b = std::make_unique<CudaBuffer>();
    b->device = dv;
    b->vmm_bytes = h.vmm_bytes;
    CUresult r = d->cuMemImportFromShareableHandle(&b->vmm, reinterpret_cast<void*>(intptr_t(fd)),
                                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r != CUDA_SUCCESS) return cu_error(d, r, fmt::format("{}: importing rank {}'s buffer", dv->uri, peer));
    if (hal_error* e = map_for_device(dv, b->vmm, b->vmm_bytes, &b->address)) {
      d->cuMemRelease(b->vmm);
      return e;
    }
    *size = h.size;
    *address = b->address;
    *host = nullptr;
    *out = b.release();
    return nullptr;
  })
}

// Over NCCL: grouped sends and receives queued on the stream (no host wait). Else staged
// through host memory: device -> packed host send area -> shared-memory all-to-all -> host
// receive area -> device; blocks the calling thread.
hal_error* cuda_comm_all_to_all(CudaComm* c, CudaStream* s, CudaBuffer* send, const uint64_t* send_offsets,
                                const uint64_t* send_sizes, CudaBuffer* recv, const uint64_t* recv_offsets,
                                const uint64_t* recv_sizes) {
  HAL_BACKEND_GUARD({
    const Driver* d = c->dv->d;
    ContextScope scope(d, c->dv->ctx);
    if (c->nccl) {
      if (auto e = c->nccl->all_to_all(send->address, send_offsets, send_sizes, recv->address, recv_offsets, recv_sizes,
                                       s->stream);
          !e.empty())
        return comm_error(HAL_DEVICE_ERROR, e);
      return nullptr;
    }
    auto cu_text = [&](CUresult r, const char* what) {
      return r == CUDA_SUCCESS ? std::string() : fmt::format("{}: {}", what, result_string(*d, r));
    };
    comm::StagedCopies copies{
        [&](uint32_t p, char* h) {
          return cu_text(d->cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(h), send->address + send_offsets[p],
                                          send_sizes[p], s->stream), "cuMemcpyAsync to host");
        },
        [&](uint32_t p, const char* h) {
          return cu_text(d->cuMemcpyAsync(recv->address + recv_offsets[p], reinterpret_cast<CUdeviceptr>(h),
                                          recv_sizes[p], s->stream), "cuMemcpyAsync to the device");
        },
        [&] { return cu_text(d->cuStreamSynchronize(s->stream), "cuStreamSynchronize"); }};
    if (auto e = comm::staged_all_to_all(*c->group, send_sizes, recv_sizes, copies); !e.empty())
      return comm_error(HAL_DEVICE_ERROR, fmt::format("{}: all_to_all staging: {}", c->dv->uri, e));
    return nullptr;
  })
}

}  // namespace halcyon::cuda
