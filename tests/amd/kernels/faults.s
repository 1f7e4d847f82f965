// Kernels that the simulator must refuse to run, each in a specific, well-reported way.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

.macro KERNEL_DESCRIPTOR name, vgprs, accum
.rodata
.p2align 6
.amdhsa_kernel \name
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_kernarg_size 8
  .amdhsa_group_segment_fixed_size 0
  .amdhsa_next_free_vgpr \vgprs
  .amdhsa_next_free_sgpr 8
  .amdhsa_accum_offset \accum
.end_amdhsa_kernel
.text
.endm

.text
// v_sin_f32 is a real gfx942 instruction that the simulator does not implement.
.globl fault_unsupported
.p2align 8
.type fault_unsupported,@function
fault_unsupported:
  v_mov_b32 v1, 0
  v_sin_f32 v1, v0
  s_endpgm
.size fault_unsupported, .-fault_unsupported
KERNEL_DESCRIPTOR fault_unsupported, 4, 4

// Uses v40 while the descriptor grants 4 VGPRs.
.globl fault_vgpr
.p2align 8
.type fault_vgpr,@function
fault_vgpr:
  v_mov_b32 v40, 1
  s_endpgm
.size fault_vgpr, .-fault_vgpr
KERNEL_DESCRIPTOR fault_vgpr, 4, 4

// Never ends.
.globl fault_loop
.p2align 8
.type fault_loop,@function
fault_loop:
  s_mov_b32 s4, 0
.Lspin:
  s_add_u32 s4, s4, 1
  s_branch .Lspin
.size fault_loop, .-fault_loop
KERNEL_DESCRIPTOR fault_loop, 4, 4

// Writes LDS at 64 KiB while the kernel has none.
.globl fault_lds
.p2align 8
.type fault_lds,@function
fault_lds:
  v_mov_b32 v1, 0x10000
  ds_write_b32 v1, v0
  s_endpgm
.size fault_lds, .-fault_lds
KERNEL_DESCRIPTOR fault_lds, 4, 4

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: GCN_TARGET_YAML
amdhsa.kernels:
  - .name: fault_unsupported
    .symbol: fault_unsupported.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 8
    .vgpr_count: 4
    .max_flat_workgroup_size: 64
    .args:
      - { .name: unused, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: fault_vgpr
    .symbol: fault_vgpr.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 8
    .vgpr_count: 4
    .max_flat_workgroup_size: 64
    .args:
      - { .name: unused, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: fault_loop
    .symbol: fault_loop.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 8
    .vgpr_count: 4
    .max_flat_workgroup_size: 64
    .args:
      - { .name: unused, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
  - .name: fault_lds
    .symbol: fault_lds.kd
    .kernarg_segment_size: 8
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 8
    .vgpr_count: 4
    .max_flat_workgroup_size: 64
    .args:
      - { .name: unused, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
...
.end_amdgpu_metadata
