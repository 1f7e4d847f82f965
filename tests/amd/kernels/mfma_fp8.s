// One FP8 MFMA, of the shape the argument names, for the simulator's test
// (test_sim_mfma_fp8.cpp): lane l loads its A and B registers (8 bytes each) from a[l], b[l] and
// its C registers from c[l] (16 floats a lane), runs the instruction once and stores D to d[l]
// (16 floats a lane; the 16x16x32 shape's 4 first). gfx942 only: CDNA2 has no FP8 MFMA.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

// The four pointers a, b, c, d; v1 = 8 * lane, v2 = 64 * lane; A in v[4:5], B in v[6:7], C in
// v[8:23].
.macro LOAD_OPERANDS
  s_load_dwordx8 s[4:11], s[0:1], 0x0
  v_lshlrev_b32 v1, 3, v0
  v_lshlrev_b32 v2, 6, v0
  s_waitcnt lgkmcnt(0)
  global_load_dwordx2 v[4:5], v1, s[4:5]
  global_load_dwordx2 v[6:7], v1, s[6:7]
  global_load_dwordx4 v[8:11], v2, s[8:9]
  global_load_dwordx4 v[12:15], v2, s[8:9] offset:16
  global_load_dwordx4 v[16:19], v2, s[8:9] offset:32
  global_load_dwordx4 v[20:23], v2, s[8:9] offset:48
  s_waitcnt vmcnt(0)
.endm

.text
.globl mfma_fp8
.p2align 8
.type mfma_fp8,@function
mfma_fp8:
  s_load_dword s12, s[0:1], 0x20            // shape: 32 (32x32x16) or 16 (16x16x32)
  LOAD_OPERANDS
  s_cmp_eq_u32 s12, 16
  s_cbranch_scc1 .L16
  v_mfma_f32_32x32x16_fp8_fp8 v[24:39], v[4:5], v[6:7], v[8:23]
  s_nop 7                                   // the result is ready after 8 passes + 3
  s_nop 7
  global_store_dwordx4 v2, v[28:31], s[10:11] offset:16
  global_store_dwordx4 v2, v[32:35], s[10:11] offset:32
  global_store_dwordx4 v2, v[36:39], s[10:11] offset:48
  s_branch .Lstore
.L16:
  v_mfma_f32_16x16x32_fp8_fp8 v[24:27], v[4:5], v[6:7], v[8:11]
  s_nop 7                                   // 4 passes + 3
.Lstore:
  global_store_dwordx4 v2, v[24:27], s[10:11]
  s_endpgm
.size mfma_fp8, .-mfma_fp8

.rodata
.p2align 6
.amdhsa_kernel mfma_fp8
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_kernarg_size 36
  .amdhsa_group_segment_fixed_size 0
  .amdhsa_next_free_vgpr 40
  .amdhsa_next_free_sgpr 13
  .amdhsa_accum_offset 40
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: GCN_TARGET_YAML
amdhsa.kernels:
  - .name: mfma_fp8
    .symbol: mfma_fp8.kd
    .kernarg_segment_size: 36
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 13
    .vgpr_count: 40
    .max_flat_workgroup_size: 64
    .args:
      - { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: d, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: shape, .offset: 32, .size: 4, .value_kind: by_value }
...
.end_amdgpu_metadata
