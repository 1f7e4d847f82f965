// c[M][N] (f32) = a[M][K] (bf16) x b[K][N] (bf16), all row-major, on MFMA 32x32x8 bf16.
// Launch: block (64,1,1), grid (ceil(N / 32), ceil(M / 32), 1): one wave per 32x32 tile of c.
// Any M, N, K >= 1: elements outside the matrices are read as zero and never written. Every
// buffer must lie below 4 GiB of offsets. Loads are one bf16 at a time, so any K is aligned.
// Register layout of v_mfma_f32_32x32x8 bf16 (CDNA2 and CDNA3 alike), lane l:
//   A operand: a[i = l % 32][k0 + 4 * (l / 32) + 0..3] in two VGPRs (low half first)
//   B operand: b[k0 + 4 * (l / 32) + 0..3][j = l % 32]
//   result register r: c[8 * (r / 4) + 4 * (l / 32) + r % 4][l % 32], in a0..a15
// Registers in: s[0:1] kernarg pointer, s2 workgroup id x (tile column), s3 workgroup id y
// (tile row), v0 work-item id x.
// Registers used: v1 = l % 32, v2 = kq = 4 * (l / 32), v3 = (row0 + i) * K, v4 = col0 + j,
// s[20:21] = lanes whose a row is inside M, s[22:23] = lanes whose column is inside N.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

// v5 = k0 + kq + e; s[24:25] = lanes with v5 < K.
.macro K_INDEX e
  v_add_u32 v5, s17, v2
  v_add_u32 v5, \e, v5
  v_cmp_gt_u32 s[24:25], s12, v5
.endm

// \dst = a[row0 + i][k0 + kq + e], or 0 outside a (those lanes read element 0 instead).
.macro LOAD_A e, dst
  K_INDEX \e
  s_and_b64 s[26:27], s[24:25], s[20:21]
  v_add_u32 v6, v3, v5
  v_cndmask_b32 v6, 0, v6, s[26:27]
  v_lshlrev_b32 v6, 1, v6
  global_load_ushort \dst, v6, s[4:5]
  s_waitcnt vmcnt(0)
  v_cndmask_b32 \dst, 0, \dst, s[26:27]
.endm

// \dst = b[k0 + kq + e][col0 + j], or 0 outside b.
.macro LOAD_B e, dst
  K_INDEX \e
  s_and_b64 s[26:27], s[24:25], s[22:23]
  v_mul_lo_u32 v6, v5, s11
  v_add_u32 v6, v6, v4
  v_cndmask_b32 v6, 0, v6, s[26:27]
  v_lshlrev_b32 v6, 1, v6
  global_load_ushort \dst, v6, s[6:7]
  s_waitcnt vmcnt(0)
  v_cndmask_b32 \dst, 0, \dst, s[26:27]
.endm

// Stores accumulator \acc to c[v20][col0 + j] on lanes inside c, then moves v20 down \step rows.
.macro STORE_C acc, step
  v_cmp_gt_u32 vcc, s10, v20
  s_and_b64 vcc, vcc, s[22:23]
  s_and_saveexec_b64 s[30:31], vcc
  v_mul_lo_u32 v21, v20, s11
  v_add_u32 v21, v21, v4
  v_lshlrev_b32 v21, 2, v21
  v_accvgpr_read_b32 v22, \acc
  global_store_dword v21, v22, s[8:9]
  s_mov_b64 exec, s[30:31]
  v_add_u32 v20, \step, v20
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
  v_and_b32 v1, 31, v0                      // i = j = l % 32
  v_lshrrev_b32 v2, 5, v0
  v_lshlrev_b32 v2, 2, v2                   // kq = 4 * (l / 32)
  .irp r, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
  v_accvgpr_write_b32 a\r, 0
  .endr
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s13, s3, 5                     // row0 = tile row * 32
  s_lshl_b32 s14, s2, 5                     // col0 = tile column * 32
  v_add_u32 v3, s13, v1                     // a row of this lane
  v_cmp_gt_u32 s[20:21], s10, v3
  v_mul_lo_u32 v3, v3, s12
  v_add_u32 v4, s14, v1                     // b and c column of this lane
  v_cmp_gt_u32 s[22:23], s11, v4
  s_mov_b32 s17, 0                          // k0
.Lk_loop:
  LOAD_A 0, v8
  LOAD_A 1, v9
  LOAD_A 2, v10
  LOAD_A 3, v11
  LOAD_B 0, v12
  LOAD_B 1, v13
  LOAD_B 2, v14
  LOAD_B 3, v15
  v_lshl_or_b32 v16, v9, 16, v8             // a[i][k0 + kq + 0..1]
  v_lshl_or_b32 v17, v11, 16, v10           // a[i][k0 + kq + 2..3]
  v_lshl_or_b32 v18, v13, 16, v12
  v_lshl_or_b32 v19, v15, 16, v14
  s_nop 1
  MFMA_F32_32X32X8_BF16 a[0:15], v[16:17], v[18:19], a[0:15]
  s_add_u32 s17, s17, 8
  s_cmp_lt_u32 s17, s12
  s_cbranch_scc1 .Lk_loop
  s_nop 7                                   // MFMA results are ready after 16 passes
  s_nop 7
  s_nop 7
  v_add_u32 v20, s13, v2                    // c row of register 0: row0 + kq
  STORE_C a0, 1
  STORE_C a1, 1
  STORE_C a2, 1
  STORE_C a3, 5
  STORE_C a4, 1
  STORE_C a5, 1
  STORE_C a6, 1
  STORE_C a7, 5
  STORE_C a8, 1
  STORE_C a9, 1
  STORE_C a10, 1
  STORE_C a11, 5
  STORE_C a12, 1
  STORE_C a13, 1
  STORE_C a14, 1
  STORE_C a15, 1
  s_endpgm
.size halcyon_gemm_bf16_tile, .-halcyon_gemm_bf16_tile

GCN_KERNEL(halcyon_gemm_bf16_tile,
  kernarg=36, lds=0, sgprs=32, vgprs=23, agprs=16, workgroup=64, dims=2,
  { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: m_rows, .offset: 24, .size: 4, .value_kind: by_value },
  { .name: n_cols, .offset: 28, .size: 4, .value_kind: by_value },
  { .name: k_depth, .offset: 32, .size: 4, .value_kind: by_value })
