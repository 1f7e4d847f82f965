// attention_prefill (kernels/attention/attention_prefill.contract): one wave per query token
// and head, (h, i) = workgroup (x, y). The token's sequence b comes from a binary search of
// cu_seqlens_q (a token past cu_seqlens_q[B] belongs to none and writes nothing); it attends to
// keys [cu_seqlens_k[b], cu_seqlens_k[b + 1]), causal aligned bottom-right (query il of q_len
// sees keys j <= il + k_len - q_len). The per-key step and the finish are gcn_attention.inc's:
// wave-reduced scores, online softmax in base 2, fp32, one bf16 rounding; a row with no key
// writes zeros and lse = -inf. Key offsets are clamped to [0, Tk] so bad offsets never reach
// outside k and v. Byte offsets are 32-bit (the launcher checks the q and k sizes).
// Launch: block (64,1,1), grid (Tq, Hq, 1): tokens in x (up to 2^31 - 1), heads in y.
// Registers in: s[0:1] kernarg, s2 i, s3 h, v0 lane (swapped on entry: s2 h, s3 i below).
#include "gcn_target.inc"
#include "gcn_wave.inc"
#include "gcn_attention.inc"
.amdgcn_target GCN_TARGET_ID

.text
.globl halcyon_attention_prefill_bf16
.p2align 8
.type halcyon_attention_prefill_bf16,@function
halcyon_attention_prefill_bf16:
  s_mov_b32 s5, s2
  s_mov_b32 s2, s3                          // h
  s_mov_b32 s3, s5                          // i
  s_load_dwordx8 s[8:15], s[0:1], 0x0       // q, k, v, cu_seqlens_q
  s_load_dwordx4 s[16:19], s[0:1], 0x20     // cu_seqlens_k, out
  s_load_dwordx2 s[20:21], s[0:1], 0x30     // lse
  s_load_dwordx8 s[24:31], s[0:1], 0x38     // B, Tk, Hq, Hkv, D, causal, group magic, q scale
  s_waitcnt lgkmcnt(0)
  ATTN_KV_HEAD s32, s2, s30                 // the KV head
  // The sequence: the first b with cu_seqlens_q[b + 1] > i.
  s_mov_b32 s33, 0
  s_mov_b32 s34, s24
.Lsearch:
  s_cmp_ge_u32 s33, s34
  s_cbranch_scc1 .Lfound
  s_add_u32 s35, s33, s34
  s_lshr_b32 s35, s35, 1
  s_lshl_b32 s36, s35, 2
  s_add_u32 s36, s36, 4
  s_load_dword s37, s[14:15], s36           // cu_seqlens_q[mid + 1]
  s_waitcnt lgkmcnt(0)
  s_add_u32 s38, s35, 1
  s_cmp_le_i32 s37, s3
  s_cselect_b32 s33, s38, s33               // <= i: after mid
  s_cselect_b32 s34, s34, s35               // > i: mid or before
  s_branch .Lsearch
.Lfound:
  s_cmp_ge_u32 s33, s24
  s_cbranch_scc1 .Ldone                     // past the last sequence
  s_lshl_b32 s36, s33, 2
  s_load_dwordx2 s[38:39], s[14:15], s36    // q offsets of b, b + 1
  s_load_dwordx2 s[40:41], s[16:17], s36    // k offsets of b, b + 1
  s_waitcnt lgkmcnt(0)
  s_max_i32 s40, s40, 0                     // keys clamped to [0, Tk]
  s_min_i32 s40, s40, s25
  s_min_i32 s41, s41, s25
  s_max_i32 s41, s41, s40
  s_sub_u32 s42, s41, s40                   // k_len = the keys seen without a mask
  s_sub_u32 s43, s39, s38                   // q_len
  s_sub_u32 s44, s3, s38                    // il
  s_add_i32 s45, s44, s42
  s_sub_i32 s45, s45, s43
  s_add_i32 s45, s45, 1                     // causal: keys j < il + k_len - q_len + 1
  s_max_i32 s45, s45, 0
  s_min_u32 s45, s45, s42
  s_cmp_eq_u32 s29, 0
  s_cselect_b32 s42, s42, s45               // n
  // The query row (i * Hq + h): its byte offset in q and out, and in lse.
  s_mul_i32 s46, s3, s26
  s_add_u32 s46, s46, s2
  s_mul_i32 s47, s46, s28
  s_lshl_b32 s47, s47, 1
  s_lshl_b32 s46, s46, 2
  ATTN_LOAD_Q s47, s[8:9], s28, s31, s48, s49
  // Keys: row ks + j of k and v, this head: (ks + j) * Hkv * D * 2 + hk * D * 2.
  s_mul_i32 s50, s27, s28
  s_lshl_b32 s50, s50, 1                    // a key row's bytes
  s_mul_i32 s51, s40, s50
  s_mul_i32 s52, s32, s28
  s_lshl_b32 s52, s52, 1
  s_add_u32 s51, s51, s52                   // key 0's row, this head
  s_mov_b32 s53, 0                          // j
  ATTN_START
.Lkey:
  s_cmp_ge_u32 s53, s42
  s_cbranch_scc1 .Lfinish
  ATTN_KEY s51, s[10:11], s[12:13]
  s_add_u32 s51, s51, s50
  s_add_u32 s53, s53, 1
  s_branch .Lkey
.Lfinish:
  ATTN_FINISH s47, s[18:19], s46, s[20:21]
.Ldone:
  s_endpgm
.size halcyon_attention_prefill_bf16, .-halcyon_attention_prefill_bf16

GCN_KERNEL(halcyon_attention_prefill_bf16,
  kernarg=88, lds=0, sgprs=60, vgprs=23, agprs=0, workgroup=64, dims=2,
  { .name: q, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: k, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: v, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: cu_seqlens_q, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: cu_seqlens_k, .offset: 32, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: out, .offset: 40, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: lse, .offset: 48, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: batch, .offset: 56, .size: 4, .value_kind: by_value },
  { .name: key_tokens, .offset: 60, .size: 4, .value_kind: by_value },
  { .name: q_heads, .offset: 64, .size: 4, .value_kind: by_value },
  { .name: kv_heads, .offset: 68, .size: 4, .value_kind: by_value },
  { .name: head_dim, .offset: 72, .size: 4, .value_kind: by_value },
  { .name: causal, .offset: 76, .size: 4, .value_kind: by_value },
  { .name: group_magic, .offset: 80, .size: 4, .value_kind: by_value },
  { .name: q_scale, .offset: 84, .size: 4, .value_kind: by_value })
