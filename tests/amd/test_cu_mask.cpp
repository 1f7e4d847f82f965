// CU masks for hipExtStreamCreateWithCUMask: XCD-aware on MI300X, and never empty or past the
// device's CU count.
#include <doctest/doctest.h>

#include "cu_mask.hpp"

using namespace halcyon::hip;

TEST_CASE("MI300X partitions spread evenly over the 8 XCDs") {
  CuLayout l = cu_layout("gfx942", 304);
  CHECK(l.xcds == 8);
  CHECK(round_units(l, 20) == 24);  // one CU per XCD is the step
  CHECK(round_units(l, 8) == 8);
  std::vector<uint32_t> cus;
  for (uint32_t i = 0; i < 24; ++i) cus.push_back(i);
  auto mask = make_cu_mask(l, cus);
  CHECK(mask.size() == 10);  // 304 bits
  CHECK(validate_cu_mask(mask, 304) == "");
  for (uint32_t n : cus_per_xcd(l, mask)) CHECK(n == 3);
  // The rest of the device, also balanced: 280 CUs, 35 per XCD.
  std::vector<uint32_t> rest;
  for (uint32_t i = 24; i < 304; ++i) rest.push_back(i);
  for (uint32_t n : cus_per_xcd(l, make_cu_mask(l, rest))) CHECK(n == 35);
}

TEST_CASE("other parts have one XCD") {
  CHECK(cu_layout("gfx90a", 110).xcds == 1);
  CHECK(cu_layout("gfx942", 228).xcds == 6);  // MI300A
  CHECK(cu_layout("gfx942", 80).xcds == 1);   // not a multiple of 38: no XCD assumption
  CHECK(round_units(cu_layout("gfx90a", 110), 7) == 7);
}

TEST_CASE("bad masks are refused") {
  CuLayout l = cu_layout("gfx942", 304);
  CHECK(validate_cu_mask(std::vector<uint32_t>(10, 0u), 304) == "CU mask selects no CU");
  std::vector<uint32_t> past(10, 0u);
  past[9] = 1u << 16;  // bit 304
  CHECK(validate_cu_mask(past, 304).find("bit 304") != std::string::npos);
  CHECK(make_cu_mask(l, {400}) == std::vector<uint32_t>(10, 0u));  // ids past the count are dropped
  CHECK(validate_cu_mask(make_cu_mask(l, {400}), 304) != "");
}
