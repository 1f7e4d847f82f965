// Kernels that each break exactly one strict-mode rule of amdgpu-sim (backends/amdgpu_sim/
// strict.hpp): reading data before the s_waitcnt that covers it, an LDS write in flight at a
// barrier, uninitialised registers, and the wait states of the CDNA3/CDNA2 ISA guides' "manually
// inserted wait states" tables. test_sim_strict.cpp expects each to fail with its rule named.
// Assembled for gfx942 and gfx90a; the gfx942-only rules must pass on gfx90a.
#include "gcn_target.inc"
#include "gcn_wave.inc"
.amdgcn_target GCN_TARGET_ID

// Exactly the wait states each rule needs (s_nop N gives N + 1): the strict_ok_* kernels must
// pass, so no rule is stricter than the ISA guide. 16x16x16 MFMA: 4 passes on gfx942, 8 on gfx90a.
#if defined(HALCYON_GFX942)
#define WS_MFMA_READ 6
#define WS_MFMA_SRCC 4
#define WS_MFMA_WAR 2
#define WS_WIDE_STORE 1
#else
#define WS_MFMA_READ 10
#define WS_MFMA_SRCC 7
#define WS_MFMA_WAR 6
#define WS_WIDE_STORE 0
#endif

.macro KERNEL name, lds
.rodata
.p2align 6
.amdhsa_kernel \name
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_kernarg_size 8
  .amdhsa_group_segment_fixed_size \lds
  .amdhsa_next_free_vgpr 16
  .amdhsa_next_free_sgpr 16
  .amdhsa_accum_offset 16
.end_amdhsa_kernel
.text
.endm

// s[4:5] = the scratch buffer, v1 = 0.
.macro LOAD_SCRATCH
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_mov_b32 v1, 0
  s_waitcnt lgkmcnt(0)
.endm

// s6 = this wave's index in the workgroup.
.macro WAVE_ID
  v_lshrrev_b32 v2, 6, v0
  NOP_VALU_READLANE
  v_readfirstlane_b32 s6, v2
.endm

// v2..v15 written, and enough wait states that the MFMA after it may read them.
.macro MFMA_INIT
  .irp r, 2,3,4,5,6,7,8,9,10,11,12,13,14,15
    v_mov_b32 v\r, 0
  .endr
  s_nop 4
.endm

#define META(n, lds) - { .name: n, .symbol: n.kd, .kernarg_segment_size: 8, .kernarg_segment_align: 8, \
  .group_segment_fixed_size: lds, .private_segment_fixed_size: 0, .wavefront_size: 64, .sgpr_count: 16, \
  .vgpr_count: 16, .max_flat_workgroup_size: 128, \
  .args: [ { .name: scratch, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global } ] }

.text
.globl strict_vm_read
.p2align 8
.type strict_vm_read,@function
strict_vm_read:
  LOAD_SCRATCH
  global_load_dword v2, v1, s[4:5]
  v_add_u32 v3, v2, v2      // v2 is still in flight: no s_waitcnt vmcnt(0)
  s_endpgm
.size strict_vm_read, .-strict_vm_read
KERNEL strict_vm_read, 0

.globl strict_smem_read
.p2align 8
.type strict_smem_read,@function
strict_smem_read:
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_add_u32 s6, s4, 4         // s4 is still in flight: no s_waitcnt lgkmcnt(0)
  s_endpgm
.size strict_smem_read, .-strict_smem_read
KERNEL strict_smem_read, 0

.globl strict_smem_out_of_order
.p2align 8
.type strict_smem_out_of_order,@function
strict_smem_out_of_order:
  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_load_dword s6, s[0:1], 0x0
  s_waitcnt lgkmcnt(1)         // scalar loads return out of order: proves nothing
  s_add_u32 s7, s4, 4
  s_endpgm
.size strict_smem_out_of_order, .-strict_smem_out_of_order
KERNEL strict_smem_out_of_order, 0

.globl strict_ds_read
.p2align 8
.type strict_ds_read,@function
strict_ds_read:
  v_mov_b32 v1, 0
  ds_read_b32 v2, v1
  v_add_u32 v3, v2, v2         // no s_waitcnt lgkmcnt(0)
  s_endpgm
.size strict_ds_read, .-strict_ds_read
KERNEL strict_ds_read, 256

.globl strict_barrier_lds
.p2align 8
.type strict_barrier_lds,@function
strict_barrier_lds:
  v_mov_b32 v1, 0
  ds_write_b32 v1, v0
  s_barrier                    // the write may not have landed
  s_endpgm
.size strict_barrier_lds, .-strict_barrier_lds
KERNEL strict_barrier_lds, 256

.globl strict_overwrite_in_flight
.p2align 8
.type strict_overwrite_in_flight,@function
strict_overwrite_in_flight:
  LOAD_SCRATCH
  global_load_dword v2, v1, s[4:5]
  v_mov_b32 v2, 0              // the load will land on top of this
  s_endpgm
.size strict_overwrite_in_flight, .-strict_overwrite_in_flight
KERNEL strict_overwrite_in_flight, 0

.globl strict_uninit_vgpr
.p2align 8
.type strict_uninit_vgpr,@function
strict_uninit_vgpr:
  v_add_u32 v1, v2, v0         // v2 was never written
  s_endpgm
.size strict_uninit_vgpr, .-strict_uninit_vgpr
KERNEL strict_uninit_vgpr, 0

.globl strict_uninit_sgpr
.p2align 8
.type strict_uninit_sgpr,@function
strict_uninit_sgpr:
  s_add_u32 s6, s7, 1          // s7 was never written
  s_endpgm
.size strict_uninit_sgpr, .-strict_uninit_sgpr
KERNEL strict_uninit_sgpr, 0

.globl strict_mfma_srcab
.p2align 8
.type strict_mfma_srcab,@function
strict_mfma_srcab:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  MFMA_F32_16X16X16_BF16 v[12:15], v[8:9], v[4:5], v[12:15]   // SrcA is the result just issued
  s_endpgm
.size strict_mfma_srcab, .-strict_mfma_srcab
KERNEL strict_mfma_srcab, 0

.globl strict_mfma_srcc_overlap
.p2align 8
.type strict_mfma_srcc_overlap,@function
strict_mfma_srcc_overlap:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  MFMA_F32_16X16X16_BF16 v[10:13], v[2:3], v[4:5], v[10:13]  // SrcC overlaps, not identical
  s_endpgm
.size strict_mfma_srcc_overlap, .-strict_mfma_srcc_overlap
KERNEL strict_mfma_srcc_overlap, 0

.globl strict_mfma_valu_read
.p2align 8
.type strict_mfma_valu_read,@function
strict_mfma_valu_read:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  v_mov_b32 v1, v8             // the MFMA result is not there yet
  s_endpgm
.size strict_mfma_valu_read, .-strict_mfma_valu_read
KERNEL strict_mfma_valu_read, 0

.globl strict_mfma_waw
.p2align 8
.type strict_mfma_waw,@function
strict_mfma_waw:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  v_mov_b32 v9, 0              // the MFMA writes v9 later
  s_endpgm
.size strict_mfma_waw, .-strict_mfma_waw
KERNEL strict_mfma_waw, 0

.globl strict_mfma_war
.p2align 8
.type strict_mfma_war,@function
strict_mfma_war:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[12:15], v[2:3], v[4:5], v[8:11]
  v_mov_b32 v8, 0              // the MFMA may not have read its SrcC yet
  s_endpgm
.size strict_mfma_war, .-strict_mfma_war
KERNEL strict_mfma_war, 0

.globl strict_valu_mfma
.p2align 8
.type strict_valu_mfma,@function
strict_valu_mfma:
  MFMA_INIT
  v_mov_b32 v2, 1.0
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]   // 2 wait states needed after the VALU write
  s_endpgm
.size strict_valu_mfma, .-strict_valu_mfma
KERNEL strict_valu_mfma, 0

.globl strict_exec_mfma
.p2align 8
.type strict_exec_mfma,@function
strict_exec_mfma:
  MFMA_INIT
  v_cmpx_eq_u32 vcc, v0, v0
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]   // 4 wait states needed after a VALU EXEC write
  s_endpgm
.size strict_exec_mfma, .-strict_exec_mfma
KERNEL strict_exec_mfma, 0

.globl strict_sgpr_vmem
.p2align 8
.type strict_sgpr_vmem,@function
strict_sgpr_vmem:
  LOAD_SCRATCH
  v_mov_b32 v5, s4
  s_nop 1
  v_readfirstlane_b32 s4, v5
  global_load_dword v2, v1, s[4:5]   // 5 wait states needed after a VALU SGPR write
  s_waitcnt vmcnt(0)
  s_endpgm
.size strict_sgpr_vmem, .-strict_sgpr_vmem
KERNEL strict_sgpr_vmem, 0

.globl strict_readlane_select
.p2align 8
.type strict_readlane_select,@function
strict_readlane_select:
  v_readfirstlane_b32 s6, v0
  v_readlane_b32 s7, v0, s6    // 4 wait states needed for the lane select
  s_endpgm
.size strict_readlane_select, .-strict_readlane_select
KERNEL strict_readlane_select, 0

.globl strict_setreg
.p2align 8
.type strict_setreg,@function
strict_setreg:
  s_mov_b32 s6, 0
  s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s6
  s_getreg_b32 s7, hwreg(HW_REG_MODE, 0, 4)   // 2 wait states needed
  s_endpgm
.size strict_setreg, .-strict_setreg
KERNEL strict_setreg, 0

.globl strict_wide_store
.p2align 8
.type strict_wide_store,@function
strict_wide_store:
  LOAD_SCRATCH
  v_mov_b32 v4, 0
  v_mov_b32 v5, 0
  v_mov_b32 v6, 0
  v_mov_b32 v7, 0
  global_store_dwordx4 v1, v[4:7], s[4:5]
  v_mov_b32 v4, 1              // the store may still read v4
  s_waitcnt vmcnt(0)
  s_endpgm
.size strict_wide_store, .-strict_wide_store
KERNEL strict_wide_store, 0

.globl strict_valu_sgpr_valu
.p2align 8
.type strict_valu_sgpr_valu,@function
strict_valu_sgpr_valu:
  v_mov_b32 v2, 1
  v_cmp_eq_u32 vcc, v0, v0
  v_cndmask_b32 v1, 0, v2, vcc // gfx942: 2 wait states after a VALU SGPR write
  s_endpgm
.size strict_valu_sgpr_valu, .-strict_valu_sgpr_valu
KERNEL strict_valu_sgpr_valu, 0

.globl strict_exec_readlane
.p2align 8
.type strict_exec_readlane,@function
strict_exec_readlane:
  v_cmpx_eq_u32 vcc, v0, v0
  s_nop 1
  v_readlane_b32 s6, v0, 0     // gfx942: 4 wait states after a VALU EXEC write
  s_endpgm
.size strict_exec_readlane, .-strict_exec_readlane
KERNEL strict_exec_readlane, 0

.globl strict_vgpr_readlane
.p2align 8
.type strict_vgpr_readlane,@function
strict_vgpr_readlane:
  v_mov_b32 v1, 5
  v_readlane_b32 s6, v1, 0     // gfx942: 1 wait state after the VALU VGPR write
  s_endpgm
.size strict_vgpr_readlane, .-strict_vgpr_readlane
KERNEL strict_vgpr_readlane, 0

.globl strict_ok_mfma_srcab
.p2align 8
.type strict_ok_mfma_srcab,@function
strict_ok_mfma_srcab:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_READ
  MFMA_F32_16X16X16_BF16 v[12:15], v[8:9], v[4:5], v[12:15]
  s_endpgm
.size strict_ok_mfma_srcab, .-strict_ok_mfma_srcab
KERNEL strict_ok_mfma_srcab, 0

.globl strict_ok_mfma_srcc_overlap
.p2align 8
.type strict_ok_mfma_srcc_overlap,@function
strict_ok_mfma_srcc_overlap:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_SRCC
  MFMA_F32_16X16X16_BF16 v[10:13], v[2:3], v[4:5], v[10:13]
  s_endpgm
.size strict_ok_mfma_srcc_overlap, .-strict_ok_mfma_srcc_overlap
KERNEL strict_ok_mfma_srcc_overlap, 0

.globl strict_ok_mfma_srcc_chain
.p2align 8
.type strict_ok_mfma_srcc_chain,@function
strict_ok_mfma_srcc_chain:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]   // identical SrcC: back to back
  s_endpgm
.size strict_ok_mfma_srcc_chain, .-strict_ok_mfma_srcc_chain
KERNEL strict_ok_mfma_srcc_chain, 0

.globl strict_ok_mfma_valu_read
.p2align 8
.type strict_ok_mfma_valu_read,@function
strict_ok_mfma_valu_read:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_READ
  v_mov_b32 v1, v8
  s_endpgm
.size strict_ok_mfma_valu_read, .-strict_ok_mfma_valu_read
KERNEL strict_ok_mfma_valu_read, 0

.globl strict_ok_mfma_waw
.p2align 8
.type strict_ok_mfma_waw,@function
strict_ok_mfma_waw:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_READ
  v_mov_b32 v9, 0
  s_endpgm
.size strict_ok_mfma_waw, .-strict_ok_mfma_waw
KERNEL strict_ok_mfma_waw, 0

.globl strict_ok_mfma_war
.p2align 8
.type strict_ok_mfma_war,@function
strict_ok_mfma_war:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[12:15], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_WAR
  v_mov_b32 v8, 0
  s_endpgm
.size strict_ok_mfma_war, .-strict_ok_mfma_war
KERNEL strict_ok_mfma_war, 0

.globl strict_ok_valu_mfma
.p2align 8
.type strict_ok_valu_mfma,@function
strict_ok_valu_mfma:
  MFMA_INIT
  v_mov_b32 v2, 1.0
  s_nop 1
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_endpgm
.size strict_ok_valu_mfma, .-strict_ok_valu_mfma
KERNEL strict_ok_valu_mfma, 0

.globl strict_ok_exec_mfma
.p2align 8
.type strict_ok_exec_mfma,@function
strict_ok_exec_mfma:
  MFMA_INIT
  v_cmpx_eq_u32 vcc, v0, v0
  s_nop 3
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_endpgm
.size strict_ok_exec_mfma, .-strict_ok_exec_mfma
KERNEL strict_ok_exec_mfma, 0

.globl strict_ok_sgpr_vmem
.p2align 8
.type strict_ok_sgpr_vmem,@function
strict_ok_sgpr_vmem:
  LOAD_SCRATCH
  v_mov_b32 v5, s4
  s_nop 1
  v_readfirstlane_b32 s4, v5
  s_nop 4
  global_load_dword v2, v1, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
.size strict_ok_sgpr_vmem, .-strict_ok_sgpr_vmem
KERNEL strict_ok_sgpr_vmem, 0

.globl strict_ok_readlane_select
.p2align 8
.type strict_ok_readlane_select,@function
strict_ok_readlane_select:
  v_readfirstlane_b32 s6, v0
  s_nop 3
  v_readlane_b32 s7, v0, s6
  s_endpgm
.size strict_ok_readlane_select, .-strict_ok_readlane_select
KERNEL strict_ok_readlane_select, 0

.globl strict_ok_setreg
.p2align 8
.type strict_ok_setreg,@function
strict_ok_setreg:
  s_mov_b32 s6, 0
  s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s6
  s_nop 1
  s_getreg_b32 s7, hwreg(HW_REG_MODE, 0, 4)
  s_endpgm
.size strict_ok_setreg, .-strict_ok_setreg
KERNEL strict_ok_setreg, 0

.globl strict_ok_wide_store
.p2align 8
.type strict_ok_wide_store,@function
strict_ok_wide_store:
  LOAD_SCRATCH
  v_mov_b32 v4, 0
  v_mov_b32 v5, 0
  v_mov_b32 v6, 0
  v_mov_b32 v7, 0
  global_store_dwordx4 v1, v[4:7], s[4:5]
  s_nop WS_WIDE_STORE
  v_mov_b32 v4, 1
  s_waitcnt vmcnt(0)
  s_endpgm
.size strict_ok_wide_store, .-strict_ok_wide_store
KERNEL strict_ok_wide_store, 0

.globl strict_ok_valu_sgpr_valu
.p2align 8
.type strict_ok_valu_sgpr_valu,@function
strict_ok_valu_sgpr_valu:
  v_mov_b32 v2, 1
  v_cmp_eq_u32 vcc, v0, v0
  s_nop 1
  v_cndmask_b32 v1, 0, v2, vcc
  s_endpgm
.size strict_ok_valu_sgpr_valu, .-strict_ok_valu_sgpr_valu
KERNEL strict_ok_valu_sgpr_valu, 0

.globl strict_ok_exec_readlane
.p2align 8
.type strict_ok_exec_readlane,@function
strict_ok_exec_readlane:
  v_cmpx_eq_u32 vcc, v0, v0
  s_nop 3
  v_readlane_b32 s6, v0, 0
  s_endpgm
.size strict_ok_exec_readlane, .-strict_ok_exec_readlane
KERNEL strict_ok_exec_readlane, 0

.globl strict_ok_vgpr_readlane
.p2align 8
.type strict_ok_vgpr_readlane,@function
strict_ok_vgpr_readlane:
  v_mov_b32 v1, 5
  s_nop 0
  v_readlane_b32 s6, v1, 0
  s_endpgm
.size strict_ok_vgpr_readlane, .-strict_ok_vgpr_readlane
KERNEL strict_ok_vgpr_readlane, 0

.globl strict_ok_vm_wait
.p2align 8
.type strict_ok_vm_wait,@function
strict_ok_vm_wait:
  LOAD_SCRATCH
  global_load_dword v2, v1, s[4:5]
  global_load_dword v3, v1, s[4:5]
  s_waitcnt vmcnt(1)             // in order: the first load has landed
  v_add_u32 v4, v2, v2
  s_waitcnt vmcnt(0)
  s_endpgm
.size strict_ok_vm_wait, .-strict_ok_vm_wait
KERNEL strict_ok_vm_wait, 0

.globl strict_lds_race_raw
.p2align 8
.type strict_lds_race_raw,@function
strict_lds_race_raw:
  WAVE_ID
  v_mov_b32 v1, 0
  s_cmp_eq_u32 s6, 0
  s_cbranch_scc0 1f
  ds_write_b32 v1, v0                // wave 0 writes
  s_waitcnt lgkmcnt(0)
  s_endpgm
1:
  ds_read_b32 v3, v1                 // wave 1 reads it with no barrier between
  s_waitcnt lgkmcnt(0)
  s_endpgm
.size strict_lds_race_raw, .-strict_lds_race_raw
KERNEL strict_lds_race_raw, 256

.globl strict_lds_race_war
.p2align 8
.type strict_lds_race_war,@function
strict_lds_race_war:
  WAVE_ID
  v_mov_b32 v1, 0
  s_cmp_eq_u32 s6, 0
  s_cbranch_scc0 1f
  ds_read_b32 v3, v1                 // wave 0 reads
  s_waitcnt lgkmcnt(0)
  s_endpgm
1:
  ds_write_b32 v1, v0                // wave 1 overwrites it with no barrier between
  s_waitcnt lgkmcnt(0)
  s_endpgm
.size strict_lds_race_war, .-strict_lds_race_war
KERNEL strict_lds_race_war, 256

.globl strict_ok_lds_barrier
.p2align 8
.type strict_ok_lds_barrier,@function
strict_ok_lds_barrier:
  WAVE_ID
  v_mov_b32 v1, 0
  s_cmp_eq_u32 s6, 0
  s_cbranch_scc0 1f
  ds_write_b32 v1, v0                // wave 0 writes
1:
  s_waitcnt lgkmcnt(0)
  s_barrier
  ds_read_b32 v3, v1                 // every wave reads after the barrier
  s_waitcnt lgkmcnt(0)
  s_endpgm
.size strict_ok_lds_barrier, .-strict_ok_lds_barrier
KERNEL strict_ok_lds_barrier, 256

// strict_short_*: the strict_ok_* sequences one wait state short; each must fail (gfx942-only
// rules: pass on gfx90a).
.globl strict_short_mfma_srcab
.p2align 8
.type strict_short_mfma_srcab,@function
strict_short_mfma_srcab:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_READ - 1
  MFMA_F32_16X16X16_BF16 v[12:15], v[8:9], v[4:5], v[12:15]
  s_endpgm
.size strict_short_mfma_srcab, .-strict_short_mfma_srcab
KERNEL strict_short_mfma_srcab, 0

.globl strict_short_mfma_srcc_overlap
.p2align 8
.type strict_short_mfma_srcc_overlap,@function
strict_short_mfma_srcc_overlap:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_SRCC - 1
  MFMA_F32_16X16X16_BF16 v[10:13], v[2:3], v[4:5], v[10:13]
  s_endpgm
.size strict_short_mfma_srcc_overlap, .-strict_short_mfma_srcc_overlap
KERNEL strict_short_mfma_srcc_overlap, 0

.globl strict_short_mfma_valu_read
.p2align 8
.type strict_short_mfma_valu_read,@function
strict_short_mfma_valu_read:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_READ - 1
  v_mov_b32 v1, v8
  s_endpgm
.size strict_short_mfma_valu_read, .-strict_short_mfma_valu_read
KERNEL strict_short_mfma_valu_read, 0

.globl strict_short_mfma_waw
.p2align 8
.type strict_short_mfma_waw,@function
strict_short_mfma_waw:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_READ - 1
  v_mov_b32 v9, 0
  s_endpgm
.size strict_short_mfma_waw, .-strict_short_mfma_waw
KERNEL strict_short_mfma_waw, 0

.globl strict_short_mfma_war
.p2align 8
.type strict_short_mfma_war,@function
strict_short_mfma_war:
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[12:15], v[2:3], v[4:5], v[8:11]
  s_nop WS_MFMA_WAR - 1
  v_mov_b32 v8, 0
  s_endpgm
.size strict_short_mfma_war, .-strict_short_mfma_war
KERNEL strict_short_mfma_war, 0

.globl strict_short_valu_mfma
.p2align 8
.type strict_short_valu_mfma,@function
strict_short_valu_mfma:
  MFMA_INIT
  v_mov_b32 v2, 1.0
  s_nop 1 - 1
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_endpgm
.size strict_short_valu_mfma, .-strict_short_valu_mfma
KERNEL strict_short_valu_mfma, 0

.globl strict_short_exec_mfma
.p2align 8
.type strict_short_exec_mfma,@function
strict_short_exec_mfma:
  MFMA_INIT
  v_cmpx_eq_u32 vcc, v0, v0
  s_nop 3 - 1
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_endpgm
.size strict_short_exec_mfma, .-strict_short_exec_mfma
KERNEL strict_short_exec_mfma, 0

.globl strict_short_sgpr_vmem
.p2align 8
.type strict_short_sgpr_vmem,@function
strict_short_sgpr_vmem:
  LOAD_SCRATCH
  v_mov_b32 v5, s4
  s_nop 1
  v_readfirstlane_b32 s4, v5
  s_nop 4 - 1
  global_load_dword v2, v1, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm
.size strict_short_sgpr_vmem, .-strict_short_sgpr_vmem
KERNEL strict_short_sgpr_vmem, 0

.globl strict_short_readlane_select
.p2align 8
.type strict_short_readlane_select,@function
strict_short_readlane_select:
  v_readfirstlane_b32 s6, v0
  s_nop 3 - 1
  v_readlane_b32 s7, v0, s6
  s_endpgm
.size strict_short_readlane_select, .-strict_short_readlane_select
KERNEL strict_short_readlane_select, 0

.globl strict_short_setreg
.p2align 8
.type strict_short_setreg,@function
strict_short_setreg:
  s_mov_b32 s6, 0
  s_setreg_b32 hwreg(HW_REG_MODE, 0, 4), s6
  s_nop 1 - 1
  s_getreg_b32 s7, hwreg(HW_REG_MODE, 0, 4)
  s_endpgm
.size strict_short_setreg, .-strict_short_setreg
KERNEL strict_short_setreg, 0

.globl strict_short_wide_store
.p2align 8
.type strict_short_wide_store,@function
strict_short_wide_store:
  LOAD_SCRATCH
  v_mov_b32 v4, 0
  v_mov_b32 v5, 0
  v_mov_b32 v6, 0
  v_mov_b32 v7, 0
  global_store_dwordx4 v1, v[4:7], s[4:5]
#if WS_WIDE_STORE > 0
  s_nop WS_WIDE_STORE - 1
#endif
  v_mov_b32 v4, 1
  s_waitcnt vmcnt(0)
  s_endpgm
.size strict_short_wide_store, .-strict_short_wide_store
KERNEL strict_short_wide_store, 0

.globl strict_short_valu_sgpr_valu
.p2align 8
.type strict_short_valu_sgpr_valu,@function
strict_short_valu_sgpr_valu:
  v_mov_b32 v2, 1
  v_cmp_eq_u32 vcc, v0, v0
  s_nop 1 - 1
  v_cndmask_b32 v1, 0, v2, vcc
  s_endpgm
.size strict_short_valu_sgpr_valu, .-strict_short_valu_sgpr_valu
KERNEL strict_short_valu_sgpr_valu, 0

.globl strict_short_exec_readlane
.p2align 8
.type strict_short_exec_readlane,@function
strict_short_exec_readlane:
  v_cmpx_eq_u32 vcc, v0, v0
  s_nop 3 - 1
  v_readlane_b32 s6, v0, 0
  s_endpgm
.size strict_short_exec_readlane, .-strict_short_exec_readlane
KERNEL strict_short_exec_readlane, 0

.globl strict_short_vgpr_readlane
.p2align 8
.type strict_short_vgpr_readlane,@function
strict_short_vgpr_readlane:
  v_mov_b32 v1, 5
  v_readlane_b32 s6, v1, 0
  s_endpgm
.size strict_short_vgpr_readlane, .-strict_short_vgpr_readlane
KERNEL strict_short_vgpr_readlane, 0

// ---- DPP and LDS DMA ----
// s[8:11] = a raw buffer resource over the first 256 bytes of the scratch buffer.
.macro SCRATCH_RSRC
  s_mov_b32 s8, s4
  s_and_b32 s9, s5, 0xffff
  s_mov_b32 s10, 256
  s_mov_b32 s11, 0x00020000
.endm
.macro K name, lds=0
.globl \name
.p2align 8
.type \name,@function
\name:
.endm
.macro END name, lds=0
  s_endpgm
.size \name, .-\name
KERNEL \name, \lds
.endm

// A VALU write of a VGPR, then a DPP read of it: 2 wait states.
K strict_dpp_vgpr
  v_mov_b32 v2, v0
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
END strict_dpp_vgpr
K strict_short_dpp_vgpr
  v_mov_b32 v2, v0
  s_nop 0
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
END strict_short_dpp_vgpr
K strict_ok_dpp_vgpr
  v_mov_b32 v2, v0
  s_nop 1
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
END strict_ok_dpp_vgpr
// ... src1 too: every VGPR a DPP instruction reads.
K strict_dpp_src1
  v_mov_b32 v2, v0
  s_nop 1
  v_mov_b32 v3, 1
  v_add_u32_dpp v4, v2, v3 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
END strict_dpp_src1

// A VALU write of EXEC, then a DPP instruction: 5 wait states.
K strict_dpp_exec
  v_mov_b32 v2, v0
  s_nop 1
  v_cmpx_eq_u32 vcc, v0, v0
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
END strict_dpp_exec
K strict_short_dpp_exec
  v_mov_b32 v2, v0
  s_nop 1
  v_cmpx_eq_u32 vcc, v0, v0
  s_nop 3
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
END strict_short_dpp_exec
K strict_ok_dpp_exec
  v_mov_b32 v2, v0
  s_nop 1
  v_cmpx_eq_u32 vcc, v0, v0
  s_nop 4
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
END strict_ok_dpp_exec

// DPP reads src0 in other lanes: lane 1 reads lane 0, which nothing wrote (EXEC was 1...10 then).
K strict_dpp_uninit
  s_mov_b32 exec_lo, -2
  v_mov_b32 v2, v0
  s_mov_b32 exec_lo, -1
  s_nop 1
  v_mov_b32_dpp v3, v2 row_shr:1 row_mask:0xf bank_mask:0xf
END strict_dpp_uninit

// An SALU write of M0, then an LDS DMA: 1 wait state (0 is one short).
K strict_lds_dma_m0
  LOAD_SCRATCH
  SCRATCH_RSRC
  s_mov_b32 m0, 0
  buffer_load_dword v1, s[8:11], 0 offen lds
  s_waitcnt vmcnt(0)
END strict_lds_dma_m0, 256
K strict_ok_lds_dma_m0
  LOAD_SCRATCH
  SCRATCH_RSRC
  s_mov_b32 m0, 0
  s_nop 0
  buffer_load_dword v1, s[8:11], 0 offen lds
  s_waitcnt vmcnt(0)
END strict_ok_lds_dma_m0, 256
// LDS DMA with M0 never written.
K strict_lds_dma_uninit_m0
  LOAD_SCRATCH
  SCRATCH_RSRC
  buffer_load_dword v1, s[8:11], 0 offen lds
  s_waitcnt vmcnt(0)
END strict_lds_dma_uninit_m0, 256
// Reading LDS that an LDS DMA is still writing (no s_waitcnt vmcnt).
K strict_lds_dma_read
  LOAD_SCRATCH
  SCRATCH_RSRC
  s_mov_b32 m0, 0
  s_nop 0
  buffer_load_dword v1, s[8:11], 0 offen lds
  ds_read_b32 v2, v1 offset:4
  s_waitcnt vmcnt(0) lgkmcnt(0)
END strict_lds_dma_read, 256
// An LDS DMA in flight at a barrier.
K strict_lds_dma_barrier
  LOAD_SCRATCH
  SCRATCH_RSRC
  s_mov_b32 m0, 0
  s_nop 0
  buffer_load_dword v1, s[8:11], 0 offen lds
  s_barrier
  s_waitcnt vmcnt(0)
END strict_lds_dma_barrier, 256

// Functional: the scratch buffer's dwords through LDS DMA (vaddr 4 * lane + 16, offset:16: lane
// l loads buffer dword l + 8 and writes LDS byte M0 + 16 + 4 * l = 32 + 4 * l; lanes 56..63 lie
// past num_records = 256 and write 0), read back reversed by ds_read, stored at dwords 64..127.
K strict_ok_lds_dma
  LOAD_SCRATCH
  SCRATCH_RSRC
  v_lshlrev_b32 v2, 2, v0            // 4 * lane
  v_add_u32 v3, 16, v2
  s_mov_b32 m0, 16
  s_nop 0
  buffer_load_dword v3, s[8:11], 0 offen offset:16 lds
  v_sub_u32 v4, 0xfc, v2             // 4 * (63 - lane)
  s_waitcnt vmcnt(0)
  ds_read_b32 v5, v4 offset:32
  s_waitcnt lgkmcnt(0)
  global_store_dword v2, v5, s[4:5] offset:256
  s_waitcnt vmcnt(0)
END strict_ok_lds_dma, 512

// Functional: each DPP control on v2 = lane, stored at dword 64 * n + lane (0xffffffff where a
// lane is not written); then the wave reduction of gcn_wave.inc on lane + 1.
.macro DPP_CASE n, insn:vararg
  v_mov_b32 v3, -1
  s_nop 1
  \insn
  global_store_dword v4, v3, s[4:5] offset:256*\n
.endm
K strict_ok_dpp_forms
  LOAD_SCRATCH
  v_mov_b32 v2, v0
  v_lshlrev_b32 v4, 2, v0
  DPP_CASE 0, v_mov_b32_dpp v3, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
  DPP_CASE 1, v_mov_b32_dpp v3, v2 row_shl:1 row_mask:0xf bank_mask:0xf
  DPP_CASE 2, v_mov_b32_dpp v3, v2 row_shr:3 row_mask:0xf bank_mask:0xf bound_ctrl:0
  DPP_CASE 3, v_mov_b32_dpp v3, v2 row_ror:5 row_mask:0xf bank_mask:0xf
  DPP_CASE 4, v_mov_b32_dpp v3, v2 wave_shl:1 row_mask:0xf bank_mask:0xf
  DPP_CASE 5, v_mov_b32_dpp v3, v2 wave_rol:1 row_mask:0xf bank_mask:0xf
  DPP_CASE 6, v_mov_b32_dpp v3, v2 wave_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
  DPP_CASE 7, v_mov_b32_dpp v3, v2 wave_ror:1 row_mask:0xf bank_mask:0xf
  DPP_CASE 8, v_mov_b32_dpp v3, v2 row_mirror row_mask:0xf bank_mask:0xf
  DPP_CASE 9, v_mov_b32_dpp v3, v2 row_half_mirror row_mask:0xf bank_mask:0xf
  DPP_CASE 10, v_mov_b32_dpp v3, v2 row_bcast:15 row_mask:0xa bank_mask:0xf
  DPP_CASE 11, v_mov_b32_dpp v3, v2 row_bcast:31 row_mask:0xc bank_mask:0xf
  DPP_CASE 12, v_add_u32_dpp v3, v2, v4 quad_perm:[0,0,0,0] row_mask:0x5 bank_mask:0x6
  // lane 0 inactive: lane 1's source is invalid (not written, then 0 under bound_ctrl)
  v_mov_b32 v3, -1
  v_mov_b32 v5, -1
  s_mov_b32 exec_lo, -2
  s_nop 1
  v_mov_b32_dpp v3, v2 wave_ror:1 row_mask:0xf bank_mask:0xf
  v_mov_b32_dpp v5, v2 wave_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
  s_mov_b32 exec_lo, -1
  global_store_dword v4, v3, s[4:5] offset:256*13
  global_store_dword v4, v5, s[4:5] offset:256*14
  v_add_u32 v6, 1, v0
  WAVE_REDUCE v_add_u32, v6, s7
  global_store_dword v4, v6, s[4:5] offset:256*15
  s_waitcnt vmcnt(0)
END strict_ok_dpp_forms

// gfx942: a transcendental result read by a non-transcendental VALU: 1 wait state (0 is one
// short); a transcendental reading it needs none.
K strict_trans_forward
  v_mov_b32 v1, 1.0
  v_exp_f32 v2, v1
  v_add_f32 v3, v2, v2
END strict_trans_forward
K strict_ok_trans_forward
  v_mov_b32 v1, 1.0
  v_exp_f32 v2, v1
  v_rcp_f32 v4, v2
  s_nop 0
  v_add_f32 v3, v2, v4
END strict_ok_trans_forward
// gfx942: a VALU result written to the high half (op_sel dst) read by a VALU: 1 wait state.
K strict_dst_sel
  v_mov_b32 v1, 1.0
  v_fma_f16 v2, v1, v1, v1 op_sel:[0,0,0,1]
  v_add_f32 v3, v2, v2
END strict_dst_sel
K strict_ok_dst_sel
  v_mov_b32 v1, 1.0
  v_fma_f16 v2, v1, v1, v1 op_sel:[0,0,0,1]
  s_nop 0
  v_add_f32 v3, v2, v2
END strict_ok_dst_sel

// An MFMA result read as a DPP src0 (the permuted operand): the MFMA -> VALU rule applies.
K strict_dpp_mfma
  MFMA_INIT
  MFMA_F32_16X16X16_BF16 v[8:11], v[2:3], v[4:5], v[8:11]
  s_nop 2
  v_mov_b32_dpp v12, v8 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:0
END strict_dpp_mfma

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: GCN_TARGET_YAML
amdhsa.kernels:
  META(strict_vm_read, 0)
  META(strict_smem_read, 0)
  META(strict_smem_out_of_order, 0)
  META(strict_ds_read, 256)
  META(strict_barrier_lds, 256)
  META(strict_overwrite_in_flight, 0)
  META(strict_uninit_vgpr, 0)
  META(strict_uninit_sgpr, 0)
  META(strict_mfma_srcab, 0)
  META(strict_mfma_srcc_overlap, 0)
  META(strict_mfma_valu_read, 0)
  META(strict_mfma_waw, 0)
  META(strict_mfma_war, 0)
  META(strict_valu_mfma, 0)
  META(strict_exec_mfma, 0)
  META(strict_sgpr_vmem, 0)
  META(strict_readlane_select, 0)
  META(strict_setreg, 0)
  META(strict_wide_store, 0)
  META(strict_valu_sgpr_valu, 0)
  META(strict_exec_readlane, 0)
  META(strict_vgpr_readlane, 0)
  META(strict_ok_mfma_srcab, 0)
  META(strict_ok_mfma_srcc_overlap, 0)
  META(strict_ok_mfma_srcc_chain, 0)
  META(strict_ok_mfma_valu_read, 0)
  META(strict_ok_mfma_waw, 0)
  META(strict_ok_mfma_war, 0)
  META(strict_ok_valu_mfma, 0)
  META(strict_ok_exec_mfma, 0)
  META(strict_ok_sgpr_vmem, 0)
  META(strict_ok_readlane_select, 0)
  META(strict_ok_setreg, 0)
  META(strict_ok_wide_store, 0)
  META(strict_ok_valu_sgpr_valu, 0)
  META(strict_ok_exec_readlane, 0)
  META(strict_ok_vgpr_readlane, 0)
  META(strict_ok_vm_wait, 0)
  META(strict_lds_race_raw, 256)
  META(strict_lds_race_war, 256)
  META(strict_ok_lds_barrier, 256)
  META(strict_short_mfma_srcab, 0)
  META(strict_short_mfma_srcc_overlap, 0)
  META(strict_short_mfma_valu_read, 0)
  META(strict_short_mfma_waw, 0)
  META(strict_short_mfma_war, 0)
  META(strict_short_valu_mfma, 0)
  META(strict_short_exec_mfma, 0)
  META(strict_short_sgpr_vmem, 0)
  META(strict_short_readlane_select, 0)
  META(strict_short_setreg, 0)
  META(strict_short_wide_store, 0)
  META(strict_short_valu_sgpr_valu, 0)
  META(strict_short_exec_readlane, 0)
  META(strict_short_vgpr_readlane, 0)
  META(strict_dpp_vgpr, 0)
  META(strict_short_dpp_vgpr, 0)
  META(strict_ok_dpp_vgpr, 0)
  META(strict_dpp_src1, 0)
  META(strict_dpp_exec, 0)
  META(strict_short_dpp_exec, 0)
  META(strict_ok_dpp_exec, 0)
  META(strict_dpp_uninit, 0)
  META(strict_lds_dma_m0, 256)
  META(strict_ok_lds_dma_m0, 256)
  META(strict_lds_dma_uninit_m0, 256)
  META(strict_lds_dma_read, 256)
  META(strict_lds_dma_barrier, 256)
  META(strict_ok_lds_dma, 512)
  META(strict_ok_dpp_forms, 0)
  META(strict_trans_forward, 0)
  META(strict_ok_trans_forward, 0)
  META(strict_dst_sel, 0)
  META(strict_ok_dst_sel, 0)
  META(strict_dpp_mfma, 0)
...
.end_amdgpu_metadata
