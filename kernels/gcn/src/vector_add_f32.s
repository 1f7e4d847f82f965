// c[i] = a[i] + b[i] for i < count.
// Launch: block (256,1,1), grid (ceil(count / 256),1,1). One lane per element.
// Registers in: s[0:1] kernarg pointer, s2 workgroup id x, v0 work-item id x.
#include "gcn_target.inc"
.amdgcn_target GCN_TARGET_ID

.text
.globl halcyon_vector_add_f32
.p2align 8
.type halcyon_vector_add_f32,@function
halcyon_vector_add_f32:
  s_load_dwordx4 s[4:7], s[0:1], 0x0        // a, b
  s_load_dwordx2 s[8:9], s[0:1], 0x10       // c
  s_load_dword s10, s[0:1], 0x18            // count
  v_lshl_add_u32 v1, s2, 8, v0              // i = group * 256 + lane
  s_waitcnt lgkmcnt(0)
  v_cmp_gt_u32 vcc, s10, v1                 // i < count
  s_and_saveexec_b64 s[12:13], vcc
  s_cbranch_execz .Ldone
  v_lshlrev_b32 v2, 2, v1                   // byte offset; count < 2^30 elements
  global_load_dword v3, v2, s[4:5]
  global_load_dword v4, v2, s[6:7]
  s_waitcnt vmcnt(0)
  v_add_f32 v3, v3, v4
  global_store_dword v2, v3, s[8:9]
.Ldone:
  s_endpgm
.size halcyon_vector_add_f32, .-halcyon_vector_add_f32

GCN_KERNEL(halcyon_vector_add_f32,
  kernarg=28, lds=0, sgprs=14, vgprs=5, agprs=0, workgroup=256, dims=1,
  { .name: a, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: b, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: c, .offset: 16, .size: 8, .value_kind: global_buffer, .address_space: global },
  { .name: count, .offset: 24, .size: 4, .value_kind: by_value })
