// Strict mode (see strict.hpp). The wait-state rules follow the "manually inserted wait
// states" tables of the CDNA3 (MI300) and CDNA2 (MI200) ISA guides, with the figures LLVM's
// GCNHazardRecognizer uses for gfx942/gfx90a; each rule has a test kernel that breaks it
// (tests/amd/kernels/strict.s).
#include "strict.hpp"

#include <fmt/format.h>

#include <bit>

#include "wave.hpp"

namespace halcyon::amdsim {

void StrictState::init(uint32_t vector_slots) {
  ws = 0;
  vinit.assign(vector_slots, 0);
  vw.assign(vector_slots, WriteRec{});
  mfma_c.assign(vector_slots, WriteRec{});
  wide_store.assign(vector_slots, WriteRec{});
  vpend.assign(vector_slots, 0);
  for (auto& b : sinit) b = false;
  for (auto& r : sw) r = WriteRec{};
  for (auto& p : spend) p = 0;
  for (auto& r : setreg) r = WriteRec{};
  for (auto& c : counters) c.clear();
  next_seq = 1;
  lds_dma_in_flight = 0;
}

namespace {

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

}  // namespace

void classify(Inst& in, const std::string& arch) {
  InstInfo& f = in.info;
  const std::string& op = in.op;
  f.gfx942 = arch == "gfx942";
  f.simm16 = uint16_t(in.word0 & 0xffff);
  bool control = op == "s_waitcnt" || op == "s_nop" || op == "s_barrier" || op == "s_endpgm" || op == "s_branch" ||
                 starts(op, "s_cbranch") || op == "s_setprio" || op == "s_sleep" || op == "s_code_end" ||
                 op == "buffer_wbinvl1" || op == "buffer_wbinvl1_vol" || op == "buffer_wbl2" || op == "buffer_inv" ||
                 op == "s_trap" || op == "s_sendmsg";
  if (control) f.cls = InstClass::Control;
  else if (starts(op, "v_mfma")) f.cls = InstClass::Mfma;
  else if (starts(op, "v_")) f.cls = InstClass::Valu;
  else if (starts(op, "s_load") || starts(op, "s_buffer_load") || starts(op, "s_store") || starts(op, "s_dcache") ||
           starts(op, "s_memtime") || starts(op, "s_memrealtime"))
    f.cls = InstClass::Smem;
  else if (starts(op, "s_")) f.cls = InstClass::Salu;
  else if (starts(op, "global_") || starts(op, "flat_") || starts(op, "buffer_") || starts(op, "scratch_"))
    f.cls = InstClass::Vmem;
  else if (starts(op, "ds_")) f.cls = InstClass::Ds;

  // Destinations.
  f.ndefs = 1;
  if (f.cls == InstClass::Control || starts(op, "s_cmp") || starts(op, "s_bitcmp") || starts(op, "s_setpc") ||
      starts(op, "s_setreg") || starts(op, "s_store") || starts(op, "s_dcache") || op == "v_nop")
    f.ndefs = 0;
  if (f.cls == InstClass::Vmem) {
    bool store = op.find("_store") != std::string::npos;
    bool atomic = op.find("_atomic") != std::string::npos;
    f.returns = !store && !atomic;
    if (atomic && starts(op, "global_"))  // global_atomic_<op> [vdst,] vaddr, vdata, saddr|off
      f.returns = in.ops.size() == 4 ||
                  (in.ops.size() == 3 && in.ops[2].kind != OpKind::Sgpr && in.ops[2].kind != OpKind::Off);
    f.ndefs = f.returns ? 1 : 0;
    f.counter = 0;
    if (store) {
      int data = starts(op, "buffer_") ? 0 : 1;
      bool sgpr_soffset = starts(op, "buffer_") && in.ops.size() > 3 && in.ops[3].kind == OpKind::Sgpr;
      if (size_t(data) < in.ops.size() && in.ops[size_t(data)].count > 2 && !sgpr_soffset) f.wide_store_data = int8_t(data);
    }
    f.partial_dst = op.find("_d16") != std::string::npos;
    if (in.mods.lds) {  // LDS DMA: no VGPR destination, vaddr is a source
      f.lds_dma = true;
      f.returns = false;
      f.ndefs = 0;
    }
  }
  if (f.cls == InstClass::Ds) {
    f.returns = starts(op, "ds_read") || op.find("_rtn") != std::string::npos || op == "ds_bpermute_b32" ||
                op == "ds_permute_b32" || starts(op, "ds_swizzle");
    f.ndefs = f.returns ? 1 : 0;
    f.counter = 1;
    f.partial_dst = op.find("_d16") != std::string::npos;
  }
  if (f.cls == InstClass::Smem) {
    f.returns = starts(op, "s_load") || starts(op, "s_buffer_load") || starts(op, "s_memtime") || starts(op, "s_memrealtime");
    f.ndefs = f.returns ? 1 : 0;
    f.counter = 1;
  }
  static const char* const two_defs[] = {"v_add_co_u32",   "v_sub_co_u32",    "v_subrev_co_u32", "v_addc_co_u32",
                                         "v_subb_co_u32",  "v_subbrev_co_u32", "v_div_scale_f32", "v_div_scale_f64",
                                         "v_mad_u64_u32",  "v_mad_i64_i32"};
  for (const char* n : two_defs)
    if (op == n && in.ops.size() > 1 && (in.ops[1].kind == OpKind::Sgpr || in.ops[1].kind == OpKind::Vcc)) f.ndefs = 2;
  f.reads_dst = starts(op, "v_fmac") || starts(op, "v_mac") || op == "v_dot2c_f32_f16" || op == "v_dot4c_i32_i8";
  f.writes_exec = starts(op, "v_cmpx") || (starts(op, "s_") && op.find("saveexec") != std::string::npos) ||
                  op.find("_wrexec") != std::string::npos;
  if (op == "v_readlane_b32") f.lane_op = 1;
  if (op == "v_readfirstlane_b32") f.lane_op = 2;
  if (op == "v_writelane_b32") {
    f.lane_op = 3;
    f.partial_dst = true;
  }
  if (f.cls == InstClass::Mfma) {
    // Passes of 4 cycles, from the ISA guides' cycle counts (shared/reference/mfma): CDNA3 runs
    // the bf16/f16 shapes in half the passes of CDNA2, and its FP8 shapes (twice the k: 32x32x16,
    // 16x16x32) in as many as its bf16 ones (32 and 16 cycles).
    bool big = op.find("32x32") != std::string::npos;
    f.passes = uint8_t(f.gfx942 ? (big ? 8 : 4) : (big ? 16 : 8));
  }
  static const char* const trans_ops[] = {"v_exp_f32",  "v_log_f32",  "v_rcp_f32",       "v_rcp_iflag_f32",
                                          "v_rsq_f32",  "v_sqrt_f32", "v_sin_f32",       "v_cos_f32",
                                          "v_rcp_f64",  "v_rsq_f64",  "v_sqrt_f64",      "v_exp_f16",
                                          "v_log_f16",  "v_rcp_f16",  "v_rsq_f16",       "v_sqrt_f16",
                                          "v_sin_f16",  "v_cos_f16",  "v_exp_legacy_f32", "v_log_legacy_f32"};
  for (const char* t : trans_ops) f.trans |= op == t;
  f.dst_sel = f.cls == InstClass::Valu && (in.mods.op_sel & 8) && !starts(op, "v_pk_");
  if (op == "s_nop") f.states = (f.simm16 & 0xf) + 1u;
  if (starts(op, "s_setreg") || starts(op, "s_getreg")) f.hwreg = int8_t(f.simm16 & 0x3f);
}

namespace {

std::string slot_name(bool vector, int slot, uint32_t num_v) {
  if (vector) return slot < int(num_v) ? fmt::format("v{}", slot) : fmt::format("a{}", slot - int(num_v));
  if (slot < kSgprs) return fmt::format("s{}", slot);
  if (slot == kSlotVcc) return "vcc_lo";
  if (slot == kSlotVcc + 1) return "vcc_hi";
  if (slot == kSlotExec) return "exec_lo";
  if (slot == kSlotExec + 1) return "exec_hi";
  return "m0";
}

// The strict-state slots of an operand: calls f(vector, slot) for each 32-bit register.
template <typename F>
void for_slots(const Wave& w, const Operand& o, F f) {
  switch (o.kind) {
    case OpKind::Vgpr:
      for (int i = 0; i < o.count; ++i) f(true, o.index + i);
      return;
    case OpKind::Agpr:
      for (int i = 0; i < o.count; ++i) f(true, int(w.num_v) + o.index + i);
      return;
    case OpKind::Sgpr:
      for (int i = 0; i < o.count; ++i) f(false, o.index + i);
      return;
    case OpKind::Vcc:
      for (int i = 0; i < o.count; ++i) f(false, kSlotVcc + o.index + i);
      return;
    case OpKind::Exec:
      for (int i = 0; i < o.count; ++i) f(false, kSlotExec + o.index + i);
      return;
    case OpKind::M0: f(false, kSlotM0); return;
    default: return;
  }
}

const char* counter_name(int c) { return c == 0 ? "vmcnt" : c == 1 ? "lgkmcnt" : "expcnt"; }

const MemOp* find_op(const StrictState& st, uint64_t seq, int* counter) {
  for (int c = 0; c < 3; ++c)
    for (auto& m : st.counters[c])
      if (m.seq == seq) {
        *counter = c;
        return &m;
      }
  return nullptr;
}

[[noreturn]] void in_flight(const Inst& in, const StrictState& st, uint64_t seq, const std::string& reg, bool write) {
  int c = 0;
  const MemOp* m = find_op(st, seq, &c);
  throw SimError(fmt::format(
      "{} at 0x{:x}: {} {} while {} at 0x{:x} is still in flight: its data arrives only after an s_waitcnt {} that "
      "covers it (read-before-wait)",
      in.text, in.addr, write ? "overwrites" : "reads", reg, m ? m->in->text : "a memory operation",
      m ? m->in->addr : 0, counter_name(c)));
}

[[noreturn]] void hazard(const Inst& in, const char* rule, const std::string& reg, const WriteRec& r, int64_t have,
                         int64_t need, const char* arch) {
  throw SimError(fmt::format(
      "{} at 0x{:x}: wait-state hazard ({}): {} {} at 0x{:x}; {} wait state{} between them, {} needs {} (insert "
      "s_nop {})",
      in.text, in.addr, rule, reg, r.by ? r.by->text : "?", r.by ? r.by->addr : 0, have, have == 1 ? "" : "s", arch,
      need, need - have - 1));
}

void retire(StrictState& st, MemOp const& m) {
  if (m.lds_dma) --st.lds_dma_in_flight;
  for (int i = 0; i < m.count; ++i) {
    uint64_t& p = m.vector ? st.vpend[size_t(m.first + i)] : st.spend[m.first + i];
    if (p == m.seq) p = 0;
  }
}

void wait_counter(StrictState& st, int c, uint32_t n) {
  auto& q = st.counters[c];
  if (q.size() <= n) return;
  bool smem = false;
  for (auto& m : q) smem |= m.smem;
  // Scalar loads return out of order: lgkmcnt(n > 0) proves nothing about any one of them.
  if (c == 1 && smem && n > 0) return;
  while (q.size() > n) {
    retire(st, q.front());
    q.pop_front();
  }
}

// DPP: src0 is read in other lanes (in flight, uninitialised?), and every VGPR the instruction
// reads needs 2 wait states after a VALU wrote it (the DPP unit reads ahead of forwarding).
void check_dpp(const Wave& w, const Inst& in, const DppLanes& lanes, const char* arch) {
  const StrictState& st = w.strict;
  const int slot = in.dpp_src.index;
  if (uint64_t seq = st.vpend[size_t(slot)]) in_flight(in, st, seq, slot_name(true, slot, w.num_v), false);
  if (uint64_t missing = lanes.read & ~st.vinit[size_t(slot)])
    throw SimError(fmt::format("{} at 0x{:x}: reads {} in lanes 0x{:016x} that nothing has written (uninitialised)",
                               in.text, in.addr, slot_name(true, slot, w.num_v), missing));
  auto check = [&](const Operand& o) {
    for_slots(w, o, [&](bool vector, int s) {
      const WriteRec& r = st.vw[size_t(s)];
      if (vector && r.by && r.cls == uint8_t(InstClass::Valu) && st.ws - r.end < 2)
        hazard(in, "VALU write of a VGPR read by a DPP instruction", "reads " + slot_name(true, s, w.num_v) + " written by",
               r, st.ws - r.end, 2, arch);
    });
  };
  check(in.dpp_src);
  // The other rules on src0 (the main source loop sees the other operands): an MFMA result.
  const WriteRec& m = st.vw[size_t(slot)];
  if (m.by && m.cls == uint8_t(InstClass::Mfma) && st.ws - m.end < m.by->info.passes + 3)
    hazard(in, "MFMA result read by VALU, VMEM or LDS", "reads " + slot_name(true, slot, w.num_v) + " written by", m,
           st.ws - m.end, m.by->info.passes + 3, arch);
  for (size_t i = 0; i < in.ops.size(); ++i)
    if (i >= in.info.ndefs || (i == 0 && in.info.reads_dst)) check(in.ops[i]);
}

}  // namespace

void strict_before(Wave& w, const Inst& in) {
  StrictState& st = w.strict;
  const InstInfo& f = in.info;
  const char* arch = f.gfx942 ? "gfx942" : "gfx90a";
  const int64_t ws = st.ws;
  const size_t nops = in.ops.size();
  const bool mfma = f.cls == InstClass::Mfma;
  const bool valu_like = f.cls == InstClass::Valu || f.cls == InstClass::Vmem || f.cls == InstClass::Ds;

  if (in.op == "s_barrier") {
    // LDS traffic in flight at a barrier: DS operations (lgkmcnt) and LDS DMA (vmcnt).
    struct InFlight {
      int counter;
      bool MemOp::*flag;
      const char* what;
    };
    static const InFlight lds_ops[] = {
        {1, &MemOp::ds, "the other waves may not see it (or it may see their writes); s_waitcnt lgkmcnt(0) first"},
        {0, &MemOp::lds_dma, "(LDS DMA) the other waves may not see its LDS writes; s_waitcnt vmcnt first"}};
    for (const InFlight& k : lds_ops)
      for (auto& m : st.counters[k.counter])
        if (m.*k.flag)
          throw SimError(fmt::format("{} at 0x{:x}: {} at 0x{:x} is still in flight at the barrier: {}", in.text,
                                     in.addr, m.in->text, m.in->addr, k.what));
  }
  if (f.lds_dma) {  // M0 holds the LDS base: written by SALU, it needs 1 wait state (GFX9)
    if (!st.sinit[kSlotM0])
      throw SimError(fmt::format("{} at 0x{:x}: LDS DMA reads m0 (its LDS base), which nothing has written "
                                 "(uninitialised)", in.text, in.addr));
    const WriteRec& r = st.sw[kSlotM0];
    if (r.by && r.cls == uint8_t(InstClass::Salu) && ws - r.end < 1)
      hazard(in, "SALU write of M0 before an LDS DMA (buffer_load ... lds)", "reads m0 written by", r, ws - r.end, 1,
             arch);
  }
  DppLanes dpp;
  if (in.mods.dpp) {
    dpp = dpp_lanes(in.mods, w.exec);
    check_dpp(w, in, dpp, arch);
  }

  // Sources.
  for (size_t i = 0; i < nops; ++i) {
    bool use = i >= f.ndefs || (i == 0 && f.reads_dst);
    if (!use) continue;
    const Operand& o = in.ops[i];
    bool srcc = mfma && i == 3;
    bool first_op_vector = o.kind == OpKind::Vgpr || o.kind == OpKind::Agpr;
    uint16_t first_slot = uint16_t(o.kind == OpKind::Agpr ? w.num_v + o.index : o.index);
    for_slots(w, o, [&](bool vector, int slot) {
      if (vector) {
        if (uint64_t seq = st.vpend[size_t(slot)]) in_flight(in, st, seq, slot_name(true, slot, w.num_v), false);
        uint64_t lanes = mfma ? ~0ull : in.mods.dpp ? dpp.write : w.exec;
        if (f.lane_op == 1 && i == 1) lanes = 1ull << (read32(w, in.ops[2], 0) & 63);
        if (f.lane_op == 2 && i == 1) lanes = w.exec ? (w.exec & (~w.exec + 1)) : 0;
        uint64_t missing = lanes & ~st.vinit[size_t(slot)];
        if (missing)
          throw SimError(fmt::format("{} at 0x{:x}: reads {} in lanes 0x{:016x} that nothing has written (uninitialised)",
                                     in.text, in.addr, slot_name(true, slot, w.num_v), missing));
        const WriteRec& r = st.vw[size_t(slot)];
        std::string reg = "reads " + slot_name(true, slot, w.num_v) + " written by";
        if (mfma && r.cls == uint8_t(InstClass::Mfma)) {
          int64_t need;
          const char* rule;
          if (srcc) {
            bool full = first_op_vector && r.first == first_slot && r.count == o.count;
            need = full ? 0 : (f.gfx942 ? r.by->info.passes + 1 : r.by->info.passes);
            rule = "MFMA result read as an overlapping, not identical, SrcC";
          } else {
            need = r.by->info.passes + 3;
            rule = "MFMA result read as SrcA/SrcB";
          }
          if (ws - r.end < need) hazard(in, rule, reg, r, ws - r.end, need, arch);
        } else if (mfma && r.cls == uint8_t(InstClass::Valu)) {
          if (ws - r.end < 2) hazard(in, "VALU write of a VGPR read by an MFMA", reg, r, ws - r.end, 2, arch);
        } else if (valu_like && r.cls == uint8_t(InstClass::Mfma)) {
          int64_t need = r.by->info.passes + 3;
          if (ws - r.end < need)
            hazard(in, "MFMA result read by VALU, VMEM or LDS", reg, r, ws - r.end, need, arch);
        }
        if (f.gfx942 && (f.lane_op == 1 || f.lane_op == 2) && i == 1 && r.cls == uint8_t(InstClass::Valu) &&
            ws - r.end < 1)
          hazard(in, "VALU write of a VGPR read by v_readlane/v_readfirstlane", reg, r, ws - r.end, 1, arch);
        // gfx942: no forwarding from the transcendental unit to the others, nor of a shifted
        // partial result (LLVM's hasTransForwardingHazard / hasDstSelForwardingHazard).
        bool valu_use = f.cls == InstClass::Valu || mfma;
        if (f.gfx942 && valu_use && !f.trans && r.by && r.by->info.trans && ws - r.end < 1)
          hazard(in, "transcendental VALU result read by a non-transcendental VALU (gfx942)", reg, r, ws - r.end, 1,
                 arch);
        if (f.gfx942 && valu_use && r.by && r.by->info.dst_sel && ws - r.end < 1)
          hazard(in, "VALU op_sel/dst_sel partial write read by a VALU (gfx942)", reg, r, ws - r.end, 1, arch);
      } else {
        if (uint64_t seq = st.spend[slot]) in_flight(in, st, seq, slot_name(false, slot, w.num_v), false);
        if (!st.sinit[slot] && slot != kSlotExec && slot != kSlotExec + 1)
          throw SimError(fmt::format("{} at 0x{:x}: reads {}, which nothing has written (uninitialised)", in.text,
                                     in.addr, slot_name(false, slot, w.num_v)));
        const WriteRec& r = st.sw[slot];
        bool by_valu = r.cls == uint8_t(InstClass::Valu) || r.cls == uint8_t(InstClass::Mfma);
        if (!by_valu || !r.by) return;
        std::string reg = "reads " + slot_name(false, slot, w.num_v) + " written by";
        if (f.cls == InstClass::Vmem && ws - r.end < 5)
          hazard(in, "VALU write of an SGPR read by VMEM", reg, r, ws - r.end, 5, arch);
        if ((f.lane_op == 1 || f.lane_op == 3) && i == 2 && ws - r.end < 4)
          hazard(in, "VALU write of the SGPR a v_readlane/v_writelane uses as lane select", reg, r, ws - r.end, 4, arch);
        if (f.gfx942 && (f.cls == InstClass::Valu || mfma) && ws - r.end < 2)
          hazard(in, "VALU write of an SGPR read by a VALU (gfx942)", reg, r, ws - r.end, 2, arch);
      }
    });
  }
  // EXEC, read by every vector instruction.
  const WriteRec& ex = st.sw[kSlotExec].end > st.sw[kSlotExec + 1].end ? st.sw[kSlotExec] : st.sw[kSlotExec + 1];
  if (ex.by && ex.cls == uint8_t(InstClass::Valu)) {
    if (mfma && ws - ex.end < 4) hazard(in, "VALU write of EXEC before an MFMA", "follows", ex, ws - ex.end, 4, arch);
    if (in.mods.dpp && ws - ex.end < 5)
      hazard(in, "VALU write of EXEC before a DPP instruction", "follows", ex, ws - ex.end, 5, arch);
    if (f.gfx942 && f.lane_op && ws - ex.end < 4)
      hazard(in, "VALU write of EXEC before v_readlane/v_readfirstlane/v_writelane (gfx942)", "follows", ex,
             ws - ex.end, 4, arch);
  }
  // Destinations.
  for (size_t i = 0; i < f.ndefs && i < nops; ++i) {
    for_slots(w, in.ops[i], [&](bool vector, int slot) {
      uint64_t seq = vector ? st.vpend[size_t(slot)] : st.spend[slot];
      if (seq) {
        // Loads on one in-order counter may target the same register (d16 halves, say).
        int c = 0;
        const MemOp* m = find_op(st, seq, &c);
        bool ordered = m && f.returns && ((c == 0 && f.cls == InstClass::Vmem) || (c == 1 && m->ds && f.cls == InstClass::Ds));
        if (!ordered) in_flight(in, st, seq, slot_name(vector, slot, w.num_v), true);
      }
      if (!vector || mfma || !valu_like) return;
      std::string reg = "overwrites " + slot_name(true, slot, w.num_v) + " used by";
      const WriteRec& r = st.vw[size_t(slot)];
      if (r.cls == uint8_t(InstClass::Mfma)) {
        int64_t need = r.by->info.passes + 3;
        if (ws - r.end < need) hazard(in, "MFMA result overwritten by VALU or a load (WAW)", reg, r, ws - r.end, need, arch);
      }
      const WriteRec& c = st.mfma_c[size_t(slot)];
      if (c.by) {
        int64_t need = c.by->info.passes - 1;
        if (ws - c.end < need) hazard(in, "MFMA SrcC overwritten by VALU or a load (WAR)", reg, c, ws - c.end, need, arch);
      }
      const WriteRec& s = st.wide_store[size_t(slot)];
      int64_t need = f.gfx942 ? 2 : 1;
      if (s.by && f.cls == InstClass::Valu && ws - s.end < need)
        hazard(in, "VALU write of the data VGPRs of a >64-bit store", reg, s, ws - s.end, need, arch);
    });
  }
  if (f.hwreg >= 0) {
    const WriteRec& r = st.setreg[f.hwreg];
    if (r.by && ws - r.end < 2) hazard(in, "s_setreg followed by s_setreg/s_getreg of the same register", "follows", r, ws - r.end, 2, arch);
  }
  if (in.op == "s_waitcnt") {
    uint32_t s = f.simm16;
    wait_counter(st, 0, (s & 0xf) | (((s >> 14) & 3) << 4));
    wait_counter(st, 2, (s >> 4) & 7);
    wait_counter(st, 1, (s >> 8) & 0xf);
  }
}

void strict_after(Wave& w, const Inst& in, uint64_t exec_before) {
  StrictState& st = w.strict;
  const InstInfo& f = in.info;
  const int64_t end = st.ws + 1;
  const bool mfma = f.cls == InstClass::Mfma;
  uint64_t seq = 0;
  if (f.cls == InstClass::Vmem || f.cls == InstClass::Ds || f.cls == InstClass::Smem) {
    MemOp m;
    m.seq = seq = st.next_seq++;
    m.in = &in;
    m.smem = f.cls == InstClass::Smem;
    m.ds = f.cls == InstClass::Ds;
    m.returns = f.returns;
    if (f.returns && !in.ops.empty()) {
      const Operand& d = in.ops[0];
      m.vector = d.kind == OpKind::Vgpr || d.kind == OpKind::Agpr;
      m.first = uint16_t(d.kind == OpKind::Agpr ? w.num_v + d.index : d.index);
      m.count = d.kind == OpKind::Sgpr || m.vector ? d.count : 0;
    }
    if (f.lds_dma) {
      m.lds_dma = true;
      m.lds_begin = uint32_t((w.m0 & 0xffff) + uint64_t(in.mods.offset));
      m.lds_end = m.lds_begin + 4 * kLanes;
      ++st.lds_dma_in_flight;
    }
    st.counters[f.counter].push_back(m);
    if (!f.returns) seq = 0;
  }
  for (size_t i = 0; i < f.ndefs && i < in.ops.size(); ++i) {
    const Operand& o = in.ops[i];
    uint16_t first = uint16_t(o.kind == OpKind::Agpr ? w.num_v + o.index : o.index);
    for_slots(w, o, [&](bool vector, int slot) {
      WriteRec r{end, &in, uint8_t(f.cls), first, o.count};
      if (vector) {
        uint64_t lanes = mfma ? ~0ull : in.mods.dpp ? w.dpp_written : exec_before;
        if (f.lane_op == 3) lanes = 1ull << (read32(w, in.ops[2], 0) & 63);
        st.vinit[size_t(slot)] |= lanes;
        st.vw[size_t(slot)] = r;
        if (i == 0 && seq) st.vpend[size_t(slot)] = seq;
      } else {
        st.sinit[slot] = true;
        st.sw[slot] = r;
        if (i == 0 && seq) st.spend[slot] = seq;
      }
    });
  }
  if (f.writes_exec) {
    st.sw[kSlotExec] = st.sw[kSlotExec + 1] = WriteRec{end, &in, uint8_t(f.cls), 0, 0};
  }
  if (mfma && in.ops.size() > 3)
    for_slots(w, in.ops[3], [&](bool vector, int slot) {
      if (vector) st.mfma_c[size_t(slot)] = WriteRec{end, &in, uint8_t(f.cls), 0, 0};
    });
  if (f.wide_store_data >= 0)
    for_slots(w, in.ops[size_t(f.wide_store_data)], [&](bool vector, int slot) {
      if (vector) st.wide_store[size_t(slot)] = WriteRec{end, &in, uint8_t(f.cls), 0, 0};
    });
  if (f.hwreg >= 0 && in.op.rfind("s_setreg", 0) == 0) st.setreg[f.hwreg] = WriteRec{end, &in, uint8_t(f.cls), 0, 0};
  st.ws += f.states;
}

}  // namespace halcyon::amdsim
