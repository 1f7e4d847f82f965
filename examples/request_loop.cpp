// examples/request_loop.cpp — an inference server's request loop in miniature: several
// threads, each with its own stream on ONE device, serve requests of varying token counts
// through the MoE layer, all sharing one copy of the weights. Every answer is checked against
// the host reference. scripts/test.sh runs it under ThreadSanitizer on the CPU backend.
//
// What is shared and what is not: the device, the weight tensors (read only) and the backend
// are shared by every thread; a MoeLayer owns a workspace that forward() writes, so each
// thread has its own (MoeLayer::create on the shared weights copies no weight), as it has its
// own stream and its own input/output tensors.
//
//   ./request_loop [device-uri] [threads] [requests per thread]   (default: cpu:0 4 6)
#include "moe_common.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

using namespace example;

namespace {

struct Shared {
  Device device;
  MoeLayerConfig config;
  MoeLayerWeights weights;
  std::vector<uint16_t> x;     // [max_tokens, hidden]: request r with T tokens takes the first T rows
  std::vector<uint16_t> want;  // the reference output of all of x: rows are independent tokens
  int64_t max_tokens = 0;
};

// One thread's requests; returns the number that failed (printing why).
int serve(const Shared& sh, int thread, int requests) {
  auto report = [&](const Error& e) {
    std::fprintf(stderr, "request_loop: thread %d: %s\n", thread, e.to_string().c_str());
    return requests;
  };
  auto stream = sh.device.create_stream();
  if (!stream) return report(stream.error());
  auto layer = MoeLayer::create(sh.device, sh.config, sh.weights);
  if (!layer) return report(layer.error());
  std::mt19937 rng(1000u + unsigned(thread));
  const int64_t H = sh.config.hidden;
  int failed = 0;
  for (int r = 0; r < requests; ++r) {
    const int64_t T = std::uniform_int_distribution<int64_t>(1, sh.max_tokens)(rng);
    std::vector<uint16_t> x(sh.x.begin(), sh.x.begin() + T * H);
    auto xt = upload(sh.device, *stream, ops::DType::bf16, {T, H}, x);
    auto out = ops::make_tensor(sh.device, ops::DType::bf16, {T, H});
    if (!xt) return report(xt.error());
    if (!out) return report(out.error());
    if (auto st = layer->forward(*stream, *xt, *out); !st) return report(st.error());
    std::vector<uint16_t> got(size_t(T * H));
    if (auto st = stream->read(out->buffer, 0, got.data(), got.size() * 2); !st) return report(st.error());
    const double err = rel_error(got, sh.want, got.size());
    if (err > kTolerance) {
      std::fprintf(stderr, "request_loop: thread %d request %d (%lld tokens): relative error %.2e\n", thread, r,
                   static_cast<long long>(T), err);
      ++failed;
    }
  }
  return failed;
}

int fail(const Error& e) {
  std::fprintf(stderr, "request_loop: %s\n", e.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string uri = argc > 1 ? argv[1] : "cpu:0";
  const int threads = argc > 2 ? std::atoi(argv[2]) : 4;
  const int requests = argc > 3 ? std::atoi(argv[3]) : 6;
  if (threads < 1 || threads > 64 || requests < 1 || requests > 100000) {
    std::fprintf(stderr, "request_loop: threads must be 1..64 and requests 1..100000\n");
    return 2;
  }
  Shared sh;
  auto dev = Device::open(uri.c_str());
  if (!dev) return fail(dev.error());
  sh.device = *dev;
  auto setup = sh.device.create_stream();
  if (!setup) return fail(setup.error());
  sh.config = small_config();
  sh.max_tokens = 40;
  std::mt19937 rng(7);
  const MoeHostWeights hw = random_weights(sh.config, rng);
  auto w = upload_weights(sh.device, *setup, sh.config, hw);
  if (!w) return fail(w.error());
  sh.weights = *w;
  sh.x = random_bf16(size_t(sh.max_tokens * sh.config.hidden), 1.0f, rng);
  if (auto st = moe_layer_reference(sh.config, hw, sh.x, sh.max_tokens, &sh.want); !st) return fail(st.error());

  std::atomic<int> failed{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { failed += serve(sh, t, requests); });
  for (auto& t : pool) t.join();
  std::printf("request_loop on %s: %d threads x %d requests, %d failed\n", uri.c_str(), threads, requests,
              failed.load());
  return failed.load() == 0 ? 0 : 1;
}
