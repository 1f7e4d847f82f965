// moe_permute, bookkeeping (kernels/moe/moe_permute.contract): expert_counts, expert_offsets,
// row_to_slot, slot_to_row and num_rows for the local experts [begin, begin + EL).
// Launch: block (512,1,1), grid (1,1,1): 8 waves, wave w owns the contiguous slot segment
// [w * seg, (w + 1) * seg), seg = ceil(T*K / 8), so the order stays deterministic and stable:
//  1. each wave counts its segment's local slots per expert into its own LDS row cnt[w][e];
//  2. thread e turns column e into exclusive prefixes over the waves and writes total[e];
//  3. lane 0 of wave 0 scans the totals serially: expert_counts, expert_offsets, num_rows, and
//     total[e] becomes expert e's first row;
//  4. thread e adds it to cnt[w][e]: the next free row of expert e for wave w;
//  5. each wave walks its segment 64 slots at a time: the lanes of one expert (v_readlane +
//     v_cmp, one group per distinct expert in the chunk) take rows cnt[w][e] + (their rank
//     among those lanes, v_mbcnt), so rows follow increasing slot within each expert.
// One s_barrier between phases; every LDS dword is touched by one wave per barrier interval.
// Ids outside [begin, begin + EL) (including those outside [0, E): a caller error) are not
// local: slot_to_row = -1 and nothing else is written for them. EL <= 1024 (LDS: 8 rows of
// 1024 counts, then 1024 totals).
// Registers in: s[0:1] kernarg, v0 thread.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

.set TOTALS, 32768

.text
.globl halcyon_moe_permute_plan
.p2align 8
.type halcyon_moe_permute_plan,@function
halcyon_moe_permute_plan:
  s_load_dwordx8 s[4:11], s[0:1], 0x0       // ids, counts, offsets, row_to_slot
  s_load_dwordx4 s[12:15], s[0:1], 0x20     // slot_to_row, num_rows
  s_load_dwordx2 s[16:17], s[0:1], 0x30     // TK, EL
  s_load_dword s18, s[0:1], 0x38            // expert_begin
  v_mov_b32 v2, 0
  v_mov_b32 v7, 1
  v_and_b32 v40, 63, v0                     // lane
  v_lshrrev_b32 v3, 6, v0
  NOP_VALU_READLANE
  v_readfirstlane_b32 s19, v3               // wave w
  s_waitcnt lgkmcnt(0)
  s_add_u32 s36, s16, 7
  s_lshr_b32 s36, s36, 3                    // seg
  s_mul_i32 s37, s36, s19
  s_min_u32 s37, s37, s16                   // segment start
  s_add_u32 s39, s37, s36
  s_min_u32 s39, s39, s16                   // segment end
  s_mov_b32 s36, s37
  s_mul_i32 s38, s19, s17
  s_lshl_b32 s38, s38, 2                    // byte offset of cnt[w][0]
  v_mov_b32 v41, s38
  // 0. zero the 8 rows of counts
  s_lshl_b32 s21, s17, 3
  s_mov_b32 s20, 0
.Lzero:
  s_cmp_ge_u32 s20, s21
  s_cbranch_scc1 .Lzero_done
  v_add_u32 v3, s20, v0
  v_cmp_gt_u32 vcc, s21, v3
  s_and_saveexec_b64 s[22:23], vcc
  v_lshlrev_b32 v4, 2, v3
  ds_write_b32 v4, v2
  s_mov_b64 exec, s[22:23]
  s_add_u32 s20, s20, 0x200
  s_branch .Lzero
.Lzero_done:
  s_waitcnt lgkmcnt(0)
  s_barrier
  // 1. count this wave's segment into cnt[w][e]
  s_mov_b32 s20, s36
.Lcount:
  s_cmp_ge_u32 s20, s39
  s_cbranch_scc1 .Lcount_done
  v_add_u32 v3, s20, v40                    // slot
  v_cmp_gt_u32 vcc, s39, v3
  s_and_saveexec_b64 s[22:23], vcc
  v_lshlrev_b32 v4, 2, v3
  global_load_dword v5, v4, s[4:5]
  s_waitcnt vmcnt(0)
  v_subrev_u32 v5, s18, v5                  // local expert (unsigned: ids below begin wrap)
  v_cmp_gt_u32 vcc, s17, v5
  s_and_b64 exec, exec, vcc
  v_lshl_add_u32 v6, v5, 2, v41
  ds_add_u32 v6, v7
  s_mov_b64 exec, s[22:23]
  s_add_u32 s20, s20, 64
  s_branch .Lcount
.Lcount_done:
  s_waitcnt lgkmcnt(0)
  s_barrier
  // 2. thread e: exclusive prefix of column e over the waves, and its total
  v_cmp_gt_u32 vcc, s17, v0
  s_and_saveexec_b64 s[22:23], vcc
  v_lshlrev_b32 v4, 2, v0
  v_mov_b32 v5, 0
  s_mov_b32 s20, 0
  s_lshl_b32 s21, s17, 2                    // row stride in bytes
.Lcolumn:
  s_cmp_ge_u32 s20, 8
  s_cbranch_scc1 .Lcolumn_done
  ds_read_b32 v8, v4
  s_waitcnt lgkmcnt(0)
  ds_write_b32 v4, v5
  v_add_u32 v5, v5, v8
  v_add_u32 v4, s21, v4
  s_add_u32 s20, s20, 1
  s_branch .Lcolumn
.Lcolumn_done:
  v_lshlrev_b32 v4, 2, v0
  ds_write_b32 v4, v5 offset:TOTALS
  s_mov_b64 exec, s[22:23]
  s_waitcnt lgkmcnt(0)
  s_barrier
  // 3. lane 0 of wave 0: serial scan of the totals
  s_cmp_eq_u32 s19, 0
  s_cbranch_scc0 .Lscan_end
  s_mov_b64 exec, 1
  v_mov_b32 v5, 0                           // running row
  s_mov_b32 s20, 0
.Lscan:
  s_cmp_ge_u32 s20, s17
  s_cbranch_scc1 .Lscan_done
  s_lshl_b32 s21, s20, 2
  v_mov_b32 v6, s21
  ds_read_b32 v8, v6 offset:TOTALS
  s_waitcnt lgkmcnt(0)
  global_store_dword v6, v8, s[6:7]         // expert_counts[i]
  global_store_dword v6, v5, s[8:9]         // expert_offsets[i]
  ds_write_b32 v6, v5 offset:TOTALS         // first row of expert i
  v_add_u32 v5, v5, v8
  s_add_u32 s20, s20, 1
  s_branch .Lscan
.Lscan_done:
  s_lshl_b32 s21, s17, 2
  v_mov_b32 v6, s21
  global_store_dword v6, v5, s[8:9]         // expert_offsets[EL] = R
  global_store_dword v2, v5, s[14:15]       // num_rows
  s_waitcnt lgkmcnt(0)
  s_mov_b64 exec, -1
.Lscan_end:
  s_barrier
  // 4. thread e: cnt[w][e] += first row of e
  v_cmp_gt_u32 vcc, s17, v0
  s_and_saveexec_b64 s[22:23], vcc
  v_lshlrev_b32 v4, 2, v0
  ds_read_b32 v9, v4 offset:TOTALS
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s20, 0
  s_lshl_b32 s21, s17, 2
.Lrebase:
  s_cmp_ge_u32 s20, 8
  s_cbranch_scc1 .Lrebase_done
  ds_read_b32 v8, v4
  s_waitcnt lgkmcnt(0)
  v_add_u32 v8, v8, v9
  ds_write_b32 v4, v8
  v_add_u32 v4, s21, v4
  s_add_u32 s20, s20, 1
  s_branch .Lrebase
.Lrebase_done:
  s_mov_b64 exec, s[22:23]
  s_waitcnt lgkmcnt(0)
  s_barrier
  // 5. rows of this wave's segment, 64 slots at a time
  s_mov_b32 s20, s36
.Lchunk:
  s_cmp_ge_u32 s20, s39
  s_cbranch_scc1 .Ldone
  v_add_u32 v3, s20, v40                    // slot
  v_cmp_gt_u32 vcc, s39, v3
  s_and_saveexec_b64 s[30:31], vcc
  s_mov_b64 s[22:23], exec                  // the chunk's slots
  v_lshlrev_b32 v4, 2, v3
  global_load_dword v8, v4, s[4:5]
  v_mov_b32 v9, -1                          // row: -1 unless local
  s_waitcnt vmcnt(0)
  v_subrev_u32 v8, s18, v8
  v_cmp_gt_u32 vcc, s17, v8
  s_and_b64 s[24:25], exec, vcc             // local lanes not yet placed
.Lgroup:
  s_cmp_eq_u64 s[24:25], 0
  s_cbranch_scc1 .Lchunk_store
  s_ff1_i32_b64 s26, s[24:25]
  v_readlane_b32 s27, v8, s26               // the expert of the first unplaced lane
  s_mov_b64 exec, s[24:25]
  NOP_VALU_SGPR
  v_cmp_eq_u32 vcc, s27, v8                 // its lanes
  s_andn2_b64 s[24:25], s[24:25], vcc
  s_mov_b64 exec, vcc
  v_mbcnt_lo_u32_b32 v10, vcc_lo, 0         // rank among them
  v_mbcnt_hi_u32_b32 v10, vcc_hi, v10
  s_lshl_b32 s28, s27, 2
  s_add_u32 s28, s28, s38
  v_mov_b32 v11, s28
  ds_read_b32 v12, v11                      // next free row of the expert for this wave
  s_bcnt1_i32_b64 s29, vcc
  s_waitcnt lgkmcnt(0)
  v_add_u32 v9, v12, v10
  v_add_u32 v12, s29, v12
  ds_write_b32 v11, v12
  s_branch .Lgroup
.Lchunk_store:
  s_mov_b64 exec, s[22:23]
  global_store_dword v4, v9, s[12:13]       // slot_to_row[slot]
  v_cmp_le_i32 vcc, 0, v9
  s_and_b64 exec, exec, vcc
  v_lshlrev_b32 v13, 2, v9
  global_store_dword v13, v3, s[10:11]      // row_to_slot[row] = slot
  s_mov_b64 exec, -1
  s_add_u32 s20, s20, 64
  s_waitcnt lgkmcnt(0)
  s_branch .Lchunk
.Ldone:
  s_endpgm
.size halcyon_moe_permute_plan, .-halcyon_moe_permute_plan

GCN_KERNEL(halcyon_moe_permute_plan,
  kernarg=60, lds=36864, sgprs=40, vgprs=42, agprs=0, workgroup=512, dims=1,
  { .name: topk_ids, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: expert_counts, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: expert_offsets, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: row_to_slot, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: slot_to_row, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: num_rows, .offset: 40, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: slots, .offset: 48, .size: 4, .value_kind: by_value },
  { .name: local_experts, .offset: 52, .size: 4, .value_kind: by_value },
  { .name: expert_begin, .offset: 56, .size: 4, .value_kind: by_value })
