// A stand-in for librccl.so.1 / libnccl.so.2 that records every call it gets, for the tests
// of the communicators' library side (backends/comm_common/ccl_comm) without a GPU: one line
// per call in the order made, read back through fake_ccl_log(). The unique id rank 0 makes
// carries its pid, so that the other ranks' ncclCommInitRank shows whose id reached them.
// Built from the loader's own X-macro table: every other entry returns success.
#include "ccl_library.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>

namespace {
std::string g_log;
int g_comm_token = 0;  // its address is the communicator handed out
void note(const char* format, ...) __attribute__((format(printf, 1, 2)));
void note(const char* format, ...) {
  char line[256];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(line, sizeof line, format, ap);
  va_end(ap);
  g_log += line;
  g_log += '\n';
}
using namespace halcyon::ccl;
}  // namespace

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT const char* fake_ccl_log() { return g_log.c_str(); }
FAKE_EXPORT void fake_ccl_clear() { g_log.clear(); }

FAKE_EXPORT Result ncclGetUniqueId(UniqueId* id) {
  std::memset(id, 0, sizeof *id);
  std::snprintf(id->internal, sizeof id->internal, "id-of-pid-%d", int(getpid()));
  note("ncclGetUniqueId");
  return kSuccess;
}
FAKE_EXPORT Result ncclCommInitRank(CommHandle* comm, int nranks, UniqueId id, int rank) {
  *comm = reinterpret_cast<CommHandle>(&g_comm_token);
  note("ncclCommInitRank nranks=%d rank=%d id=%.40s", nranks, rank, id.internal);
  return kSuccess;
}
FAKE_EXPORT Result ncclCommDestroy(CommHandle comm) {
  note("ncclCommDestroy ours=%d", comm == reinterpret_cast<CommHandle>(&g_comm_token));
  return kSuccess;
}
FAKE_EXPORT Result ncclGroupStart() {
  note("ncclGroupStart");
  return kSuccess;
}
FAKE_EXPORT Result ncclGroupEnd() {
  note("ncclGroupEnd");
  return kSuccess;
}
FAKE_EXPORT Result ncclSend(const void* buf, size_t count, DataType type, int peer, CommHandle comm, StreamHandle s) {
  note("ncclSend buf=%p count=%zu type=%d peer=%d ours=%d stream=%p", buf, count, type, peer,
       comm == reinterpret_cast<CommHandle>(&g_comm_token), s);
  return kSuccess;
}
FAKE_EXPORT Result ncclRecv(void* buf, size_t count, DataType type, int peer, CommHandle comm, StreamHandle s) {
  note("ncclRecv buf=%p count=%zu type=%d peer=%d ours=%d stream=%p", buf, count, type, peer,
       comm == reinterpret_cast<CommHandle>(&g_comm_token), s);
  return kSuccess;
}

// The rest of the table: present, successful, unrecorded.
#define FAKE_QUIET(name, ret, params) \
  FAKE_EXPORT ret name params { return static_cast<ret>(0); }
FAKE_QUIET(ncclGetVersion, Result, (int*))
FAKE_QUIET(ncclCommAbort, Result, (CommHandle))
FAKE_QUIET(ncclCommCount, Result, (const CommHandle, int*))
FAKE_QUIET(ncclCommUserRank, Result, (const CommHandle, int*))
FAKE_QUIET(ncclCommGetAsyncError, Result, (CommHandle, Result*))
FAKE_QUIET(ncclGetErrorString, const char*, (Result))
FAKE_QUIET(ncclAllGather, Result, (const void*, void*, size_t, DataType, CommHandle, StreamHandle))
FAKE_QUIET(ncclGetLastError, const char*, (CommHandle))
FAKE_QUIET(ncclCommRegister, Result, (const CommHandle, void*, size_t, void**))
FAKE_QUIET(ncclCommDeregister, Result, (const CommHandle, void*))
