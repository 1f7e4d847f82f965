// hal/include/halcyon/plugin.hpp's helpers, alone: no libhalcyon. The host table is this
// test's own, whose error_new records the error instead of making one in the core.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <halcyon/plugin.hpp>

#include <cstdint>
#include <string>

namespace {

hal_status g_status = HAL_OK;
std::string g_message;
int g_errors = 0;

// Stands for the core's error: a non-null pointer the helper hands back untouched.
hal_error* record(hal_status status, const char* message) {
  g_status = status;
  g_message = message;
  ++g_errors;
  static char token;
  return reinterpret_cast<hal_error*>(&token);
}

void use_test_host() {
  static const hal_host_api api{sizeof(hal_host_api), nullptr, HAL_ABI_MAJOR, HAL_ABI_MINOR, record, nullptr, nullptr};
  halcyon::plugin::host() = &api;
  g_status = HAL_OK;
  g_message.clear();
  g_errors = 0;
}

// True when [start, +size) is accepted in [base, +bytes); a refusal must be the one error.
bool fits(uint64_t start, uint64_t size, uint64_t base, uint64_t bytes) {
  use_test_host();
  hal_error* e = halcyon::plugin::check_import_range("dev:0", start, size, base, bytes);
  if (!e) {
    CHECK(g_errors == 0);
    return true;
  }
  CHECK(g_errors == 1);
  CHECK(g_status == HAL_INVALID_ARGUMENT);
  return false;
}

constexpr uint64_t kMax = UINT64_MAX;

}  // namespace

TEST_CASE("check_import_range: ranges inside the allocation are accepted, to its last byte") {
  CHECK(fits(0x1000, 0x100, 0x1000, 0x100));   // exact fit
  CHECK(fits(0x1000, 1, 0x1000, 0x100));       // first byte
  CHECK(fits(0x10ff, 1, 0x1000, 0x100));       // last byte
  CHECK(fits(0x1040, 0xc0, 0x1000, 0x100));    // a view of the tail, to the end
  CHECK(fits(kMax - 0xff, 0x100, kMax - 0xff, 0x100));  // an allocation ending at the top of the address space
}

TEST_CASE("check_import_range: ranges reaching outside the allocation are refused") {
  CHECK_FALSE(fits(0x1000, 0x101, 0x1000, 0x100));  // one byte past the end
  CHECK_FALSE(fits(0x10ff, 2, 0x1000, 0x100));      // straddling the end
  CHECK_FALSE(fits(0x0fff, 1, 0x1000, 0x100));      // starting before the allocation
  CHECK_FALSE(fits(0, 0x2000, 0x1000, 0x100));      // covering it from below
  CHECK_FALSE(fits(0x1100, 1, 0x1000, 0x100));      // starting at its end
  CHECK_FALSE(fits(0x2000, 1, 0x1000, 0x100));      // starting past it
  CHECK_FALSE(fits(0x1000, 1, 0x1000, 0));          // an empty allocation holds no byte
}

TEST_CASE("check_import_range: an empty range may sit anywhere from the allocation's start to its end") {
  CHECK(fits(0x1000, 0, 0x1000, 0x100));
  CHECK(fits(0x1080, 0, 0x1000, 0x100));
  CHECK(fits(0x1100, 0, 0x1000, 0x100));  // at the end, as a one-past-the-end pointer
  CHECK_FALSE(fits(0x1101, 0, 0x1000, 0x100));
  CHECK_FALSE(fits(0x0fff, 0, 0x1000, 0x100));
}

// The old checks summed offset + size: a size near 2^64 wrapped to a small sum and was accepted.
TEST_CASE("check_import_range: sizes whose sum with the offset wraps 2^64 are refused") {
  const uint64_t base = 0x7f0000000000, bytes = uint64_t(1) << 20;
  CHECK_FALSE(fits(base, kMax, base, bytes));
  for (uint64_t off : {uint64_t(64), uint64_t(4096), bytes - 1}) {
    CAPTURE(off);
    CHECK_FALSE(fits(base + off, kMax, base, bytes));
    CHECK_FALSE(fits(base + off, 0 - off, base, bytes));       // offset + size == 2^64: sums to 0
    CHECK_FALSE(fits(base + off, 0 - off + 16, base, bytes));  // sums to 16
  }
  CHECK_FALSE(fits(kMax, kMax, 0, kMax));  // every term at its largest: nothing overflows
  CHECK(fits(kMax - 1, 1, 0, kMax));       // the last byte of an allocation spanning all but one
  CHECK_FALSE(fits(kMax, 1, 0, kMax));
}

TEST_CASE("check_import_range: the message names who imports, the range and the allocation") {
  use_test_host();
  REQUIRE(halcyon::plugin::check_import_range("cuda:1", 0x7f0000001000, kMax, 0x7f0000000000, 1 << 20));
  CHECK(g_message == "cuda:1: importing [0x7f0000001000, +18446744073709551615): the range runs past its "
                     "allocation [0x7f0000000000, +1048576)");
}
