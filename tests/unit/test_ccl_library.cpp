// The NCCL/RCCL loader (backends/comm_common/ccl_library): a missing library is a clear
// "not found", a library without a required symbol names it, a complete one loads, and where
// nccl.h and libnccl.so.2 are at hand the table is checked against both.
#include "ccl_library.hpp"

#include <doctest/doctest.h>

#include <dlfcn.h>

#include <string>
#include <type_traits>

#if defined(HALCYON_HAVE_NCCL_H)
#include <nccl.h>
#endif

using namespace halcyon::ccl;

namespace {

std::string load_error(Flavor f, const char* path = nullptr) {
  std::unique_ptr<Library> lib;
  return Library::open(f, &lib, path);
}

bool installed(const char* soname) {
  void* dl = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (dl) dlclose(dl);
  return dl != nullptr;
}

}  // namespace

TEST_CASE("ccl: a library that is not there is 'not found', naming the file and what needs it") {
  auto e = load_error(Flavor::kNccl, "libnccl-that-is-not-here.so.2");
  CHECK(e.find("libnccl-that-is-not-here.so.2 not found") == 0);
  CHECK(e.find("NCCL is needed for NVIDIA GPU communicators") != std::string::npos);
  auto r = load_error(Flavor::kRccl, "librccl-that-is-not-here.so.1");
  CHECK(r.find("librccl-that-is-not-here.so.1 not found") == 0);
  CHECK(r.find("RCCL is needed for AMD") != std::string::npos);
  // The real sonames: where they are absent (CI), the same message for the default name.
  for (Flavor f : {Flavor::kNccl, Flavor::kRccl}) {
    const char* soname = flavor_info(f).soname;
    CAPTURE(soname);
    if (!installed(soname)) CHECK(load_error(f).find(std::string(soname) + " not found") == 0);
  }
}

TEST_CASE("ccl: a stand-in exporting the whole table loads; one without ncclSend is refused by name") {
  std::unique_ptr<Library> lib;
  REQUIRE(Library::open(Flavor::kRccl, &lib, HALCYON_FAKE_CCL) == "");
  CHECK(lib->flavor() == Flavor::kRccl);
  CHECK(bool(lib->symbols().ncclSend));
  CHECK(bool(lib->symbols().ncclCommRegister));
  CHECK(lib->symbols().ncclGroupStart() == kSuccess);
  auto e = load_error(Flavor::kNccl, HALCYON_FAKE_CCL_NO_SEND);
  CHECK(e.find("lacks required symbol ncclSend") != std::string::npos);
}

TEST_CASE("ccl: the symbol lists name every table entry once") {
  size_t nr = 0, no = 0;
  const char* const* req = required_symbol_names(&nr);
  const char* const* opt = optional_symbol_names(&no);
  CHECK(nr == 14);
  CHECK(no == 3);
  CHECK(sizeof(Symbols) == (nr + no) * sizeof(void*));
  for (size_t i = 0; i < nr + no; ++i)
    for (size_t j = i + 1; j < nr + no; ++j) {
      const char* a = i < nr ? req[i] : opt[i - nr];
      const char* b = j < nr ? req[j] : opt[j - nr];
      CHECK(std::string(a) != b);
    }
}

TEST_CASE("ccl: the real libnccl.so.2, where installed, has every required symbol") {
  if (!installed("libnccl.so.2")) {
    MESSAGE("libnccl.so.2 is not installed here: only the stand-in was checked");
    return;
  }
  std::unique_ptr<Library> lib;
  REQUIRE(Library::open(Flavor::kNccl, &lib) == "");
  // ncclGetVersion needs no GPU.
  CHECK(lib->version().rfind("NCCL 2.", 0) == 0);
  MESSAGE("loaded " << lib->version());
}

#if defined(HALCYON_HAVE_NCCL_H)
// Our declarations against the real header: same arity and return type; each parameter the
// same type, or both pointers (opaque handles, streams), or an int for one of NCCL's int-sized
// enums, or the unique id by value with the same size.
namespace {
template <typename A, typename B>
constexpr bool compatible() {
  if constexpr (std::is_same_v<A, B>) return true;
  else if constexpr (std::is_pointer_v<A> && std::is_pointer_v<B>) return true;
  else if constexpr (std::is_enum_v<B>) return std::is_same_v<std::remove_cv_t<A>, int> && sizeof(B) == sizeof(int);
  else return sizeof(A) == sizeof(B) && std::is_class_v<A> && std::is_class_v<B>;
}
template <typename Ours, typename Theirs>
struct same_shape : std::false_type {};
template <typename R1, typename... A1, typename R2, typename... A2>
struct same_shape<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool value = sizeof...(A1) == sizeof...(A2) && compatible<R1, R2>() && (compatible<A1, A2>() && ...);
};
}  // namespace
#define HALCYON_CCL_CHECK(name, ret, params)                                                   \
  static_assert(same_shape<decltype(Symbols::name), decltype(&::name)>::value,                 \
                #name ": ccl_library.hpp's declaration does not match nccl.h");
HALCYON_CCL_REQUIRED(HALCYON_CCL_CHECK)
HALCYON_CCL_OPTIONAL(HALCYON_CCL_CHECK)
static_assert(sizeof(UniqueId) == sizeof(ncclUniqueId));
static_assert(kUint8 == ncclUint8 && kBfloat16 == ncclBfloat16 && kSuccess == ncclSuccess);
// (Compile-time only: a mismatch stops the build of this test.)
#endif
