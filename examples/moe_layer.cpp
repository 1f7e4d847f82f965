// examples/moe_layer.cpp — the MoE layer (halcyon::rt::MoeLayer) from C++: upload weights,
// run a forward pass on a device, and check it against the host reference.
//
//   ./moe_layer [device-uri] [tokens]      (default: cpu:0, 48 tokens)
#include "moe_common.hpp"

#include <cstdlib>
#include <string>

using namespace example;

static int fail(const Error& e) {
  std::fprintf(stderr, "moe_layer: %s\n", e.to_string().c_str());
  return 1;
}

int main(int argc, char** argv) {
  const std::string uri = argc > 1 ? argv[1] : "cpu:0";
  const int64_t tokens = argc > 2 ? std::atoll(argv[2]) : 48;
  if (tokens < 1 || tokens > 65536) {
    std::fprintf(stderr, "moe_layer: tokens must be 1..65536, got '%s'\n", argv[2]);
    return 2;
  }
  auto dev = Device::open(uri.c_str());
  if (!dev) return fail(dev.error());
  auto stream = dev->create_stream();
  if (!stream) return fail(stream.error());

  const MoeLayerConfig c = small_config();
  std::mt19937 rng(21);
  const MoeHostWeights hw = random_weights(c, rng);
  auto w = upload_weights(*dev, *stream, c, hw);
  if (!w) return fail(w.error());
  auto layer = MoeLayer::create(*dev, c, *w);
  if (!layer) return fail(layer.error());

  const auto hx = random_bf16(size_t(tokens * c.hidden), 1.0f, rng);
  auto x = upload(*dev, *stream, ops::DType::bf16, {tokens, c.hidden}, hx);
  auto out = ops::make_tensor(*dev, ops::DType::bf16, {tokens, c.hidden});
  if (!x) return fail(x.error());
  if (!out) return fail(out.error());
  if (auto st = layer->forward(*stream, *x, *out); !st) return fail(st.error());
  std::vector<uint16_t> got(hx.size());
  if (auto st = stream->read(out->buffer, 0, got.data(), got.size() * 2); !st) return fail(st.error());

  std::vector<uint16_t> want;
  if (auto st = moe_layer_reference(c, hw, hx, tokens, &want); !st) return fail(st.error());
  const double err = rel_error(got, want, got.size());
  std::printf("moe_layer on %s: %lld tokens, %s path, relative error %.2e (tolerance %.0e)\n", uri.c_str(),
              static_cast<long long>(tokens), layer->gathers_rows() ? "gather" : "copy", err, kTolerance);
  std::printf("%s\n", err <= kTolerance ? "moe_layer: ok" : "moe_layer: FAILED");
  return err <= kTolerance ? 0 : 1;
}
