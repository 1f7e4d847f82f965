// Device memory of the simulator: host allocations, each registered with a name, so that every
// access a kernel makes is checked and an out-of-bounds one is reported with the address and
// the buffer it missed.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "inst.hpp"

namespace halcyon::amdsim {

struct Region {
  uint64_t base = 0;
  uint64_t size = 0;
  std::string name;  // "buffer #3 (4096 bytes)", "kernarg segment of vadd"
  bool writable = true;
};

class Memory {
 public:
  void add(uint64_t base, uint64_t size, std::string name, bool writable = true);
  void remove(uint64_t base);
  // The same, for a caller that already holds mutex() (a launch registering its kernarg segment).
  void add_locked(uint64_t base, uint64_t size, std::string name, bool writable);
  void remove_locked(uint64_t base);
  // Host pointer for [addr, addr + size), or throws SimError naming the instruction, the
  // address and the nearest buffer. The caller holds mutex() (a launch does).
  void* check(uint64_t addr, uint64_t size, bool write, const Inst& in) {
    const Region* r = last_;
    if (r && addr >= r->base && addr + size <= r->base + r->size && (!write || r->writable))
      return reinterpret_cast<void*>(addr);
    return check_slow(addr, size, write, in);
  }
  std::mutex& mutex() { return mu_; }

 private:
  void* check_slow(uint64_t addr, uint64_t size, bool write, const Inst& in);
  std::string describe_miss(uint64_t addr, uint64_t size) const;
  std::map<uint64_t, Region> regions_;  // by base
  const Region* last_ = nullptr;        // the region the previous access hit
  std::mutex mu_;
};

}  // namespace halcyon::amdsim
