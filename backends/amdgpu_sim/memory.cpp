#include "memory.hpp"

#include <fmt/format.h>


namespace halcyon::amdsim {

void Memory::add(uint64_t base, uint64_t size, std::string name, bool writable) {
  std::lock_guard lock(mu_);
  add_locked(base, size, std::move(name), writable);
}

void Memory::remove(uint64_t base) {
  std::lock_guard lock(mu_);
  remove_locked(base);
}

void Memory::add_locked(uint64_t base, uint64_t size, std::string name, bool writable) {
  regions_[base] = Region{base, size, std::move(name), writable};
  last_ = nullptr;
}

void Memory::remove_locked(uint64_t base) {
  regions_.erase(base);
  last_ = nullptr;
}

void* Memory::check_slow(uint64_t addr, uint64_t size, bool write, const Inst& in) {
  std::string what = fmt::format("{} at 0x{:x}", in.text, in.addr);
  const Region* r = last_;
  if (!r || addr < r->base || addr + size > r->base + r->size) {
    r = nullptr;
    auto it = regions_.upper_bound(addr);
    if (it != regions_.begin()) {
      --it;
      if (addr >= it->second.base && addr + size <= it->second.base + it->second.size) r = &it->second;
    }
    if (!r)
      throw SimError(fmt::format("{}: out-of-bounds {} of {} bytes at 0x{:x}: {}", what, write ? "write" : "read",
                                 size, addr, describe_miss(addr, size)));
    last_ = r;
  }
  if (write && !r->writable)
    throw SimError(fmt::format("{}: write to read-only {} at 0x{:x}", what, r->name, addr));
  return reinterpret_cast<void*>(addr);
}

std::string Memory::describe_miss(uint64_t addr, uint64_t size) const {
  if (regions_.empty()) return "no buffer is allocated";
  auto it = regions_.upper_bound(addr);
  const Region* below = it != regions_.begin() ? &std::prev(it)->second : nullptr;
  const Region* above = it != regions_.end() ? &it->second : nullptr;
  if (below && addr < below->base + below->size)
    return fmt::format("it runs {} bytes past the end of {} [0x{:x}, 0x{:x})", addr + size - (below->base + below->size),
                       below->name, below->base, below->base + below->size);
  std::string out = "outside every buffer";
  if (below)
    out += fmt::format("; it starts {} bytes past the end of {} [0x{:x}, 0x{:x})", addr - (below->base + below->size),
                       below->name, below->base, below->base + below->size);
  if (above) out += fmt::format("; {} bytes before {} at 0x{:x}", above->base - addr, above->name, above->base);
  return out;
}

}  // namespace halcyon::amdsim
