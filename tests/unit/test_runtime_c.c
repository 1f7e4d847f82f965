/* The runtime's C ABI, used from C: an operator through hrt_run_op and the MoE layer. */
#include <halcyon/hal.h>
#include <halcyon/runtime.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "c_check.h"

static uint16_t bf16(float f) { /* round to nearest even; test values are finite */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

int main(void) {
  hal_device dev = NULL;
  hal_stream s = NULL;
  if (!ok(hal_device_open("cpu", &dev), "open") || !ok(hal_stream_create(dev, NULL, &s), "stream")) return 1;

  /* vector_add through hrt_run_op */
  enum { N = 1000 };
  float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) a[i] = (float)i * 0.5f, b[i] = 3.0f - (float)i, c[i] = NAN;
  hal_buffer ba = alloc(dev, sizeof a), bb = alloc(dev, sizeof b), bc = alloc(dev, sizeof c);
  ok(hal_stream_write(s, ba, 0, a, sizeof a), "write a");
  ok(hal_stream_write(s, bb, 0, b, sizeof b), "write b");
  hrt_tensor t[3] = {{"a", ba, 0, HRT_F32, 1, {N}}, {"b", bb, 0, HRT_F32, 1, {N}}, {"c", bc, 0, HRT_F32, 1, {N}}};
  ok(hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0), "hrt_run_op");
  ok(hal_stream_read(s, bc, 0, c, sizeof c), "read c");
  ok(hal_stream_synchronize(s), "sync");
  for (int i = 0; i < N; ++i) EXPECT(c[i] == a[i] + b[i], "c[%d] = %f", i, c[i]);

  hrt_param bad = {"alpha", "2"};
  hal_error* e = hrt_run_op(dev, s, "vector_add", t, 3, &bad, 1);
  EXPECT(e && hal_error_status(e) == HAL_INVALID_ARGUMENT && strstr(hal_error_message(e), "unknown parameter 'alpha'"),
         "unknown param: %s", hal_error_message(e));
  hal_error_free(e);
  e = hrt_run_op(dev, s, "no_such_op", t, 3, NULL, 0);
  EXPECT(hal_error_status(e) == HAL_NOT_FOUND, "unknown op");
  hal_error_free(e);

  /* A small MoE layer. */
  enum { T = 16, H = 64, I = 32, E = 16, K = 4 };
  static uint16_t wr[H * E], wgu[E * H * 2 * I], wd[E * I * H], x[T * H], y[T * H];
  unsigned seed = 12345;
#define RND() ((seed = seed * 1103515245u + 12345u), (float)((seed >> 9) & 0xFFFF) / 65536.0f - 0.5f)
  for (int i = 0; i < H * E; ++i) wr[i] = bf16(RND() * 0.2f);
  for (int i = 0; i < E * H * 2 * I; ++i) wgu[i] = bf16(RND() * 0.2f);
  for (int i = 0; i < E * I * H; ++i) wd[i] = bf16(RND() * 0.2f);
  for (int i = 0; i < T * H; ++i) x[i] = bf16(RND() * 2.0f);
  hal_buffer bwr = alloc(dev, sizeof wr), bgu = alloc(dev, sizeof wgu), bwd = alloc(dev, sizeof wd);
  hal_buffer bx = alloc(dev, sizeof x), by = alloc(dev, sizeof y);
  ok(hal_stream_write(s, bwr, 0, wr, sizeof wr), "w");
  ok(hal_stream_write(s, bgu, 0, wgu, sizeof wgu), "w");
  ok(hal_stream_write(s, bwd, 0, wd, sizeof wd), "w");
  ok(hal_stream_write(s, bx, 0, x, sizeof x), "x");
  uint16_t nan_bits = 0x7FC1;
  ok(hal_stream_fill(s, by, 0, sizeof y, &nan_bits, 2), "poison");
  hrt_moe_layer_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.hidden = H, d.inter = I, d.experts = E, d.topk = K, d.n_groups = 4, d.topk_groups = 2;
  d.expert_begin = 0, d.local_experts = -1, d.normalize = 1, d.routed_scale = 2.5;
  d.w_router = bwr, d.w_gate_up = bgu, d.w_down = bwd;
  hrt_moe_layer layer = NULL;
  if (ok(hrt_moe_layer_create(dev, &d, &layer), "hrt_moe_layer_create")) {
    ok(hrt_moe_layer_forward(layer, s, bx, by, T), "forward");
    ok(hal_stream_read(s, by, 0, y, sizeof y), "read y");
    ok(hal_stream_synchronize(s), "sync");
    int nonfinite = 0, nonzero = 0;
    for (int i = 0; i < T * H; ++i) {
      uint32_t u = (uint32_t)y[i] << 16;
      float f;
      memcpy(&f, &u, 4);
      nonfinite += !isfinite(f);
      nonzero += f != 0.0f;
    }
    EXPECT(nonfinite == 0, "%d outputs are not finite (unwritten?)", nonfinite);
    EXPECT(nonzero > T * H / 2, "only %d non-zero outputs", nonzero);
    e = hrt_moe_layer_forward(layer, s, bx, by, T + 1);
    EXPECT(hal_error_status(e) == HAL_OUT_OF_RANGE, "a too-small x buffer must be refused: %s", hal_error_message(e));
    hal_error_free(e);
    hrt_moe_layer_destroy(layer);
  }
  d.struct_size = 8;
  e = hrt_moe_layer_create(dev, &d, &layer);
  EXPECT(hal_error_status(e) == HAL_VERSION_MISMATCH, "old desc");
  hal_error_free(e);
  d.struct_size = sizeof d;
  d.topk = 0;
  e = hrt_moe_layer_create(dev, &d, &layer);
  EXPECT(hal_error_status(e) == HAL_INVALID_ARGUMENT && strstr(hal_error_message(e), "topk 0"), "topk 0: %s", hal_error_message(e));
  hal_error_free(e);

  hal_buffer all[] = {ba, bb, bc, bwr, bgu, bwd, bx, by};
  for (unsigned i = 0; i < sizeof all / sizeof all[0]; ++i) ok(hal_buffer_release(all[i]), "release");
  ok(hal_stream_release(s), "release");
  ok(hal_device_release(dev), "release");
  printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
  return failures ? 1 : 0;
}
