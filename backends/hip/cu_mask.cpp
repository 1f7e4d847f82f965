#include "cu_mask.hpp"

#include <bit>

namespace halcyon::hip {

CuLayout cu_layout(const std::string& arch, uint32_t cu_count) {
  CuLayout l;
  l.cu_count = cu_count;
  if (arch.rfind("gfx94", 0) == 0 && cu_count >= 38 && cu_count % 38 == 0) l.xcds = cu_count / 38;
  return l;
}

uint32_t round_units(const CuLayout& layout, uint32_t units) {
  uint32_t g = layout.xcds ? layout.xcds : 1;
  return (units + g - 1) / g * g;
}

std::vector<uint32_t> make_cu_mask(const CuLayout& layout, const std::vector<uint32_t>& cus) {
  std::vector<uint32_t> mask((layout.cu_count + 31) / 32, 0u);
  for (uint32_t i : cus)
    if (i < layout.cu_count) mask[i / 32] |= 1u << (i % 32);
  return mask;
}

std::string validate_cu_mask(const std::vector<uint32_t>& mask, uint32_t cu_count) {
  uint32_t set = 0;
  for (size_t w = 0; w < mask.size(); ++w) {
    set += uint32_t(std::popcount(mask[w]));
    for (uint32_t b = 0; b < 32; ++b)
      if ((mask[w] >> b) & 1u && w * 32 + b >= cu_count)
        return "CU mask sets bit " + std::to_string(w * 32 + b) + ", past the device's " +
               std::to_string(cu_count) + " CUs";
  }
  if (set == 0) return "CU mask selects no CU";
  return "";
}

std::vector<uint32_t> cus_per_xcd(const CuLayout& layout, const std::vector<uint32_t>& mask) {
  std::vector<uint32_t> out(layout.xcds ? layout.xcds : 1, 0u);
  for (size_t w = 0; w < mask.size(); ++w)
    for (uint32_t b = 0; b < 32; ++b)
      if ((mask[w] >> b) & 1u) ++out[(w * 32 + b) % out.size()];
  return out;
}

}  // namespace halcyon::hip
