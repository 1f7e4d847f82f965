// Memory instructions: scalar loads (SMEM), global/flat and buffer (MUBUF) loads, stores and
// atomics, and LDS (DS). Every global access goes through Memory::check; every LDS access is
// checked against the workgroup's LDS size.
#include <fmt/format.h>

#include <cstring>

#include "wave.hpp"

namespace halcyon::amdsim {
namespace {

#define H [](Wave & w, const Inst & in, Dispatch & d)
#define LANES for (int l = 0; l < kLanes; ++l) if (w.active(l))

enum Ext { kDword = 0, kSigned = 1, kD16Lo = 2, kD16Hi = 3 };

// Writes `bytes` loaded bytes into the destination operand of lane l.
void put_loaded(Wave& w, const Inst& in, int l, const unsigned char* p, int bytes, int ext) {
  const Operand& dst = in.ops[0];
  if (bytes >= 4) {
    for (int i = 0; i < bytes / 4; ++i) {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      write32(w, dst, l, v, i);
    }
    return;
  }
  uint32_t v = 0;
  std::memcpy(&v, p, size_t(bytes));
  if (ext == kSigned) v = bytes == 1 ? uint32_t(int32_t(int8_t(v))) : uint32_t(int32_t(int16_t(v)));
  uint32_t old = read32(w, dst, l);
  if (ext == kD16Lo) v = (old & 0xffff0000u) | (v & 0xffff);
  if (ext == kD16Hi) v = (old & 0xffffu) | (v << 16);
  write32(w, dst, l, v);
}

void get_stored(const Wave& w, const Operand& src, int l, unsigned char* p, int bytes, int ext) {
  if (bytes >= 4) {
    for (int i = 0; i < bytes / 4; ++i) {
      uint32_t v = read32(w, src, l, i);
      std::memcpy(p + 4 * i, &v, 4);
    }
    return;
  }
  uint32_t v = read32(w, src, l);
  if (ext == kD16Hi) v >>= 16;
  std::memcpy(p, &v, size_t(bytes));
}

// global_*/flat_*: vaddr is a 64-bit address ("off" or no saddr) or a 32-bit offset from saddr.
uint64_t flat_address(const Wave& w, const Inst& in, int vaddr_index, int l) {
  const Operand& va = in.ops[size_t(vaddr_index)];
  size_t saddr_index = size_t(vaddr_index) + (vaddr_index == 0 ? 2 : 1);
  bool has_saddr = in.ops.size() > saddr_index && in.ops[saddr_index].kind == OpKind::Sgpr;
  uint64_t a = has_saddr ? read64(w, in.ops[saddr_index], 0) + read32(w, va, l) : read64(w, va, l);
  return a + uint64_t(in.mods.offset);
}

void global_load(Wave& w, const Inst& in, Dispatch& d) {
  LANES {
    uint64_t a = flat_address(w, in, 1, l);
    auto* p = static_cast<unsigned char*>(d.mem->check(a, uint64_t(in.aux), false, in));
    put_loaded(w, in, l, p, in.aux, in.aux2);
  }
}

void global_store(Wave& w, const Inst& in, Dispatch& d) {
  // global_store_* vaddr, vdata, saddr|off  /  flat_store_* vaddr, vdata
  LANES {
    const Operand& va = in.ops[0];
    bool has_saddr = in.ops.size() > 2 && in.ops[2].kind == OpKind::Sgpr;
    uint64_t a = (has_saddr ? read64(w, in.ops[2], 0) + read32(w, va, l) : read64(w, va, l)) + uint64_t(in.mods.offset);
    auto* p = static_cast<unsigned char*>(d.mem->check(a, uint64_t(in.aux), true, in));
    get_stored(w, in.ops[1], l, p, in.aux, in.aux2);
  }
}

// global_atomic_<op> [vdst,] vaddr, vdata, saddr|off: waves run one at a time, so a
// read-modify-write is atomic by construction.
template <typename T, typename F>
void global_atomic(Wave& w, const Inst& in, Dispatch& d, F f) {
  bool returns = in.ops.size() == 4 || (in.ops.size() == 3 && in.ops[2].kind != OpKind::Sgpr && in.ops[2].kind != OpKind::Off);
  int base = returns ? 1 : 0;
  LANES {
    const Operand& va = in.ops[size_t(base)];
    size_t si = size_t(base) + 2;
    bool has_saddr = in.ops.size() > si && in.ops[si].kind == OpKind::Sgpr;
    uint64_t a = (has_saddr ? read64(w, in.ops[si], 0) + read32(w, va, l) : read64(w, va, l)) + uint64_t(in.mods.offset);
    auto* p = static_cast<T*>(d.mem->check(a, sizeof(T), true, in));
    uint32_t data = read32(w, in.ops[size_t(base) + 1], l);
    T old = *p, v;
    std::memcpy(&v, &data, sizeof(T));
    *p = f(old, v);
    if (returns) {
      uint32_t o;
      std::memcpy(&o, &old, 4);
      write32(w, in.ops[0], l, o);
    }
  }
}

// s_load_dword*: sdst, sbase, offset (immediate or SGPR) [offset:imm]
void s_load(Wave& w, const Inst& in, Dispatch& d) {
  uint64_t base = read64(w, in.ops[1], 0);
  uint64_t off = (in.ops.size() > 2 ? read32(w, in.ops[2], 0) : 0) + uint64_t(in.mods.offset);
  uint64_t a = (base + off) & ~3ull;
  auto* p = static_cast<unsigned char*>(d.mem->check(a, uint64_t(in.aux) * 4, false, in));
  for (int i = 0; i < in.aux; ++i) {
    uint32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    write32(w, in.ops[0], 0, v, i);
  }
}

struct BufferResource {
  uint64_t base;
  uint32_t stride, num_records;
};
BufferResource resource(const Wave& w, const Operand& o) {
  uint32_t r0 = read32(w, o, 0, 0), r1 = read32(w, o, 0, 1), r2 = read32(w, o, 0, 2);
  return {uint64_t(r0) | (uint64_t(r1 & 0xffff) << 32), (r1 >> 16) & 0x3fff, r2};
}

void s_buffer_load(Wave& w, const Inst& in, Dispatch& d) {
  BufferResource r = resource(w, in.ops[1]);
  uint64_t off = ((in.ops.size() > 2 ? read32(w, in.ops[2], 0) : 0) + uint64_t(in.mods.offset)) & ~3ull;
  for (int i = 0; i < in.aux; ++i) {
    uint32_t v = 0;
    if (off + 4 * uint64_t(i) + 4 <= r.num_records)
      std::memcpy(&v, d.mem->check(r.base + off + 4 * uint64_t(i), 4, false, in), 4);
    write32(w, in.ops[0], 0, v, i);
  }
}

// The buffer offset of lane l (vaddr operand `va`: index and/or offset), false when it lies
// past num_records.
bool buffer_offset(const Wave& w, const Inst& in, const Operand& va, const BufferResource& r, int l, uint64_t* off) {
  uint64_t index = 0, voff = 0;
  if (in.mods.idxen && in.mods.offen) {
    index = read32(w, va, l, 0);
    voff = read32(w, va, l, 1);
  } else if (in.mods.idxen) {
    index = read32(w, va, l);
  } else if (in.mods.offen) {
    voff = read32(w, va, l);
  }
  *off = voff + uint64_t(in.mods.offset) + index * r.stride;
  return r.stride == 0 || !in.mods.idxen ? *off + uint64_t(in.aux) <= r.num_records : index < r.num_records;
}

// buffer_{load,store}_*: vdata, vaddr|off, srsrc, soffset [offen] [idxen] [offset:N]. Raw
// buffers: an access past num_records reads 0 and drops writes, as the hardware does.
void buffer_access(Wave& w, const Inst& in, Dispatch& d, bool store) {
  BufferResource r = resource(w, in.ops[2]);
  uint32_t soffset = read32(w, in.ops[3], 0);
  LANES {
    uint64_t off = 0;
    unsigned char zero[16] = {};
    if (!buffer_offset(w, in, in.ops[1], r, l, &off)) {
      if (!store) put_loaded(w, in, l, zero, in.aux, in.aux2);
      continue;
    }
    auto* p = static_cast<unsigned char*>(d.mem->check(r.base + soffset + off, uint64_t(in.aux), store, in));
    if (store)
      get_stored(w, in.ops[0], l, p, in.aux, in.aux2);
    else
      put_loaded(w, in, l, p, in.aux, in.aux2);
  }
}

enum LdsAccess { kLdsRead, kLdsWrite, kLdsAtomic };

// Strict mode: LDS that this wave's own LDS DMA (buffer_load ... lds) is still writing may not be
// read or written before the s_waitcnt vmcnt that covers the DMA.
void check_lds_dma(const Wave& w, const Inst& in, uint64_t addr, uint64_t bytes) {
  for (const MemOp& m : w.strict.counters[0])
    if (m.lds_dma && addr < m.lds_end && m.lds_begin < addr + bytes)
      fail(in, fmt::format("{} LDS at 0x{:x} that {} at 0x{:x} (LDS DMA) is still writing: its data arrives only after "
                           "an s_waitcnt vmcnt that covers it (read-before-wait)",
                           in.info.cls == InstClass::Ds && in.info.returns ? "reads" : "accesses", addr, m.in->text,
                           m.in->addr));
}

// Bounds, and (strict mode) races between the waves of the workgroup: an LDS dword written by
// one wave and read, written or updated by another with no s_barrier between them is an error,
// as is a write after another wave's read in the same barrier interval. The simulator runs the
// waves one after another between barriers, so such code would otherwise pass here.
unsigned char* lds_at(const Wave& w, Dispatch& d, const Inst& in, uint64_t addr, uint64_t bytes, LdsAccess kind) {
  if (addr + bytes > d.lds.size())
    fail(in, fmt::format("LDS access of {} bytes at 0x{:x} is out of bounds: the workgroup has {} bytes of LDS", bytes,
                         addr, d.lds.size()));
  if (w.strict.lds_dma_in_flight && !in.info.lds_dma) check_lds_dma(w, in, addr, bytes);
  const uint32_t me = w.index, epoch = d.lds_epoch;
  for (uint64_t dw = addr / 4; dw <= (addr + bytes - 1) / 4; ++dw) {
    Dispatch::LdsTag& t = d.lds_tags[dw];
    bool written_now = t.write_epoch == epoch && t.writer != me && !(kind == kLdsAtomic && t.atomic);
    if (written_now)
      fail(in, fmt::format("LDS race: the dword at 0x{:x} was {} by wave {} ({}) with no s_barrier since; this wave ({}) "
                           "{} it", dw * 4, t.atomic ? "updated atomically" : "written", t.writer,
                           t.by ? t.by->text : "?", me, kind == kLdsRead ? "reads" : "writes"));
    if (kind != kLdsRead && t.read_epoch == epoch && (t.readers & ~(uint64_t(1) << (me & 63))))
      fail(in, fmt::format("LDS race: the dword at 0x{:x} was read by another wave with no s_barrier since; this wave "
                           "({}) writes it", dw * 4, me));
    if (kind == kLdsRead) {
      if (t.read_epoch != epoch) t.readers = 0;
      t.read_epoch = epoch;
      t.readers |= uint64_t(1) << (me & 63);
    } else {
      t.write_epoch = epoch;
      t.writer = me;
      t.atomic = kind == kLdsAtomic;
      t.by = &in;
    }
  }
  return d.lds.data() + addr;
}

// ds_read_*: vdst, vaddr [offset:N]
void ds_read(Wave& w, const Inst& in, Dispatch& d) {
  LANES put_loaded(w, in, l, lds_at(w, d, in, uint64_t(read32(w, in.ops[1], l)) + uint64_t(in.mods.offset), uint64_t(in.aux), kLdsRead),
                   in.aux, in.aux2);
}

// ds_write_*: vaddr, vdata [offset:N]
void ds_write(Wave& w, const Inst& in, Dispatch& d) {
  LANES get_stored(w, in.ops[1], l, lds_at(w, d, in, uint64_t(read32(w, in.ops[0], l)) + uint64_t(in.mods.offset), uint64_t(in.aux), kLdsWrite),
                   in.aux, in.aux2);
}

// ds_read2[st64]_b32/b64: vdst(2 elements), vaddr offset0 offset1 (in elements, x64 for st64).
void ds_read2(Wave& w, const Inst& in, Dispatch& d) {
  uint64_t unit = uint64_t(in.aux) * uint64_t(in.aux2 ? 64 : 1);
  int words = in.aux / 4;
  LANES {
    uint64_t base = read32(w, in.ops[1], l);
    for (int k = 0; k < 2; ++k) {
      unsigned char* p = lds_at(w, d, in, base + unit * (k ? in.mods.offset1 : in.mods.offset0), uint64_t(in.aux), kLdsRead);
      for (int i = 0; i < words; ++i) {
        uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        write32(w, in.ops[0], l, v, k * words + i);
      }
    }
  }
}

// ds_write2[st64]_b32/b64: vaddr, vdata0, vdata1 offset0 offset1.
void ds_write2(Wave& w, const Inst& in, Dispatch& d) {
  uint64_t unit = uint64_t(in.aux) * uint64_t(in.aux2 ? 64 : 1);
  LANES {
    uint64_t base = read32(w, in.ops[0], l);
    for (int k = 0; k < 2; ++k)
      get_stored(w, in.ops[size_t(1 + k)], l, lds_at(w, d, in, base + unit * (k ? in.mods.offset1 : in.mods.offset0), uint64_t(in.aux), kLdsWrite),
                 in.aux, 0);
  }
}

// ds_add_[rtn_]u32/f32: [vdst,] vaddr, vdata [offset:N]
template <typename T>
void ds_add(Wave& w, const Inst& in, Dispatch& d) {
  bool rtn = in.ops.size() == 3;
  int b = rtn ? 1 : 0;
  LANES {
    unsigned char* p = lds_at(w, d, in, uint64_t(read32(w, in.ops[size_t(b)], l)) + uint64_t(in.mods.offset), 4, kLdsAtomic);
    T old, v;
    uint32_t data = read32(w, in.ops[size_t(b) + 1], l);
    std::memcpy(&old, p, 4);
    std::memcpy(&v, &data, 4);
    T sum = T(old + v);
    std::memcpy(p, &sum, 4);
    if (rtn) {
      uint32_t o;
      std::memcpy(&o, &old, 4);
      write32(w, in.ops[0], l, o);
    }
  }
}

// ds_bpermute_b32 vdst, vaddr, vdata: lane l reads vdata of lane (vaddr + offset) / 4.
void ds_bpermute(Wave& w, const Inst& in, Dispatch& d) {
  (void)d;
  uint32_t src[kLanes];
  for (int l = 0; l < kLanes; ++l) src[l] = w.active(l) ? read32(w, in.ops[2], l) : 0;
  LANES write32(w, in.ops[0], l, src[((read32(w, in.ops[1], l) + uint32_t(in.mods.offset)) / 4) & 63]);
}

// buffer_load_dword vaddr|off, srsrc, soffset ... lds (LDS DMA): lane l's dword goes to LDS at
// M0[15:0] + offset + 4 * l (0 when out of range); no VGPR is written.
void buffer_load_lds(Wave& w, const Inst& in, Dispatch& d) {
  BufferResource r = resource(w, in.ops[1]);
  uint32_t soffset = read32(w, in.ops[2], 0);
  uint64_t lds_base = (w.m0 & 0xffff) + uint64_t(in.mods.offset);
  LANES {
    uint64_t off = 0;
    uint32_t v = 0;
    if (buffer_offset(w, in, in.ops[0], r, l, &off))
      std::memcpy(&v, d.mem->check(r.base + soffset + off, 4, false, in), 4);
    std::memcpy(lds_at(w, d, in, lds_base + 4 * uint64_t(l), 4, kLdsWrite), &v, 4);
  }
}

}  // namespace

std::vector<HandlerEntry> memory_handlers() {
  std::vector<HandlerEntry> t = {
      {"s_load_dword", s_load, 1},         {"s_load_dwordx2", s_load, 2},       {"s_load_dwordx4", s_load, 4},
      {"s_load_dwordx8", s_load, 8},       {"s_load_dwordx16", s_load, 16},     {"s_buffer_load_dword", s_buffer_load, 1},
      {"s_buffer_load_dwordx2", s_buffer_load, 2}, {"s_buffer_load_dwordx4", s_buffer_load, 4},
      {"s_buffer_load_dwordx8", s_buffer_load, 8}, {"s_buffer_load_dwordx16", s_buffer_load, 16},
      {"ds_read_b32", ds_read, 4},         {"ds_read_b64", ds_read, 8},         {"ds_read_b96", ds_read, 12},
      {"ds_read_b128", ds_read, 16},       {"ds_read_u8", ds_read, 1},          {"ds_read_i8", ds_read, 1, kSigned},
      {"ds_read_u16", ds_read, 2},         {"ds_read_i16", ds_read, 2, kSigned},
      {"ds_read_u16_d16", ds_read, 2, kD16Lo}, {"ds_read_u16_d16_hi", ds_read, 2, kD16Hi},
      {"ds_write_b32", ds_write, 4},       {"ds_write_b64", ds_write, 8},       {"ds_write_b96", ds_write, 12},
      {"ds_write_b128", ds_write, 16},     {"ds_write_b8", ds_write, 1},        {"ds_write_b16", ds_write, 2},
      {"ds_write_b16_d16_hi", ds_write, 2, kD16Hi},
      {"ds_read2_b32", ds_read2, 4},       {"ds_read2_b64", ds_read2, 8},       {"ds_read2st64_b32", ds_read2, 4, 1},
      {"ds_read2st64_b64", ds_read2, 8, 1}, {"ds_write2_b32", ds_write2, 4},    {"ds_write2_b64", ds_write2, 8},
      {"ds_write2st64_b32", ds_write2, 4, 1}, {"ds_write2st64_b64", ds_write2, 8, 1},
      {"ds_add_u32", ds_add<uint32_t>},    {"ds_add_rtn_u32", ds_add<uint32_t>},
      {"ds_add_f32", ds_add<float>},       {"ds_add_rtn_f32", ds_add<float>},
      {"ds_bpermute_b32", ds_bpermute},
      {"buffer_load_dword_lds", buffer_load_lds, 4},
      {"global_atomic_add", H { global_atomic<uint32_t>(w, in, d, [](uint32_t a, uint32_t b) { return a + b; }); }},
      {"global_atomic_add_f32", H { global_atomic<float>(w, in, d, [](float a, float b) { return a + b; }); }},
      {"global_atomic_umax", H { global_atomic<uint32_t>(w, in, d, [](uint32_t a, uint32_t b) { return a > b ? a : b; }); }},
      {"global_atomic_smax", H { global_atomic<int32_t>(w, in, d, [](int32_t a, int32_t b) { return a > b ? a : b; }); }},
  };
  struct Width {
    const char* suffix;
    int bytes, ext;
  };
  const Width loads[] = {{"dword", 4, kDword},     {"dwordx2", 8, kDword},        {"dwordx3", 12, kDword},
                         {"dwordx4", 16, kDword},  {"ubyte", 1, kDword},          {"sbyte", 1, kSigned},
                         {"ushort", 2, kDword},    {"sshort", 2, kSigned},        {"short_d16", 2, kD16Lo},
                         {"short_d16_hi", 2, kD16Hi}, {"ubyte_d16", 1, kD16Lo},  {"ubyte_d16_hi", 1, kD16Hi}};
  const Width stores[] = {{"dword", 4, kDword}, {"dwordx2", 8, kDword}, {"dwordx3", 12, kDword}, {"dwordx4", 16, kDword},
                          {"byte", 1, kDword},  {"short", 2, kDword},   {"short_d16_hi", 2, kD16Hi}, {"byte_d16_hi", 1, kD16Hi}};
  // Names are built once at start-up; the table keeps them alive.
  static std::vector<std::string> names;
  if (names.empty()) {
    for (const char* seg : {"global", "flat"}) {
      for (auto& l : loads) names.push_back(fmt::format("{}_load_{}", seg, l.suffix));
      for (auto& s : stores) names.push_back(fmt::format("{}_store_{}", seg, s.suffix));
    }
    for (auto& l : loads) names.push_back(fmt::format("buffer_load_{}", l.suffix));
    for (auto& s : stores) names.push_back(fmt::format("buffer_store_{}", s.suffix));
  }
  size_t n = 0;
  for (int seg = 0; seg < 2; ++seg) {
    for (auto& l : loads) t.push_back({names[n++].c_str(), global_load, l.bytes, l.ext});
    for (auto& s : stores) t.push_back({names[n++].c_str(), global_store, s.bytes, s.ext});
  }
  for (auto& l : loads) t.push_back({names[n++].c_str(), H { buffer_access(w, in, d, false); }, l.bytes, l.ext});
  for (auto& s : stores) t.push_back({names[n++].c_str(), H { buffer_access(w, in, d, true); }, s.bytes, s.ext});
  return t;
}

}  // namespace halcyon::amdsim
