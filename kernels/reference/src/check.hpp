// Argument checks shared by the reference kernels: each returns HAL_INVALID_ARGUMENT with a
// message "<op>: <what> ..." naming the parameter and its value.
#pragma once

#include <halcyon/kernels/reference/moe.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <utility>

namespace halcyon::ref::detail {

template <typename... Args>
Error invalid(fmt::format_string<Args...> f, Args&&... args) {
  return Error(HAL_INVALID_ARGUMENT, fmt::format(f, std::forward<Args>(args)...));
}

// Index types in outputs are int32; sizes that index them must fit.
inline constexpr int64_t kMaxI32 = INT32_MAX;

inline Status check_size(const char* op, const char* name, int64_t v, int64_t lo) {
  if (v < lo) return invalid("{}: {} = {} must be >= {}", op, name, v, lo);
  return {};
}

// A pointer may be null only when nothing is read or written through it.
inline Status check_ptr(const char* op, const char* name, const void* p, bool used) {
  if (used && p == nullptr) return invalid("{}: {} is null", op, name);
  return {};
}

// Turns RowRange{} into [0, n) and checks 0 <= begin <= end <= n.
inline Result<RowRange> resolve_rows(const char* op, const char* what, RowRange r, int64_t n) {
  const int64_t end = r.end == RowRange::kToLastRow ? n : r.end;
  if (r.begin < 0 || end < r.begin || end > n) {
    return invalid("{}: row range [{}, {}) is not within the {} {}", op, r.begin, end, n, what);
  }
  return RowRange{r.begin, end};
}

// Offsets of the per-expert row segments: E_local + 1 entries, 0 first, never decreasing,
// R last.
inline Status check_offsets(const char* op, const int32_t* offsets, int64_t offsets_len,
                            int64_t E_local, int64_t R) {
  HALCYON_TRY(check_size(op, "E_local", E_local, 0));
  if (offsets_len != E_local + 1) {
    return invalid("{}: expert_offsets has {} entries, expected E_local + 1 = {}", op,
                   offsets_len, E_local + 1);
  }
  HALCYON_TRY(check_ptr(op, "expert_offsets", offsets, true));
  if (offsets[0] != 0) return invalid("{}: expert_offsets[0] = {}, expected 0", op, offsets[0]);
  for (int64_t e = 0; e < E_local; ++e) {
    if (offsets[e + 1] < offsets[e]) {
      return invalid("{}: expert_offsets decreases at expert {}: {} then {}", op, e, offsets[e],
                     offsets[e + 1]);
    }
  }
  // R is the capacity of the row arrays; the experts' rows end at offsets[E_local] <= R and
  // the rows past it are neither read nor written (a layer passes T*K rows of capacity).
  if (offsets[E_local] > R) {
    return invalid("{}: expert_offsets[E_local = {}] = {} lies past R = {} rows", op, E_local,
                   offsets[E_local], R);
  }
  return {};
}

}  // namespace halcyon::ref::detail
