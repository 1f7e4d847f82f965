// moe_gate (kernels/moe/moe_gate.contract): sigmoid or softmax scores, optional selection bias,
// group-limited top-k (DeepSeek-V3: 256 experts, 8 groups, top-4 groups, top-8), weights
// normalised and scaled.
// Launch: block (64,1,1), grid (T,1,1): one wave per token; lane l holds experts l, l+64,
// l+128, l+192 (E <= 256), n_groups <= 64, topk <= 64 (the launcher checks).
// Every selection is an arg-max over (key, expert) with ties to the lower expert: first within
// the lane (strict >, the lane's experts ascend), then a ds_bpermute butterfly over the wave
// (xor 32 .. 1), after which every lane holds the winner. Sums and maxima are DPP reductions
// (WAVE_REDUCE, gcn_wave.inc). Group ids are mul_hi(e, magic) with magic = ceil(2^32 /
// group_size) from the launcher (exact for e, group_size < 2^16).
// Registers in: s[0:1] kernarg, s2 token, v0 lane.
// v1..v4 expert ids, v5..v8 logits then scores, v9..v12 bias then selection scores,
// v13..v16 keys (selection score or -inf), v17..v20 group ids, v21..v24 kept (0/1),
// v25 group scores (lane g), v26 chosen ids (lane k), v27 their weights (lane k),
// v28/v29 arg-max value/expert, v30/v31 partner's, v32..v37 partner byte addresses,
// v38, v39, v41..v43 temporaries, v40 = -inf.
#include "gcn_target.inc"
#include "gcn_wave.inc"
.amdgcn_target GCN_TARGET_ID

// v28/v29 = key/expert if key > v28 (lower experts win ties: they come first)
.macro PICK key, idx
  v_cmp_gt_f32 vcc, \key, v28
  NOP_VALU_SGPR
  v_cndmask_b32 v28, v28, \key, vcc
  v_cndmask_b32 v29, v29, \idx, vcc
.endm
// One butterfly step: take the partner's pair if it ranks before ours.
.macro BSTEP addr
  ds_bpermute_b32 v30, \addr, v28
  ds_bpermute_b32 v31, \addr, v29
  s_waitcnt lgkmcnt(0)
  v_cmp_gt_f32 vcc, v30, v28
  v_cmp_eq_f32 s[36:37], v30, v28
  v_cmp_lt_u32 s[38:39], v31, v29
  s_and_b64 s[36:37], s[36:37], s[38:39]
  s_or_b64 vcc, vcc, s[36:37]
  v_cndmask_b32 v28, v28, v30, vcc
  v_cndmask_b32 v29, v29, v31, vcc
.endm
.macro BUTTERFLY
  .irp a, v32, v33, v34, v35, v36, v37
    BSTEP \a
  .endr
.endm
// Arg-max of the keys v13..v16 over the wave -> v28 (key), v29 (expert) in every lane.
.macro ARGMAX
  v_mov_b32 v28, v13
  v_mov_b32 v29, v1
  PICK v14, v2
  PICK v15, v3
  PICK v16, v4
  BUTTERFLY
.endm
// v38 = op over the wave of v38 (every lane gets the same result): DPP, gcn_wave.inc (s38 is
// BSTEP's scratch, free here).
.macro REDUCE op
  WAVE_REDUCE \op, v38, s38
.endm
// Lane s28 of dst = sval (v_writelane cannot take two SGPRs on gfx9).
.macro SETLANE dst, sval
  v_cmp_eq_u32 vcc, s28, v0
  v_mov_b32 v43, \sval
  NOP_VALU_SGPR
  v_cndmask_b32 \dst, \dst, v43, vcc
.endm
// v_dst = byte address of lane (lane ^ p)
.macro PARTNER dst, p
  v_xor_b32 v38, \p, v0
  v_lshlrev_b32 \dst, 2, v38
.endm

.text
.globl halcyon_moe_gate_f32
.p2align 8
.type halcyon_moe_gate_f32,@function
halcyon_moe_gate_f32:
  s_load_dwordx8 s[4:11], s[0:1], 0x0       // logits, bias, topk_ids, topk_weights
  s_load_dwordx8 s[12:19], s[0:1], 0x20     // T, E, n_groups, topk_groups, topk, group size, magic, flags
  s_load_dword s20, s[0:1], 0x40            // routed_scale
  v_mov_b32 v40, 0xff800000                 // -inf
  v_mov_b32 v1, v0
  v_add_u32 v2, 64, v0
  v_add_u32 v3, 0x80, v0
  v_add_u32 v4, 0xc0, v0
  v_mov_b32 v25, v40
  v_mov_b32 v26, 0
  v_mov_b32 v27, 0
  PARTNER v32, 32
  PARTNER v33, 16
  PARTNER v34, 8
  PARTNER v35, 4
  PARTNER v36, 2
  PARTNER v37, 1
  v_mov_b32 v5, v40
  v_mov_b32 v9, 0
  v_mov_b32 v6, v40
  v_mov_b32 v10, 0
  v_mov_b32 v7, v40
  v_mov_b32 v11, 0
  v_mov_b32 v8, v40
  v_mov_b32 v12, 0
  s_waitcnt lgkmcnt(0)
  s_mul_i32 s21, s2, s13
  s_lshl_b32 s21, s21, 2
  s_add_u32 s22, s4, s21                    // this token's logits
  s_addc_u32 s23, s5, 0
  s_cmp_eq_u32 s17, 1
  s_cbranch_scc1 .Lgroup_is_expert
  v_mul_hi_u32 v17, v1, s18
  v_mul_hi_u32 v18, v2, s18
  v_mul_hi_u32 v19, v3, s18
  v_mul_hi_u32 v20, v4, s18
  s_branch .Lload
.Lgroup_is_expert:
  v_mov_b32 v17, v1
  v_mov_b32 v18, v2
  v_mov_b32 v19, v3
  v_mov_b32 v20, v4
.Lload:
  v_cmp_gt_u32 vcc, s13, v1
  s_and_saveexec_b64 s[24:25], vcc
  v_lshlrev_b32 v38, 2, v1
  global_load_dword v5, v38, s[22:23]
  s_bitcmp1_b32 s19, 2
  s_cbranch_scc0 .Lnobias0
  global_load_dword v9, v38, s[6:7]
.Lnobias0:
  s_mov_b64 exec, s[24:25]
  v_cmp_gt_u32 vcc, s13, v2
  s_and_saveexec_b64 s[24:25], vcc
  v_lshlrev_b32 v38, 2, v2
  global_load_dword v6, v38, s[22:23]
  s_bitcmp1_b32 s19, 2
  s_cbranch_scc0 .Lnobias1
  global_load_dword v10, v38, s[6:7]
.Lnobias1:
  s_mov_b64 exec, s[24:25]
  v_cmp_gt_u32 vcc, s13, v3
  s_and_saveexec_b64 s[24:25], vcc
  v_lshlrev_b32 v38, 2, v3
  global_load_dword v7, v38, s[22:23]
  s_bitcmp1_b32 s19, 2
  s_cbranch_scc0 .Lnobias2
  global_load_dword v11, v38, s[6:7]
.Lnobias2:
  s_mov_b64 exec, s[24:25]
  v_cmp_gt_u32 vcc, s13, v4
  s_and_saveexec_b64 s[24:25], vcc
  v_lshlrev_b32 v38, 2, v4
  global_load_dword v8, v38, s[22:23]
  s_bitcmp1_b32 s19, 2
  s_cbranch_scc0 .Lnobias3
  global_load_dword v12, v38, s[6:7]
.Lnobias3:
  s_mov_b64 exec, s[24:25]
  s_waitcnt vmcnt(0)
  s_bitcmp1_b32 s19, 0
  s_cbranch_scc1 .Lsoftmax
  s_mov_b32 s26, 0xbfb8aa3b                 // -log2(e): sigmoid = 1 / (1 + 2^(-x log2 e))
  v_mul_f32 v38, s26, v5
  v_exp_f32 v38, v38
  NOP_TRANS                                 // gfx942: transcendental -> VALU
  v_add_f32 v38, 1.0, v38
  v_rcp_f32 v5, v38
  v_mul_f32 v38, s26, v6
  v_exp_f32 v38, v38
  NOP_TRANS                                 // gfx942: transcendental -> VALU
  v_add_f32 v38, 1.0, v38
  v_rcp_f32 v6, v38
  v_mul_f32 v38, s26, v7
  v_exp_f32 v38, v38
  NOP_TRANS                                 // gfx942: transcendental -> VALU
  v_add_f32 v38, 1.0, v38
  v_rcp_f32 v7, v38
  v_mul_f32 v38, s26, v8
  v_exp_f32 v38, v38
  NOP_TRANS                                 // gfx942: transcendental -> VALU
  v_add_f32 v38, 1.0, v38
  v_rcp_f32 v8, v38
  s_branch .Lselect
.Lsoftmax:
  v_max_f32 v38, v5, v6
  v_max_f32 v38, v38, v7
  v_max_f32 v38, v38, v8
  REDUCE v_max_f32
  s_mov_b32 s26, 0x3fb8aa3b                 // log2(e)
  v_sub_f32 v39, v5, v38
  v_mul_f32 v39, s26, v39
  v_exp_f32 v5, v39
  v_sub_f32 v39, v6, v38
  v_mul_f32 v39, s26, v39
  v_exp_f32 v6, v39
  v_sub_f32 v39, v7, v38
  v_mul_f32 v39, s26, v39
  v_exp_f32 v7, v39
  v_sub_f32 v39, v8, v38
  v_mul_f32 v39, s26, v39
  v_exp_f32 v8, v39
  v_add_f32 v38, v5, v6
  v_add_f32 v38, v38, v7
  v_add_f32 v38, v38, v8
  REDUCE v_add_f32
  v_rcp_f32 v39, v38
  NOP_TRANS
  v_mul_f32 v5, v5, v39
  v_mul_f32 v6, v6, v39
  v_mul_f32 v7, v7, v39
  v_mul_f32 v8, v8, v39
.Lselect:
  v_add_f32 v9, v5, v9
  v_add_f32 v10, v6, v10
  v_add_f32 v11, v7, v11
  v_add_f32 v12, v8, v12
  s_cmp_eq_u32 s14, s15
  s_cbranch_scc1 .Lall_groups
  // group scores: the sum of each group's two best selection scores
  s_mov_b32 s28, 0
.Lgroup:
  s_cmp_ge_u32 s28, s14
  s_cbranch_scc1 .Lpick_groups
  v_cmp_eq_u32 vcc, s28, v17
  NOP_VALU_SGPR
  v_cndmask_b32 v13, v40, v9, vcc
  v_cmp_eq_u32 vcc, s28, v18
  NOP_VALU_SGPR
  v_cndmask_b32 v14, v40, v10, vcc
  v_cmp_eq_u32 vcc, s28, v19
  NOP_VALU_SGPR
  v_cndmask_b32 v15, v40, v11, vcc
  v_cmp_eq_u32 vcc, s28, v20
  NOP_VALU_SGPR
  v_cndmask_b32 v16, v40, v12, vcc
  ARGMAX
  s_cmp_lt_u32 s17, 2
  s_cbranch_scc1 .Lone_expert
  v_mov_b32 v41, v28
  v_cmp_eq_u32 vcc, v29, v1
  NOP_VALU_SGPR
  v_cndmask_b32 v13, v13, v40, vcc
  v_cmp_eq_u32 vcc, v29, v2
  NOP_VALU_SGPR
  v_cndmask_b32 v14, v14, v40, vcc
  v_cmp_eq_u32 vcc, v29, v3
  NOP_VALU_SGPR
  v_cndmask_b32 v15, v15, v40, vcc
  v_cmp_eq_u32 vcc, v29, v4
  NOP_VALU_SGPR
  v_cndmask_b32 v16, v16, v40, vcc
  ARGMAX
  v_add_f32 v28, v41, v28
.Lone_expert:
  NOP_VALU_READLANE
  v_readfirstlane_b32 s29, v28
  NOP_VALU_SGPR
  SETLANE v25, s29
  s_add_u32 s28, s28, 1
  s_branch .Lgroup
  // keep the topk_groups best groups
.Lpick_groups:
  v_cmp_gt_u32 vcc, s14, v0
  NOP_VALU_SGPR
  v_cndmask_b32 v42, v40, v25, vcc
  v_mov_b32 v21, 0
  v_mov_b32 v22, 0
  v_mov_b32 v23, 0
  v_mov_b32 v24, 0
  s_mov_b32 s28, 0
.Lgroup_pick:
  s_cmp_ge_u32 s28, s15
  s_cbranch_scc1 .Lexperts
  v_mov_b32 v28, v42
  v_mov_b32 v29, v0
  BUTTERFLY
  NOP_VALU_READLANE
  v_readfirstlane_b32 s29, v29
  NOP_VALU_SGPR
  v_cmp_eq_u32 vcc, s29, v17
  NOP_VALU_SGPR
  v_cndmask_b32 v21, v21, 1, vcc
  v_cmp_eq_u32 vcc, s29, v18
  NOP_VALU_SGPR
  v_cndmask_b32 v22, v22, 1, vcc
  v_cmp_eq_u32 vcc, s29, v19
  NOP_VALU_SGPR
  v_cndmask_b32 v23, v23, 1, vcc
  v_cmp_eq_u32 vcc, s29, v20
  NOP_VALU_SGPR
  v_cndmask_b32 v24, v24, 1, vcc
  v_cmp_eq_u32 vcc, s29, v0
  NOP_VALU_SGPR
  v_cndmask_b32 v42, v42, v40, vcc
  s_add_u32 s28, s28, 1
  s_branch .Lgroup_pick
.Lall_groups:
  v_cmp_gt_u32 vcc, s13, v1
  NOP_VALU_SGPR
  v_cndmask_b32 v21, 0, 1, vcc
  v_cmp_gt_u32 vcc, s13, v2
  NOP_VALU_SGPR
  v_cndmask_b32 v22, 0, 1, vcc
  v_cmp_gt_u32 vcc, s13, v3
  NOP_VALU_SGPR
  v_cndmask_b32 v23, 0, 1, vcc
  v_cmp_gt_u32 vcc, s13, v4
  NOP_VALU_SGPR
  v_cndmask_b32 v24, 0, 1, vcc
  // the topk best experts of the kept groups
.Lexperts:
  v_cmp_ne_u32 vcc, 0, v21
  NOP_VALU_SGPR
  v_cndmask_b32 v13, v40, v9, vcc
  v_cmp_ne_u32 vcc, 0, v22
  NOP_VALU_SGPR
  v_cndmask_b32 v14, v40, v10, vcc
  v_cmp_ne_u32 vcc, 0, v23
  NOP_VALU_SGPR
  v_cndmask_b32 v15, v40, v11, vcc
  v_cmp_ne_u32 vcc, 0, v24
  NOP_VALU_SGPR
  v_cndmask_b32 v16, v40, v12, vcc
  s_mov_b32 s28, 0
.Lexpert_pick:
  s_cmp_ge_u32 s28, s16
  s_cbranch_scc1 .Lweights
  ARGMAX
  NOP_VALU_READLANE
  v_readfirstlane_b32 s29, v29              // the chosen expert
  NOP_VALU_SGPR
  SETLANE v26, s29
  s_and_b32 s30, s29, 63                    // its lane and register
  s_lshr_b32 s31, s29, 6
  v_readlane_b32 s32, v5, s30               // its (unbiased) score
  v_readlane_b32 s33, v6, s30
  v_readlane_b32 s34, v7, s30
  v_readlane_b32 s35, v8, s30
  s_cmp_eq_u32 s31, 1
  s_cselect_b32 s32, s33, s32
  s_cmp_eq_u32 s31, 2
  s_cselect_b32 s32, s34, s32
  s_cmp_eq_u32 s31, 3
  s_cselect_b32 s32, s35, s32
  SETLANE v27, s32
  v_cmp_eq_u32 vcc, s29, v1
  NOP_VALU_SGPR
  v_cndmask_b32 v13, v13, v40, vcc
  v_cmp_eq_u32 vcc, s29, v2
  NOP_VALU_SGPR
  v_cndmask_b32 v14, v14, v40, vcc
  v_cmp_eq_u32 vcc, s29, v3
  NOP_VALU_SGPR
  v_cndmask_b32 v15, v15, v40, vcc
  v_cmp_eq_u32 vcc, s29, v4
  NOP_VALU_SGPR
  v_cndmask_b32 v16, v16, v40, vcc
  s_add_u32 s28, s28, 1
  s_branch .Lexpert_pick
.Lweights:
  v_mov_b32 v38, v27
  REDUCE v_add_f32                          // sum of the chosen scores (lanes >= topk hold 0)
  s_bitcmp1_b32 s19, 1
  s_cbranch_scc0 .Lscale
  v_rcp_f32 v39, v38
  NOP_TRANS
  v_mul_f32 v39, v27, v39
  v_cmp_neq_f32 vcc, 0, v38                 // a zero sum leaves the weights 0
  NOP_VALU_SGPR
  v_cndmask_b32 v27, v27, v39, vcc
.Lscale:
  v_mul_f32 v27, s20, v27
  v_cmp_gt_u32 vcc, s16, v0
  s_and_saveexec_b64 s[24:25], vcc
  s_mul_i32 s21, s2, s16
  v_add_u32 v38, s21, v0
  v_lshlrev_b32 v38, 2, v38
  global_store_dword v38, v26, s[8:9]
  global_store_dword v38, v27, s[10:11]
  s_endpgm
.size halcyon_moe_gate_f32, .-halcyon_moe_gate_f32

GCN_KERNEL(halcyon_moe_gate_f32,
  kernarg=68, lds=0, sgprs=40, vgprs=44, agprs=0, workgroup=64, dims=1,
  { .name: logits, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: bias, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: topk_ids, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: topk_weights, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: tokens, .offset: 32, .size: 4, .value_kind: by_value },
  { .name: experts, .offset: 36, .size: 4, .value_kind: by_value },
  { .name: n_groups, .offset: 40, .size: 4, .value_kind: by_value },
  { .name: topk_groups, .offset: 44, .size: 4, .value_kind: by_value },
  { .name: topk, .offset: 48, .size: 4, .value_kind: by_value },
  { .name: group_size, .offset: 52, .size: 4, .value_kind: by_value },
  { .name: group_magic, .offset: 56, .size: 4, .value_kind: by_value },
  { .name: flags, .offset: 60, .size: 4, .value_kind: by_value },
  { .name: routed_scale, .offset: 64, .size: 4, .value_kind: by_value })
