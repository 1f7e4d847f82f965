// Strict mode of amdgpu-sim: each kernel of kernels/strict.s breaks one rule and must fail with
// that rule named, on the instruction that breaks it; the gfx942-only rules must not fire on
// gfx90a. The shipped kernels and the clang-compiled test kernels run under the same rules in
// the other test files, so a rule that fired on correct code would fail those.
#include <algorithm>

#include "sim_harness.hpp"

using namespace amdtest;

namespace {

struct Case {
  const char* kernel;
  const char* expect;     // part of the error message
  const char* at;         // the instruction named
  bool gfx942_only;
};

const Case kCases[] = {
    {"strict_vm_read", "still in flight: its data arrives only after an s_waitcnt vmcnt", "v_add_u32", false},
    {"strict_smem_read", "reads s4 while s_load_dwordx2", "s_add_u32", false},
    {"strict_smem_out_of_order", "s_waitcnt lgkmcnt", "s_add_u32 s7", false},
    {"strict_ds_read", "reads v2 while ds_read_b32", "v_add_u32", false},
    {"strict_barrier_lds", "still in flight at the barrier", "s_barrier", false},
    {"strict_overwrite_in_flight", "overwrites v2 while global_load_dword", "v_mov_b32", false},
    {"strict_uninit_vgpr", "reads v2 in lanes 0xffffffffffffffff that nothing has written", "v_add_u32", false},
    {"strict_uninit_sgpr", "reads s7, which nothing has written", "s_add_u32", false},
    {"strict_mfma_srcab", "MFMA result read as SrcA/SrcB", "v_mfma", false},
    {"strict_mfma_srcc_overlap", "MFMA result read as an overlapping, not identical, SrcC", "v_mfma", false},
    {"strict_mfma_valu_read", "MFMA result read by VALU, VMEM or LDS", "v_mov_b32_e32 v1, v8", false},
    {"strict_mfma_waw", "MFMA result overwritten by VALU or a load (WAW)", "v_mov_b32_e32 v9", false},
    {"strict_mfma_war", "MFMA SrcC overwritten by VALU or a load (WAR)", "v_mov_b32_e32 v8", false},
    {"strict_valu_mfma", "VALU write of a VGPR read by an MFMA", "v_mfma", false},
    {"strict_exec_mfma", "VALU write of EXEC before an MFMA", "v_mfma", false},
    {"strict_sgpr_vmem", "VALU write of an SGPR read by VMEM", "global_load_dword", false},
    {"strict_readlane_select", "lane select", "v_readlane_b32", false},
    {"strict_setreg", "s_setreg followed by s_setreg/s_getreg", "s_getreg_b32", false},
    {"strict_wide_store", "data VGPRs of a >64-bit store", "v_mov_b32_e32 v4, 1", false},
    {"strict_valu_sgpr_valu", "VALU write of an SGPR read by a VALU (gfx942)", "v_cndmask_b32", true},
    {"strict_exec_readlane", "VALU write of EXEC before v_readlane", "v_readlane_b32", true},
    {"strict_vgpr_readlane", "VALU write of a VGPR read by v_readlane", "v_readlane_b32", true},
    {"strict_dpp_vgpr", "VALU write of a VGPR read by a DPP instruction", "v_mov_b32_dpp", false},
    {"strict_dpp_src1", "reads v3 written by v_mov_b32_e32 v3, 1", "v_add_u32_dpp", false},
    {"strict_dpp_exec", "VALU write of EXEC before a DPP instruction", "v_mov_b32_dpp", false},
    {"strict_dpp_uninit", "reads v2 in lanes 0x0000000000000001 that nothing has written", "v_mov_b32_dpp", false},
    {"strict_lds_dma_m0", "SALU write of M0 before an LDS DMA", "buffer_load_dword v1, s[8:11], 0 offen lds", false},
    {"strict_lds_dma_uninit_m0", "reads m0 (its LDS base), which nothing has written", "lds", false},
    {"strict_lds_dma_read", "(LDS DMA) is still writing", "ds_read_b32", false},
    {"strict_lds_dma_barrier", "still in flight at the barrier: (LDS DMA)", "s_barrier", false},
    {"strict_trans_forward", "transcendental VALU result read by a non-transcendental VALU", "v_add_f32", true},
    {"strict_dst_sel", "op_sel/dst_sel partial write read by a VALU", "v_add_f32", true},
    {"strict_dpp_mfma", "MFMA result read by VALU, VMEM or LDS", "v_mov_b32_dpp", false},
};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// kernels/strict.s on one target, each kernel launched as one wave with a zeroed scratch buffer.
struct StrictKernels {
  static constexpr size_t kScratchBytes = 4096;
  Sim sim;
  halcyon::Module mod;
  halcyon::Buffer scratch;
  explicit StrictKernels(const char* arch) : sim(arch) {
    mod = sim.load(test_object("strict", arch), "strict");
    scratch = must(sim.dev.allocate(kScratchBytes), "allocate");
    must(sim.stream.fill(scratch, 0, kScratchBytes, 0u), "fill");
  }
  halcyon::Status launch(const char* name, uint32_t block = 64) {
    halcyon::ArgPack args;
    args.pointer(scratch);
    return sim.stream.launch(must(mod.kernel(name), "kernel"), {1}, {block}, args);
  }
};

}  // namespace

// The same sequences with exactly the wait states (or the s_waitcnt) the rule asks for.
const char* const kOkKernels[] = {
    "strict_ok_mfma_srcab",      "strict_ok_mfma_srcc_overlap", "strict_ok_mfma_srcc_chain",
    "strict_ok_mfma_valu_read",  "strict_ok_mfma_waw",          "strict_ok_mfma_war",
    "strict_ok_valu_mfma",       "strict_ok_exec_mfma",         "strict_ok_sgpr_vmem",
    "strict_ok_readlane_select", "strict_ok_setreg",            "strict_ok_wide_store",
    "strict_ok_valu_sgpr_valu",  "strict_ok_exec_readlane",     "strict_ok_vgpr_readlane",
    "strict_ok_vm_wait",         "strict_ok_dpp_vgpr",          "strict_ok_dpp_exec",
    "strict_ok_lds_dma_m0",      "strict_ok_lds_dma",           "strict_ok_dpp_forms",
    "strict_ok_trans_forward",   "strict_ok_dst_sel"};

TEST_CASE("strict mode: exactly the required wait states pass (no rule is stricter than the ISA)") {
  for (const char* arch : {"gfx942", "gfx90a"}) {
    StrictKernels sk(arch);
    for (const char* name : kOkKernels) {
      CAPTURE(arch);
      CAPTURE(name);
      auto st = sk.launch(name);
      CHECK_MESSAGE(bool(st), (st ? std::string() : st.error().message()));
    }
  }
}

TEST_CASE("strict mode: each broken rule is an error naming the rule and the instruction") {
  for (const char* arch : {"gfx942", "gfx90a"}) {
    StrictKernels sk(arch);
    for (const Case& c : kCases) {
      CAPTURE(arch);
      CAPTURE(c.kernel);
      auto st = sk.launch(c.kernel);
      if (c.gfx942_only && std::string(arch) == "gfx90a") {
        CHECK_MESSAGE(bool(st), (st ? std::string() : st.error().message()));
        continue;
      }
      REQUIRE_MESSAGE(!st, "the launch was expected to fail");
      std::string m = st.error().message();
      CAPTURE(m);
      CHECK(has(m, c.expect));
      CHECK(has(m, c.at));
      CHECK(has(m, " at 0x"));
    }
  }
}

TEST_CASE("strict mode: LDS shared by two waves with no barrier between is a race") {
  for (const char* arch : {"gfx942", "gfx90a"}) {
    CAPTURE(arch);
    StrictKernels sk(arch);
    auto raw = sk.launch("strict_lds_race_raw", 128);
    REQUIRE(!raw);
    CHECK(has(raw.error().message(), "LDS race: the dword at 0x0 was written by wave 0"));
    CHECK(has(raw.error().message(), "this wave (1) reads it"));
    auto war = sk.launch("strict_lds_race_war", 128);
    REQUIRE(!war);
    CHECK(has(war.error().message(), "LDS race: the dword at 0x0 was read by another wave"));
    auto ok = sk.launch("strict_ok_lds_barrier", 128);
    CHECK_MESSAGE(bool(ok), (ok ? std::string() : ok.error().message()));
  }
}

TEST_CASE("strict mode: one wait state short of each rule is an error (no rule is more lenient than the ISA)") {
  const char* const names[] = {"mfma_srcab", "mfma_srcc_overlap", "mfma_valu_read", "mfma_waw", "mfma_war",
                               "valu_mfma", "exec_mfma", "sgpr_vmem", "readlane_select", "setreg", "wide_store",
                               "valu_sgpr_valu", "exec_readlane", "vgpr_readlane", "dpp_vgpr", "dpp_exec"};
  // (SALU M0 -> LDS DMA and gfx942's transcendental and dst_sel forwarding need 1 wait state:
  // strict_lds_dma_m0, strict_trans_forward and strict_dst_sel, with none, are one short.)
  const std::string gfx942_only[] = {"valu_sgpr_valu", "exec_readlane", "vgpr_readlane"};
  for (const char* arch : {"gfx942", "gfx90a"}) {
    StrictKernels sk(arch);
    for (const char* n : names) {
      const std::string kernel = "strict_short_" + std::string(n), target = arch;
      CAPTURE(target);
      CAPTURE(kernel);
      auto st = sk.launch(kernel.c_str());
      bool only942 = std::find(std::begin(gfx942_only), std::end(gfx942_only), n) != std::end(gfx942_only);
      if (only942 && target == "gfx90a") {
        CHECK_MESSAGE(bool(st), (st ? std::string() : st.error().message()));
        continue;
      }
      REQUIRE_MESSAGE(!st, "one wait state short was accepted");
      CHECK(has(st.error().message(), "wait-state hazard"));
      CHECK(has(st.error().message(), "(insert s_nop 0)"));  // exactly one short
    }
  }
}

// The lane DPP lane l reads, written out from the ISA guide's DPP_CTRL table independently of
// the simulator's code: -1 where the source is out of range.
int dpp_reference(int form, int l) {
  int row = l / 16 * 16, i = l % 16;
  switch (form) {
    case 0: return l / 4 * 4 + (l % 4 ^ 1);                       // quad_perm:[1,0,3,2]
    case 1: return i + 1 < 16 ? l + 1 : -1;                        // row_shl:1
    case 2: return i >= 3 ? l - 3 : -1;                            // row_shr:3
    case 3: return row + (i + 16 - 5) % 16;                        // row_ror:5
    case 4: return l + 1 < 64 ? l + 1 : -1;                        // wave_shl:1
    case 5: return (l + 1) % 64;                                   // wave_rol:1
    case 6: return l >= 1 ? l - 1 : -1;                            // wave_shr:1
    case 7: return (l + 63) % 64;                                  // wave_ror:1
    case 8: return row + 15 - i;                                   // row_mirror
    case 9: return l / 8 * 8 + 7 - l % 8;                          // row_half_mirror
    case 10: return l >= 16 ? l / 16 * 16 - 1 : -1;                // row_bcast:15
    case 11: return l >= 32 ? 31 : -1;                             // row_bcast:31
  }
  return -1;
}

TEST_CASE("amdgpu-sim: DPP controls, masks, bound_ctrl, inactive sources and the wave reduction") {
  for (const char* arch : {"gfx942", "gfx90a"}) {
    CAPTURE(arch);
    StrictKernels sk(arch);
    must(sk.launch("strict_ok_dpp_forms"), "strict_ok_dpp_forms");
    auto out = sk.sim.download<uint32_t>(sk.scratch, 16 * 64);
    const uint32_t none = 0xffffffffu;
    const bool bound_ctrl[12] = {false, false, true, false, false, false, true, false, false, false, false, false};
    for (int form = 0; form < 12; ++form)
      for (int l = 0; l < 64; ++l) {
        CAPTURE(form);
        CAPTURE(l);
        int s = dpp_reference(form, l);
        bool masked = (form == 10 && (l / 16) % 2 == 0) || (form == 11 && l < 32);  // row_mask 0xa / 0xc
        uint32_t want = masked ? none : s >= 0 ? uint32_t(s) : bound_ctrl[form] ? 0u : none;
        CHECK(out[size_t(form * 64 + l)] == want);
      }
    for (int l = 0; l < 64; ++l) {
      CAPTURE(l);
      // v_add_u32_dpp quad_perm:[0,0,0,0] row_mask:0x5 bank_mask:0x6: rows 0 and 2, banks 1 and 2.
      bool written = (l / 16 == 0 || l / 16 == 2) && ((l / 4) % 4 == 1 || (l / 4) % 4 == 2);
      CHECK(out[size_t(12 * 64 + l)] == (written ? uint32_t(l / 4 * 4 + 4 * l) : none));
      // EXEC without lane 0: wave_ror:1 leaves lanes 0 and 1 alone; wave_shr:1 bound_ctrl: lane 1 reads 0.
      CHECK(out[size_t(13 * 64 + l)] == (l <= 1 ? none : uint32_t(l - 1)));
      CHECK(out[size_t(14 * 64 + l)] == (l == 0 ? none : l == 1 ? 0u : uint32_t(l - 1)));
      CHECK(out[size_t(15 * 64 + l)] == 64u * 65u / 2u);  // WAVE_REDUCE v_add_u32 of lane + 1
    }
  }
}

TEST_CASE("amdgpu-sim: LDS DMA (buffer_load_dword ... lds) writes LDS at M0 + offset + 4 * lane") {
  for (const char* arch : {"gfx942", "gfx90a"}) {
    CAPTURE(arch);
    StrictKernels sk(arch);
    std::vector<uint32_t> pattern(64);
    for (uint32_t i = 0; i < 64; ++i) pattern[i] = 0x1000u + i * 7u;
    must(sk.sim.stream.write(sk.scratch, 0, pattern.data(), pattern.size() * 4), "write");
    must(sk.launch("strict_ok_lds_dma"), "strict_ok_lds_dma");
    auto out = sk.sim.download<uint32_t>(sk.scratch, 128);
    for (int l = 0; l < 64; ++l) {
      CAPTURE(l);
      int src = 63 - l;  // the lane whose LDS dword lane l reads back
      CHECK(out[size_t(64 + l)] == (src <= 55 ? pattern[size_t(src + 8)] : 0u));
    }
  }
}
