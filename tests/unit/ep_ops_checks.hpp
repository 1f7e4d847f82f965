// Checks of ep_dispatch and ep_combine (kernels/comm) in their contracts' world form, on any
// device: a layout worked out by hand, and the round trip (dispatch, identity experts, combine)
// against what it must give, the gate-weighted sum of each token's own row. Used by
// unit.runtime (cpu) and ptx.ep (cuda:0, also on a comm partition). Each returns "" or what
// went wrong.
#pragma once

#include <halcyon/ops/op.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace test::ep_ops {

using halcyon::Device;
using halcyon::Stream;
using halcyon::ops::DType;
using halcyon::ops::Tensor;
using Tensors = std::map<std::string, Tensor, std::less<>>;
using Params = std::map<std::string, std::string>;

inline float bf16_value(uint16_t v) {
  uint32_t b = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint16_t to_bf16_truncated(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return uint16_t(b >> 16);
}

template <typename T>
halcyon::Result<Tensor> put(const Device& d, const Stream& s, DType dt, std::vector<int64_t> shape,
                            const std::vector<T>& v) {
  auto t = halcyon::ops::make_tensor(d, dt, std::move(shape));
  if (!t) return t.error();
  if (auto st = s.write(t->buffer, t->offset, v.data(), v.size() * sizeof(T)); !st.ok()) return st.error();
  return t;
}
template <typename T>
std::vector<T> get(const Stream& s, const Tensor& t) {
  std::vector<T> v(t.bytes() / sizeof(T));
  if (!s.read(t.buffer, t.offset, v.data(), t.bytes()).ok()) v.clear();
  return v;
}

#define EP_TRY(expr)                                                                 \
  do {                                                                               \
    auto&& ep_r_ = (expr);                                                           \
    if (!ep_r_.ok()) return std::string(#expr ": ") + ep_r_.error().to_string();     \
  } while (0)

// allocate_outputs, then the flag outputs zeroed, as a layer zeroes its flags once before
// generation 1: the contracts compare flags for equality with the generation, so memory that
// still holds an earlier call's flags (a pool's recycled block) would signal rows not yet sent.
inline halcyon::Status allocate_ep_outputs(const Device& d, const Stream& s, const char* op, Tensors& io,
                                           const Params& params) {
  HALCYON_TRY(halcyon::ops::allocate_outputs(d, op, io, params));
  for (const char* flags : {"count_flags", "chunk_flags", "ready"})
    if (auto it = io.find(flags); it != io.end() && it->second.bytes())
      HALCYON_TRY(s.fill(it->second.buffer, it->second.offset, it->second.bytes(), uint8_t(0)));
  return s.synchronize();
}

// P = 2 ranks, E = 4 experts (rank 0 owns 0 and 1, rank 1 owns 2 and 3), T = 2, K = 2.
//   rank 0 routes token 0 to experts 1, 2 and token 1 to 2, 0;
//   rank 1 routes token 0 to experts 3, 1 and token 1 to 1, 2.
// Rank 0 receives expert 0: [r0 t1], expert 1: [r0 t0, r1 t0, r1 t1] -> offsets 0 1 4;
// rank 1 receives expert 2: [r0 t0, r0 t1, r1 t1], expert 3: [r1 t0] -> offsets 0 3 4.
// dispatch_impl, combine_impl: the ep_dispatch / ep_combine implementation to run ("" = the
// registry's choice).
inline std::string layout_by_hand(const Device& d, const Stream& s, const std::string& dispatch_impl = "") {
  const int64_t RC = 6, H = 8;
  std::vector<uint16_t> x;
  for (int p = 0; p < 2; ++p)
    for (int t = 0; t < 2; ++t)
      for (int h = 0; h < H; ++h) x.push_back(to_bf16_truncated(float(10 * p + t + 1)));
  const std::vector<int32_t> ids{1, 2, 2, 0, 3, 1, 1, 2};
  Tensors io;
  auto xt = put(d, s, DType::bf16, {2, 2, H}, x);
  auto it = put(d, s, DType::i32, {2, 2, 2}, ids);
  EP_TRY(xt);
  EP_TRY(it);
  io["x"] = *xt, io["topk_ids"] = *it;
  const Params params{{"experts", "4"}, {"capacity", std::to_string(RC)}, {"chunk_rows", "1"}};
  EP_TRY(allocate_ep_outputs(d, s, "ep_dispatch", io, params));
  halcyon::ops::RunOptions run;
  run.impl = dispatch_impl;
  EP_TRY(halcyon::ops::run_op(d, s, "ep_dispatch", io, params, run));
  const auto dest = get<int32_t>(s, io["slot_dest"]);
  const auto offsets = get<int32_t>(s, io["expert_offsets"]);
  const auto recv = get<uint16_t>(s, io["recv"]);
  const auto source = get<int32_t>(s, io["row_source"]);
  const std::vector<int32_t> want_dest{1, RC + 0, RC + 1, 0, RC + 3, 2, 3, RC + 2};
  const std::vector<int32_t> want_offsets{0, 1, 4, 0, 3, 4};
  if (dest != want_dest) return fmt::format("slot_dest [{}], expected [{}]", fmt::join(dest, ", "), fmt::join(want_dest, ", "));
  if (offsets != want_offsets)
    return fmt::format("expert_offsets [{}], expected [{}]", fmt::join(offsets, ", "), fmt::join(want_offsets, ", "));
  // No token has two experts on one other rank here: every row came from x, the tail is -1.
  const std::vector<int32_t> want_source{0, 1, 2, 3, -1, -1, 0, 1, 2, 3, -1, -1};
  if (source != want_source)
    return fmt::format("row_source [{}], expected [{}]", fmt::join(source, ", "), fmt::join(want_source, ", "));
  // Row values: rank p's token t is 10p + t + 1; rows past the 4 received are zeroed.
  const std::vector<float> want_rows{2, 1, 11, 12, 0, 0, 1, 2, 12, 11, 0, 0};
  for (size_t q = 0; q < 2; ++q)
    for (size_t r = 0; r < size_t(RC); ++r) {
      const float got = bf16_value(recv[(q * RC + r) * H + 7]), want = want_rows[q * 6 + r];
      if (got != want) return fmt::format("recv of rank {} row {} holds {}, expected {}", q, r, got, want);
    }
  return {};
}

// The round trip, `generations` times on the same buffers (flags never reset): each time new
// routing, dispatch (every slot's row where slot_dest says, equal to its token's row bit for
// bit), expert outputs = the received rows, combine; out[p, t] must be bf16(x[p, t] * sum of its
// weights) up to the sums' rounding. dedup: ep_dispatch's parameter.
inline std::string round_trip(const Device& d, const Stream& s, int64_t P, int64_t T, int64_t K, int64_t H, int64_t E,
                              int64_t chunk, int64_t combine_chunk, int generations, uint32_t seed,
                              const std::string& dispatch_impl = "", const std::string& combine_impl = "",
                              bool dedup = true) {
  std::mt19937 rng(seed);
  halcyon::ops::RunOptions run, run_combine;
  run.impl = dispatch_impl;
  run_combine.impl = combine_impl;
  const int64_t RC = P * T * K;
  std::vector<uint16_t> x(size_t(P * T * H));
  std::uniform_real_distribution<float> u(-1, 1), w01(0, 1);
  for (auto& v : x) v = to_bf16_truncated(u(rng));
  auto xt = put(d, s, DType::bf16, {P, T, H}, x);
  EP_TRY(xt);
  Tensors disp{{"x", *xt}}, comb;
  for (int g = 1; g <= generations; ++g) {
    std::vector<int32_t> ids(size_t(P * T * K));
    std::vector<float> w(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(rng() % uint32_t(E)), w[i] = w01(rng);
    auto it = put(d, s, DType::i32, {P, T, K}, ids);
    auto wt = put(d, s, DType::f32, {P, T, K}, w);
    EP_TRY(it);
    EP_TRY(wt);
    disp["topk_ids"] = *it;
    const Params dp{{"experts", std::to_string(E)}, {"capacity", std::to_string(RC)}, {"chunk_rows", std::to_string(chunk)},
                    {"generation", std::to_string(g)}, {"zero_tail", g == 1 ? "true" : "false"},
                    {"dedup", dedup ? "true" : "false"}};
    if (g == 1) EP_TRY(allocate_ep_outputs(d, s, "ep_dispatch", disp, dp));
    EP_TRY(halcyon::ops::run_op(d, s, "ep_dispatch", disp, dp, run));
    const auto dest = get<int32_t>(s, disp["slot_dest"]);
    const auto recv = get<uint16_t>(s, disp["recv"]);
    if (dest.size() != ids.size() || recv.size() != size_t(P * RC * H))
      return fmt::format("generation {}: slot_dest or recv could not be read", g);
    for (size_t i = 0; i < dest.size(); ++i) {
      const int64_t pt = int64_t(i) / K;  // rank * T + token
      if (dest[i] < 0 || dest[i] >= P * RC) return fmt::format("generation {}: slot_dest[{}] = {}", g, i, dest[i]);
      if (std::memcmp(&recv[size_t(dest[i] * H)], &x[size_t(pt * H)], size_t(H) * 2) != 0)
        return fmt::format("generation {}: row {} of rank {}'s recv is not slot {}'s token row", g, dest[i] % RC,
                           dest[i] / RC, i);
    }
    comb["expert_out"] = disp["recv"];  // identity experts: the outputs are the rows as they landed
    comb["topk_weights"] = *wt;
    comb["slot_dest"] = disp["slot_dest"];
    const Params cp{{"chunk_rows", std::to_string(combine_chunk)}, {"generation", std::to_string(g)}};
    if (g == 1) EP_TRY(allocate_ep_outputs(d, s, "ep_combine", comb, cp));
    EP_TRY(halcyon::ops::run_op(d, s, "ep_combine", comb, cp, run_combine));
    const auto out = get<uint16_t>(s, comb["out"]);
    const auto ready = get<int32_t>(s, comb["ready"]);
    const auto flags = get<int32_t>(s, disp["chunk_flags"]);
    EP_TRY(s.synchronize());
    for (int32_t f : ready)
      if (f != g) return fmt::format("generation {}: a ready flag holds {}", g, f);
    for (int32_t f : flags)
      if (f != g) return fmt::format("generation {}: a chunk flag holds {}", g, f);
    double err2 = 0, ref2 = 0;
    for (int64_t pt = 0; pt < P * T; ++pt) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += w[size_t(pt * K + k)];
      for (int64_t h = 0; h < H; ++h) {
        const double want = sum * bf16_value(x[size_t(pt * H + h)]);
        const double got = bf16_value(out[size_t(pt * H + h)]);
        if (!std::isfinite(got)) return fmt::format("generation {}: out[{}, {}] is not finite", g, pt, h);
        err2 += (got - want) * (got - want), ref2 += want * want;
      }
    }
    const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
    if (rel > 8e-3) return fmt::format("generation {}: the round trip is off by {:.3g} (relative)", g, rel);
  }
  return {};
}

// A tensor of `shape` whose dimension `dim` is 0, over a buffer that holds one row there (a
// backend need not allocate 0 bytes): what a rank without tokens passes.
inline halcyon::Result<Tensor> empty_along(const Device& d, DType dt, std::vector<int64_t> shape, size_t dim) {
  shape[dim] = 1;
  auto t = halcyon::ops::make_tensor(d, dt, shape);
  if (t) t->shape[dim] = 0;
  return t;
}

// Every rank without tokens (T = 0), twice on the same buffers (the flags never reset): dispatch
// still publishes its counts (zeros) and raises every count flag, writes expert_offsets (all 0)
// and zeroes the receive buffer's tail (all of it); combine still raises every ready flag. A
// layer's rank whose micro-batch is empty runs the one-rank form of exactly this.
inline std::string no_tokens(const Device& d, const Stream& s, int64_t P, int64_t E) {
  const int64_t K = 2, H = 8, RC = 4, EO = (E + P - 1) / P + 1;
  Tensors disp, comb;
  for (auto [t, name, dt, shape, dim] :
       {std::tuple{&disp, "x", DType::bf16, std::vector<int64_t>{P, 0, H}, size_t(1)},
        {&disp, "topk_ids", DType::i32, {P, 0, K}, 1}, {&disp, "slot_dest", DType::i32, {P, 0, K}, 1},
        {&disp, "chunk_flags", DType::i32, {P, P, 0}, 2}, {&comb, "topk_weights", DType::f32, {P, 0, K}, 1},
        {&comb, "out", DType::bf16, {P, 0, H}, 1}}) {
    auto made = empty_along(d, dt, shape, dim);
    EP_TRY(made);
    (*t)[name] = *made;
  }
  auto recv = put(d, s, DType::bf16, {P, RC, H}, std::vector<uint16_t>(size_t(P * RC * H), 0x3f80));  // 1.0
  auto offsets = put(d, s, DType::i32, {P, EO}, std::vector<int32_t>(size_t(P * EO), -1));
  auto counts = put(d, s, DType::i32, {P, P, E}, std::vector<int32_t>(size_t(P * P * E), -1));
  auto cflags = put(d, s, DType::i32, {P, P}, std::vector<int32_t>(size_t(P * P), 0));
  auto ready = put(d, s, DType::i32, {P, P}, std::vector<int32_t>(size_t(P * P), 0));
  auto source = put(d, s, DType::i32, {P, RC}, std::vector<int32_t>(size_t(P * RC), 7));
  for (auto* t : {&recv, &offsets, &counts, &cflags, &ready, &source}) EP_TRY(*t);
  disp["recv"] = *recv, disp["expert_offsets"] = *offsets, disp["counts"] = *counts, disp["count_flags"] = *cflags;
  disp["row_source"] = *source;
  comb["expert_out"] = *recv, comb["slot_dest"] = disp["slot_dest"], comb["ready"] = *ready;
  for (int g = 1; g <= 2; ++g) {
    const Params dp{{"experts", std::to_string(E)}, {"capacity", std::to_string(RC)}, {"chunk_rows", "3"},
                    {"generation", std::to_string(g)}, {"zero_tail", "true"}};
    EP_TRY(halcyon::ops::run_op(d, s, "ep_dispatch", disp, dp));
    EP_TRY(halcyon::ops::run_op(d, s, "ep_combine", comb, {{"generation", std::to_string(g)}}));
    EP_TRY(s.synchronize());
    for (auto [name, t, want] : {std::tuple{"count flag", &cflags, g}, {"ready flag", &ready, g},
                                 {"count", &counts, 0}, {"expert offset", &offsets, 0}, {"row source", &source, -1}}) {
      const auto got = get<int32_t>(s, **t);
      if (got.size() != size_t((*t)->numel())) return fmt::format("generation {}: the {}s could not be read", g, name);
      for (int32_t v : got)
        if (v != want) return fmt::format("generation {}: a {} holds {}, expected {}", g, name, v, want);
    }
    const auto rows = get<uint16_t>(s, *recv);
    if (rows.size() != size_t(P * RC * H)) return fmt::format("generation {}: recv could not be read", g);
    for (uint16_t v : rows)
      if (v != 0) return fmt::format("generation {}: a received row past the 0 that arrived holds {:#06x}", g, v);
  }
  return {};
}

#undef EP_TRY

}  // namespace test::ep_ops
