// The three grouped GEMMs of the MoE layer on MFMA 32x32x8 bf16, one kernel with a mode:
//   mode 0  moe_grouped_gemm:               out[r, j] = bf16(a[r] . w[e][:, j])             (N = H)
//   mode 1  moe_grouped_gemm_swiglu:        out[r, j] = bf16(silu(a[r] . w[e][:, j]) * (a[r] . w[e][:, N + j]))
//   mode 2  moe_grouped_gemm_swiglu_gather: mode 1 with a[r] = x[row_to_slot[r] / topk]
// for rows r of expert e: [expert_offsets[e], expert_offsets[e + 1]).
// Launch: block (64,1,1), grid (round_up(ceil(N / 32), 8), ceil(R / 32) + EL, 1). MI300X deals
// workgroups to its 8 XCDs round-robin by linear id (x fastest), so with the x extent a
// multiple of 8 every row tile of column tile x runs on XCD x % 8, and the weight column tile
// w[e][:, 32x .. 32x + 31] of an expert is fetched into one XCD's L2 only; the padding tiles
// exit at once. Workgroup y is a virtual
// row tile: the tiles of expert 0, then expert 1, ... (ceil(rows_e / 32) each); workgroups past
// the last tile exit. One wave computes a 32 x 32 tile of out (mode 1/2: 32 x 32 of gate and of
// up, in a[0:15] and a[16:31]).
// Loads are raw buffer loads with range checks: a lane whose element lies outside the matrix
// (k >= K, a row past its expert, a column past N, an invalid row_to_slot) gets offset
// 0xffffffff, past num_records, and the hardware returns 0; weights of one expert are one
// buffer of b_bytes, so k >= K falls outside it by itself. Offsets are 32-bit per buffer.
// Register layout of v_mfma_f32_32x32x8 bf16 (CDNA2 and CDNA3 alike), lane l:
//   A: a[i = l % 32][k0 + 4 * (l / 32) + 0..3]   B: b[k0 + 4 * (l / 32) + 0..3][j = l % 32]
//   result register q: c[8 * (q / 4) + 4 * (l / 32) + q % 4][l % 32]
// Registers in: s[0:1] kernarg, s2 column tile, s3 virtual row tile, v0 lane.
// v1 = l % 32, v2 = kq = 4 * (l / 32), v3 = a row * K (elements), v4 = column of this lane,
// s[36:37] lanes whose a row is valid, s[38:39] lanes whose column is < N.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

// v5 = k = k0 + kq + e; s[26:27] = lanes whose a element (row valid, k < K) exists.
.macro K_INDEX e
  v_add_u32 v5, s43, v2
  v_add_u32 v5, \e, v5
  v_cmp_gt_u32 s[24:25], s15, v5
  s_and_b64 s[26:27], s[24:25], s[36:37]
.endm

// dst = a[row][k], 0 outside a (offset 0xffffffff is past num_records).
.macro LOAD_A e, dst
  K_INDEX \e
  v_add_u32 v6, v3, v5
  v_lshlrev_b32 v6, 1, v6
  v_cndmask_b32 v6, -1, v6, s[26:27]
  buffer_load_ushort \dst, v6, s[44:47], 0 offen
.endm

// dst = w[e][k][col] (and up = w[e][k][N + col] when swiglu), 0 outside.
.macro LOAD_B e, dst, up, swiglu
  v_mul_lo_u32 v6, v5, s30
  v_add_u32 v6, v6, v4
  v_lshlrev_b32 v6, 1, v6
  .if \swiglu
  v_add_u32 v7, s54, v6
  v_cndmask_b32 v7, -1, v7, s[38:39]
  buffer_load_ushort \up, v7, s[48:51], 0 offen
  .endif
  v_cndmask_b32 v6, -1, v6, s[38:39]
  buffer_load_ushort \dst, v6, s[48:51], 0 offen
.endm

// One k-step of 8: loads (all in flight together), packing, MFMA into a[0:15] and, with
// swiglu, into a[16:31]; leaves SCC = (k0 < K).
.macro K_STEP swiglu
  LOAD_A 0, v8
  LOAD_B 0, v12, v24, \swiglu
  LOAD_A 1, v9
  LOAD_B 1, v13, v25, \swiglu
  LOAD_A 2, v10
  LOAD_B 2, v14, v26, \swiglu
  LOAD_A 3, v11
  LOAD_B 3, v15, v27, \swiglu
  s_waitcnt vmcnt(0)
  v_lshl_or_b32 v16, v9, 16, v8             // a[i][k0 + kq + 0..1]
  v_lshl_or_b32 v17, v11, 16, v10           // a[i][k0 + kq + 2..3]
  v_lshl_or_b32 v18, v13, 16, v12           // gate (or down) columns
  v_lshl_or_b32 v19, v15, 16, v14
  .if \swiglu
  v_lshl_or_b32 v28, v25, 16, v24           // up columns
  v_lshl_or_b32 v29, v27, 16, v26
  .endif
  s_nop 1
  MFMA_F32_32X32X8_BF16 a[0:15], v[16:17], v[18:19], a[0:15]
  .if \swiglu
  MFMA_F32_32X32X8_BF16 a[16:31], v[16:17], v[28:29], a[16:31]
  .endif
  s_add_u32 s43, s43, 8
  s_cmp_lt_u32 s43, s15
.endm

// v22 = bf16(v22) in the low half (round to nearest even).
.macro TO_BF16
  v_bfe_u32 v23, v22, 16, 1
  v_add3_u32 v22, v22, v23, s55
  v_lshrrev_b32 v22, 16, v22
.endm

// Stores accumulator q (and up a\up for swiglu) to out[v20][col] on valid lanes, then moves
// v20 down \step rows.
.macro STORE_C acc, up, step
  v_cmp_gt_u32 vcc, s42, v20
  s_and_b64 vcc, vcc, s[38:39]
  s_and_saveexec_b64 s[56:57], vcc
  v_accvgpr_read_b32 v22, \acc
  s_cmp_eq_u32 s18, 0
  s_cbranch_scc1 1f
  v_accvgpr_read_b32 v24, \up
  v_mul_f32 v23, s58, v22                   // silu(g) * u = g * u / (1 + 2^(-g log2 e))
  v_exp_f32 v23, v23
  v_add_f32 v23, 1.0, v23
  v_rcp_f32 v23, v23
  v_mul_f32 v22, v22, v24
  v_mul_f32 v22, v22, v23
1:
  TO_BF16
  v_mul_lo_u32 v21, v20, s16
  v_add_u32 v21, v21, v4
  v_lshlrev_b32 v21, 1, v21
  global_store_short v21, v22, s[10:11]
  s_mov_b64 exec, s[56:57]
  v_add_u32 v20, \step, v20
.endm

.text
.globl halcyon_moe_grouped_gemm_bf16
.p2align 8
.type halcyon_moe_grouped_gemm_bf16,@function
halcyon_moe_grouped_gemm_bf16:
  s_load_dwordx8 s[4:11], s[0:1], 0x0       // a, w, expert_offsets, out
  s_load_dwordx4 s[12:15], s[0:1], 0x20     // row_to_slot, R, K
  s_load_dwordx8 s[16:23], s[0:1], 0x30     // N, EL, mode, topk, topk magic, slots, a bytes, b bytes
  s_load_dword s30, s[0:1], 0x50            // ldb: weight row length (N or 2N)
  v_and_b32 v1, 31, v0                      // i = j = l % 32
  v_lshrrev_b32 v2, 5, v0
  v_lshlrev_b32 v2, 2, v2                   // kq
  .irp q, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
  v_accvgpr_write_b32 a\q, 0
  .endr
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s40, s2, 5                     // col0
  s_cmp_ge_u32 s40, s16
  s_cbranch_scc1 .Lend                      // padding column tile (the grid is padded to 8)
  // which expert and tile: walk the experts' tile counts
  s_mov_b32 s31, s3
  s_mov_b32 s32, 0                          // e
  s_load_dword s33, s[8:9], 0x0             // expert_offsets[0]
.Lfind:
  s_cmp_ge_u32 s32, s17
  s_cbranch_scc1 .Lend                      // past the last tile
  s_lshl_b32 s35, s32, 2
  s_add_u32 s35, s35, 4
  s_load_dword s34, s[8:9], s35             // expert_offsets[e + 1]
  s_waitcnt lgkmcnt(0)
  s_min_u32 s34, s34, s14                   // never past R
  s_max_u32 s34, s34, s33
  s_sub_u32 s35, s34, s33
  s_add_u32 s35, s35, 31
  s_lshr_b32 s35, s35, 5                    // tiles of expert e
  s_cmp_lt_u32 s31, s35
  s_cbranch_scc1 .Lfound
  s_sub_u32 s31, s31, s35
  s_mov_b32 s33, s34
  s_add_u32 s32, s32, 1
  s_branch .Lfind
.Lfound:
  s_lshl_b32 s41, s31, 5
  s_add_u32 s41, s41, s33                   // row0
  s_mov_b32 s42, s34                        // row end
  // buffers: a (all of it), w[e] (one expert)
  s_mov_b32 s44, s4
  s_and_b32 s45, s5, 0xffff
  s_mov_b32 s46, s22
  s_mov_b32 s47, 0x27000
  s_mul_i32 s52, s32, s23                   // e * b bytes, 64-bit
  s_mul_hi_u32 s53, s32, s23
  s_add_u32 s48, s6, s52
  s_addc_u32 s49, s7, s53
  s_and_b32 s49, s49, 0xffff
  s_mov_b32 s50, s23
  s_mov_b32 s51, 0x27000
  s_lshl_b32 s54, s16, 1                    // byte offset of the up columns
  s_movk_i32 s55, 0x7fff
  s_mov_b32 s58, 0xbfb8aa3b                 // -log2(e)
  // this lane's a row
  v_add_u32 v8, s41, v1                     // r
  v_cmp_gt_u32 s[36:37], s42, v8
  v_mov_b32 v3, v8
  s_cmp_eq_u32 s18, 2
  s_cbranch_scc0 .Lrow_ready
  v_mov_b32 v10, 0                          // rows past the expert: slot 0, masked below
  v_lshlrev_b32 v9, 2, v8
  s_and_saveexec_b64 s[56:57], s[36:37]
  global_load_dword v10, v9, s[12:13]       // row_to_slot[r]
  s_mov_b64 exec, s[56:57]
  s_waitcnt vmcnt(0)
  v_cmp_gt_u32 s[24:25], s21, v10           // a valid slot
  s_and_b64 s[36:37], s[36:37], s[24:25]
  v_mov_b32 v3, v10
  s_cmp_eq_u32 s19, 1
  s_cbranch_scc1 .Lrow_ready
  v_mul_hi_u32 v3, v10, s20                 // token = slot / topk
.Lrow_ready:
  v_mul_lo_u32 v3, v3, s15                  // a row * K
  v_add_u32 v4, s40, v1                     // column
  v_cmp_gt_u32 s[38:39], s16, v4
  s_mov_b32 s43, 0                          // k0
  s_cmp_eq_u32 s18, 0
  s_cbranch_scc0 .Lk_swiglu
.Lk_down:
  K_STEP 0
  s_cbranch_scc1 .Lk_down
  s_branch .Lk_done
.Lk_swiglu:
  K_STEP 1
  s_cbranch_scc1 .Lk_swiglu
.Lk_done:
  s_nop 7                                   // MFMA results are ready after passes + 3
  s_nop 7
  s_nop 7
  v_add_u32 v20, s41, v2                    // out row of register 0: row0 + kq
  STORE_C a0, a16, 1
  STORE_C a1, a17, 1
  STORE_C a2, a18, 1
  STORE_C a3, a19, 5
  STORE_C a4, a20, 1
  STORE_C a5, a21, 1
  STORE_C a6, a22, 1
  STORE_C a7, a23, 5
  STORE_C a8, a24, 1
  STORE_C a9, a25, 1
  STORE_C a10, a26, 1
  STORE_C a11, a27, 5
  STORE_C a12, a28, 1
  STORE_C a13, a29, 1
  STORE_C a14, a30, 1
  STORE_C a15, a31, 1
.Lend:
  s_endpgm
.size halcyon_moe_grouped_gemm_bf16, .-halcyon_moe_grouped_gemm_bf16

.rodata
.p2align 6
.amdhsa_kernel halcyon_moe_grouped_gemm_bf16
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x 1
  .amdhsa_system_sgpr_workgroup_id_y 1
  .amdhsa_system_vgpr_workitem_id 0
  .amdhsa_kernarg_size 84
  .amdhsa_group_segment_fixed_size 0
  .amdhsa_next_free_vgpr 64
  .amdhsa_next_free_sgpr 59
  .amdhsa_accum_offset 32
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.target: GCN_TARGET_YAML
amdhsa.kernels:
  - .name: halcyon_moe_grouped_gemm_bf16
    .symbol: halcyon_moe_grouped_gemm_bf16.kd
    .kernarg_segment_size: 84
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 59
    .vgpr_count: 32
    .agpr_count: 32
    .max_flat_workgroup_size: 64
    .args:
      - { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: w, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: expert_offsets, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: out, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: row_to_slot, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: rows, .offset: 40, .size: 4, .value_kind: by_value }
      - { .name: depth, .offset: 44, .size: 4, .value_kind: by_value }
      - { .name: cols, .offset: 48, .size: 4, .value_kind: by_value }
      - { .name: local_experts, .offset: 52, .size: 4, .value_kind: by_value }
      - { .name: mode, .offset: 56, .size: 4, .value_kind: by_value }
      - { .name: topk, .offset: 60, .size: 4, .value_kind: by_value }
      - { .name: topk_magic, .offset: 64, .size: 4, .value_kind: by_value }
      - { .name: slots, .offset: 68, .size: 4, .value_kind: by_value }
      - { .name: a_bytes, .offset: 72, .size: 4, .value_kind: by_value }
      - { .name: b_bytes, .offset: 76, .size: 4, .value_kind: by_value }
      - { .name: ldb, .offset: 80, .size: 4, .value_kind: by_value }
...
.end_amdgpu_metadata
