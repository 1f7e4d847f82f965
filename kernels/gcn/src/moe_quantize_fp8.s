// FP8 activation quantization (DeepSeek-V3's): a row's group of 128 bf16 values -> e4m3 codes
// and one f32 scale = amax / 448, q = e4m3(x / scale), bit for bit the reference
// (gcn_fp8.inc: integer arithmetic only). One kernel for two operators, by `mode`:
//   mode 0  moe_quantize_fp8 (kernels/moe/moe_quantize_fp8.contract): row y of x [R, K] into row
//           y of q [R, K] and scale [R, KG];
//   mode 1  moe_permute_fp8's rows (kernels/moe/moe_permute_fp8.contract, after
//           halcyon_moe_permute_plan on the same stream): token y of x [T, K] quantized once and
//           written to each of its slots' rows slot_to_row[y, j] (j < topk; -1, or a row past
//           num_rows[0], is not written).
// Launch: block (64,1,1), grid (KG, rows or tokens, 1): one wave a (row, group); lane l holds
// the group's elements l and l + 64 (0 past K). KG = ceil(K / 128). Byte offsets are 32-bit: the
// launcher checks rows * K * 2 < 2^32.
// Registers in: s[0:1] kernarg, s2 group, s3 row (token), v0 lane.
#include "gcn_target.inc"
#include "gcn_wave.inc"
#include "gcn_fp8.inc"
.amdgcn_target GCN_TARGET_ID

// The lanes whose column \col (a VGPR) lies in the row (< K, s14) run what follows, up to
// ALL_LANES: EXEC saved in s[32:33].
.macro LANES_IN_ROW col
  v_cmp_gt_u32 vcc, s14, \col
  s_and_saveexec_b64 s[32:33], vcc
.endm
.macro ALL_LANES
  s_mov_b64 exec, s[32:33]
.endm

.text
.globl halcyon_moe_quantize_fp8
.p2align 8
.type halcyon_moe_quantize_fp8,@function
halcyon_moe_quantize_fp8:
  s_load_dwordx8 s[4:11], s[0:1], 0x0       // x, q, scale, slot_to_row
  s_load_dwordx2 s[12:13], s[0:1], 0x20     // num_rows
  s_load_dwordx2 s[14:15], s[0:1], 0x28     // K, topk
  s_load_dword s16, s[0:1], 0x30            // mode
  FP8_CONSTANTS
  v_mov_b32 v7, s26                         // 448.0f
  v_mov_b32 v3, 0
  v_mov_b32 v4, 0
  s_lshl_b32 s17, s2, 7
  v_add_u32 v1, s17, v0                     // k0 = 128 g + lane
  v_add_u32 v2, 64, v1                      // k1 = k0 + 64
  s_waitcnt lgkmcnt(0)
  s_mul_i32 s18, s3, s14                    // y * K: the row's first element
  LANES_IN_ROW v1
  v_add_lshl_u32 v25, s18, v1, 1
  global_load_ushort v3, v25, s[4:5]
  ALL_LANES
  LANES_IN_ROW v2
  v_add_lshl_u32 v25, s18, v2, 1
  global_load_ushort v4, v25, s[4:5]
  ALL_LANES
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v3, 16, v3                  // bf16 -> fp32 bits
  v_lshlrev_b32 v4, 16, v4
  AMAX_KEY v5, v3
  AMAX_KEY v6, v4
  v_max_u32 v5, v5, v6
  WAVE_REDUCE v_max_u32, v5, s19            // amax (bits), in every lane
  F32_DIV v6, v5, v7                        // scale = amax / 448
  F32_DIV v24, v3, v6
  F32_TO_E4M3 v8, v24
  F32_DIV v24, v4, v6
  F32_TO_E4M3 v9, v24
  // A group of zeros: scale 0 and q = +0; x / 0 gave +-0 (F32_DIV's 0 / b), or 0x7f for a NaN
  // x, which stays (no NaN is lost): drop the sign.
  v_cmp_eq_u32 vcc, 0, v6
  NOP_VALU_SGPR
  v_and_b32 v10, 0x7f, v8
  v_and_b32 v11, 0x7f, v9
  v_cndmask_b32 v8, v8, v10, vcc
  v_cndmask_b32 v9, v9, v11, vcc
  s_add_u32 s17, s14, 127
  s_lshr_b32 s17, s17, 7                    // KG
  s_cmp_eq_u32 s16, 0
  s_cbranch_scc0 .Lpermuted
  s_mov_b32 s19, s3                         // mode 0: the same row
  s_mov_b32 s22, 0
  s_branch .Lstore
.Lpermuted:
  s_mul_i32 s22, s3, s15                    // mode 1: slots [y * topk, (y + 1) * topk)
  s_add_u32 s23, s22, s15
  s_load_dword s28, s[12:13], 0x0           // num_rows
.Lslot:
  s_cmp_ge_u32 s22, s23
  s_cbranch_scc1 .Ldone
  s_lshl_b32 s19, s22, 2
  s_load_dword s19, s[10:11], s19           // its row
  s_add_u32 s22, s22, 1
  s_waitcnt lgkmcnt(0)
  s_cmp_lt_i32 s19, 0
  s_cbranch_scc1 .Lslot                     // not a local expert's
  s_cmp_ge_i32 s19, s28
  s_cbranch_scc1 .Lslot
.Lstore:                                    // row s19: q[s19, k] and, from lane 0, scale[s19, g]
  s_mul_i32 s18, s19, s14
  LANES_IN_ROW v1
  v_add_u32 v25, s18, v1
  global_store_byte v25, v8, s[6:7]
  ALL_LANES
  LANES_IN_ROW v2
  v_add_u32 v25, s18, v2
  global_store_byte v25, v9, s[6:7]
  ALL_LANES
  v_cmp_eq_u32 vcc, 0, v0
  s_and_saveexec_b64 s[32:33], vcc
  s_mul_i32 s18, s19, s17
  s_add_u32 s18, s18, s2
  s_lshl_b32 s18, s18, 2
  v_mov_b32 v25, s18
  global_store_dword v25, v6, s[8:9]
  ALL_LANES
  s_cmp_eq_u32 s16, 0
  s_cbranch_scc0 .Lslot
.Ldone:
  s_endpgm
.size halcyon_moe_quantize_fp8, .-halcyon_moe_quantize_fp8

GCN_KERNEL(halcyon_moe_quantize_fp8,
  kernarg=52, lds=0, sgprs=36, vgprs=32, agprs=0, workgroup=64, dims=2,
  { .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: q, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: scale, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: slot_to_row, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: num_rows, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: width, .offset: 40, .size: 4, .value_kind: by_value },
  { .name: top_k, .offset: 44, .size: 4, .value_kind: by_value },
  { .name: mode, .offset: 48, .size: 4, .value_kind: by_value })
