// output[r][j] = exp(input[r][j] - max_r) / sum_j exp(input[r][j] - max_r), rows of `cols` f32, row-major.
// Launch: block (256,1,1), grid (rows,1,1): one workgroup (4 waves) per row. Each lane walks
// the row with a stride of 256; the four waves combine their partial max and sum through a
// 256-float LDS tree with s_barrier between levels.
// Registers in: s[0:1] kernarg pointer, s2 workgroup id x (the row), v0 work-item id x.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

// LDS tree reduction of v2 over the workgroup with \op (v_max_f32 or v_add_f32); every lane
// gets the result in \dst. Uses v5-v7, s[13:15], s18. v1 holds this lane byte offset in LDS.
.macro LDS_REDUCE op, dst
  ds_write_b32 v1, v2
  s_waitcnt lgkmcnt(0)
  s_barrier
  s_movk_i32 s13, 128                 // active lanes this level
.Lreduce_level\@:
  v_cmp_gt_u32 vcc, s13, v0
  s_and_saveexec_b64 s[14:15], vcc
  s_cbranch_execz .Lreduce_skip\@
  s_lshl_b32 s18, s13, 2
  v_add_u32 v5, s18, v1
  ds_read_b32 v6, v5
  ds_read_b32 v7, v1
  s_waitcnt lgkmcnt(0)
  \op v7, v7, v6
  ds_write_b32 v1, v7
.Lreduce_skip\@:
  s_mov_b64 exec, s[14:15]
  s_waitcnt lgkmcnt(0)
  s_barrier
  s_lshr_b32 s13, s13, 1
  s_cmp_lg_u32 s13, 0
  s_cbranch_scc1 .Lreduce_level\@
  v_mov_b32 v5, 0
  ds_read_b32 \dst, v5
  s_waitcnt lgkmcnt(0)
  s_barrier                           // everyone has read lds[0] before it is reused
.endm

// Loop over this lane's elements of the row: v3 = byte offset of the element; the body is
// the macro argument list. Uses s[16:17], s12 (row bytes).
.macro ROW_LOOP body:vararg
  v_mov_b32 v3, v1
  s_mov_b64 s[16:17], exec
.Lrow_loop\@:
  v_cmp_gt_u32 vcc, s12, v3
  s_and_b64 exec, exec, vcc
  s_cbranch_execz .Lrow_done\@
  \body
  v_add_u32 v3, 0x400, v3             // 256 elements further
  s_branch .Lrow_loop\@
.Lrow_done\@:
  s_mov_b64 exec, s[16:17]
.endm

.macro LOAD_MAX
  global_load_dword v4, v3, s[4:5]
  s_waitcnt vmcnt(0)
  v_max_f32 v2, v2, v4
.endm

// v4 = exp(x - max) = exp2((x - max) * log2(e))
.macro LOAD_EXP
  global_load_dword v4, v3, s[4:5]
  s_waitcnt vmcnt(0)
  v_sub_f32 v4, v4, v8
  v_mul_f32 v4, 0x3fb8aa3b, v4
  v_exp_f32 v4, v4
  NOP_TRANS                                 // gfx942: before a VALU reads v4
.endm

.macro LOAD_EXP_SUM
  LOAD_EXP
  v_add_f32 v2, v2, v4
.endm

.macro LOAD_EXP_STORE
  LOAD_EXP
  v_mul_f32 v4, v4, v9
  global_store_dword v3, v4, s[6:7]
.endm

.text
.globl halcyon_softmax_rows_f32
.p2align 8
.type halcyon_softmax_rows_f32,@function
halcyon_softmax_rows_f32:
  s_load_dwordx4 s[4:7], s[0:1], 0x0        // input, output
  s_load_dword s8, s[0:1], 0x14             // cols
  s_waitcnt lgkmcnt(0)
  s_mul_i32 s10, s2, s8                     // row * cols (64-bit)
  s_mul_hi_u32 s11, s2, s8
  s_lshl_b64 s[10:11], s[10:11], 2
  s_add_u32 s4, s4, s10                     // x += row start
  s_addc_u32 s5, s5, s11
  s_add_u32 s6, s6, s10                     // y += row start
  s_addc_u32 s7, s7, s11
  s_lshl_b32 s12, s8, 2                     // row bytes
  v_lshlrev_b32 v1, 2, v0                   // lane * 4

  v_mov_b32 v2, 0xff800000                  // -inf
  ROW_LOOP LOAD_MAX
  LDS_REDUCE v_max_f32, v8                  // v8 = row max

  v_mov_b32 v2, 0
  ROW_LOOP LOAD_EXP_SUM
  LDS_REDUCE v_add_f32, v9                  // v9 = row sum
  v_rcp_f32 v9, v9
  NOP_TRANS

  ROW_LOOP LOAD_EXP_STORE
  s_endpgm
.size halcyon_softmax_rows_f32, .-halcyon_softmax_rows_f32

GCN_KERNEL(halcyon_softmax_rows_f32,
  kernarg=24, lds=1024, sgprs=19, vgprs=10, agprs=0, workgroup=256, dims=1,
  { .name: input, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: output, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: rows, .offset: 16, .size: 4, .value_kind: by_value },
  { .name: cols, .offset: 20, .size: 4, .value_kind: by_value })
