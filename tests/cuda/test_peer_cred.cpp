// The uid check both ends of a communicator's fd socket make (peer_cred.hpp): abstract unix
// sockets have no permissions, so it is what keeps another user's process from being handed a
// cuMemCreate descriptor.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "peer_cred.hpp"

using halcyon::cuda::peer_refusal;

TEST_CASE("cuda comm: a peer of this user is served, another user's is refused by uid") {
  const uid_t self = geteuid();
  CHECK(peer_refusal(ucred{42, self, 0}, self).empty());
  std::string why = peer_refusal(ucred{42, self + 1, 0}, self);
  CHECK(why.find(fmt::format("uid {}", self + 1)) != std::string::npos);
  CHECK(why.find(fmt::format("this process's uid {}", self)) != std::string::npos);
  CHECK(why.find("pid 42") != std::string::npos);
}

TEST_CASE("cuda comm: the credentials of a connected socket are read with SO_PEERCRED") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK(peer_refusal(sv[0]) == "");  // this process at both ends
  CHECK(peer_refusal(sv[1]) == "");
  close(sv[0]);
  close(sv[1]);
  int p[2];
  REQUIRE(pipe(p) == 0);
  CHECK(peer_refusal(p[0]).find("SO_PEERCRED") != std::string::npos);  // not a socket: refused, by name
  close(p[0]);
  close(p[1]);
}

// As root, a child that drops to nobody (65534) connects to an abstract socket of the parent's:
// each end refuses the other.
TEST_CASE("cuda comm: another user's process at either end of an abstract socket is refused") {
  if (geteuid() != 0) {
    MESSAGE("not root: no second user to connect as");
    return;
  }
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::string name = fmt::format("halcyon-test-peer-cred.{}", getpid());
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const auto len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&a), len) == 0);
  REQUIRE(listen(listener, 1) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // exit status: 0 = refused the root listener by uid, else what went wrong
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) _exit(3);
    _exit(peer_refusal(s).find("runs as uid 0") != std::string::npos ? 0 : 4);
  }
  int conn = accept(listener, nullptr, nullptr);
  REQUIRE(conn >= 0);
  std::string why = peer_refusal(conn);
  CHECK_MESSAGE(why.find("runs as uid 65534") != std::string::npos, why);
  close(conn);
  close(listener);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
