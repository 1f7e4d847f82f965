// moe_permute, row gather (kernels/moe/moe_permute.contract, write_permuted = true):
//   permuted[slot_to_row[t, k]] = x[t] for every local slot (slot_to_row >= 0), written by
//   halcyon_moe_permute_plan earlier on the same stream.
// Launch: block (256,1,1), grid (T, K, 1): one workgroup per slot, one lane per element.
// Byte offsets are 32-bit: T*H*2 and T*K*H*2 must be < 2^32 (the launcher checks).
// Registers in: s[0:1] kernarg, s2 token, s3 choice k, v0 lane.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

.text
.globl halcyon_moe_permute_rows
.p2align 8
.type halcyon_moe_permute_rows,@function
halcyon_moe_permute_rows:
  s_load_dwordx4 s[4:7], s[0:1], 0x0        // x, slot_to_row
  s_load_dwordx2 s[8:9], s[0:1], 0x10       // permuted
  s_load_dwordx2 s[10:11], s[0:1], 0x1c     // K, H
  s_waitcnt lgkmcnt(0)
  s_mul_i32 s12, s2, s10
  s_add_u32 s12, s12, s3                    // slot = t * K + k
  s_lshl_b32 s13, s12, 2
  s_load_dword s14, s[6:7], s13             // its row
  s_waitcnt lgkmcnt(0)
  s_cmp_lt_i32 s14, 0
  s_cbranch_scc1 .Ldone                     // not local
  s_mul_i32 s15, s2, s11                    // t * H
  s_mul_i32 s16, s14, s11                   // row * H
  s_mov_b32 s17, 0
.Lcopy:
  s_cmp_ge_u32 s17, s11
  s_cbranch_scc1 .Ldone
  v_add_u32 v1, s17, v0                     // h
  v_cmp_gt_u32 vcc, s11, v1
  s_and_saveexec_b64 s[18:19], vcc
  v_add_u32 v2, s15, v1
  v_lshlrev_b32 v2, 1, v2
  global_load_ushort v3, v2, s[4:5]
  v_add_u32 v4, s16, v1
  v_lshlrev_b32 v4, 1, v4
  s_waitcnt vmcnt(0)
  global_store_short v4, v3, s[8:9]
  s_mov_b64 exec, s[18:19]
  s_add_u32 s17, s17, 256
  s_branch .Lcopy
.Ldone:
  s_endpgm
.size halcyon_moe_permute_rows, .-halcyon_moe_permute_rows

GCN_KERNEL(halcyon_moe_permute_rows,
  kernarg=36, lds=0, sgprs=20, vgprs=5, agprs=0, workgroup=256, dims=2,
  { .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: slot_to_row, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: permuted, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: tokens, .offset: 24, .size: 4, .value_kind: by_value },
  { .name: top_k, .offset: 28, .size: 4, .value_kind: by_value },
  { .name: hidden, .offset: 32, .size: 4, .value_kind: by_value })
