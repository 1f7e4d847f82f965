// moe_combine (kernels/moe/moe_combine.contract), gather form:
//   out[t, h] = bf16( sum_k topk_weights[t, k] * expert_out[slot_to_row[t, k], h] ), skipping
//   slots whose row is -1 (expert not local) or outside [0, R) (a caller error: never read).
// Launch: block (256,1,1), grid (T, ceil(H / 256), 1). One lane per output column; the K row
// indices and weights of the token are scalar loads shared by the workgroup; f32 accumulation,
// one round-to-nearest-even to bf16 per output. Byte offsets are 32-bit: R*H*2 and T*H*2 must
// be < 2^32 (the launcher checks).
// Registers in: s[0:1] kernarg, s2 token (group x), s3 column block (group y), v0 lane.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

.text
.globl halcyon_moe_combine_bf16
.p2align 8
.type halcyon_moe_combine_bf16,@function
halcyon_moe_combine_bf16:
  s_load_dwordx8 s[4:11], s[0:1], 0x0       // expert_out, topk_weights, slot_to_row, out
  s_load_dwordx4 s[12:15], s[0:1], 0x20     // T, K, H, R
  v_lshl_add_u32 v1, s3, 8, v0              // h = column block * 256 + lane
  v_mov_b32 v2, 0                           // acc
  s_waitcnt lgkmcnt(0)
  v_cmp_gt_u32 vcc, s14, v1                 // h < H
  s_and_saveexec_b64 s[16:17], vcc
  s_cbranch_execz .Ldone
  s_mul_i32 s18, s2, s13                    // first slot of the token: t * K
  s_lshl_b32 s18, s18, 2
  s_add_u32 s20, s8, s18                    // &slot_to_row[t, 0]
  s_addc_u32 s21, s9, 0
  s_add_u32 s22, s6, s18                    // &topk_weights[t, 0]
  s_addc_u32 s23, s7, 0
  s_mov_b32 s24, 0                          // k
.Lslot:
  s_cmp_ge_u32 s24, s13
  s_cbranch_scc1 .Lstore
  s_lshl_b32 s25, s24, 2
  s_load_dword s26, s[20:21], s25           // row
  s_load_dword s27, s[22:23], s25           // weight
  s_add_u32 s24, s24, 1
  s_waitcnt lgkmcnt(0)
  s_cmp_lt_i32 s26, 0                       // -1: not local; other negatives: caller error
  s_cbranch_scc1 .Lslot
  s_cmp_ge_i32 s26, s15                     // past R: caller error, never read
  s_cbranch_scc1 .Lslot
  s_mul_i32 s28, s26, s14                   // row * H
  v_add_u32 v3, s28, v1
  v_lshlrev_b32 v3, 1, v3                   // byte offset of expert_out[row, h]
  global_load_ushort v4, v3, s[4:5]
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v4, 16, v4                  // bf16 -> f32
  v_fmac_f32 v2, s27, v4                    // acc += w * x
  s_branch .Lslot
.Lstore:
  s_movk_i32 s29, 0x7fff
  v_bfe_u32 v5, v2, 16, 1                   // round to nearest even
  v_add3_u32 v5, v2, v5, s29
  v_lshrrev_b32 v5, 16, v5
  s_mul_i32 s28, s2, s14                    // t * H
  v_add_u32 v3, s28, v1
  v_lshlrev_b32 v3, 1, v3
  global_store_short v3, v5, s[10:11]
.Ldone:
  s_endpgm
.size halcyon_moe_combine_bf16, .-halcyon_moe_combine_bf16

GCN_KERNEL(halcyon_moe_combine_bf16,
  kernarg=48, lds=0, sgprs=30, vgprs=6, agprs=0, workgroup=256, dims=2,
  { .name: expert_out, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: topk_weights, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: slot_to_row, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: out, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: tokens, .offset: 32, .size: 4, .value_kind: by_value },
  { .name: top_k, .offset: 36, .size: 4, .value_kind: by_value },
  { .name: hidden, .offset: 40, .size: 4, .value_kind: by_value },
  { .name: rows, .offset: 44, .size: 4, .value_kind: by_value })
