// The expert-parallel MoE layer checked against the single-rank layer, one rank's side: shared
// by tests/unit/test_moe_ep.cpp (CPU ranks, forked) and tests/cuda/test_ep_ipc.cpp (GPU ranks,
// spawned: CUDA does not survive a fork).
#pragma once

#include <halcyon/kernels/reference/bf16.hpp>
#include <halcyon/runtime/moe_ep_layer.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "fork_ranks.hpp"

namespace test::ep {

using namespace halcyon::rt;
using namespace halcyon::ops;
using halcyon::Comm;
using halcyon::Device;
using halcyon::Stream;

struct Problem {
  MoeLayerConfig c;
  std::vector<uint16_t> w_router, w_gate_up, w_down;
  std::vector<float> bias;
};

inline std::vector<uint16_t> random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = halcyon::ref::float_to_bf16(u(rng)).bits;
  return v;
}

// Every rank makes the same weights from the same seed.
inline Problem make_problem(int64_t hidden, int64_t inter, int64_t experts, int64_t topk, int64_t groups, int64_t topk_groups) {
  Problem p;
  p.c.hidden = hidden;
  p.c.inter = inter;
  p.c.experts = experts;
  p.c.topk = topk;
  p.c.n_groups = groups;
  p.c.topk_groups = topk_groups;
  std::mt19937 rng(11);
  p.w_router = random_bf16(size_t(hidden * experts), 0.2f, rng);
  p.bias.resize(size_t(experts));
  for (auto& b : p.bias) b = std::uniform_real_distribution<float>(-0.05f, 0.05f)(rng);
  p.w_gate_up = random_bf16(size_t(experts * hidden * 2 * inter), 0.1f, rng);
  p.w_down = random_bf16(size_t(experts * inter * hidden), 0.1f, rng);
  return p;
}

template <typename T>
inline halcyon::Result<Tensor> upload(const Device& d, const Stream& s, DType dt, std::vector<int64_t> shape,
                               const T* data, size_t n) {
  auto t = make_tensor(d, dt, std::move(shape));
  if (!t) return t.error();
  if (n) HALCYON_TRY(s.write(t->buffer, 0, data, n * sizeof(T)));
  return t;
}

// Weights with the experts [first, end) of `p`.
inline halcyon::Result<MoeLayerWeights> weights(const Device& d, const Stream& s, const Problem& p, ExpertRange r) {
  const auto& c = p.c;
  const size_t gu = size_t(c.hidden * 2 * c.inter), dn = size_t(c.inter * c.hidden);
  MoeLayerWeights w;
  auto router = upload(d, s, DType::bf16, {c.hidden, c.experts}, p.w_router.data(), p.w_router.size());
  auto bias = upload(d, s, DType::f32, {c.experts}, p.bias.data(), p.bias.size());
  auto up = upload(d, s, DType::bf16, {r.count(), c.hidden, 2 * c.inter}, p.w_gate_up.data() + r.first * gu,
                   size_t(r.count()) * gu);
  auto down = upload(d, s, DType::bf16, {r.count(), c.inter, c.hidden}, p.w_down.data() + r.first * dn,
                     size_t(r.count()) * dn);
  for (auto* t : {&router, &bias, &up, &down})
    if (!*t) return t->error();
  w.w_router = *router;
  w.bias = *bias;
  w.w_gate_up = *up;
  w.w_down = *down;
  return w;
}

inline halcyon::Result<std::vector<uint16_t>> read_out(const Stream& s, const Tensor& t) {
  std::vector<uint16_t> v(size_t(t.bytes() / 2));
  HALCYON_TRY(s.read(t.buffer, 0, v.data(), t.bytes()));
  return v;
}

// This rank's device, communicator and stream.
struct RankEnv {
  Device dev;
  Comm comm;
  Stream s;
};
inline std::string open_rank(uint32_t rank, uint32_t size, const std::string& name, RankEnv* env, const char* uri = "cpu:0") {
  auto dev = Device::open(uri);
  RANK_TRY(dev);
  auto comm = Comm::create(*dev, {rank, size, name, 30000});
  RANK_TRY(comm);
  auto s = dev->create_stream();
  RANK_TRY(s);
  *env = {*dev, *comm, *s};
  return {};
}

// One rank of the EP layer against the single-rank layer on the same tokens. exact: the same
// bits (the CPU); otherwise within `rel` (relative L2 error) and every value finite. Rank r
// holds first_tokens + 7 r tokens (ranks hold different numbers).
inline std::string ep_rank(const Problem& p, uint32_t rank, uint32_t size, const std::string& name,
                           const char* uri = "cpu:0", bool exact = true, double rel = 0,
                           EpTransport transport = EpTransport::kAllToAll, EpOptions ep_options = {},
                           int64_t first_tokens = 5) {
  RankEnv env;
  if (auto e = open_rank(rank, size, name, &env, uri); !e.empty()) return e;
  const Device* dev = &env.dev;
  const Comm* comm = &env.comm;
  const Stream* s = &env.s;
  const auto& c = p.c;
  const int64_t T = first_tokens + 7 * int64_t(rank);
  std::mt19937 rng(100 + rank);
  auto x_host = random_bf16(size_t(T * c.hidden), 1.0f, rng);
  auto x = upload(*dev, *s, DType::bf16, {T, c.hidden}, x_host.data(), x_host.size());
  RANK_TRY(x);

  const ExpertRange mine = ep_expert_range(c.experts, rank, size);
  auto ep_w = weights(*dev, *s, p, mine);
  RANK_TRY(ep_w);
  auto ep = MoeEpLayer::create(*dev, *comm, c, *ep_w, {}, transport, ep_options);
  RANK_TRY(ep);
  RANK_CHECK(ep->experts().first == mine.first && ep->experts().end == mine.end, "experts [{}, {})",
             ep->experts().first, ep->experts().end);
  auto out = make_tensor(*dev, DType::bf16, {T, c.hidden});
  RANK_TRY(out);
  RANK_TRY(s->fill<uint16_t>(out->buffer, 0, out->bytes(), 0x7FC1));  // NaN until written
  MoeEpStats stats;
  RANK_TRY(ep->forward(*s, *x, *out, &stats));
  RANK_CHECK(stats.rows_sent == T * c.topk, "rows_sent {}", stats.rows_sent);
  auto got = read_out(*s, *out);
  RANK_TRY(got);
  // Twice: the second call reuses nothing stale.
  RANK_TRY(ep->forward(*s, *x, *out));
  auto again = read_out(*s, *out);
  RANK_TRY(again);
  RANK_CHECK(*again == *got, "a second forward gave other values");

  // The single-rank layer with all experts on this rank's tokens.
  auto all_w = weights(*dev, *s, p, {0, c.experts});
  RANK_TRY(all_w);
  auto single = MoeLayer::create(*dev, c, *all_w);
  RANK_TRY(single);
  auto ref = make_tensor(*dev, DType::bf16, {T, c.hidden});
  RANK_TRY(ref);
  RANK_TRY(single->forward(*s, *x, *ref));
  auto want = read_out(*s, *ref);
  RANK_TRY(want);
  size_t differ = 0, first = 0;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < want->size(); ++i) {
    if ((*got)[i] != (*want)[i] && differ++ == 0) first = i;
    float g = halcyon::ref::bf16_to_float(halcyon::ref::bf16{(*got)[i]});
    float w = halcyon::ref::bf16_to_float(halcyon::ref::bf16{(*want)[i]});
    RANK_CHECK(std::isfinite(g), "output {} is not finite", i);
    err2 += double(g - w) * double(g - w);
    ref2 += double(w) * double(w);
  }
  const double rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (exact)
    RANK_CHECK(differ == 0, "{} of {} outputs differ from the single-rank layer; first at {}: {:#06x} vs {:#06x}",
               differ, want->size(), first, (*got)[first], (*want)[first]);
  else
    RANK_CHECK(rel_err <= rel, "relative error {:.3g} against the single-rank layer (limit {}); {} of {} values differ",
               rel_err, rel, differ, want->size());
  if (transport == EpTransport::kPeerKernel) {
    // Back-to-back generations on other tokens, queued with no host step between them: x2, x,
    // x2 again. Each must give what it gives alone (a flag taken from an earlier generation, or
    // a buffer overwritten before a peer read it, would show here).
    auto x2_host = random_bf16(size_t(T * c.hidden), 1.0f, rng);
    auto x2 = upload(*dev, *s, DType::bf16, {T, c.hidden}, x2_host.data(), x2_host.size());
    RANK_TRY(x2);
    auto out2 = make_tensor(*dev, DType::bf16, {T, c.hidden});
    auto out3 = make_tensor(*dev, DType::bf16, {T, c.hidden});
    auto ref2 = make_tensor(*dev, DType::bf16, {T, c.hidden});
    RANK_TRY(out2);
    RANK_TRY(out3);
    RANK_TRY(ref2);
    RANK_TRY(ep->forward(*s, *x2, *out2));
    RANK_TRY(ep->forward(*s, *x, *out));
    RANK_TRY(ep->forward(*s, *x2, *out3));
    RANK_TRY(single->forward(*s, *x2, *ref2));
    auto g2 = read_out(*s, *out2), g1 = read_out(*s, *out), g3 = read_out(*s, *out3), w2 = read_out(*s, *ref2);
    for (auto* r : {&g2, &g1, &g3, &w2}) RANK_TRY(*r);
    // The same transport on the same tokens gives the same bits, on any device.
    RANK_CHECK(*g1 == *got, "back-to-back: the second forward differs from the first on the same tokens");
    RANK_CHECK(*g3 == *g2, "back-to-back: the third forward differs from the first on the same tokens");
    if (exact) {
      RANK_CHECK(*g2 == *w2, "back-to-back: the forward of other tokens differs from the single-rank layer");
    } else {
      double e2 = 0, r2 = 0;
      for (size_t i = 0; i < w2->size(); ++i) {
        const double g = halcyon::ref::bf16_to_float(halcyon::ref::bf16{(*g2)[i]});
        const double w = halcyon::ref::bf16_to_float(halcyon::ref::bf16{(*w2)[i]});
        e2 += (g - w) * (g - w), r2 += w * w;
      }
      RANK_CHECK(std::sqrt(e2 / std::max(r2, 1e-30)) <= rel, "back-to-back: relative error {:.3g} on other tokens",
                 std::sqrt(e2 / std::max(r2, 1e-30)));
    }
  }
  static const char* names[] = {"all-to-all", "peer writes", "dispatch/combine kernels"};
  std::fprintf(stderr, "[rank %u of %u on %s, %s, %lld micro-batch(es), %lld tokens] %zu of %zu outputs differ from the "
               "single-rank layer, relative error %.3g\n", rank, size, uri, names[int(transport)],
               (long long)ep_options.micro_batches, (long long)T, differ, want->size(), rel_err);
  return {};
}

}  // namespace test::ep
