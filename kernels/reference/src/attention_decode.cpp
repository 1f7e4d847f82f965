// attention_decode and attention_mla_decode references (paged KV cache). See
// docs/kernels/attention.md.
#include <halcyon/kernels/reference/attention.hpp>

#include "attention_common.hpp"
#include "check.hpp"

namespace halcyon::ref {
namespace {

Status check_paged_shape(const char* op, int64_t B, int64_t Sq, int64_t Hq, int64_t NB, int64_t BS, int64_t MB) {
  HALCYON_TRY(detail::check_size(op, "B", B, 0));
  HALCYON_TRY(detail::check_size(op, "Sq", Sq, 1));
  HALCYON_TRY(detail::check_size(op, "Hq", Hq, 1));
  HALCYON_TRY(detail::check_size(op, "NB (num_blocks)", NB, 1));
  HALCYON_TRY(detail::check_size(op, "MB (blocks per sequence in block_table)", MB, 1));
  if (BS < 16 || BS > 256 || BS % 16 != 0)
    return detail::invalid("{}: block size BS = {} is not supported (a multiple of 16 in [16, 256])", op, BS);
  if (MB * BS > detail::kMaxI32 || NB > detail::kMaxI32)
    return detail::invalid("{}: MB * BS = {} or NB = {} does not fit int32", op, MB * BS, NB);
  return {};
}

// The sequences of `rows` attend through their block tables; query s of sequence b sits at
// position seq_lens[b] - Sq + s and sees keys [0, that position].
template <typename Row>
void paged_rows(RowRange r, int64_t Sq, int64_t BS, int64_t MB, const int32_t* block_table, const int32_t* seq_lens,
                Row row) {
  for (int64_t b = r.begin; b < r.end; ++b) {
    const int64_t L = seq_lens[b];
    const int32_t* table = block_table + b * MB;
    auto slot = [=](int64_t j) { return int64_t(table[j / BS]) * BS + j % BS; };  // cache row of token j
    for (int64_t s = 0; s < Sq; ++s) row(b, s, L - Sq + s + 1, slot);
  }
}

}  // namespace

Status attention_check_paged(const char* op, const int32_t* block_table, const int32_t* seq_lens, int64_t B,
                             int64_t Sq, int64_t NB, int64_t BS, int64_t MB) {
  HALCYON_TRY(detail::check_ptr(op, "seq_lens", seq_lens, B > 0));
  HALCYON_TRY(detail::check_ptr(op, "block_table", block_table, B > 0));
  for (int64_t b = 0; b < B; ++b) {
    if (seq_lens[b] < Sq || seq_lens[b] > MB * BS)
      return detail::invalid("{}: seq_lens[{}] = {} is outside [Sq = {}, MB * BS = {}] (the block table's capacity)", op,
                             b, seq_lens[b], Sq, MB * BS);
    for (int64_t j = 0; j < (seq_lens[b] + BS - 1) / BS; ++j)
      if (block_table[b * MB + j] < 0 || block_table[b * MB + j] >= NB)
        return detail::invalid("{}: block_table[{}, {}] = {} is not a block index in [0, NB = {})", op, b, j,
                               block_table[b * MB + j], NB);
  }
  return {};
}

Status attention_decode_check(const AttentionDecodeShape& s) {
  constexpr const char* kOp = "attention_decode";
  HALCYON_TRY(check_paged_shape(kOp, s.B, s.Sq, s.Hq, s.NB, s.BS, s.MB));
  HALCYON_TRY(detail::check_size(kOp, "Hkv", s.Hkv, 1));
  if (s.D != 64 && s.D != 128) return detail::invalid("{}: head dim D = {} is not supported (64 or 128)", kOp, s.D);
  if (s.Hq % s.Hkv != 0)
    return detail::invalid("{}: Hq = {} (heads of q) is not a multiple of Hkv = {} (heads of the KV cache)", kOp, s.Hq,
                           s.Hkv);
  if (!std::isfinite(s.scale)) return detail::invalid("{}: scale = {} is not finite", kOp, s.scale);
  return {};
}

Status attention_decode(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* block_table,
                        const int32_t* seq_lens, const AttentionDecodeShape& s, bf16* out, float* lse, RowRange rows) {
  constexpr const char* kOp = "attention_decode";
  HALCYON_TRY(attention_decode_check(s));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "sequences", rows, s.B));
  HALCYON_TRY(attention_check_paged(kOp, block_table, seq_lens, s.B, s.Sq, s.NB, s.BS, s.MB));
  const bool any = r.end > r.begin;
  for (auto [name, p] : {std::pair{"q", (const void*)q}, {"k_cache", k_cache}, {"v_cache", v_cache},
                         {"out", out}, {"lse", lse}})
    HALCYON_TRY(detail::check_ptr(kOp, name, p, any));
  const double scale = attention_scale(s.scale, s.D);
  const int64_t group = s.Hq / s.Hkv, D = s.D;
  std::vector<double> scores, acc;
  paged_rows(r, s.Sq, s.BS, s.MB, block_table, seq_lens, [&](int64_t b, int64_t sq, int64_t visible, auto slot) {
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t hk = h / group;
      auto kv = [&](int64_t j) {
        const int64_t row = slot(j) * s.Hkv + hk;
        return std::pair{k_cache + row * D, v_cache + row * D};
      };
      const int64_t o = (b * s.Sq + sq) * s.Hq + h;
      detail::attend_row(q + o * D, D, D, visible, kv, scale, out + o * D, lse + o, scores, acc);
    }
  });
  return {};
}

Status attention_mla_decode_check(const AttentionMlaShape& s) {
  constexpr const char* kOp = "attention_mla_decode";
  HALCYON_TRY(check_paged_shape(kOp, s.B, s.Sq, s.Hq, s.NB, s.BS, s.MB));
  if (s.Hq > 128) return detail::invalid("{}: Hq = {} query heads; at most 128 are supported", kOp, s.Hq);
  if (!std::isfinite(s.scale)) return detail::invalid("{}: scale = {} is not finite", kOp, s.scale);
  return {};
}

Status attention_mla_decode(const bf16* q, const bf16* kv_cache, const int32_t* block_table, const int32_t* seq_lens,
                            const AttentionMlaShape& s, bf16* out, float* lse, RowRange rows) {
  constexpr const char* kOp = "attention_mla_decode";
  HALCYON_TRY(attention_mla_decode_check(s));
  HALCYON_ASSIGN_OR_RETURN(const RowRange r, detail::resolve_rows(kOp, "sequences", rows, s.B));
  HALCYON_TRY(attention_check_paged(kOp, block_table, seq_lens, s.B, s.Sq, s.NB, s.BS, s.MB));
  const bool any = r.end > r.begin;
  for (auto [name, p] : {std::pair{"q", (const void*)q}, {"kv_cache", kv_cache}, {"out", out}, {"lse", lse}})
    HALCYON_TRY(detail::check_ptr(kOp, name, p, any));
  const double scale = attention_scale(s.scale, kMlaQkDim);
  std::vector<double> scores, acc;
  paged_rows(r, s.Sq, s.BS, s.MB, block_table, seq_lens, [&](int64_t b, int64_t sq, int64_t visible, auto slot) {
    for (int64_t h = 0; h < s.Hq; ++h) {
      auto kv = [&](int64_t j) {
        const bf16* row = kv_cache + slot(j) * kMlaQkDim;
        return std::pair{row, row};  // V is the latent part of the same row
      };
      const int64_t o = (b * s.Sq + sq) * s.Hq + h;
      detail::attend_row(q + o * kMlaQkDim, kMlaQkDim, kMlaVDim, visible, kv, scale, out + o * kMlaVDim, lse + o,
                         scores, acc);
    }
  });
  return {};
}

}  // namespace halcyon::ref
