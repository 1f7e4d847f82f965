// The three FP8 grouped GEMMs of the MoE layer (e4m3 with 1x128 / 128x128 block scales,
// kernels/moe/*fp8*.contract), one kernel with a mode, on gfx942's FP8 MFMA 32x32x16 and on
// gfx90a's bf16 MFMA 32x32x8 (CDNA2 has no FP8 MFMA: the bytes are decoded to bf16, see below):
//   mode 0  moe_grouped_gemm_fp8:                out[r, n] = bf16(sum_g sa[r, g] sw[n / 128, g] a[r, g] . w[e][n, g])
//   mode 1  moe_grouped_gemm_fp8_swiglu:         out[r, n] = bf16(silu(gate) * up), gate of row n, up of row N + n
//   mode 2  moe_grouped_gemm_fp8_swiglu_gather:  mode 1 with a[r] = x[row_to_slot[r] / topk] (and its scales)
// for rows r of expert e: [expert_offsets[e], expert_offsets[e + 1]); g: groups of 128 of K.
// Correct first: no LDS, one wave a workgroup.
// Launch: block (64,1,1), grid (ceil(N / 32), ceil(R / 32) + EL, 1). Workgroup y is a virtual
// row tile of 32 tokens (the tiles of expert 0, then expert 1, ...; those past the last exit);
// x a tile of 32 weight rows (SwiGLU: 32 gate rows and their 32 up rows).
// Swap-AB: the weights are the MFMA's A (i = weight row), the tokens its B (j = token), so a
// lane's results all belong to one token: one activation scale a lane per group; its 16 rows
// (8 (q / 4) + q % 4 + 4 (l / 32), q the result register) lie in at most two 128-row scale
// blocks (two only for the up rows when N % 128 != 0), chosen per register.
// Both operands are [rows, K] bytes (K-major), what the FP8 MFMA's A/B layout takes: a lane's 8
// k-values are 8 consecutive bytes. Lane l (i = j = l % 32, h = l / 32) loads bytes [64 h,
// 64 h + 64) of the group of its weight row and of its token row; gfx942's MFMA s takes bytes
// [8 s, 8 s + 8) of them (the instruction's k = 8 h + e is then group element 64 h + 8 s + e, the
// same for both operands, so the sum over k is the group's dot product).
// K % 8 == 0 (the launcher refuses others): an 8-byte chunk lies wholly inside or wholly past
// K. Loads are raw buffer loads with range checks: offset 0x80000000 (past every buffer) for
// a chunk at k >= K, a token row past its expert or with an invalid slot, a weight row past N.
// FP8 encodings: the operators' e4m3 is OCP e4m3fn (bias 7, max 448, 0x7f/0xff NaN, 0x80 = -0).
// gfx942: the MFMA reads e4m3fnuz (bias 8, max 240, 0x80 the only NaN, no -0). Every fn code but -0
// and the NaNs read as fnuz is exactly half its value, so each loaded byte is re-encoded
// (FNUZ: 0x80 -> 0x00, 0x7f/0xff -> 0x80, others unchanged) and each group's promotion scale
// is a_scale * w_scale * 4 (two halves; exact, a power of two).
// gfx90a: every e4m3fn value is exactly a bf16 value (3 mantissa bits, 2^-9 .. 448), so each
// loaded dword is decoded exactly into two dwords of bf16 pairs (BF16_DECODE: NaN stays NaN, -0
// stays -0), v[104:135] weights, v[136:167] tokens, v[168:199] up weights, and each 8-byte
// chunk takes two bf16 MFMAs of 4 k-values a lane (MULTIPLY says why the sum is unchanged);
// the promotion scale is a_scale * w_scale.
// Per group: 8 FP8 MFMAs (gfx942) or 16 bf16 MFMAs (gfx90a) into a zeroed temporary (a[0:15], up
// a[16:31]), then the promotion into the fp32 totals (v[56:71], up v[72:87]): total += temp *
// scale, one FMA per result.
// Register layout of v_mfma_f32_32x32x16_fp8_fp8 (AMD's calculator, shared/reference/mfma), lane l:
//   A: a[i = l % 32][k = 8 (l / 32) + byte]  B: b[k = 8 (l / 32) + byte][j = l % 32]
//   result register q: c[8 (q / 4) + 4 (l / 32) + q % 4][l % 32]
// and of v_mfma_f32_32x32x8bf16_1k (gfx90a): the same result registers; A: a[i = l % 32][k = 4 (l /
// 32) + 0..3], B: b[k = 4 (l / 32) + 0..3][j = l % 32], two dwords of bf16 pairs, low half first.
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

#if defined(HALCYON_GFX90A)
// gfx90a: the 4 e4m3fn bytes of v[\x] (b0..b3) decoded exactly to bf16 pairs, low half first:
// v[\d] = (b0, b2), v[\d + 1] = (b1, b3). Per byte, mag = its low 7 bits: a normal code (8 <=
// mag <= 0x7e) is (mag << 4) + (120 << 7); a denormal or zero (mag < 8, m * 2^-9) comes from a
// table (two v_perm_b32 on the byte tables v210..v213: low and high bytes of bf16(m * 2^-9));
// the NaNs (mag 0x7f) pick table bytes 0xff, so 0xffff, a bf16 NaN; then the sign (bit 15).
// Constants: s72 0x7f7f7f7f, s73 0x01010101, s74 0x77777777, s84 0x00ff00ff, s85 0x0c030c01,
// s86 0x3c003c00, s87 0x09090808, s88 0x0b0b0a0a, s89 0x80008000. Temporaries v200..v206.
.macro BF16_DECODE x, d
  v_and_b32 v200, s72, v[\x]               // mag of each byte
  v_add_u32 v201, s73, v200
  v_and_b32 v201, s72, v201                 // (mag + 1) & 0x7f: 0 for the NaNs
  v_add_u32 v201, s74, v201                 // bit 7 of a byte: 8 <= mag <= 0x7e (no carry crosses)
  v_lshlrev_b32 v202, 8, v201
  v_perm_b32 v203, v202, v201, s88          // 0xffff in the halves of the normal bytes 0 / 2
  v_perm_b32 v204, v202, v201, s87          // ... of bytes 1 / 3 (the sign of each 16-bit half)
  v_and_b32 v205, s84, v200                 // (mag0, mag2) as 16-bit halves
  v_perm_b32 v206, v200, v200, s85          // (mag1, mag3)
  BF16_HALVES \d, v205, v203
  v_lshlrev_b32 v202, 8, v[\x]              // the signs of bytes 0 / 2 at bits 15 / 31
  v_and_or_b32 v[\d], v202, s89, v[\d]
  BF16_HALVES \d+1, v206, v204
  v_and_or_b32 v[\d+1], v[\x], s89, v[\d+1] // the signs of bytes 1 / 3 are there already
.endm
// v[\d] = the magnitudes \mag (16-bit halves) decoded: normal halves (mask \normal) by the formula,
// the others from the tables (selector byte 0 between the halves: table byte 0 is 0x00).
.macro BF16_HALVES d, mag, normal
  v_perm_b32 v201, v211, v210, \mag         // low bytes of bf16(m * 2^-9)
  v_perm_b32 v202, v213, v212, \mag         // high bytes
  v_lshl_or_b32 v201, v202, 8, v201
  v_lshl_add_u32 v202, \mag, 4, s86
  v_bfi_b32 v[\d], \normal, v202, v201
.endm
// Decoded operand registers of source dword j: weights v[104 + 2 j], tokens v[136 + 2 j], up
// weights v[168 + 2 j] (two each).
.macro DECODE_DWORD j, swiglu
  BF16_DECODE 8+\j, 104+2*\j
  BF16_DECODE 24+\j, 136+2*\j
  .if \swiglu
    BF16_DECODE 40+\j, 168+2*\j
  .endif
.endm
// The bf16 MFMA of source dword j: k = 4 (l / 32) + 0..3 of the instruction are bytes (0, 2, 1, 3)
// of dword j of the lane's 64 bytes, in both operands: group elements 64 h + 4 j + (0, 2, 1, 3).
.macro MFMA_DWORD j, swiglu
  .if (\j) == 0
    MFMA_F32_32X32X8_BF16 a[0:15], v[104:105], v[136:137], 0
    .if \swiglu
      MFMA_F32_32X32X8_BF16 a[16:31], v[168:169], v[136:137], 0
    .endif
  .else
    MFMA_F32_32X32X8_BF16 a[0:15], v[104+2*(\j):105+2*(\j)], v[136+2*(\j):137+2*(\j)], a[0:15]
    .if \swiglu
      MFMA_F32_32X32X8_BF16 a[16:31], v[168+2*(\j):169+2*(\j)], v[136+2*(\j):137+2*(\j)], a[16:31]
    .endif
  .endif
.endm
// The group's 16 bf16 MFMAs (gfx90a), each on 4 k-values a lane: a[0:15] = the weight rows x
// tokens of the group (a[16:31] the up rows). Each MFMA sums over a set of 8 group elements, the
// same permutation of them in A and B, and the 16 sets cover the group once, so the sum is the
// group's dot product. Dword j + 1 is decoded while the MFMA of dword j runs.
.macro MULTIPLY swiglu
  DECODE_DWORD 0, \swiglu
  .irp j, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    s_nop 1                                 // VALU write -> MFMA read (the dword just decoded)
    MFMA_DWORD \j-1, \swiglu
    DECODE_DWORD \j, \swiglu
  .endr
  s_nop 1
  MFMA_DWORD 15, \swiglu
.endm
#else
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

#endif

// Promotion scales of the group, a_scale * w_scale (gfx942: x 4, as fnuz reads each code at half
// its value, in both operands; gfx90a decodes exactly): v90 / v91 for the gate rows in their
// first / second scale block, v92 / v93 for the up rows.
.macro GROUP_SCALE dst, w
  v_mul_f32 v\dst, \w, v89
#if defined(HALCYON_GFX942)
  v_mul_f32 v\dst, 4.0, v\dst
#endif
.endm
.macro GROUP_SCALES swiglu
  GROUP_SCALE 90, s66
  GROUP_SCALE 91, s67
  .if \swiglu
    GROUP_SCALE 92, s68
    GROUP_SCALE 93, s69
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
  s_nop 7                                   // MFMA results are ready after its passes + 3
  s_nop 7                                   // (gfx942 FP8: 8 passes, gfx90a bf16: 16)
#if defined(HALCYON_GFX90A)
  s_nop 2                                   // 19 (GROUP_SCALES, PROMOTE's v_cmp give the rest too)
#endif
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
#if defined(HALCYON_GFX90A)
  s_mov_b32 s74, 0x77777777                 // BF16_DECODE's constants and tables
  s_mov_b32 s84, 0x00ff00ff
  s_mov_b32 s85, 0x0c030c01
  s_mov_b32 s86, 0x3c003c00
  s_mov_b32 s87, 0x09090808
  s_mov_b32 s88, 0x0b0b0a0a
  s_mov_b32 s89, 0x80008000
  v_mov_b32 v210, 0xc0800000                // low bytes of bf16(m * 2^-9), m = 0..3
  v_mov_b32 v211, 0x60402000                // m = 4..7
  v_mov_b32 v212, 0x3b3b3b00                // high bytes
  v_mov_b32 v213, 0x3c3c3c3c
#else
  s_mov_b32 s74, 0x80808080
#endif
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

// gfx90a: the decoded operands (v104..v199), BF16_DECODE's temporaries and tables, s84..s89.
#if defined(HALCYON_GFX90A)
#define FP8_SGPRS 90
#define FP8_VGPRS 214
#else
#define FP8_SGPRS 84
#define FP8_VGPRS 103
#endif
GCN_KERNEL(halcyon_moe_grouped_gemm_fp8,
  kernarg=108, lds=0, sgprs=FP8_SGPRS, vgprs=FP8_VGPRS, agprs=32, workgroup=64, dims=2,
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
