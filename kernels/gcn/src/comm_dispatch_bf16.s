// comm_dispatch (kernels/comm/comm_dispatch.contract): out[r] = x[src_row[r]] for every
// destination row r, chunk_rows rows at a time: workgroup w moves chunks w, w + G, ... (rows
// [c * chunk_rows, (c + 1) * chunk_rows) in order), so the launcher sizes G from the compute
// units of the stream's partition. A row whose src_row is outside [0, T) is skipped untouched.
// Loads and stores are non-temporal (STREAM_POLICY: nt on gfx942, slc on gfx90a).
// Launch: block (256,1,1), grid (G,1,1); step_rows = G * chunk_rows. dwords = 1 when H is even
// and x and out are 4-byte aligned: a lane then moves 2 elements a step, else 1 (ushort).
// Byte offsets are 32-bit: T*H*2 and R*H*2 must be < 2^32 (the launcher checks).
// Registers in: s[0:1] kernarg, s2 workgroup, v0 lane.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

.text
// One row, from byte offset s25 of x to s26 of out: lane l moves items l, l + 256, ... below
// \count, each 1 << \shift bytes; leaves through .Lrow_next.
.macro COPY_ROW count, shift, load, store
  s_mov_b32 s27, 0
1:
  s_cmp_ge_u32 s27, \count
  s_cbranch_scc1 .Lrow_next
  v_add_u32 v1, s27, v0
  v_cmp_gt_u32 vcc, \count, v1
  s_and_saveexec_b64 s[28:29], vcc
  v_lshlrev_b32 v1, \shift, v1
  v_add_u32 v2, s25, v1
  \load v3, v2, s[4:5] STREAM_POLICY
  v_add_u32 v4, s26, v1
  s_waitcnt vmcnt(0)
  \store v4, v3, s[8:9] STREAM_POLICY
  s_mov_b64 exec, s[28:29]
  s_add_u32 s27, s27, 256
  s_branch 1b
.endm

.globl halcyon_comm_dispatch_bf16
.p2align 8
.type halcyon_comm_dispatch_bf16,@function
halcyon_comm_dispatch_bf16:
  s_load_dwordx4 s[4:7], s[0:1], 0x0        // x, src_row
  s_load_dwordx2 s[8:9], s[0:1], 0x10       // out
  s_load_dwordx4 s[12:15], s[0:1], 0x18     // T, R, H, chunk_rows
  s_load_dwordx2 s[16:17], s[0:1], 0x28     // step_rows, dwords
  s_waitcnt lgkmcnt(0)
  s_mul_i32 s18, s2, s15                    // first row of this workgroup's first chunk
  s_lshl_b32 s19, s14, 1                    // row bytes = 2H
  s_lshr_b32 s20, s14, 1                    // dwords a row (dwords = 1: H is even)
.Lchunk:
  s_cmp_ge_u32 s18, s13
  s_cbranch_scc1 .Ldone                     // past the last row
  s_add_u32 s21, s18, s15
  s_min_u32 s21, s21, s13                   // the chunk's end
  s_mov_b32 s22, s18                        // r
.Lrow:
  s_cmp_ge_u32 s22, s21
  s_cbranch_scc1 .Lnext_chunk
  s_lshl_b32 s23, s22, 2
  s_load_dword s24, s[6:7], s23             // src = src_row[r]
  s_waitcnt lgkmcnt(0)
  s_cmp_ge_u32 s24, s12                     // unsigned: a negative src is huge
  s_cbranch_scc1 .Lrow_next                 // outside [0, T): skipped
  s_mul_i32 s25, s24, s19                   // source row's byte offset
  s_mul_i32 s26, s22, s19                   // destination row's byte offset
  s_cmp_eq_u32 s17, 0
  s_cbranch_scc1 .Lshorts
  COPY_ROW s20, 2, global_load_dword, global_store_dword
.Lshorts:
  COPY_ROW s14, 1, global_load_ushort, global_store_short
.Lrow_next:
  s_add_u32 s22, s22, 1
  s_branch .Lrow
.Lnext_chunk:
  s_add_u32 s18, s18, s16                   // the next chunk of this workgroup
  s_branch .Lchunk
.Ldone:
  s_endpgm
.size halcyon_comm_dispatch_bf16, .-halcyon_comm_dispatch_bf16

GCN_KERNEL(halcyon_comm_dispatch_bf16,
  kernarg=48, lds=0, sgprs=30, vgprs=5, agprs=0, workgroup=256, dims=1,
  { .name: x, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: src_row, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: out, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: tokens, .offset: 24, .size: 4, .value_kind: by_value },
  { .name: rows, .offset: 28, .size: 4, .value_kind: by_value },
  { .name: hidden, .offset: 32, .size: 4, .value_kind: by_value },
  { .name: chunk_rows, .offset: 36, .size: 4, .value_kind: by_value },
  { .name: step_rows, .offset: 40, .size: 4, .value_kind: by_value },
  { .name: dwords, .offset: 44, .size: 4, .value_kind: by_value })
