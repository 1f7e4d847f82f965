// NCCL (libnccl.so.2) and RCCL (librccl.so.1), loaded at run time through one X-macro table,
// like the CUDA driver (backends/cuda/cuda_driver.hpp) and HIP (backends/hip/hip_symbols.hpp):
// one binary runs where neither is installed, and the backend that wants one reports its
// absence as a reason, never as a failure to start.
//
// RCCL exports NCCL's C API under NCCL's names, so both libraries fill the same table. The
// types are declared here (NCCL's C ABI is stable since 2.0): the build needs no NCCL or RCCL
// header. Where nccl.h is present, tests/unit/test_ccl_library.cpp checks every entry's
// signature against it.
//
// What the communicator uses them for (docs/expert_parallel.md): ncclSend/ncclRecv between
// ncclGroupStart/ncclGroupEnd for hal_comm_all_to_all, with the unique id travelling through
// the shared-memory rendezvous (shm_group.hpp). On the multi-GPU machine the caller's script
// sets NCCL_NVLS_ENABLE=0 (NVLink multicast off, as the machine's notes ask); this library
// never sets or reads environment variables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace halcyon::ccl {

// NCCL's C types, by value and layout.
using Result = int;                     // ncclResult_t; 0 = ncclSuccess
using DataType = int;                   // ncclDataType_t
struct OpaqueComm;
using CommHandle = OpaqueComm*;         // ncclComm_t
using StreamHandle = void*;             // cudaStream_t / hipStream_t
struct UniqueId {
  char internal[128];                   // NCCL_UNIQUE_ID_BYTES
};
constexpr DataType kUint8 = 1;          // ncclUint8
constexpr DataType kBfloat16 = 9;       // ncclBfloat16
constexpr Result kSuccess = 0;

// X(name, return type, parameter list).
#define HALCYON_CCL_REQUIRED(X)                                                                            \
  X(ncclGetVersion, ::halcyon::ccl::Result, (int* version))                                                \
  X(ncclGetUniqueId, ::halcyon::ccl::Result, (::halcyon::ccl::UniqueId * id))                              \
  X(ncclCommInitRank, ::halcyon::ccl::Result,                                                              \
    (::halcyon::ccl::CommHandle * comm, int nranks, ::halcyon::ccl::UniqueId id, int rank))                \
  X(ncclCommDestroy, ::halcyon::ccl::Result, (::halcyon::ccl::CommHandle comm))                            \
  X(ncclCommAbort, ::halcyon::ccl::Result, (::halcyon::ccl::CommHandle comm))                              \
  X(ncclCommCount, ::halcyon::ccl::Result, (const ::halcyon::ccl::CommHandle comm, int* count))            \
  X(ncclCommUserRank, ::halcyon::ccl::Result, (const ::halcyon::ccl::CommHandle comm, int* rank))          \
  X(ncclCommGetAsyncError, ::halcyon::ccl::Result,                                                         \
    (::halcyon::ccl::CommHandle comm, ::halcyon::ccl::Result * async_error))                               \
  X(ncclGetErrorString, const char*, (::halcyon::ccl::Result result))                                      \
  X(ncclGroupStart, ::halcyon::ccl::Result, ())                                                            \
  X(ncclGroupEnd, ::halcyon::ccl::Result, ())                                                              \
  X(ncclSend, ::halcyon::ccl::Result,                                                                      \
    (const void* sendbuff, size_t count, ::halcyon::ccl::DataType datatype, int peer,                      \
     ::halcyon::ccl::CommHandle comm, ::halcyon::ccl::StreamHandle stream))                                \
  X(ncclRecv, ::halcyon::ccl::Result,                                                                      \
    (void* recvbuff, size_t count, ::halcyon::ccl::DataType datatype, int peer,                            \
     ::halcyon::ccl::CommHandle comm, ::halcyon::ccl::StreamHandle stream))                                \
  X(ncclAllGather, ::halcyon::ccl::Result,                                                                 \
    (const void* sendbuff, void* recvbuff, size_t sendcount, ::halcyon::ccl::DataType datatype,            \
     ::halcyon::ccl::CommHandle comm, ::halcyon::ccl::StreamHandle stream))

// Newer than NCCL 2.0 (or absent from some RCCL builds): NULL when missing.
#define HALCYON_CCL_OPTIONAL(X)                                                                            \
  X(ncclGetLastError, const char*, (::halcyon::ccl::CommHandle comm))                                      \
  X(ncclCommRegister, ::halcyon::ccl::Result,                                                              \
    (const ::halcyon::ccl::CommHandle comm, void* buff, size_t size, void** handle))                       \
  X(ncclCommDeregister, ::halcyon::ccl::Result, (const ::halcyon::ccl::CommHandle comm, void* handle))

struct Symbols {
#define HALCYON_CCL_FIELD(name, ret, params) ret(*name) params = nullptr;
  HALCYON_CCL_REQUIRED(HALCYON_CCL_FIELD)
  HALCYON_CCL_OPTIONAL(HALCYON_CCL_FIELD)
#undef HALCYON_CCL_FIELD
};

enum class Flavor { kNccl, kRccl };

struct FlavorInfo {
  const char* name;     // "NCCL"
  const char* soname;   // "libnccl.so.2"
  const char* vendor;   // whose GPUs it drives
};
const FlavorInfo& flavor_info(Flavor flavor);

// The names of the table's entries, for listings and tests.
const char* const* required_symbol_names(size_t* count);
const char* const* optional_symbol_names(size_t* count);

class Library {
 public:
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();
  // Opens the flavor's library (`path` overrides its soname, e.g. for a test's stand-in).
  // Errors: "libnccl.so.2 not found (...)", or "<file> lacks required symbol ncclSend".
  static std::string open(Flavor flavor, std::unique_ptr<Library>* out, const char* path = nullptr);
  const Symbols& symbols() const { return sym_; }
  Flavor flavor() const { return flavor_; }
  // "NCCL 2.27.3" from ncclGetVersion.
  std::string version() const;
  // A failed call's text: "ncclSend: unhandled cuda error (...)".
  std::string error_text(const char* call, Result r) const;

 private:
  Library() = default;
  void* dl_ = nullptr;
  Flavor flavor_ = Flavor::kNccl;
  Symbols sym_;
};

}  // namespace halcyon::ccl
