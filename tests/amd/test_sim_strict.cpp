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
};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// kernels/strict.s on one target, each kernel launched as one wave with a zeroed scratch buffer.
struct StrictKernels {
  Sim sim;
  halcyon::Module mod;
  halcyon::Buffer scratch;
  explicit StrictKernels(const char* arch) : sim(arch) {
    mod = sim.load(test_object("strict", arch), "strict");
    scratch = must(sim.dev.allocate(256), "allocate");
    must(sim.stream.fill(scratch, 0, 256, 0u), "fill");
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
    "strict_ok_vm_wait"};

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
                               "valu_sgpr_valu", "exec_readlane", "vgpr_readlane"};
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
