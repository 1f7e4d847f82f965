// c[M][N] (f32) = a[M][K] (bf16) x b[K][N] (bf16), all row-major, on MFMA 32x32x8 bf16.
// Launch: block (64,1,1), grid (N / 32, M / 32, 1): one wave per 32x32 tile of c.
// Requires M % 32 == 0, N % 32 == 0, K % 8 == 0, K >= 8; every buffer below 4 GiB.
// Register layout of v_mfma_f32_32x32x8 bf16 (CDNA2 and CDNA3 alike), lane l:
//   A operand: a[i = l % 32][k0 + 4 * (l / 32) + 0..3] in two VGPRs (low half first)
//   B operand: b[k0 + 4 * (l / 32) + 0..3][j = l % 32]
//   result register r: c[8 * (r / 4) + 4 * (l / 32) + r % 4][l % 32], in a0..a15
// Registers in: s[0:1] kernarg pointer, s2 workgroup id x (tile column), s3 workgroup id y
// (tile row), v0 work-item id x.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

// Four result rows of one register group: read a0..a3 style accumulators and store them
// one c row apart, then step to the next group (5 rows further).
.macro STORE_GROUP r0, r1, r2, r3
  v_accvgpr_read_b32 v15, a\r0
  global_store_dword v14, v15, s[8:9]
  v_add_u32 v14, s18, v14
  v_accvgpr_read_b32 v15, a\r1
  global_store_dword v14, v15, s[8:9]
  v_add_u32 v14, s18, v14
  v_accvgpr_read_b32 v15, a\r2
  global_store_dword v14, v15, s[8:9]
  v_add_u32 v14, s18, v14
  v_accvgpr_read_b32 v15, a\r3
  global_store_dword v14, v15, s[8:9]
  v_add_u32 v14, s19, v14
.endm

.text
.globl halcyon_gemm_bf16_tile
.p2align 8
.type halcyon_gemm_bf16_tile,@function
halcyon_gemm_bf16_tile:
  s_load_dwordx4 s[4:7], s[0:1], 0x0        // a, b
  s_load_dwordx2 s[8:9], s[0:1], 0x10       // c
  s_load_dwordx2 s[10:11], s[0:1], 0x18     // M, N
  s_load_dword s12, s[0:1], 0x20            // K
  v_and_b32 v1, 31, v0                      // l % 32
  v_lshrrev_b32 v2, 5, v0
  v_lshlrev_b32 v2, 2, v2                   // kq = 4 * (l / 32)
  .irp r, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
  v_accvgpr_write_b32 a\r, 0
  .endr
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s13, s3, 5                     // tile row * 32
  s_lshl_b32 s14, s2, 5                     // tile column * 32
  v_add_u32 v3, s13, v1                     // a: ((row0 + i) * K + kq) * 2
  v_mul_lo_u32 v3, v3, s12
  v_add_u32 v3, v3, v2
  v_lshlrev_b32 v3, 1, v3
  v_mul_lo_u32 v4, v2, s11                  // b: (kq * N + col0 + j) * 2
  v_add_u32 v4, s14, v4
  v_add_u32 v4, v4, v1
  v_lshlrev_b32 v4, 1, v4
  s_lshl_b32 s15, s11, 1                    // bytes per b row
  s_lshl_b32 s16, s11, 4                    // bytes per 8 b rows
  s_mov_b32 s17, 0                          // k0
.Lk_loop:
  global_load_dwordx2 v[6:7], v3, s[4:5]    // a[i][k0 + kq + 0..3]
  global_load_ushort v8, v4, s[6:7]         // b[k0 + kq + 0..3][j]
  v_add_u32 v5, s15, v4
  global_load_ushort v9, v5, s[6:7]
  v_add_u32 v5, s15, v5
  global_load_ushort v10, v5, s[6:7]
  v_add_u32 v5, s15, v5
  global_load_ushort v11, v5, s[6:7]
  s_waitcnt vmcnt(0)
  v_lshl_or_b32 v12, v9, 16, v8
  v_lshl_or_b32 v13, v11, 16, v10
  s_nop 1
  MFMA_F32_32X32X8_BF16 a[0:15], v[6:7], v[12:13], a[0:15]
  v_add_u32 v3, 16, v3                      // a: 8 columns further
  v_add_u32 v4, s16, v4                     // b: 8 rows further
  s_add_u32 s17, s17, 8
  s_cmp_lt_u32 s17, s12
  s_cbranch_scc1 .Lk_loop
  s_nop 7                                   // MFMA results are ready after 16 passes
  s_nop 7
  s_nop 7
  v_add_u32 v14, s13, v2                    // c: ((row0 + kq) * N + col0 + j) * 4
  v_mul_lo_u32 v14, v14, s11
  v_add_u32 v14, s14, v14
  v_add_u32 v14, v14, v1
  v_lshlrev_b32 v14, 2, v14
  s_lshl_b32 s18, s11, 2                    // bytes per c row
  s_mul_i32 s19, s18, 5                     // from row 3 of a group to row 0 of the next
  STORE_GROUP 0, 1, 2, 3
  STORE_GROUP 4, 5, 6, 7
  STORE_GROUP 8, 9, 10, 11
  STORE_GROUP 12, 13, 14, 15
  s_endpgm
.size halcyon_gemm_bf16_tile, .-halcyon_gemm_bf16_tile

.rodata
.p2align 6
.amdhsa_kernel halcyon_gemm_bf16_tile
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_system_sgpr_workgroup_id_y 1
  .amdhsa_system_vgpr_workitem_id 0
  .amdhsa_kernarg_size 36
  .amdhsa_group_segment_fixed_size 0
  .amdhsa_next_free_vgpr 32
  .amdhsa_next_free_sgpr 20
  .amdhsa_accum_offset 16
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: GCN_TARGET_YAML
amdhsa.kernels:
  - .name: halcyon_gemm_bf16_tile
    .symbol: halcyon_gemm_bf16_tile.kd
    .kernarg_segment_size: 36
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 20
    .vgpr_count: 16
    .agpr_count: 16
    .max_flat_workgroup_size: 64
    .args:
      - { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: m_rows, .offset: 24, .size: 4, .value_kind: by_value }
      - { .name: n_cols, .offset: 28, .size: 4, .value_kind: by_value }
      - { .name: k_depth, .offset: 32, .size: 4, .value_kind: by_value }
...
.end_amdgpu_metadata
