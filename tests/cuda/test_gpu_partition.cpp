// Green-context partitions: granted SM counts, rounding, and a %smid check that kernels in
// two partitions never share an SM.
#include "gpu_support.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>

using test::expect_error;
using test::unwrap;

namespace {

// Launches smid_record with many spinning blocks on `s` and returns the SM ids they ran on.
std::set<uint32_t> sms_used(const halcyon::Device& dev, const halcyon::Stream& s, const halcyon::Kernel& k,
                            uint32_t blocks) {
  auto ids = unwrap(dev.allocate(blocks * 4));
  unwrap(s.fill<uint32_t>(ids, 0, blocks * 4, 0xFFFFFFFFu));
  halcyon::ArgPack args;
  args.pointer(ids).value(uint64_t(200'000));  // ~0.1 ms per block: blocks spread out
  unwrap(s.launch(k, {blocks}, {64}, args));
  std::vector<uint32_t> out(blocks);
  unwrap(s.read(ids, 0, out.data(), blocks * 4));
  unwrap(s.synchronize());
  std::set<uint32_t> used;
  for (uint32_t v : out) {
    CHECK(v != 0xFFFFFFFFu);  // every block ran and wrote
    used.insert(v);
  }
  return used;
}

std::string show(const std::set<uint32_t>& s) {
  std::string out;
  for (uint32_t v : s) out += std::to_string(v) + " ";
  return out;
}

}  // namespace

TEST_CASE("cuda: partitions grant SMs in documented steps") {
  auto dev = gpu::open();
  if (!dev.has("partition.green_context")) {
    MESSAGE("no green contexts on this driver/device; capabilities: " << unwrap(dev.info()).capabilities);
    auto r = dev.split(8);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().status() == HAL_UNSUPPORTED);
    return;
  }
  CHECK(dev.has("partition.enforced"));
  const uint32_t sms = unwrap(dev.info()).compute_units;
  {
    auto [p, rest] = unwrap(dev.split(16));
    auto pi = unwrap(p.info());
    auto ri = unwrap(rest.info());
    CHECK(pi.mechanism == HAL_PARTITION_GREEN_CONTEXT);
    CHECK(pi.enforced == 1);
    CHECK(pi.units_requested == 16);
    CHECK(pi.units_granted >= 16);
    CHECK(pi.units_granted % pi.granularity == 0);
    CHECK(pi.units_granted + ri.units_granted <= sms);
    MESSAGE("16 SMs asked: granted " << pi.units_granted << " (step " << pi.granularity << "), remainder "
                                     << ri.units_granted << " of " << sms);
    // The remainder holds every free SM: nothing is left to split until they are released.
    CHECK_FALSE(dev.split(8).ok());
  }
  // 20 SMs: rounded up to the coarse step by default, exact with FINE_GRAINED on Hopper.
  hal_partition_info ci{}, fi{};
  {
    auto [c, crest] = unwrap(dev.split(20));
    ci = unwrap(c.info());
  }
  {
    auto [f, frest] = unwrap(dev.split(20, HAL_PARTITION_FINE_GRAINED));
    fi = unwrap(f.info());
  }
  MESSAGE("20 SMs asked: default " << ci.units_granted << " (step " << ci.granularity << "), fine-grained "
                                   << fi.units_granted << " (step " << fi.granularity << ")");
  CHECK(ci.units_granted >= 20);
  CHECK(fi.units_granted >= 20);
  CHECK(fi.units_granted <= ci.units_granted);
  auto caps = unwrap(dev.partition_caps());
  auto fine = unwrap(dev.partition_caps(HAL_PARTITION_FINE_GRAINED));
  CHECK(caps.units == sms);
  CHECK(caps.units_free == sms);
  CHECK(caps.step_units == ci.granularity);
  CHECK(fine.step_units == fi.granularity);
  CHECK(std::string(caps.mechanism_name) == "green_context");
  if (gpu::arch(dev) == "sm_90a") {
    CHECK(ci.units_granted == 24);
    CHECK(fi.units_granted == 20);
    CHECK(ci.granularity == 8);
    CHECK(fi.granularity == 2);
    CHECK(caps.min_units == 8);
  }
  // Everything but nothing for the rest is refused when a remainder is asked for.
  hal_partition_desc d{};
  d.struct_size = sizeof d;
  d.units = sms;
  hal_partition a = nullptr, b = nullptr;
  expect_error(hal_device_split(dev.get(), &d, &a, &b), HAL_OUT_OF_RANGE);
}

TEST_CASE("cuda: splits reserve SMs: two splits never overlap, split_n names them") {
  auto dev = gpu::open();
  if (!dev.has("partition.green_context")) {
    MESSAGE("no green contexts: skipped");
    return;
  }
  const uint32_t sms = unwrap(dev.info()).compute_units;
  auto mod = gpu::load(dev, "smid_record");
  auto k = unwrap(mod.kernel("smid_record"));
  {
    // Two splits without a remainder: each draws on the SMs the other left.
    hal_partition_desc d{sizeof d, nullptr, 16, 0};
    hal_partition a = nullptr, b = nullptr;
    REQUIRE(hal_device_split(dev.get(), &d, &a, nullptr) == nullptr);
    REQUIRE(hal_device_split(dev.get(), &d, &b, nullptr) == nullptr);
    halcyon::Partition pa(a), pb(b);
    auto sa = unwrap(dev.create_stream(&pa)), sb = unwrap(dev.create_stream(&pb));
    auto used_a = sms_used(dev, sa, k, sms * 8), used_b = sms_used(dev, sb, k, sms * 8);
    for (uint32_t sm : used_a) CHECK_MESSAGE(used_b.count(sm) == 0, "SM " << sm << " ran work of both splits");
    CHECK(unwrap(dev.partition_caps()).units_free == sms - unwrap(pa.info()).units_granted - unwrap(pb.info()).units_granted);
  }
  auto parts = unwrap(dev.split_n({{"comm", 20}, {"compute", 0}}, HAL_PARTITION_FINE_GRAINED));
  auto comm = unwrap(parts[0].info()), compute = unwrap(parts[1].info());
  MESSAGE("split_n comm 20 + compute rest (fine-grained): " << comm.units_granted << " + " << compute.units_granted);
  CHECK(std::string(comm.name) == "comm");
  CHECK(comm.units_granted + compute.units_granted == sms);
  auto s = unwrap(dev.create_stream(&parts[1]));
  CHECK(unwrap(s.info()).units == compute.units_granted);
  if (gpu::arch(dev) == "sm_90a") CHECK(comm.units_granted == 20);
}

TEST_CASE("cuda: kernels in two partitions run on disjoint SMs (%smid)") {
  auto dev = gpu::open();
  if (!dev.has("partition.green_context")) {
    MESSAGE("no green contexts: skipped");
    return;
  }
  const uint32_t sms = unwrap(dev.info()).compute_units;
  auto mod = gpu::load(dev, "smid_record");
  auto k = unwrap(mod.kernel("smid_record"));
  const uint32_t blocks = sms * 8;
  // The check can fail: on the whole device the same kernel spreads over far more SMs.
  auto whole = unwrap(dev.create_stream());
  auto all = sms_used(dev, whole, k, blocks);
  MESSAGE("whole device: " << all.size() << " SMs used");
  for (uint32_t flags : {0u, uint32_t(HAL_PARTITION_FINE_GRAINED)}) {
    CAPTURE(flags);
    auto [p, rest] = unwrap(dev.split(flags ? 18 : 24, flags));
    auto pi = unwrap(p.info());
    auto ri = unwrap(rest.info());
    auto sp = unwrap(dev.create_stream(&p));
    auto sr = unwrap(dev.create_stream(&rest));
    auto in_p = sms_used(dev, sp, k, blocks);
    auto in_r = sms_used(dev, sr, k, blocks);
    std::vector<uint32_t> shared;
    std::set_intersection(in_p.begin(), in_p.end(), in_r.begin(), in_r.end(), std::back_inserter(shared));
    MESSAGE("partition of " << pi.units_granted << " SMs used " << in_p.size() << ": " << show(in_p));
    MESSAGE("remainder of " << ri.units_granted << " SMs used " << in_r.size());
    CHECK(shared.empty());
    CHECK(in_p.size() <= pi.units_granted);
    CHECK(in_r.size() <= ri.units_granted);
    CHECK(in_p.size() >= pi.units_granted / 2);  // the blocks did spread over the partition
    CHECK(all.size() > in_p.size());
    // Work on both partitions at once: still disjoint, and both finish.
    auto ids_p = unwrap(dev.allocate(blocks * 4)), ids_r = unwrap(dev.allocate(blocks * 4));
    halcyon::ArgPack ap, ar;
    ap.pointer(ids_p).value(uint64_t(200'000));
    ar.pointer(ids_r).value(uint64_t(200'000));
    unwrap(sp.launch(k, {blocks}, {64}, ap));
    unwrap(sr.launch(k, {blocks}, {64}, ar));
    std::vector<uint32_t> op(blocks), orr(blocks);
    unwrap(sp.read(ids_p, 0, op.data(), blocks * 4));
    unwrap(sr.read(ids_r, 0, orr.data(), blocks * 4));
    unwrap(sp.synchronize());
    unwrap(sr.synchronize());
    std::set<uint32_t> cp(op.begin(), op.end()), cr(orr.begin(), orr.end());
    shared.clear();
    std::set_intersection(cp.begin(), cp.end(), cr.begin(), cr.end(), std::back_inserter(shared));
    CHECK(shared.empty());
  }
}

TEST_CASE("cuda: events recorded in a partition order the whole device's streams") {
  auto dev = gpu::open();
  if (!dev.has("partition.green_context")) return;
  auto [p, rest] = unwrap(dev.split(16));
  auto sp = unwrap(dev.create_stream(&p));
  auto whole = unwrap(dev.create_stream());
  auto ev = unwrap(dev.create_event());
  auto start = unwrap(dev.create_event());
  auto buf = unwrap(dev.allocate(64 << 20));
  unwrap(sp.record(start));
  for (uint32_t i = 0; i < 8; ++i) unwrap(sp.fill<uint32_t>(buf, 0, 64 << 20, 100 + i));
  unwrap(sp.record(ev));
  unwrap(whole.wait(ev));
  uint32_t tail = 0;
  unwrap(whole.read(buf, (64 << 20) - 4, &tail, 4));
  unwrap(whole.synchronize());
  CHECK(tail == 107u);
  float ms = unwrap(ev.elapsed_since(start));
  CHECK(ms > 0.0f);
}

// A record on a stream of another context remakes the event there (cuda_event.cpp). A
// synchronize already waiting on the old CUevent, outside the event's lock, must not have it
// destroyed under it: each round one thread waits on the primary-context event behind a ~1 ms
// kernel while the main thread records the event on the partition's stream. Where the driver
// records primary-context events on green-context streams itself, nothing is remade and this
// passes either way.
TEST_CASE("cuda: an event synchronized while a record remakes it in a partition stays valid") {
  auto dev = gpu::open();
  if (!dev.has("partition.green_context")) return;
  auto [p, rest] = unwrap(dev.split(16));
  auto sp = unwrap(dev.create_stream(&p));
  auto whole = unwrap(dev.create_stream());
  auto mod = gpu::load(dev, "smid_record");
  auto k = unwrap(mod.kernel("smid_record"));
  auto ids = unwrap(dev.allocate(4));
  auto ev = unwrap(dev.create_event(false));
  halcyon::ArgPack args;
  args.pointer(ids).value(uint64_t(2'000'000));  // ~1 ms at 2 GHz
  std::string failure;
  for (uint32_t round = 0; round < 50 && failure.empty(); ++round) {
    unwrap(whole.launch(k, {1}, {32}, args));
    unwrap(whole.record(ev));  // remade back in the primary context from round 1 on
    std::thread waiter([&] {
      auto st = ev.synchronize();
      if (!st.ok()) failure = "round " + std::to_string(round) + ": " + st.error().message();
    });
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the waiter is in cuEventSynchronize
    unwrap(sp.record(ev));
    waiter.join();
    unwrap(sp.synchronize());
  }
  CHECK_MESSAGE(failure.empty(), failure);
  unwrap(ev.synchronize());
  unwrap(whole.synchronize());
}
