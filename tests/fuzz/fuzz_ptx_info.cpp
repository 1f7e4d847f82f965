// libFuzzer target: what the CUDA backend reads from untrusted module images before any driver
// call (backends/cuda/ptx_info.cpp): the PTX directives and parameter layouts, architecture
// tags, the target check, and the cubin/fatbin bounds check.
#include "ptx_info.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  halcyon::cuda::PtxInfo info;
  std::string error;
  if (halcyon::cuda::parse_ptx(text, &info, &error)) {
    for (const auto& e : info.entries) {
      uint32_t end = 0;
      for (const auto& p : e.params) {
        if (p.offset < end) std::abort();  // parameters never overlap
        end = p.offset + p.size;
      }
      if (e.args_size < end) std::abort();
      if (info.find(e.name) == nullptr) std::abort();
    }
    (void)halcyon::cuda::check_target(info.target, true, 9, 0);
  }
  std::string_view first = text.substr(0, text.find('\n'));
  if (auto arch = halcyon::cuda::parse_arch(first)) (void)halcyon::cuda::check_target(first, false, arch->major, arch->minor);
  (void)halcyon::cuda::check_cubin_image(data, size);
  return 0;
}
