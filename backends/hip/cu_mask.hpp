// Compute-unit masks for hipExtStreamCreateWithCUMask. A bad mask can hang a queue, so every
// mask is built and validated here before it reaches the driver.
//
// MI300X (gfx942) spreads logical CU ids round-robin over its XCDs: mask bit i lands on XCD
// i mod xcds. Taking a partition's units as a run of consecutive bit indices therefore gives
// every XCD an equal share (each XCD has its own L2), and the granularity is one CU per XCD.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace halcyon::hip {

struct CuLayout {
  uint32_t cu_count = 0;  // CUs the device reports
  uint32_t xcds = 1;      // accelerator complex dies the CUs are spread over
};

// The XCD count of a device: gfx94x parts have 38 CUs per XCD (MI300X: 8 x 38 = 304,
// MI300A: 6 x 38 = 228); other parts count as one.
CuLayout cu_layout(const std::string& arch, uint32_t cu_count);

// Units rounded up to the partition granularity (a multiple of the XCD count).
uint32_t round_units(const CuLayout& layout, uint32_t units);

// Mask words (32 bits each, bit i = CU i) selecting the CUs listed; ids past the CU count
// are left out (validate_cu_mask then reports a mask that ends up empty).
std::vector<uint32_t> make_cu_mask(const CuLayout& layout, const std::vector<uint32_t>& cus);

// "" if `mask` is usable on the device, otherwise why not: an empty mask, or bits set past
// the CU count.
std::string validate_cu_mask(const std::vector<uint32_t>& mask, uint32_t cu_count);

// CUs per XCD selected by `mask` (index = XCD), for messages and tests.
std::vector<uint32_t> cus_per_xcd(const CuLayout& layout, const std::vector<uint32_t>& mask);

}  // namespace halcyon::hip
