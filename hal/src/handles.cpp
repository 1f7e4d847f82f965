#include "core.hpp"

#include <shared_mutex>

namespace halcyon::core {

const char* type_name(ObjType t) {
  switch (t) {
    case ObjType::Device: return "device";
    case ObjType::Buffer: return "buffer";
    case ObjType::Stream: return "stream";
    case ObjType::Event: return "event";
    case ObjType::Module: return "module";
    case ObjType::Kernel: return "kernel";
    case ObjType::Partition: return "partition";
    case ObjType::Comm: return "communicator";
  }
  return "object";
}

namespace {

struct Slot {
  std::shared_ptr<Object> obj;
  uint32_t generation = 1;
};

struct Table {
  std::shared_mutex mu;
  std::vector<Slot> slots;
  std::vector<uint32_t> free_slots;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: handles may be released during exit
  return *t;
}

constexpr uint64_t kGenMask = 0xFFFFFF;

uint64_t encode(ObjType type, uint32_t generation, uint32_t slot) {
  return (uint64_t(type) << 56) | ((uint64_t(generation) & kGenMask) << 32) | (uint64_t(slot) + 1);
}

// Finds the live slot for h, or explains why there is none. Caller holds the lock.
Slot* find(Table& t, uint64_t h, ObjType type, const char* function, const char* what,
           hal_error** error) {
  if (h == 0) {
    *error = err(HAL_INVALID_HANDLE, "{}: {} is a NULL {} handle", function, what, type_name(type));
    return nullptr;
  }
  auto htype = static_cast<ObjType>(h >> 56);
  uint32_t gen = uint32_t((h >> 32) & kGenMask);
  uint64_t slot1 = h & 0xFFFFFFFFu;
  if (slot1 == 0 || slot1 > t.slots.size() || uint8_t(htype) < 1 || uint8_t(htype) > uint8_t(ObjType::Comm)) {
    *error = err(HAL_INVALID_HANDLE, "{}: {} (0x{:016x}) is not a handle that halcyon made",
                 function, what, h);
    return nullptr;
  }
  if (htype != type) {
    *error = err(HAL_INVALID_HANDLE, "{}: {} (0x{:016x}) is a {} handle, not a {} handle",
                 function, what, h, type_name(htype), type_name(type));
    return nullptr;
  }
  Slot& s = t.slots[slot1 - 1];
  if (!s.obj || (s.generation & kGenMask) != gen) {
    *error = err(HAL_INVALID_HANDLE, "{}: {} handle 0x{:016x} was already released", function,
                 what, h);
    return nullptr;
  }
  return &s;
}

}  // namespace

uint64_t handle_insert(std::shared_ptr<Object> obj) {
  Table& t = table();
  std::unique_lock lock(t.mu);
  uint32_t slot;
  if (!t.free_slots.empty()) {
    slot = t.free_slots.back();
    t.free_slots.pop_back();
  } else {
    slot = uint32_t(t.slots.size());
    t.slots.emplace_back();
  }
  Slot& s = t.slots[slot];
  obj->handle = encode(obj->type, s.generation, slot);
  s.obj = std::move(obj);
  return s.obj->handle;
}

std::shared_ptr<Object> handle_lookup(uint64_t h, ObjType type, const char* function,
                                      const char* what, hal_error** error) {
  Table& t = table();
  std::shared_lock lock(t.mu);
  Slot* s = find(t, h, type, function, what, error);
  return s ? s->obj : nullptr;
}

hal_error* handle_retain(uint64_t h, ObjType type, const char* function) {
  Table& t = table();
  std::shared_lock lock(t.mu);
  hal_error* e = nullptr;
  Slot* s = find(t, h, type, function, "handle", &e);
  if (!s) return e;
  s->obj->user_refs.fetch_add(1);
  return nullptr;
}

hal_error* handle_release(uint64_t h, ObjType type, const char* function) {
  std::shared_ptr<Object> dying;  // destroyed after the lock is dropped
  {
    Table& t = table();
    std::unique_lock lock(t.mu);
    hal_error* e = nullptr;
    Slot* s = find(t, h, type, function, "handle", &e);
    if (!s) return e;
    if (s->obj->user_refs.fetch_sub(1) != 1) return nullptr;
    dying = std::move(s->obj);
    s->generation = (s->generation + 1) & kGenMask;
    if (s->generation == 0) s->generation = 1;
    t.free_slots.push_back(uint32_t((h & 0xFFFFFFFFu) - 1));
  }
  if (type == ObjType::Device) {
    auto* dev = static_cast<DeviceObj*>(dying.get());
    int children = dev->live_children.load();
    if (children > 0)
      log(HAL_LOG_WARNING,
          fmt::format("device {} released while {} object(s) made from it are still alive; "
                      "it is closed when the last of them is released",
                      dev->uri, children));
  }
  return nullptr;
}

}  // namespace halcyon::core
