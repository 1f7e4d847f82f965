// The three grouped GEMMs of the MoE layer on MFMA 32x32x8 bf16, one kernel with a mode:
//   mode 0  moe_grouped_gemm:               out[r, j] = bf16(a[r] . w[e][:, j])             (N = H)
//   mode 1  moe_grouped_gemm_swiglu:        out[r, j] = bf16(silu(a[r] . w[e][:, j]) * (a[r] . w[e][:, N + j]))
//   mode 2  moe_grouped_gemm_swiglu_gather: mode 1 with a[r] = x[row_to_slot[r] / topk]
// for rows r of expert e: [expert_offsets[e], expert_offsets[e + 1]).
// Launch: block (256,1,1), grid (round_up(ceil(N / 64), 8), ceil(R / 64) + EL, 1).
// A workgroup computes a 64 x 64 tile of out (SwiGLU: of gate and of up), each of its 4 waves a
// 32 x 32 quarter in a[0:15] (and up in a[16:31]). Workgroup y is a virtual row tile: the
// tiles of expert 0, then expert 1, ... (ceil(rows_e / 64) each); workgroups past the last
// tile exit. MI300X deals workgroups to its 8 XCDs round-robin by linear id (x fastest), so
// with the x extent a multiple of 8 every row tile of column tile x runs on XCD x % 8 and an
// expert's weight column tile is fetched into one XCD's L2 only; padding tiles exit at once.
// K advances KS = 32 at a time through LDS, double buffered, with two stages of global loads in
// flight: while the waves multiply stage s from one LDS buffer, stage s + 1 is landing in one
// register set and stage s + 2's loads are issued into the other; then stage s + 1 goes to the
// other LDS buffer, one barrier per stage.
// LDS stage (3 KiB): A [64 rows][8 k], then B gate [64 cols][8 k], then B up [64 cols][8 k]
// (B transposed so that each MFMA operand is one ds_read_b64).
// Loads are raw buffer loads with range checks: a lane whose element lies outside the matrix
// (k >= K, a row past its expert, a column past N, an invalid row_to_slot) gets offset
// 0xffffffff, past num_records, and the hardware returns 0; the weights of one expert are one
// buffer of b_bytes, so k >= K falls outside it by itself. Offsets are 32-bit per buffer.
// Register layout of v_mfma_f32_32x32x8 bf16 (CDNA2 and CDNA3 alike), lane l:
//   A: a[i = l % 32][k0 + 4 * (l / 32) + 0..3]   B: b[k0 + 4 * (l / 32) + 0..3][j = l % 32]
//   result register q: c[8 * (q / 4) + 4 * (l / 32) + q % 4][l % 32]
// Registers in: s[0:1] kernarg, s2 column tile, s3 virtual row tile, v0 thread (0..255).
// Loader (thread t): A row t / 4, k pair 2 * (t % 4); B column t % 64, k pair 2 * (t / 64).
// v3 = byte offset of its a[row][kA], v42 = a row * K, v4 / v39 = byte offsets of its
// w[e][kB][col] and up column, v38 = 0x80000000.
#include "gcn_target.inc"
#include "gcn_moe.inc"
.amdgcn_target GCN_TARGET_ID

.set KS, 32                                 // k per stage
.set ROW_BYTES, 64                          // one LDS row: KS bf16
.set STAGE_BYTES, 12288
.set B_OFFSET, 4096
.set UP_OFFSET, 4096

// Register set `set` (0: v44..v55, 1: v56..v67) of a stage's loads: v[44:47] = a[row][kbase +
// kA + 0..7], v[48:51] = w[e][kbase + kB + 0..7][col] (v[52:55] the up columns when swiglu),
// set 1 the same 12 registers higher; B in bf16 pairs packed by d16 / d16_hi loads; 0 outside.
// checked = 0 when the whole stage lies inside K and K is even: then A is one
// buffer_load_dwordx4 from the precomputed byte offset v3 (0x80000000 for an invalid row: out
// of range) with k0 * 2 in soffset; checked = 1 (the last stage, or any stage of an odd K)
// masks each element by k < K. B needs no k check: past K it lies outside
// the expert's buffer; v4/v39 are 0x80000000 for a column past N.
.macro A_ELEMENT e, dst, hi, kbase
  v_add_u32 v7, \kbase, v5
  v_add_u32 v7, \e, v7
  v_cmp_gt_u32 s[24:25], s15, v7
  s_and_b64 s[26:27], s[24:25], s[36:37]
  v_add_u32 v7, v42, v7
  v_lshlrev_b32 v7, 1, v7
  v_cndmask_b32 v7, -1, v7, s[26:27]
  .if \hi
    buffer_load_short_d16_hi \dst, v7, s[44:47], 0 offen
  .else
    buffer_load_short_d16 \dst, v7, s[44:47], 0 offen
  .endif
.endm
// B element k = kbase + kB + e: s52 holds (kbase + e) * ldb * 2 on entry and steps on.
.macro B_ELEMENT dst, up, hi, swiglu
  .if \swiglu
    v_add_u32 v36, s52, v39
    .if \hi
      buffer_load_short_d16_hi \up, v36, s[48:51], 0 offen
    .else
      buffer_load_short_d16 \up, v36, s[48:51], 0 offen
    .endif
  .endif
  v_add_u32 v7, s52, v4
  .if \hi
    buffer_load_short_d16_hi \dst, v7, s[48:51], 0 offen
  .else
    buffer_load_short_d16 \dst, v7, s[48:51], 0 offen
  .endif
  s_add_u32 s52, s52, s29
.endm
.macro LOAD_STAGE kbase, swiglu, checked, set
  s_lshl_b32 s53, \kbase, 1
  .if \checked
    A_ELEMENT 0, v[44+12*\set], 0, \kbase
    A_ELEMENT 1, v[44+12*\set], 1, \kbase
    A_ELEMENT 2, v[45+12*\set], 0, \kbase
    A_ELEMENT 3, v[45+12*\set], 1, \kbase
    A_ELEMENT 4, v[46+12*\set], 0, \kbase
    A_ELEMENT 5, v[46+12*\set], 1, \kbase
    A_ELEMENT 6, v[47+12*\set], 0, \kbase
    A_ELEMENT 7, v[47+12*\set], 1, \kbase
  .else
    // the 8 elements are 16 contiguous bytes, dword-aligned as K is even (LOAD_ANY)
    buffer_load_dwordx4 v[44+12*\set:47+12*\set], v3, s[44:47], s53 offen
  .endif
  s_mul_i32 s52, \kbase, s29                // kbase * ldb * 2
  B_ELEMENT v[48+12*\set], v[52+12*\set], 0, \swiglu
  B_ELEMENT v[48+12*\set], v[52+12*\set], 1, \swiglu
  B_ELEMENT v[49+12*\set], v[53+12*\set], 0, \swiglu
  B_ELEMENT v[49+12*\set], v[53+12*\set], 1, \swiglu
  B_ELEMENT v[50+12*\set], v[54+12*\set], 0, \swiglu
  B_ELEMENT v[50+12*\set], v[54+12*\set], 1, \swiglu
  B_ELEMENT v[51+12*\set], v[55+12*\set], 0, \swiglu
  B_ELEMENT v[51+12*\set], v[55+12*\set], 1, \swiglu
.endm

// LOAD_STAGE into set `set`, unchecked (A as one 16-byte load a thread) when kbase + KS <= K
// and K is even.
.macro LOAD_ANY kbase, swiglu, set
  s_add_u32 s52, \kbase, KS
  s_cmp_le_u32 s52, s15
  s_cbranch_scc0 .Lchecked\@
  s_bitcmp1_b32 s15, 0
  s_cbranch_scc1 .Lchecked\@
  LOAD_STAGE \kbase, \swiglu, 0, \set
  s_branch .Lloaded\@
.Lchecked\@:
  LOAD_STAGE \kbase, \swiglu, 1, \set
.Lloaded\@:
.endm

// Register set `set` into the LDS stage at s60 (16 bytes each: A row part, B column part).
.macro WRITE_STAGE swiglu, set
  v_add_u32 v32, s60, v14
  v_add_u32 v33, s60, v15
  ds_write_b128 v32, v[44+12*\set:47+12*\set]
  ds_write_b128 v33, v[48+12*\set:51+12*\set]
  .if \swiglu
    ds_write_b128 v33, v[52+12*\set:55+12*\set] offset:UP_OFFSET
  .endif
.endm

// s_waitcnt until the older of two register sets has landed while the newer (a stage's loads:
// at least 1 + 8, or 1 + 16 with the up columns) may still be in flight. VMEM loads return in
// order, so vmcnt(fewest loads of a stage) covers the older set whichever path loaded the newer.
.macro WAIT_OLDER swiglu
  .if \swiglu
    s_waitcnt vmcnt(17)
  .else
    s_waitcnt vmcnt(9)
  .endif
.endm

// This wave's MFMA operands from the LDS stage at s59, then the MFMAs, KS / 8 k-steps.
.macro COMPUTE_STEP kk, swiglu
  ds_read_b64 v[16:17], v34 offset:16*\kk
  ds_read_b64 v[18:19], v35 offset:16*\kk
  .if \swiglu
    ds_read_b64 v[28:29], v35 offset:UP_OFFSET+16*\kk
  .endif
  s_waitcnt lgkmcnt(0)
  MFMA_F32_32X32X8_BF16 a[0:15], v[16:17], v[18:19], a[0:15]
  .if \swiglu
    MFMA_F32_32X32X8_BF16 a[16:31], v[16:17], v[28:29], a[16:31]
  .endif
.endm
.macro COMPUTE_STAGE swiglu
  v_add_u32 v34, s59, v25
  v_add_u32 v35, s59, v26
  COMPUTE_STEP 0, \swiglu
  COMPUTE_STEP 1, \swiglu
  COMPUTE_STEP 2, \swiglu
  COMPUTE_STEP 3, \swiglu
.endm

// One K stage: the waves multiply stage s43 (LDS s59) while stage s43 + KS is in flight in
// register set `have` and stage s43 + 2 KS is loaded into set `load`; then set `have` goes to
// the LDS stage s60 and the stages move on. Jumps to `done` after the last stage.
.macro K_STEP swiglu, have, load, done
  s_add_u32 s61, s43, KS
  s_add_u32 s64, s43, 2*KS
  s_cmp_lt_u32 s64, s15
  s_cbranch_scc0 .Lno_load\@
  LOAD_ANY s64, \swiglu, \load             // in flight during two stages of MFMAs
.Lno_load\@:
  COMPUTE_STAGE \swiglu
  s_cmp_ge_u32 s61, s15
  s_cbranch_scc1 \done
  s_cmp_lt_u32 s64, s15
  s_cbranch_scc0 .Lwait_all\@
  WAIT_OLDER \swiglu
  s_branch .Lwaited\@
.Lwait_all\@:
  s_waitcnt vmcnt(0)
.Lwaited\@:
  WRITE_STAGE \swiglu, \have
  s_waitcnt lgkmcnt(0)
  s_barrier                                 // the stage is written, and the other one read
  s_xor_b32 s59, s59, STAGE_BYTES
  s_xor_b32 s60, s60, STAGE_BYTES
  s_mov_b32 s43, s61
.endm

// The whole K loop; falls through when done. Two stages of loads in flight (register sets 0
// and 1 alternate, so the loop body is K_STEP twice); LDS double buffered.
.macro K_LOOP swiglu
  LOAD_ANY s43, \swiglu, 0                 // stage 0 -> set 0
  s_add_u32 s61, s43, KS
  s_cmp_lt_u32 s61, s15
  s_cbranch_scc0 .Lone_stage\@
  LOAD_ANY s61, \swiglu, 1                 // stage 1 -> set 1
  WAIT_OLDER \swiglu
  s_branch .Lfirst\@
.Lone_stage\@:
  s_waitcnt vmcnt(0)
.Lfirst\@:
  s_mov_b32 s60, 0                          // the first stage goes to buffer 0
  WRITE_STAGE \swiglu, 0
  s_waitcnt lgkmcnt(0)
  s_barrier
  s_mov_b32 s59, 0                          // stage being multiplied
  s_movk_i32 s60, STAGE_BYTES               // stage being filled
.Lk\@:
  K_STEP \swiglu, 1, 0, .Ldone\@
  K_STEP \swiglu, 0, 1, .Ldone\@
  s_branch .Lk\@
.Ldone\@:
.endm

// Stores accumulator acc (and up for swiglu) to out[v20][v27] on valid lanes, then moves v20
// down \step rows.
.macro STORE_C acc, up, step
  v_cmp_gt_u32 vcc, s42, v20
  s_and_b64 vcc, vcc, s[34:35]
  s_and_saveexec_b64 s[56:57], vcc
  v_accvgpr_read_b32 v22, \acc
  s_cmp_eq_u32 s18, 0
  s_cbranch_scc1 1f
  v_accvgpr_read_b32 v24, \up
  SILU_MUL v22, v24, v23, s58
1:
  TO_BF16 v22, v23, s55
  v_mul_lo_u32 v21, v20, s16
  v_add_u32 v21, v21, v27
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
  v_bfe_u32 v2, v0, 5, 1
  v_lshlrev_b32 v2, 2, v2                   // kq = 4 * ((t % 64) / 32)
  v_lshrrev_b32 v7, 6, v0
  NOP_VALU_READLANE
  v_readfirstlane_b32 s62, v7               // wave 0..3
  .irp q, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
  v_accvgpr_write_b32 a\q, 0
  .endr
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s40, s2, 6                     // col0
  s_cmp_ge_u32 s40, s16
  s_cbranch_scc1 .Lend                      // padding column tile (the grid is padded to 8)
  MOE_FIND_TILE 6, 8, s17, s14, .Lend       // s32 expert, s41 row0, s42 row end
  // buffers: a (all of it), w[e] (one expert)
  RAW_BUFFER 44, 4, 5, s22
  s_mul_i32 s52, s32, s23                   // e * b bytes, 64-bit
  s_mul_hi_u32 s53, s32, s23
  s_add_u32 s48, s6, s52
  s_addc_u32 s49, s7, s53
  RAW_BUFFER 48, 48, 49, s23
  s_lshl_b32 s54, s16, 1                    // byte offset of the up columns
  s_lshl_b32 s29, s30, 1                    // bytes per weight row
  s_movk_i32 s55, 0x7fff
  s_mov_b32 s58, 0xbfb8aa3b                 // -log2(e)
  // loader: this thread's a row (t / 4) and k pair, its B column (t % 64) and k pair
  v_lshrrev_b32 v8, 2, v0
  v_add_u32 v8, s41, v8                     // r
  MOE_TOKEN_ROW s18, 12, s21, s19, s20, 56, 24
  v_mul_lo_u32 v42, v3, s15                 // a row * K (elements)
  v_and_b32 v5, 3, v0
  v_lshlrev_b32 v5, 3, v5                   // kA = 8 * (t % 4)
  v_mov_b32 v38, 0x80000000                 // an offset past every buffer
  v_add_u32 v3, v42, v5
  v_lshlrev_b32 v3, 1, v3
  v_cndmask_b32 v3, v38, v3, s[36:37]       // byte offset of a[row][kA], or out of range
  v_and_b32 v7, 63, v0
  v_add_u32 v4, s40, v7                     // B column
  v_cmp_gt_u32 s[38:39], s16, v4
  v_lshrrev_b32 v6, 6, v0
  v_lshlrev_b32 v6, 3, v6                   // kB = 8 * (t / 64)
  v_mul_lo_u32 v36, v6, s30
  v_add_u32 v36, v36, v4
  v_lshlrev_b32 v36, 1, v36                 // byte offset of w[e][kB][col]
  v_add_u32 v39, s54, v36                   // ... of its up column
  v_cndmask_b32 v39, v38, v39, s[38:39]
  v_cndmask_b32 v4, v38, v36, s[38:39]
  v_lshrrev_b32 v14, 2, v0                  // LDS A write: (t / 4) * ROW_BYTES + kA * 2
  v_lshlrev_b32 v14, 6, v14
  v_lshl_add_u32 v14, v5, 1, v14
  v_lshlrev_b32 v15, 6, v7                  // LDS B write: B_OFFSET + (t % 64) * ROW_BYTES + kB * 2
  v_lshl_add_u32 v15, v6, 1, v15
  v_add_u32 v15, B_OFFSET, v15
  // this wave's quarter: rows 32 * (w / 2), columns 32 * (w % 2)
  s_lshr_b32 s63, s62, 1
  s_lshl_b32 s63, s63, 5                    // row offset of the quarter
  s_and_b32 s53, s62, 1
  s_lshl_b32 s53, s53, 5                    // column offset of the quarter
  v_add_u32 v25, s63, v1                    // LDS A read: (quarter row + i) * ROW_BYTES + kq * 2
  v_lshlrev_b32 v25, 6, v25
  v_lshl_add_u32 v25, v2, 1, v25
  v_add_u32 v26, s53, v1                    // LDS B read: B_OFFSET + (quarter col + j) * ROW_BYTES + kq * 2
  v_lshlrev_b32 v26, 6, v26
  v_lshl_add_u32 v26, v2, 1, v26
  v_add_u32 v26, B_OFFSET, v26
  s_add_u32 s53, s53, s40
  v_add_u32 v27, s53, v1                    // out column of this lane
  v_cmp_gt_u32 s[34:35], s16, v27
  s_add_u32 s41, s41, s63                   // out row 0 of the quarter
  s_mov_b32 s43, 0                          // k0
  s_cmp_eq_u32 s18, 0
  s_cbranch_scc0 .Lk_swiglu
  K_LOOP 0
  s_branch .Lk_done
.Lk_swiglu:
  K_LOOP 1
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

GCN_KERNEL(halcyon_moe_grouped_gemm_bf16,
  kernarg=84, lds=24576, sgprs=65, vgprs=68, agprs=32, workgroup=256, dims=2,
  { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: w, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: expert_offsets, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: out, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: row_to_slot, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: rows, .offset: 40, .size: 4, .value_kind: by_value },
  { .name: depth, .offset: 44, .size: 4, .value_kind: by_value },
  { .name: cols, .offset: 48, .size: 4, .value_kind: by_value },
  { .name: local_experts, .offset: 52, .size: 4, .value_kind: by_value },
  { .name: mode, .offset: 56, .size: 4, .value_kind: by_value },
  { .name: topk, .offset: 60, .size: 4, .value_kind: by_value },
  { .name: topk_magic, .offset: 64, .size: 4, .value_kind: by_value },
  { .name: slots, .offset: 68, .size: 4, .value_kind: by_value },
  { .name: a_bytes, .offset: 72, .size: 4, .value_kind: by_value },
  { .name: b_bytes, .offset: 76, .size: 4, .value_kind: by_value },
  { .name: ldb, .offset: 80, .size: 4, .value_kind: by_value })
