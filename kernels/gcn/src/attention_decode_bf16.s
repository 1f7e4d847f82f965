// attention_decode (kernels/attention/attention_decode.contract): one wave per query row and
// head, (h, s, b) = workgroup (x, y, z): out[b, s, h] = softmax(scale q k^T) v over the
// sequence's keys j <= seq_lens[b] - Sq + s, read from the paged cache through block_table;
// lse[b, s, h] = log of the softmax's sum. Lane l holds elements l and l + 64 of q, of each key
// and value row and of the output (D = 128; with D = 64 the second is element l again, its q
// weight 0, so it changes nothing and its store repeats the first). Per key: one dot product
// reduced over the wave (WAVE_REDUCE), then the online softmax in base 2 (q carries
// scale * log2 e), fp32 throughout, one round to bf16 at the end.
// Never reads outside the tensors: the key count is clamped to [0, MB * BS], a block number
// outside [0, NB) reads block 0 (such a sequence's result is unspecified, as the contract says).
// Byte offsets are 32-bit (the launcher checks the cache and q sizes).
// Launch: block (64,1,1), grid (Hq, Sq, B). Registers in: s[0:1] kernarg, s2 h, s3 s, s4 b, v0 lane.
#include "gcn_target.inc"
#include "gcn_wave.inc"
#include "gcn_attention.inc"
.amdgcn_target GCN_TARGET_ID

.text
.globl halcyon_attention_decode_bf16
.p2align 8
.type halcyon_attention_decode_bf16,@function
halcyon_attention_decode_bf16:
  s_load_dwordx8 s[8:15], s[0:1], 0x0       // q, k_cache, v_cache, block_table
  s_load_dwordx4 s[16:19], s[0:1], 0x20     // seq_lens, out
  s_load_dwordx2 s[20:21], s[0:1], 0x30     // lse
  s_load_dwordx8 s[24:31], s[0:1], 0x38     // Sq, Hq, Hkv, D, BS, MB, group magic, q scale
  s_load_dword s22, s[0:1], 0x58            // NB
  s_waitcnt lgkmcnt(0)
  ATTN_KV_HEAD s32, s2, s30                 // the KV head
  // Keys: n = seq_lens[b] - Sq + s + 1, clamped to [0, MB * BS].
  PAGED_KEY_COUNT s34, s[16:17], s4, s3, s24, s29, s28, s33, s35
  // The query row: ((b * Sq + s) * Hq + h), its elements at byte (row * D + d) * 2.
  s_mul_i32 s36, s4, s24
  s_add_u32 s36, s36, s3
  s_mul_i32 s36, s36, s25
  s_add_u32 s36, s36, s2                    // row (also lse's index)
  s_mul_i32 s37, s36, s27
  s_lshl_b32 s37, s37, 1                    // the row's byte offset in q and out
  ATTN_LOAD_Q s37, s[8:9], s27, s31, s39, s38
  // Strides: a cache slot Hkv * D * 2 bytes, a block BS of them; the head at hk * D * 2.
  s_mul_i32 s40, s26, s27
  s_lshl_b32 s40, s40, 1
  s_mul_i32 s41, s40, s28
  s_mul_i32 s42, s32, s27
  s_lshl_b32 s42, s42, 1
  // The sequence's block-table row.
  s_mul_i32 s43, s4, s29
  s_lshl_b32 s43, s43, 2
  s_add_u32 s44, s14, s43
  s_addc_u32 s45, s15, 0
  ATTN_START
  s_mov_b32 s46, 0                          // first key of the block
  s_mov_b32 s47, 0                          // block index
.Lblock:
  s_cmp_ge_u32 s46, s34
  s_cbranch_scc1 .Lfinish
  PAGED_BLOCK s49, s50, s[44:45], s47, s46, s34, s28, s22, s48
  s_mul_i32 s51, s49, s41
  s_add_u32 s51, s51, s42                   // the block's first slot, this head
  s_mov_b32 s52, 0                          // slot
.Lkey:
  s_cmp_ge_u32 s52, s50
  s_cbranch_scc1 .Lnext_block
  s_mul_i32 s53, s52, s40
  s_add_u32 s53, s53, s51                   // the key's row, this head
  ATTN_KEY s53, s[10:11], s[12:13]
  s_add_u32 s52, s52, 1
  s_branch .Lkey
.Lnext_block:
  s_add_u32 s46, s46, s28
  s_add_u32 s47, s47, 1
  s_branch .Lblock
.Lfinish:
  s_lshl_b32 s58, s36, 2                    // lse's byte offset
  ATTN_FINISH s37, s[18:19], s58, s[20:21]
  s_endpgm
.size halcyon_attention_decode_bf16, .-halcyon_attention_decode_bf16

GCN_KERNEL(halcyon_attention_decode_bf16,
  kernarg=92, lds=0, sgprs=60, vgprs=23, agprs=0, workgroup=64, dims=3,
  { .name: q, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: k_cache, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: v_cache, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: block_table, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: seq_lens, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: out, .offset: 40, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: lse, .offset: 48, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: query_tokens, .offset: 56, .size: 4, .value_kind: by_value },
  { .name: q_heads, .offset: 60, .size: 4, .value_kind: by_value },
  { .name: kv_heads, .offset: 64, .size: 4, .value_kind: by_value },
  { .name: head_dim, .offset: 68, .size: 4, .value_kind: by_value },
  { .name: block_size, .offset: 72, .size: 4, .value_kind: by_value },
  { .name: max_blocks, .offset: 76, .size: 4, .value_kind: by_value },
  { .name: group_magic, .offset: 80, .size: 4, .value_kind: by_value },
  { .name: q_scale, .offset: 84, .size: 4, .value_kind: by_value },
  { .name: num_blocks, .offset: 88, .size: 4, .value_kind: by_value })
