// `halcyon info [-v]`: backends, devices and their properties. With -v, every backend and
// plugin file that was tried, and why each was accepted or refused.
#include <halcyon/halcyon.hpp>

#include <fmt/format.h>

#include "command.hpp"

namespace {

const char* state_word(uint32_t s) {
  switch (s) {
    case HAL_BACKEND_AVAILABLE: return "available";
    case HAL_BACKEND_UNAVAILABLE: return "unavailable";
    case HAL_BACKEND_REFUSED: return "refused";
  }
  return "?";
}

std::string bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", double(b) / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", double(b) / double(1ull << 20));
  if (b >= 1024) return fmt::format("{:.0f} KiB", double(b) / 1024.0);
  return fmt::format("{} B", b);
}

int run(const std::vector<std::string>& args) {
  bool verbose = false;
  for (auto& a : args) {
    if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (a == "-h" || a == "--help") {
      fmt::print("usage: halcyon info [-v]\n  Lists backends and devices. -v also explains every "
                 "backend that is unavailable and every plugin file that was tried.\n");
      return 0;
    } else {
      fmt::print(stderr, "halcyon info: unknown option '{}'\n", a);
      return 2;
    }
  }
  auto records = halcyon::backend_records();
  if (!records) {
    fmt::print(stderr, "halcyon info: {}\n", records.error().to_string());
    return 1;
  }
  fmt::print("backends:\n");
  for (auto& r : *records) {
    if (!verbose && r.state != HAL_BACKEND_AVAILABLE) continue;
    fmt::print("  {:<12} {:<11} {}\n", r.name[0] ? r.name : "-", state_word(r.state), r.source);
    if (verbose || r.state == HAL_BACKEND_AVAILABLE) fmt::print("               {}\n", r.reason);
  }
  if (!verbose) {
    size_t hidden = 0;
    for (auto& r : *records) hidden += r.state != HAL_BACKEND_AVAILABLE;
    if (hidden) fmt::print("  ({} unavailable or refused; 'halcyon info -v' says why)\n", hidden);
  }
  auto uris = halcyon::device_uris();
  if (!uris) {
    fmt::print(stderr, "halcyon info: {}\n", uris.error().to_string());
    return 1;
  }
  fmt::print("devices:\n");
  for (auto& uri : *uris) {
    auto dev = halcyon::Device::open(uri.c_str());
    if (!dev) {
      fmt::print("  {:<14} cannot be opened: {}\n", uri, dev.error().to_string());
      continue;
    }
    auto i = dev->info();
    if (!i) {
      fmt::print("  {:<14} {}\n", uri, i.error().to_string());
      continue;
    }
    fmt::print("  {:<14} {} ({}, {})\n", i->uri, i->name, i->vendor, i->arch);
    fmt::print("                 compute units {}, SIMD width {}, memory {}, shared/block {}, "
               "threads/block {}{}\n",
               i->compute_units, i->simd_width, bytes(i->memory_bytes), bytes(i->max_shared_per_block),
               i->max_threads_per_block, i->clock_khz ? fmt::format(", clock {} MHz", i->clock_khz / 1000) : "");
    if (i->l2_cache_bytes) fmt::print("                 L2 {}\n", bytes(i->l2_cache_bytes));
    if (i->memory_bytes_per_s)
      fmt::print("                 memory bandwidth {:.2f} TB/s (peak)\n", double(i->memory_bytes_per_s) / 1e12);
    fmt::print("                 capabilities: {}\n", i->capabilities);
  }
  if (uris->empty()) fmt::print("  none\n");
  return 0;
}

halcyon::cli::Register reg({"info", "list backends, devices and their properties (-v: why a backend is unavailable)", run});

}  // namespace
