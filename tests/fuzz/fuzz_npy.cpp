// libFuzzer target: the one .npy reader. Any input must give an array or an error; an array
// must hold exactly the bytes its header announces.
#include <halcyon/runtime/npy.hpp>

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto a = halcyon::rt::parse_npy(data, size, "fuzz.npy");
  if (!a) return 0;
  if (a->numel() < 0 || uint64_t(a->numel()) * a->item_size() != a->data.size()) std::abort();
  return 0;
}
