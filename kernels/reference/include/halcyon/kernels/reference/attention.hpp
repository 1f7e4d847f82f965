// CPU reference implementations of the attention operators (kernels/attention/*.contract).
//
// The CPU backend's kernels and the oracle of every conformance check, written to be
// obviously right: scores, softmax sums and weighted sums of v in fp64 (bf16 products are
// exact in fp64), one rounding to the output type at the end. Conventions as in moe.hpp:
// pure functions over host pointers, arguments validated before anything is written (a bad
// one returns HAL_INVALID_ARGUMENT naming the tensor or dimension and its value, outputs
// untouched), and a RowRange of independent rows so a thread pool may split the work.
// docs/kernels/attention.md gives the full semantics.
#pragma once

#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/kernels/reference/moe.hpp>  // RowRange
#include <halcyon/result.hpp>

#include <cmath>
#include <cstdint>

namespace halcyon::ref {

// scale = 0 means 1/sqrt(head_dim), computed in fp32 (what every implementation uses).
inline float attention_scale(float scale, int64_t head_dim) {
  return scale == 0.0f ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) : scale;
}

// ---------------------------------------------------------------------------------------
// attention_prefill: q [Tq, Hq, D], k and v [Tk, Hkv, D], cu_seqlens_q/k [B + 1].
// ---------------------------------------------------------------------------------------
struct AttentionPrefillShape {
  int64_t B = 1, Tq = 0, Tk = 0, Hq = 1, Hkv = 1, D = 128;
  bool causal = false;
  float scale = 0;  // 0: 1/sqrt(D)
};

// The checks that need no tensor data: D in {64, 128}, Hq a positive multiple of Hkv, sizes.
Status attention_prefill_check(const AttentionPrefillShape& s);
// The data-dependent checks of the offsets (host copies): 0 first, never decreasing, last <= T.
Status attention_check_cu_seqlens(const char* op, const char* name, const int32_t* cu, int64_t B, int64_t T);

// Computes the query tokens `rows` (default: all) of out [Tq, Hq, D] and lse [Tq, Hq].
// Tokens past cu_seqlens_q[B] are not written.
Status attention_prefill(const bf16* q, const bf16* k, const bf16* v, const int32_t* cu_seqlens_q,
                         const int32_t* cu_seqlens_k, const AttentionPrefillShape& s, bf16* out, float* lse,
                         RowRange rows = {});

// ---------------------------------------------------------------------------------------
// attention_decode: q [B, Sq, Hq, D], k_cache/v_cache [NB, BS, Hkv, D], block_table [B, MB],
// seq_lens [B].
// ---------------------------------------------------------------------------------------
struct AttentionDecodeShape {
  int64_t B = 1, Sq = 1, Hq = 1, Hkv = 1, D = 128, NB = 1, BS = 16, MB = 1;
  float scale = 0;
};

Status attention_decode_check(const AttentionDecodeShape& s);
// block_table entries in [0, NB) (those a sequence uses) and seq_lens in [Sq, MB * BS].
Status attention_check_paged(const char* op, const int32_t* block_table, const int32_t* seq_lens, int64_t B,
                             int64_t Sq, int64_t NB, int64_t BS, int64_t MB);

// Computes the sequences `rows` (default: all B) of out [B, Sq, Hq, D] and lse [B, Sq, Hq].
Status attention_decode(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* block_table,
                        const int32_t* seq_lens, const AttentionDecodeShape& s, bf16* out, float* lse,
                        RowRange rows = {});

// ---------------------------------------------------------------------------------------
// attention_mla_decode: q [B, Sq, Hq, 576], kv_cache [NB, BS, 576] (V = the first 512 dims).
// ---------------------------------------------------------------------------------------
inline constexpr int64_t kMlaQkDim = 576;
inline constexpr int64_t kMlaVDim = 512;

struct AttentionMlaShape {
  int64_t B = 1, Sq = 1, Hq = 16, NB = 1, BS = 64, MB = 1;
  float scale = 0;  // 0: 1/sqrt(576)
};

Status attention_mla_decode_check(const AttentionMlaShape& s);

Status attention_mla_decode(const bf16* q, const bf16* kv_cache, const int32_t* block_table,
                            const int32_t* seq_lens, const AttentionMlaShape& s, bf16* out, float* lse,
                            RowRange rows = {});

}  // namespace halcyon::ref
