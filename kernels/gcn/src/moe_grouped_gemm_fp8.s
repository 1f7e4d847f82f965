// The three FP8 grouped GEMMs of the MoE layer (e4m3 with 1x128 / 128x128 block scales,
// kernels/moe/*fp8*.contract) on gfx942's FP8 MFMA 32x32x16, one kernel with a mode:
//   mode 0  moe_grouped_gemm_fp8:                out[r, n] = bf16(sum_g sa[r, g] sw[n / 128, g] a[r, g] . w[e][n, g])
//   mode 1  moe_grouped_gemm_fp8_swiglu:         out[r, n] = bf16(silu(gate) * up), gate of row n, up of row N + n
//   mode 2  moe_grouped_gemm_fp8_swiglu_gather:  mode 1 with a[r] = x[row_to_slot[r] / topk] (and its scales)
// for rows r of expert e: [expert_offsets[e], expert_offsets[e + 1]); g: groups of 128 of K.
// gfx942 only (CDNA2 has no FP8 MFMA). Correct first: no LDS, one wave a workgroup.
// Launch: block (64,1,1), grid (ceil(N / 32), ceil(R / 32) + EL, 1). Workgroup y is a virtual
// row tile of 32 tokens (the tiles of expert 0, then expert 1, ...; those past the last exit);
// x a tile of 32 weight rows (SwiGLU: 32 gate rows and their 32 up rows).
// Swap-AB: the weights are the MFMA's A (i = weight row), the tokens its B (j = token), so a
// lane's results all belong to one token: one activation scale a lane per group; its 16 rows
// (8 (q / 4) + q % 4 + 4 (l / 32), q the result register) lie in at most two 128-row scale
// blocks (two only for the up rows when N % 128 != 0), chosen per register.
// Both operands are [rows, K] bytes (K-major), what the FP8 MFMA's A/B layout takes: a lane's 8
// k-values are 8 consecutive bytes. Lane l (i = j = l % 32, h = l / 32) loads bytes [64 h,
// 64 h + 64) of the group of its weight row and of its token row; MFMA s takes bytes [8 s,
// 8 s + 8) of them (the instruction's k = 8 h + e is then group element 64 h + 8 s + e, the
// same for both operands, so the sum over k is the group's dot product).
// K % 8 == 0 (the launcher refuses others): an 8-byte chunk lies wholly inside or wholly past
// K. Loads are raw buffer loads with range checks: offset 0x80000000 (past every buffer) for
// a chunk at k >= K, a token row past its expert or with an invalid slot, a weight row past N.
// FP8 encodings: the operators' e4m3 is OCP e4m3fn (bias 7, max 448, 0x7f/0xff NaN, 0x80 = -0);
// the MFMA reads e4m3fnuz (bias 8, max 240, 0x80 the only NaN, no -0). Every fn code but -0
// and the NaNs read as fnuz is exactly half its value, so each loaded byte is re-encoded
// (FNUZ: 0x80 -> 0x00, 0x7f/0xff -> 0x80, others unchanged) and each group's promotion scale
// is a_scale * w_scale * 4 (two halves; exact, a power of two).
// Per group: 8 MFMAs into a zeroed temporary (a[0:15], up a[16:31]), then the promotion into the
// fp32 totals (v[56:71], up v[72:87]): total += temp * scale, one FMA per result.
// Register layout of v_mfma_f32_32x32x16_fp8_fp8 (AMD's calculator, shared/reference/mfma), lane l:
//   A: a[i = l % 32][k = 8 (l / 32) + byte]  B: b[k = 8 (l / 32) + byte][j = l % 32]
//   result register q: c[8 (q / 4) + 4 (l / 32) + q % 4][l % 32]
// Registers in: s[0:1] kernarg, s2 weight row tile, s3 virtual row tile, v0 lane (0..63).
// v3 / v4 / v5: byte offsets of this lane's token / weight / up weight row at 64 h (0x80000000
// when out of range); v6: of its a_scale row; v7 / v88: its first rows' distance to the next
// scale block (gate / up).
#include "gcn_target.inc"
#include "gcn_moe.inc"
.amdgcn_target GCN_TARGET_ID

// OCP e4m3fn -> e4m3fnuz, bytewise on one dword (see the header): NaN bytes (low 7 bits all
// ones) become 0x80, -0 (0x80) becomes 0x00, every other byte is kept. s72 = 0x7f7f7f7f,
// s73 = 0x01010101, s74 = 0x80808080; no carry crosses a byte.
.macro FNUZ reg
  v_and_b32 v94, s72, \reg                  // low 7 bits of each byte
  v_add_u32 v95, s73, v94
  v_and_b32 v95, s74, v95                   // 0x80 in the NaN bytes
  v_add_u32 v94, s72, v94                   // bit 7 set where the low 7 bits are not zero
  v_and_b32 v96, s74, \reg
  v_bfi_b32 v96, v94, 0, v96                // 0x80 in the -0 bytes
  v_xor_b32 \reg, \reg, v96                 // -0 -> +0
  v_or_b32 \reg, \reg, v95
  v_lshrrev_b32 v94, 7, v95
  v_sub_u32 v94, v95, v94                   // 0x7f in the NaN bytes
  v_bfi_b32 \reg, v94, 0, \reg              // NaN -> 0x80
.endm

// Chunk s (8 bytes) of the group at s57 for each operand, range checked: v99 = bytes of K left
// past this lane's 64 h; the chunk is past K when 8 s >= v99 (then bit 31 joins its offset).
.macro LOAD_CHUNK s, swiglu
  v_subrev_u32 v97, 8*\s+1, v99
  v_and_b32 v97, v98, v97
  v_or_b32 v100, v4, v97
  buffer_load_dwordx2 v[8+2*\s:9+2*\s], v100, s[48:51], s57 offen offset:8*\s
  v_or_b32 v100, v3, v97
  buffer_load_dwordx2 v[24+2*\s:25+2*\s], v100, s[44:47], s57 offen offset:8*\s
  .if \swiglu
    v_or_b32 v100, v5, v97
    buffer_load_dwordx2 v[40+2*\s:41+2*\s], v100, s[48:51], s57 offen offset:8*\s
  .endif
.endm
// 64 bytes of one operand from byte offset \off + s57, as 4 x 16 bytes (the group lies inside K).
.macro LOAD_WHOLE off, dst, buf
  buffer_load_dwordx4 v[\dst:\dst+3], \off, s[\buf:\buf+3], s57 offen
  buffer_load_dwordx4 v[\dst+4:\dst+7], \off, s[\buf:\buf+3], s57 offen offset:16
  buffer_load_dwordx4 v[\dst+8:\dst+11], \off, s[\buf:\buf+3], s57 offen offset:32
  buffer_load_dwordx4 v[\dst+12:\dst+15], \off, s[\buf:\buf+3], s57 offen offset:48
.endm

// The group's operands (v[8:23] weights, v[24:39] tokens, v[40:55] up weights), its activation
// scale (v89) and weight scales (s66/s67 the gate blocks, s68/s69 the up blocks), all landed.
.macro LOAD_GROUP swiglu
  s_lshl_b32 s70, s56, 2                    // g * 4: a group's scale in a scale row
  s_add_u32 s80, s62, s70
  s_load_dword s66, s[60:61], s80
  s_add_u32 s81, s63, s70
  s_load_dword s67, s[60:61], s81
  .if \swiglu
    s_add_u32 s82, s64, s70
    s_load_dword s68, s[60:61], s82
    s_add_u32 s83, s65, s70
    s_load_dword s69, s[60:61], s83
  .endif
  buffer_load_dword v89, v6, s[52:55], s70 offen
  s_sub_u32 s58, s19, s57                   // K left from the group
  s_cmp_lt_u32 s58, 128
  s_cbranch_scc1 .Lpartial\@
  LOAD_WHOLE v4, 8, 48
  LOAD_WHOLE v3, 24, 44
  .if \swiglu
    LOAD_WHOLE v5, 40, 48
  .endif
  s_branch .Lloaded\@
.Lpartial\@:
  v_sub_u32 v99, s58, v102
  .irp s, 0,1,2,3,4,5,6,7
    LOAD_CHUNK \s, \swiglu
  .endr
.Lloaded\@:
  s_waitcnt vmcnt(0) lgkmcnt(0)
.endm

// The group's 8 MFMAs: a[0:15] = the weight rows x tokens of the group (a[16:31] the up rows).
.macro MULTIPLY swiglu
  .irp r, 8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39
    FNUZ v\r
  .endr
  .if \swiglu
    .irp r, 40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55
      FNUZ v\r
    .endr
  .endif
  s_nop 1                                   // VALU write -> MFMA read
  v_mfma_f32_32x32x16_fp8_fp8 a[0:15], v[8:9], v[24:25], 0
  .if \swiglu
    v_mfma_f32_32x32x16_fp8_fp8 a[16:31], v[40:41], v[24:25], 0
  .endif
  .irp s, 1,2,3,4,5,6,7
    v_mfma_f32_32x32x16_fp8_fp8 a[0:15], v[8+2*\s:9+2*\s], v[24+2*\s:25+2*\s], a[0:15]
    .if \swiglu
      v_mfma_f32_32x32x16_fp8_fp8 a[16:31], v[40+2*\s:41+2*\s], v[24+2*\s:25+2*\s], a[16:31]
    .endif
  .endr
.endm

// Promotion scales of the group, a_scale * w_scale * 4 (the factor 4: fnuz reads each code at
// half its value, in both operands): v90 / v91 for the gate rows in their first / second scale
// block, v92 / v93 for the up rows.
.macro GROUP_SCALES swiglu
  v_mul_f32 v90, s66, v89
  v_mul_f32 v90, 4.0, v90
  v_mul_f32 v91, s67, v89
  v_mul_f32 v91, 4.0, v91
  .if \swiglu
    v_mul_f32 v92, s68, v89
    v_mul_f32 v92, 4.0, v92
    v_mul_f32 v93, s69, v89
    v_mul_f32 v93, 4.0, v93
  .endif
.endm

// total (v[tot]) += temp (a[acc]) * the scale of its row: v[s0] in the first scale block
// (row offset 8 (q / 4) + q % 4 below v[thr] = the block's end relative to this lane's
// first row), else v[s1].
.macro PROMOTE q, acc, tot, thr, s0, s1
  v_cmp_lt_i32 vcc, 8*(\q/4)+\q%4, v\thr
  v_accvgpr_read_b32 v94, a[\acc]
  s_nop 0                                   // gfx942: VALU write of vcc -> VALU read
  v_cndmask_b32 v95, v\s1, v\s0, vcc
  v_fmac_f32 v[\tot], v94, v95
.endm
.macro PROMOTE_ALL swiglu
  .irp q, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    PROMOTE \q, \q, 56+\q, 7, 90, 91
    .if \swiglu
      PROMOTE \q, 16+\q, 72+\q, 88, 92, 93
    .endif
  .endr
.endm

// The whole K loop: group s56 at byte s57, until K.
.macro K_LOOP swiglu
  s_mov_b32 s56, 0
  s_mov_b32 s57, 0
.Lgroup\@:
  LOAD_GROUP \swiglu
  MULTIPLY \swiglu
  GROUP_SCALES \swiglu
  s_nop 7                                   // MFMA results are ready after 8 passes + 3
  s_nop 7
  PROMOTE_ALL \swiglu
  s_add_u32 s56, s56, 1
  s_add_u32 s57, s57, 128
  s_cmp_lt_u32 s56, s28
  s_cbranch_scc1 .Lgroup\@
.endm

// Result register q to out[token][n0 + 8 (q / 4) + q % 4 + 4 h] where the token row is valid
// (s[36:37]) and the column below N (v101 = N - n0 - 4 h); SwiGLU (s22 != 0): silu(gate) * up.
.macro STORE_C q
  v_cmp_lt_i32 vcc, 8*(\q/4)+\q%4, v101
  s_and_b64 vcc, vcc, s[36:37]
  s_and_saveexec_b64 s[78:79], vcc
  v_mov_b32 v94, v[56+\q]
  s_cmp_eq_u32 s22, 0
  s_cbranch_scc1 1f
  SILU_MUL v94, v[72+\q], v95, s76
1:
  TO_BF16 v94, v95, s75
  global_store_short v100, v94, s[14:15] offset:2*(8*(\q/4)+\q%4)
  s_mov_b64 exec, s[78:79]
.endm

.text
.globl halcyon_moe_grouped_gemm_fp8
.p2align 8
.type halcyon_moe_grouped_gemm_fp8,@function
halcyon_moe_grouped_gemm_fp8:
  s_load_dwordx16 s[4:19], s[0:1], 0x0      // a, a_scale, w, w_scale, expert_offsets, out, row_to_slot, R, K
  s_load_dwordx8 s[20:27], s[0:1], 0x40     // N, EL, mode, topk, topk magic, slots, a bytes, w bytes
  s_load_dwordx2 s[28:29], s[0:1], 0x60     // groups of K, weight scale blocks
  s_load_dword s30, s[0:1], 0x68            // a_scale bytes
  v_and_b32 v1, 31, v0                      // i = j = l % 32
  v_lshrrev_b32 v2, 5, v0                   // h = l / 32
  v_lshlrev_b32 v102, 6, v2                 // 64 h
  .irp q, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    v_mov_b32 v[56+\q], 0
    v_mov_b32 v[72+\q], 0
  .endr
  s_waitcnt lgkmcnt(0)
  s_lshl_b32 s40, s2, 5                     // n0
  s_cmp_ge_u32 s40, s20
  s_cbranch_scc1 .Lend
  MOE_FIND_TILE 5, 12, s21, s18, .Lend      // s32 expert, s41 row0, s42 row end
  // buffers: tokens (all of them), w[e] (one expert), the token scales
  RAW_BUFFER 44, 4, 5, s26
  s_mul_i32 s58, s32, s27                   // e * w bytes, 64-bit
  s_mul_hi_u32 s59, s32, s27
  s_add_u32 s48, s8, s58
  s_addc_u32 s49, s9, s59
  RAW_BUFFER 48, 48, 49, s27
  RAW_BUFFER 52, 6, 7, s30
  // w_scale[e]: e * NB * KG * 4 bytes in; row blocks of the gate rows (n0) and the up rows (N + n0)
  s_mul_i32 s71, s29, s28
  s_lshl_b32 s71, s71, 2                    // bytes of one expert's weight scales
  s_mul_i32 s58, s32, s71
  s_mul_hi_u32 s59, s32, s71
  s_add_u32 s60, s10, s58
  s_addc_u32 s61, s11, s59
  s_lshl_b32 s71, s28, 2                    // bytes of one scale block row
  s_sub_u32 s77, s29, 1                     // last block
  s_lshr_b32 s58, s40, 7                    // gate block b0
  s_add_u32 s59, s58, 1
  s_min_u32 s59, s59, s77                   // b1 (unused unless a tile straddles)
  s_mul_i32 s62, s58, s71
  s_mul_i32 s63, s59, s71
  s_and_b32 s58, s40, 127
  s_sub_u32 s58, 128, s58                   // rows from n0 to the end of its block
  v_lshrrev_b32 v97, 4, v102                // 4 h: this lane's first row in the tile
  v_sub_u32 v7, s58, v97
  s_add_u32 s57, s20, s40                   // first up row: N + n0
  s_lshr_b32 s58, s57, 7
  s_add_u32 s59, s58, 1
  s_min_u32 s59, s59, s77
  s_mul_i32 s64, s58, s71
  s_mul_i32 s65, s59, s71
  s_and_b32 s58, s57, 127
  s_sub_u32 s58, 128, s58
  v_sub_u32 v88, s58, v97
  s_mov_b32 s72, 0x7f7f7f7f
  s_mov_b32 s73, 0x01010101
  s_mov_b32 s74, 0x80808080
  s_movk_i32 s75, 0x7fff
  s_mov_b32 s76, 0xbfb8aa3b                 // -log2(e)
  v_mov_b32 v98, 0x80000000                 // an offset past every buffer
  // this lane's token row (B column j)
  v_add_u32 v8, s41, v1                     // r
  MOE_TOKEN_ROW s22, 16, s25, s23, s24, 78, 38
  v_mul_lo_u32 v6, v3, s28
  v_lshlrev_b32 v6, 2, v6                   // its a_scale row
  v_cndmask_b32 v6, v98, v6, s[36:37]
  v_mul_lo_u32 v3, v3, s19
  v_add_u32 v3, v3, v102
  v_cndmask_b32 v3, v98, v3, s[36:37]       // its bytes at 64 h, or out of range
  // this lane's weight rows (A row i): n0 + i, and the up row N + n0 + i
  v_add_u32 v9, s40, v1
  v_cmp_gt_u32 vcc, s20, v9
  v_mul_lo_u32 v4, v9, s19
  v_add_u32 v4, v4, v102
  v_add_u32 v9, s20, v9
  v_mul_lo_u32 v5, v9, s19
  v_add_u32 v5, v5, v102
  s_nop 0                                   // gfx942: VALU write of vcc -> VALU read
  v_cndmask_b32 v4, v98, v4, vcc
  v_cndmask_b32 v5, v98, v5, vcc
  s_cmp_eq_u32 s22, 0
  s_cbranch_scc0 .Lk_swiglu
  K_LOOP 0
  s_branch .Lk_done
.Lk_swiglu:
  K_LOOP 1
.Lk_done:
  // out[token][n0 + 4 h]: v100 its byte offset, v101 = N - n0 - 4 h
  v_add_u32 v8, s41, v1
  v_mul_lo_u32 v100, v8, s20
  v_add_u32 v100, v100, s40
  v_lshrrev_b32 v101, 4, v102               // 4 h
  v_add_u32 v100, v100, v101
  v_lshlrev_b32 v100, 1, v100
  v_sub_u32 v101, s20, v101
  v_subrev_u32 v101, s40, v101
  .irp q, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    STORE_C \q
  .endr
.Lend:
  s_endpgm
.size halcyon_moe_grouped_gemm_fp8, .-halcyon_moe_grouped_gemm_fp8

GCN_KERNEL(halcyon_moe_grouped_gemm_fp8,
  kernarg=108, lds=0, sgprs=84, vgprs=103, agprs=32, workgroup=64, dims=2,
  { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: a_scale, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: w, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: w_scale, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: expert_offsets, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: out, .offset: 40, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: row_to_slot, .offset: 48, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: rows, .offset: 56, .size: 4, .value_kind: by_value },
  { .name: depth, .offset: 60, .size: 4, .value_kind: by_value },
  { .name: cols, .offset: 64, .size: 4, .value_kind: by_value },
  { .name: local_experts, .offset: 68, .size: 4, .value_kind: by_value },
  { .name: mode, .offset: 72, .size: 4, .value_kind: by_value },
  { .name: topk, .offset: 76, .size: 4, .value_kind: by_value },
  { .name: topk_magic, .offset: 80, .size: 4, .value_kind: by_value },
  { .name: slots, .offset: 84, .size: 4, .value_kind: by_value },
  { .name: a_bytes, .offset: 88, .size: 4, .value_kind: by_value },
  { .name: w_bytes, .offset: 92, .size: 4, .value_kind: by_value },
  { .name: groups, .offset: 96, .size: 4, .value_kind: by_value },
  { .name: w_blocks, .offset: 100, .size: 4, .value_kind: by_value },
  { .name: a_scale_bytes, .offset: 104, .size: 4, .value_kind: by_value })
