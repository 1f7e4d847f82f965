// Compute partitions on the CPU: disjoint, pinned thread sets.
#include "test_support.hpp"

#include <sched.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>

using test::expect_error;
using test::unwrap;

namespace {
std::mutex g_mu;
std::set<int> g_cpus_seen;

void record_cpu(const hal_host_launch_ctx*, const void*) {
  int cpu = sched_getcpu();
  std::lock_guard lock(g_mu);
  g_cpus_seen.insert(cpu);
}
const hal_host_kernel_entry kKernels[] = {{"record_cpu", record_cpu, 0, nullptr, 0}};
const hal_host_module_image kImage = {sizeof(hal_host_module_image), nullptr, 1, kKernels};
}  // namespace

TEST_CASE("partitions: a split gives disjoint, enforced thread sets") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto info = unwrap(dev.info());
  if (info.compute_units < 2) {
    MESSAGE("this machine has one core: a split needs at least two");
    CHECK_MESSAGE(dev.split(1).ok() == false, "a split of a 1-core device must fail");
    return;
  }
  auto parts = unwrap(dev.split(1));
  auto pi = unwrap(parts.first.info());
  auto ri = unwrap(parts.second.info());
  CHECK(pi.units_requested == 1);
  CHECK(pi.units_granted == 1);
  CHECK(ri.units_granted == info.compute_units - 1);
  CHECK(pi.mechanism == HAL_PARTITION_THREAD_SET);
  CHECK(pi.granularity == 1);
  CHECK(pi.first_unit != ri.first_unit);
  auto mod = unwrap(dev.load_module(HAL_MODULE_HOST, "host", &kImage, sizeof kImage, "partition-test"));
  auto k = unwrap(mod.kernel("record_cpu"));
  std::set<int> seen[2];
  int idx = 0;
  for (auto* p : {&parts.first, &parts.second}) {
    auto s = unwrap(dev.create_stream(p));
    {
      std::lock_guard lock(g_mu);
      g_cpus_seen.clear();
    }
    unwrap(s.launch(k, {256}, {1}, nullptr, 0));
    unwrap(s.synchronize());
    std::lock_guard lock(g_mu);
    seen[idx++] = g_cpus_seen;
  }
  if (pi.enforced) {
    for (int c : seen[0]) CHECK_MESSAGE(seen[1].count(c) == 0, "core ", c, " ran work of both partitions");
    CHECK(seen[0].size() == 1);
    CHECK(*seen[0].begin() == int(pi.first_unit));
  } else {
    MESSAGE("thread pinning was refused here; the partition reports itself as not enforced");
  }
  // The cores are taken: a further split of the whole device cannot have them.
  expect_error(hal_device_split(dev.get(), nullptr, nullptr, nullptr), HAL_INVALID_ARGUMENT);
}

TEST_CASE("partitions: bad requests are refused") {
  auto dev = unwrap(halcyon::Device::open(test::device_uri()));
  auto info = unwrap(dev.info());
  hal_partition p = nullptr, r = nullptr;
  hal_partition_desc d{};
  d.struct_size = sizeof d;
  d.units = 0;
  expect_error(hal_device_split(dev.get(), &d, &p, &r), HAL_INVALID_ARGUMENT, "0 compute units");
  d.units = info.compute_units + 1;
  expect_error(hal_device_split(dev.get(), &d, &p, &r), HAL_OUT_OF_RANGE, "compute units");
  d.units = info.compute_units;
  expect_error(hal_device_split(dev.get(), &d, &p, &r), HAL_OUT_OF_RANGE, "non-empty remainder");
  d.units = 1;
  d.flags = 0x100;
  expect_error(hal_device_split(dev.get(), &d, &p, &r), HAL_INVALID_ARGUMENT, "unknown flags");
  CHECK(p == nullptr);
  CHECK(r == nullptr);
}

// hal.h: partitions of one device are always disjoint, also when the device was opened twice
// (once two backend devices, each handing out unit 0 as enforced).
TEST_CASE("partitions: partitions made through two opens of one device are disjoint") {
  auto d1 = unwrap(halcyon::Device::open(test::device_uri()));
  auto d2 = unwrap(halcyon::Device::open(test::device_uri()));
  if (unwrap(d1.info()).compute_units < 2) {
    MESSAGE("this machine has one core: two partitions need at least two");
    return;
  }
  hal_partition_desc pd{};
  pd.struct_size = sizeof pd;
  pd.units = 1;
  hal_partition p1 = nullptr, p2 = nullptr;
  test::expect_ok(hal_device_split(d1.get(), &pd, &p1, nullptr));
  test::expect_ok(hal_device_split(d2.get(), &pd, &p2, nullptr));
  hal_partition_info i1{}, i2{};
  i1.struct_size = i2.struct_size = sizeof i1;
  test::expect_ok(hal_partition_get_info(p1, &i1));
  test::expect_ok(hal_partition_get_info(p2, &i2));
  CHECK(i1.first_unit != i2.first_unit);
  test::expect_ok(hal_partition_release(p1));
  test::expect_ok(hal_partition_release(p2));
}
