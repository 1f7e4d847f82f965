// A stand-in for libnccl.so.2 / librccl.so.1 built from the loader's own X-macro table, for
// the loader's tests on machines without either: every entry returns success. Built twice:
// whole, and with FAKE_CCL_DROP_SEND, where ncclSend is exported under another name so that
// the loader must report it missing.
#include "ccl_library.hpp"

#ifdef FAKE_CCL_DROP_SEND
#define ncclSend ncclSend_missing
#endif

#define FAKE_CCL_DEFINE(name, ret, params) \
  extern "C" __attribute__((visibility("default"))) ret name params { return static_cast<ret>(0); }
HALCYON_CCL_REQUIRED(FAKE_CCL_DEFINE)
HALCYON_CCL_OPTIONAL(FAKE_CCL_DEFINE)
