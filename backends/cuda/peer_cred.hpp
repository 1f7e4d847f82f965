// GPU-free: who is at the other end of a unix socket. The communicator's fd sockets
// (cuda_comm.cpp) live in the abstract namespace, which has no file permissions: any local
// process can connect to one, so each end checks that the other runs as the same user before
// a cuMemCreate descriptor (the whole buffer, read-write) crosses over SCM_RIGHTS.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace halcyon::cuda {

// "" when `peer` may be served by a process whose effective uid is `self`, else why not.
inline std::string peer_refusal(const ucred& peer, uid_t self) {
  if (peer.uid == self) return {};
  return fmt::format("its peer (pid {}) runs as uid {}, not as this process's uid {}", peer.pid, peer.uid, self);
}

// The check of a connected unix socket `fd` against geteuid(): "" when the peer may be served.
inline std::string peer_refusal(int fd) {
  ucred peer{};
  socklen_t len = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0)
    return fmt::format("its peer's credentials (SO_PEERCRED) cannot be read: {}", std::strerror(errno));
  if (len != sizeof peer)
    return fmt::format("its peer's credentials (SO_PEERCRED) came as {} bytes, not {}", len, sizeof peer);
  return peer_refusal(peer, geteuid());
}

}  // namespace halcyon::cuda
