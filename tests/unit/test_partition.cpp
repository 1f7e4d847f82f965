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
