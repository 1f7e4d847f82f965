// Host implementations of the attention operators: the reference code (kernels/reference)
// run on slices of query tokens (prefill) or sequences (decode), one slice per block, through
// the CPU backend.
//
// Shape errors (D, Hq vs Hkv, block size) are returned now, before anything is queued.
// Data-dependent errors (offsets that decrease, a block index past NB, seq_lens past the
// table) cannot be returned from a queued kernel: the reference refuses them before writing
// and the message goes to the log; `halcyon run` checks them on the host before launching.
#include <halcyon/kernels/reference/attention.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "host_kernels.hpp"

namespace halcyon::host {
namespace {

using ref::bf16;

// ---- attention_prefill --------------------------------------------------------------------
struct PrefillArgs {
  uint64_t q, k, v, cu_q, cu_k, out, lse;
  int64_t B, Tq, Tk, Hq, Hkv, D, causal, rows_per_block;
  float scale;
};
ref::AttentionPrefillShape prefill_shape(const PrefillArgs& a) {
  return {a.B, a.Tq, a.Tk, a.Hq, a.Hkv, a.D, a.causal != 0, a.scale};
}
void prefill_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<PrefillArgs>(blob);
  report("attention_prefill",
         ref::attention_prefill(ptr<const bf16>(a.q), ptr<const bf16>(a.k), ptr<const bf16>(a.v),
                                ptr<const int32_t>(a.cu_q), ptr<const int32_t>(a.cu_k), prefill_shape(a),
                                ptr<bf16>(a.out), ptr<float>(a.lse), block_rows(ctx, a.Tq, a.rows_per_block)));
}
HostKernel k_prefill("attention_prefill", prefill_kernel,
                     {HALCYON_ARG_PTR(PrefillArgs, q), HALCYON_ARG_PTR(PrefillArgs, k), HALCYON_ARG_PTR(PrefillArgs, v),
                      HALCYON_ARG_PTR(PrefillArgs, cu_q), HALCYON_ARG_PTR(PrefillArgs, cu_k),
                      HALCYON_ARG_PTR(PrefillArgs, out), HALCYON_ARG_PTR(PrefillArgs, lse),
                      HALCYON_ARG_VAL(PrefillArgs, B), HALCYON_ARG_VAL(PrefillArgs, Tq), HALCYON_ARG_VAL(PrefillArgs, Tk),
                      HALCYON_ARG_VAL(PrefillArgs, Hq), HALCYON_ARG_VAL(PrefillArgs, Hkv), HALCYON_ARG_VAL(PrefillArgs, D),
                      HALCYON_ARG_VAL(PrefillArgs, causal), HALCYON_ARG_VAL(PrefillArgs, rows_per_block),
                      HALCYON_ARG_VAL(PrefillArgs, scale)},
                     sizeof(PrefillArgs));
Status attention_prefill(ops::OpContext& ctx) {
  const auto& p = ctx.params();
  PrefillArgs a{ctx.tensor("q").address(), ctx.tensor("k").address(), ctx.tensor("v").address(),
                ctx.tensor("cu_seqlens_q").address(), ctx.tensor("cu_seqlens_k").address(),
                ctx.tensor("out").address(), ctx.tensor("lse").address(), ctx.dim("B"), ctx.dim("Tq"), ctx.dim("Tk"),
                ctx.dim("Hq"), ctx.dim("Hkv"), ctx.dim("D"), p.b("causal"), 0, float(p.f("scale"))};
  HALCYON_TRY(ref::attention_prefill_check(prefill_shape(a)));
  a.rows_per_block = rows_per_block(a.Tq, std::max<int64_t>(a.Tk, 1) * a.Hq * a.D / 8);
  return launch(ctx, "attention_prefill", uint64_t((a.Tq + a.rows_per_block - 1) / a.rows_per_block), a);
}

// ---- attention_decode ---------------------------------------------------------------------
struct DecodeArgs {
  uint64_t q, k, v, table, lens, out, lse;
  int64_t B, Sq, Hq, Hkv, D, NB, BS, MB, rows_per_block;
  float scale;
};
ref::AttentionDecodeShape decode_shape(const DecodeArgs& a) {
  return {a.B, a.Sq, a.Hq, a.Hkv, a.D, a.NB, a.BS, a.MB, a.scale};
}
void decode_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<DecodeArgs>(blob);
  report("attention_decode",
         ref::attention_decode(ptr<const bf16>(a.q), ptr<const bf16>(a.k), ptr<const bf16>(a.v),
                               ptr<const int32_t>(a.table), ptr<const int32_t>(a.lens), decode_shape(a),
                               ptr<bf16>(a.out), ptr<float>(a.lse), block_rows(ctx, a.B, a.rows_per_block)));
}
HostKernel k_decode("attention_decode", decode_kernel,
                    {HALCYON_ARG_PTR(DecodeArgs, q), HALCYON_ARG_PTR(DecodeArgs, k), HALCYON_ARG_PTR(DecodeArgs, v),
                     HALCYON_ARG_PTR(DecodeArgs, table), HALCYON_ARG_PTR(DecodeArgs, lens),
                     HALCYON_ARG_PTR(DecodeArgs, out), HALCYON_ARG_PTR(DecodeArgs, lse), HALCYON_ARG_VAL(DecodeArgs, B),
                     HALCYON_ARG_VAL(DecodeArgs, Sq), HALCYON_ARG_VAL(DecodeArgs, Hq), HALCYON_ARG_VAL(DecodeArgs, Hkv),
                     HALCYON_ARG_VAL(DecodeArgs, D), HALCYON_ARG_VAL(DecodeArgs, NB), HALCYON_ARG_VAL(DecodeArgs, BS),
                     HALCYON_ARG_VAL(DecodeArgs, MB), HALCYON_ARG_VAL(DecodeArgs, rows_per_block),
                     HALCYON_ARG_VAL(DecodeArgs, scale)},
                    sizeof(DecodeArgs));
Status attention_decode(ops::OpContext& ctx) {
  DecodeArgs a{ctx.tensor("q").address(), ctx.tensor("k_cache").address(), ctx.tensor("v_cache").address(),
               ctx.tensor("block_table").address(), ctx.tensor("seq_lens").address(), ctx.tensor("out").address(),
               ctx.tensor("lse").address(), ctx.dim("B"), ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("Hkv"), ctx.dim("D"),
               ctx.dim("NB"), ctx.dim("BS"), ctx.dim("MB"), 0, float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_decode_check(decode_shape(a)));
  a.rows_per_block = rows_per_block(a.B, a.MB * a.BS * a.Sq * a.Hq * a.D / 8);
  return launch(ctx, "attention_decode", uint64_t((a.B + a.rows_per_block - 1) / a.rows_per_block), a);
}

// ---- attention_mla_decode -----------------------------------------------------------------
struct MlaArgs {
  uint64_t q, kv, table, lens, out, lse;
  int64_t B, Sq, Hq, NB, BS, MB, rows_per_block;
  float scale;
};
ref::AttentionMlaShape mla_shape(const MlaArgs& a) { return {a.B, a.Sq, a.Hq, a.NB, a.BS, a.MB, a.scale}; }
void mla_kernel(const hal_host_launch_ctx* ctx, const void* blob) {
  auto a = args_of<MlaArgs>(blob);
  report("attention_mla_decode",
         ref::attention_mla_decode(ptr<const bf16>(a.q), ptr<const bf16>(a.kv), ptr<const int32_t>(a.table),
                                   ptr<const int32_t>(a.lens), mla_shape(a), ptr<bf16>(a.out), ptr<float>(a.lse),
                                   block_rows(ctx, a.B, a.rows_per_block)));
}
HostKernel k_mla("attention_mla_decode", mla_kernel,
                 {HALCYON_ARG_PTR(MlaArgs, q), HALCYON_ARG_PTR(MlaArgs, kv), HALCYON_ARG_PTR(MlaArgs, table),
                  HALCYON_ARG_PTR(MlaArgs, lens), HALCYON_ARG_PTR(MlaArgs, out), HALCYON_ARG_PTR(MlaArgs, lse),
                  HALCYON_ARG_VAL(MlaArgs, B), HALCYON_ARG_VAL(MlaArgs, Sq), HALCYON_ARG_VAL(MlaArgs, Hq),
                  HALCYON_ARG_VAL(MlaArgs, NB), HALCYON_ARG_VAL(MlaArgs, BS), HALCYON_ARG_VAL(MlaArgs, MB),
                  HALCYON_ARG_VAL(MlaArgs, rows_per_block), HALCYON_ARG_VAL(MlaArgs, scale)},
                 sizeof(MlaArgs));
Status attention_mla_decode(ops::OpContext& ctx) {
  MlaArgs a{ctx.tensor("q").address(), ctx.tensor("kv_cache").address(), ctx.tensor("block_table").address(),
            ctx.tensor("seq_lens").address(), ctx.tensor("out").address(), ctx.tensor("lse").address(),
            ctx.dim("B"), ctx.dim("Sq"), ctx.dim("Hq"), ctx.dim("NB"), ctx.dim("BS"), ctx.dim("MB"), 0,
            float(ctx.params().f("scale"))};
  HALCYON_TRY(ref::attention_mla_decode_check(mla_shape(a)));
  a.rows_per_block = rows_per_block(a.B, a.MB * a.BS * a.Sq * a.Hq * 1088 / 8);
  return launch(ctx, "attention_mla_decode", uint64_t((a.B + a.rows_per_block - 1) / a.rows_per_block), a);
}

ops::RegisterOpImpl r_prefill({"attention_prefill", HAL_MODULE_HOST, "host", "", 0, attention_prefill});
ops::RegisterOpImpl r_decode({"attention_decode", HAL_MODULE_HOST, "host", "", 0, attention_decode});
ops::RegisterOpImpl r_mla({"attention_mla_decode", HAL_MODULE_HOST, "host", "", 0, attention_mla_decode});

}  // namespace
}  // namespace halcyon::host
