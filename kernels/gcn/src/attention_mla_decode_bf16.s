// attention_mla_decode (kernels/attention/attention_mla_decode.contract): DeepSeek's absorbed MLA
// over a paged latent cache of 576-dim rows (512 latent + 64 rope; V = the latent part). One wave
// per query row and head, (h, s, b) = workgroup (x, y, z); lane l holds elements l + 64 i,
// i = 0..8, of q and of each cache row, the first 8 of which are also the row's V elements, and
// elements l + 64 i, i = 0..7, of the output. Per key: a 576-long dot product reduced over the
// wave, the online softmax in base 2 (q carries scale * log2 e), fp32, one bf16 rounding.
// Never reads outside the tensors: the key count is clamped to [0, MB * BS] and a block number
// outside [0, NB) reads block 0 (such a sequence's result is unspecified, as the contract says).
// Byte offsets are 32-bit (the launcher checks the cache and q sizes).
// Launch: block (64,1,1), grid (Hq, Sq, B). Registers in: s[0:1] kernarg, s2 h, s3 s, s4 b, v0 lane.
#include "gcn_target.inc"
#include "gcn_wave.inc"
#include "gcn_attention.inc"
.amdgcn_target GCN_TARGET_ID

.text
.globl halcyon_attention_mla_decode_bf16
.p2align 8
.type halcyon_attention_mla_decode_bf16,@function
halcyon_attention_mla_decode_bf16:
  s_load_dwordx8 s[8:15], s[0:1], 0x0       // q, kv_cache, block_table, seq_lens
  s_load_dwordx4 s[16:19], s[0:1], 0x20     // out, lse
  s_load_dwordx4 s[20:23], s[0:1], 0x30     // Sq, Hq, BS, MB
  s_load_dwordx2 s[24:25], s[0:1], 0x40     // NB, q scale
  s_waitcnt lgkmcnt(0)
  // Keys: n = seq_lens[b] - Sq + s + 1, clamped to [0, MB * BS].
  PAGED_KEY_COUNT s27, s[14:15], s4, s3, s20, s23, s22, s26, s28
  // The query row ((b * Sq + s) * Hq + h): q at row * 1152 bytes, out at row * 1024, lse at row * 4.
  s_mul_i32 s29, s4, s20
  s_add_u32 s29, s29, s3
  s_mul_i32 s29, s29, s21
  s_add_u32 s29, s29, s2
  s_mul_i32 s30, s29, 0x480                 // q row bytes: 576 * 2
  s_lshl_b32 s31, s29, 10                   // out row bytes: 512 * 2
  s_lshl_b32 s32, s29, 2                    // lse
  v_lshlrev_b32 v1, 1, v0                   // 2 l
  v_add_u32 v4, s30, v1
.irp i, 0, 1, 2, 3, 4, 5, 6, 7, 8
  global_load_ushort v1\i, v4, s[8:9] offset:\i*128  // q elements l + 64 i
.endr
  s_waitcnt vmcnt(0)
.irp i, 0, 1, 2, 3, 4, 5, 6, 7, 8
  v_lshlrev_b32 v1\i, 16, v1\i
  v_mul_f32 v1\i, s25, v1\i                 // times scale * log2 e
.endr
  // The sequence's block-table row; a cache block is BS * 1152 bytes.
  s_mul_i32 s33, s4, s23
  s_lshl_b32 s33, s33, 2
  s_add_u32 s34, s12, s33
  s_addc_u32 s35, s13, 0
  s_mul_i32 s36, s22, 0x480
  // Softmax state: max -inf (v40), sum (v41), output (v30-v37).
  v_mov_b32 v40, 0xff800000
  v_mov_b32 v41, 0
.irp i, 0, 1, 2, 3, 4, 5, 6, 7
  v_mov_b32 v3\i, 0
.endr
  s_mov_b32 s37, 0                          // first key of the block
  s_mov_b32 s38, 0                          // block index
.Lblock:
  s_cmp_ge_u32 s37, s27
  s_cbranch_scc1 .Lfinish
  PAGED_BLOCK s41, s42, s[34:35], s38, s37, s27, s22, s24, s39
  s_mul_i32 s43, s41, s36                   // the block's first row
  s_mov_b32 s44, 0                          // slot
.Lkey:
  s_cmp_ge_u32 s44, s42
  s_cbranch_scc1 .Lnext_block
  v_add_u32 v4, s43, v1
.irp i, 0, 1, 2, 3, 4, 5, 6, 7, 8
  global_load_ushort v2\i, v4, s[10:11] offset:\i*128  // the row's elements l + 64 i
.endr
  s_waitcnt vmcnt(0)
.irp i, 0, 1, 2, 3, 4, 5, 6, 7, 8
  v_lshlrev_b32 v2\i, 16, v2\i
.endr
  v_mul_f32 v42, v10, v20
.irp i, 1, 2, 3, 4, 5, 6, 7, 8
  v_fmac_f32 v42, v1\i, v2\i
.endr
  WAVE_REDUCE v_add_f32, v42, s40           // the score, base 2, in every lane
  v_max_f32 v43, v40, v42                   // new max
  v_sub_f32 v44, v40, v43
  v_exp_f32 v44, v44                        // rescale of the old state
  v_sub_f32 v45, v42, v43
  v_exp_f32 v45, v45                        // this key's weight
  NOP_TRANS
  v_mul_f32 v41, v41, v44
  v_add_f32 v41, v41, v45
.irp i, 0, 1, 2, 3, 4, 5, 6, 7
  v_mul_f32 v3\i, v3\i, v44
  v_fmac_f32 v3\i, v45, v2\i               // V = the row's first 512 elements
.endr
  v_mov_b32 v40, v43
  s_add_u32 s43, s43, 0x480                 // the next row
  s_add_u32 s44, s44, 1
  s_branch .Lkey
.Lnext_block:
  s_add_u32 s37, s37, s22
  s_add_u32 s38, s38, 1
  s_branch .Lblock
.Lfinish:
  v_rcp_f32 v44, v41
  v_log_f32 v45, v41                        // log2 of the sum
  NOP_TRANS
  v_cmp_eq_f32 vcc, 0, v41
  NOP_VALU_SGPR
  v_cndmask_b32_e64 v44, v44, 0, vcc        // no key: 0 times the zero accumulators
  s_movk_i32 s45, 0x7fff
  v_add_u32 v4, s31, v1
.irp i, 0, 1, 2, 3, 4, 5, 6, 7
  v_mul_f32 v3\i, v3\i, v44
  v_bfe_u32 v2, v3\i, 16, 1                 // round to nearest even
  v_add3_u32 v2, v3\i, v2, s45
  v_lshrrev_b32 v2, 16, v2
  global_store_short v4, v2, s[16:17] offset:\i*128
.endr
  v_add_f32 v45, v45, v40
  v_mul_f32 v45, 0x3f317218, v45            // lse = (max + log2 sum) ln 2
  v_cmp_eq_u32 vcc, 0, v0
  s_and_saveexec_b64 s[46:47], vcc
  v_mov_b32 v3, s32
  global_store_dword v3, v45, s[18:19]
  s_endpgm
.size halcyon_attention_mla_decode_bf16, .-halcyon_attention_mla_decode_bf16

GCN_KERNEL(halcyon_attention_mla_decode_bf16,
  kernarg=72, lds=0, sgprs=48, vgprs=46, agprs=0, workgroup=64, dims=3,
  { .name: q, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: kv_cache, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: block_table, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: seq_lens, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: out, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: lse, .offset: 40, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: query_tokens, .offset: 48, .size: 4, .value_kind: by_value },
  { .name: q_heads, .offset: 52, .size: 4, .value_kind: by_value },
  { .name: block_size, .offset: 56, .size: 4, .value_kind: by_value },
  { .name: max_blocks, .offset: 60, .size: 4, .value_kind: by_value },
  { .name: num_blocks, .offset: 64, .size: 4, .value_kind: by_value },
  { .name: q_scale, .offset: 68, .size: 4, .value_kind: by_value })
