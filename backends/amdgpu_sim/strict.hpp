// Strict mode: what a functional model would otherwise let through and a GPU would not.
//  - memory is asynchronous: a load's destination registers stay "in flight" until the
//    s_waitcnt that covers it (vmcnt for VMEM, lgkmcnt for LDS and scalar loads, expcnt for
//    exports/GDS); reading or overwriting one before that wait is an error; so is touching LDS
//    that a buffer_load ... lds (LDS DMA) of the same wave is still writing (vmcnt);
//  - the wait states the CDNA3/CDNA2 ISA guides require software to insert between dependent
//    instructions (MFMA result reuse, VALU SGPR write -> VMEM read, v_readlane/v_writelane lane
//    selects, s_setreg/s_getreg, wide store data, DPP after VALU VGPR/EXEC writes, SALU M0 write
//    -> LDS DMA, gfx942's VALU SGPR and transcendental forwarding ...) are counted
//    on the executed instruction stream and a shortfall is an error;
//  - a register read before anything wrote it (in an active lane) is an error.
// Every error names the instruction, its address, the register and the earlier instruction.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "inst.hpp"

namespace halcyon::amdsim {

struct Wave;
struct Dispatch;

// Scalar register slots of the strict state: s0..s105, then these.
constexpr int kSlotVcc = 106, kSlotExec = 108, kSlotM0 = 110, kScalarSlots = 111;

struct WriteRec {
  int64_t end = -(int64_t(1) << 40);  // wait-state count after the writer issued
  const Inst* by = nullptr;
  uint8_t cls = 0;                    // InstClass of the writer
  uint16_t first = 0, count = 0;      // the writer's whole destination (vector slots)
};

struct MemOp {
  uint64_t seq = 0;
  const Inst* in = nullptr;
  bool smem = false, ds = false, returns = false;
  bool vector = false;         // the destination that stays in flight
  uint16_t first = 0;
  uint8_t count = 0;
  bool lds_dma = false;        // buffer_load ... lds: LDS [lds_begin, lds_end) stays in flight
  uint32_t lds_begin = 0, lds_end = 0;
};

// Per-wave strict state.
struct StrictState {
  int64_t ws = 0;                           // wait states issued so far
  std::vector<uint64_t> vinit;              // [vector slot] lanes written at least once
  std::vector<WriteRec> vw;                 // [vector slot] last writer
  std::vector<WriteRec> mfma_c;             // [vector slot] last MFMA that read it as SrcC
  std::vector<WriteRec> wide_store;         // [vector slot] last >64-bit store that read it as data
  std::vector<uint64_t> vpend;              // [vector slot] seq of the in-flight load, 0 = none
  bool sinit[kScalarSlots] = {};
  WriteRec sw[kScalarSlots];
  uint64_t spend[kScalarSlots] = {};
  WriteRec setreg[64];
  std::deque<MemOp> counters[3];            // 0 vmcnt, 1 lgkmcnt, 2 expcnt: issued, not yet waited for
  uint64_t next_seq = 1;
  uint32_t lds_dma_in_flight = 0;           // LDS DMA operations in counters[0]
  void init(uint32_t vector_slots);
};

// Fills Inst::info at bind time. arch: "gfx942" or "gfx90a".
void classify(Inst& in, const std::string& arch);
// Checks `in` against the state before it executes, throwing SimError on a violation.
void strict_before(Wave& w, const Inst& in);
// Records what `in` wrote and issued; exec_before is EXEC as it was when `in` issued.
void strict_after(Wave& w, const Inst& in, uint64_t exec_before);

}  // namespace halcyon::amdsim
