/* The runtime's C ABI, used from C: an operator through hrt_run_op and as a prepared call
 * (hrt_op_create / hrt_op_run), and the MoE layer. */
#include <halcyon/dlpack.h>
#include <halcyon/hal.h>
#include <halcyon/runtime.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Each *_SIZE macro names its struct's last field: sizeof may only add tail padding. */
#define TRACKS_LAST_FIELD(T, SIZE) _Static_assert(sizeof(T) - (SIZE) < _Alignof(T), #SIZE " does not name the last field of " #T)
TRACKS_LAST_FIELD(hrt_tensor, HRT_TENSOR_SIZE);
TRACKS_LAST_FIELD(hrt_param, HRT_PARAM_SIZE);
TRACKS_LAST_FIELD(hrt_moe_layer_desc, HRT_MOE_LAYER_DESC_SIZE);
TRACKS_LAST_FIELD(hrt_moe_fp8_weights, HRT_MOE_FP8_WEIGHTS_SIZE);
TRACKS_LAST_FIELD(hrt_moe_layer_info, HRT_MOE_LAYER_INFO_SIZE);
TRACKS_LAST_FIELD(hrt_call_options, HRT_CALL_OPTIONS_SIZE);
TRACKS_LAST_FIELD(hrt_moe_layer_impls, HRT_MOE_LAYER_IMPLS_SIZE);

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
  hrt_tensor t[3] = {{sizeof(hrt_tensor), NULL, "a", ba, 0, HRT_F32, 1, {N}},
                     {sizeof(hrt_tensor), NULL, "b", bb, 0, HRT_F32, 1, {N}},
                     {sizeof(hrt_tensor), NULL, "c", bc, 0, HRT_F32, 1, {N}}};
  ok(hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0), "hrt_run_op");
  ok(hal_stream_read(s, bc, 0, c, sizeof c), "read c");
  ok(hal_stream_synchronize(s), "sync");
  for (int i = 0; i < N; ++i) EXPECT(c[i] == a[i] + b[i], "c[%d] = %f", i, c[i]);

  hrt_param bad = {sizeof(hrt_param), NULL, "alpha", "2"};
  hal_error* e = hrt_run_op(dev, s, "vector_add", t, 3, &bad, 1);
  REFUSED(e, HAL_INVALID_ARGUMENT, "unknown parameter 'alpha'", "unknown param");
  e = hrt_run_op(dev, s, "no_such_op", t, 3, NULL, 0);
  REFUSED(e, HAL_NOT_FOUND, NULL, "unknown op");

  /* The same call prepared once (hrt_op_create) and run three times: each run reads the
   * buffers' contents anew, and the op keeps its buffers alive after the caller releases them. */
  hrt_op prepared = NULL;
  hal_buffer pa = alloc(dev, sizeof a), pb = alloc(dev, sizeof b), pc = alloc(dev, sizeof c);
  hrt_tensor pt[3] = {{sizeof(hrt_tensor), NULL, "a", pa, 0, HRT_F32, 1, {N}},
                      {sizeof(hrt_tensor), NULL, "b", pb, 0, HRT_F32, 1, {N}},
                      {sizeof(hrt_tensor), NULL, "c", pc, 0, HRT_F32, 1, {N}}};
  if (ok(hrt_op_create(dev, "vector_add", pt, 3, NULL, 0, &prepared), "hrt_op_create")) {
    EXPECT(hrt_op_impl_name(prepared) && strcmp(hrt_op_impl_name(prepared), "host") == 0, "impl name: %s",
           hrt_op_impl_name(prepared) ? hrt_op_impl_name(prepared) : "(null)");
    float av[N], cv[N];
    for (int round = 0; round < 3; ++round) {
      if (round < 2) { /* new contents */
        for (int i = 0; i < N; ++i) av[i] = (float)(round * 1000 + i);
        ok(hal_stream_write(s, pa, 0, av, sizeof av), "write a");
        ok(hal_stream_write(s, pb, 0, b, sizeof b), "write b");
      } else { /* the caller's references gone: the op's keep a and b */
        hal_buffer_release(pa), hal_buffer_release(pb);
      }
      for (int i = 0; i < N; ++i) cv[i] = NAN;
      ok(hal_stream_write(s, pc, 0, cv, sizeof cv), "poison c");
      ok(hrt_op_run(prepared, s), "hrt_op_run");
      ok(hal_stream_read(s, pc, 0, cv, sizeof cv), "read c");
      ok(hal_stream_synchronize(s), "sync");
      for (int i = 0; i < N; ++i) EXPECT(cv[i] == av[i] + b[i], "prepared run %d: c[%d] = %f", round, i, cv[i]);
    }
    hrt_op_release(prepared);
  }
  hal_buffer_release(pc);
  /* Checked at create, with hrt_run_op's messages: nothing is made. */
  prepared = (hrt_op)&bad;
  e = hrt_op_create(dev, "vector_add", t, 3, &bad, 1, &prepared);
  EXPECT(e && hal_error_status(e) == HAL_INVALID_ARGUMENT && strstr(hal_error_message(e), "unknown parameter 'alpha'") &&
             prepared == NULL, "prepared, unknown param: %s", e ? hal_error_message(e) : "no error");
  hal_error_free(e);
  t[2].shape[0] = N - 1;
  e = hrt_op_create(dev, "vector_add", t, 3, NULL, 0, &prepared);
  EXPECT(e && hal_error_status(e) == HAL_INVALID_ARGUMENT && prepared == NULL, "prepared, c of N - 1: %s",
         e ? hal_error_message(e) : "no error");
  hal_error_free(e);
  t[2].shape[0] = N;
  e = hrt_op_create(dev, "no_such_op", t, 3, NULL, 0, &prepared);
  REFUSED(e, HAL_NOT_FOUND, NULL, "prepared, unknown op");
  e = hrt_op_create(dev, "vector_add", t, 3, NULL, 0, NULL);
  REFUSED(e, HAL_INVALID_ARGUMENT, NULL, "prepared, out NULL");
  e = hrt_op_run(NULL, s);
  REFUSED(e, HAL_INVALID_HANDLE, NULL, "hrt_op_run(NULL)");
  EXPECT(hrt_op_impl_name(NULL) == NULL, "hrt_op_impl_name(NULL)");
  hrt_op_release(NULL);

  /* An implementation by name (hrt_call_options): the CPU's "host" runs; a name of another
   * device's kernel is refused as unable to run here, an unknown name as not found, both with the
   * list of implementations; NULL options or impl: the registry's choice. */
  hrt_call_options host = {sizeof(hrt_call_options), NULL, "host"};
  for (int i = 0; i < N; ++i) c[i] = NAN;
  ok(hal_stream_write(s, bc, 0, c, sizeof c), "poison c");
  ok(hrt_run_op_with(dev, s, "vector_add", t, 3, NULL, 0, &host), "hrt_run_op_with host");
  ok(hal_stream_read(s, bc, 0, c, sizeof c), "read c");
  ok(hal_stream_synchronize(s), "sync");
  for (int i = 0; i < N; ++i) EXPECT(c[i] == a[i] + b[i], "by name: c[%d] = %f", i, c[i]);
  /* Other devices' kernels: registered or not depending on the build (an ASan build has no PTX),
   * so each is refused either as unable to run here or as unknown, with the list either way. */
  const char* other_kernels[] = {"sm80", "spirv", "gfx942"};
  for (int k = 0; k < 3; ++k) {
    hrt_call_options other = {sizeof(hrt_call_options), NULL, other_kernels[k]};
    e = hrt_run_op_with(dev, s, "vector_add", t, 3, NULL, 0, &other);
    const char* m = e ? hal_error_message(e) : "";
    EXPECT(e && ((hal_error_status(e) == HAL_UNSUPPORTED && strstr(m, "cannot run on cpu:0")) ||
                 (hal_error_status(e) == HAL_NOT_FOUND && strstr(m, "no implementation named"))) &&
               strstr(m, "host (host host)"),
           "%s on the CPU: %s", other_kernels[k], e ? m : "no error");
    hal_error_free(e);
  }
  hrt_call_options nope = {sizeof(hrt_call_options), NULL, "nope"};
  e = hrt_op_create_with(dev, "vector_add", t, 3, NULL, 0, &nope, &prepared);
  EXPECT(e && hal_error_status(e) == HAL_NOT_FOUND && strstr(hal_error_message(e), "no implementation named 'nope'") &&
             prepared == NULL,
         "unknown name: %s", e ? hal_error_message(e) : "no error");
  hal_error_free(e);
  hrt_call_options old_size = {HRT_CALL_OPTIONS_MIN_SIZE - 1, NULL, "host"};
  e = hrt_run_op_with(dev, s, "vector_add", t, 3, NULL, 0, &old_size);
  REFUSED(e, HAL_VERSION_MISMATCH, NULL, "options struct_size too small");
  hrt_call_options choice = {sizeof(hrt_call_options), NULL, NULL};
  ok(hrt_run_op_with(dev, s, "vector_add", t, 3, NULL, 0, &choice), "hrt_run_op_with, impl NULL");
  ok(hrt_run_op_with(dev, s, "vector_add", t, 3, NULL, 0, NULL), "hrt_run_op_with, options NULL");
  if (ok(hrt_op_create_with(dev, "vector_add", t, 3, NULL, 0, &host, &prepared), "hrt_op_create_with host")) {
    EXPECT(strcmp(hrt_op_impl_name(prepared), "host") == 0, "prepared by name: %s", hrt_op_impl_name(prepared));
    ok(hrt_op_run(prepared, s), "hrt_op_run (by name)");
    ok(hal_stream_synchronize(s), "sync");
    hrt_op_release(prepared);
  }

  /* struct_size of the array structs (runtime.h). The oldest size a reader accepts: */
  for (int i = 0; i < 3; ++i) t[i].struct_size = HRT_TENSOR_MIN_SIZE;
  ok(hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0), "hrt_run_op, struct_size = HRT_TENSOR_MIN_SIZE");
  /* A newer caller's larger structs: read at their stride, the unknown tail ignored. */
  struct newer_tensor {
    hrt_tensor t;
    uint64_t future[3];
  } big[3];
  memset(big, 0xEE, sizeof big);
  for (int i = 0; i < 3; ++i) {
    big[i].t = t[i];
    big[i].t.struct_size = sizeof(struct newer_tensor);
  }
  memset(c, 0, sizeof c);
  ok(hal_stream_write(s, bc, 0, c, sizeof c), "clear c");
  ok(hrt_run_op(dev, s, "vector_add", &big[0].t, 3, NULL, 0), "hrt_run_op, a newer caller's hrt_tensor");
  ok(hal_stream_read(s, bc, 0, c, sizeof c), "read c");
  ok(hal_stream_synchronize(s), "sync");
  for (int i = 0; i < N; ++i) EXPECT(c[i] == a[i] + b[i], "newer structs: c[%d] = %f", i, c[i]);
  /* Too small: refused, naming the struct and the sizes. */
  t[0].struct_size = t[1].struct_size = t[2].struct_size = HRT_TENSOR_MIN_SIZE - 8;
  e = hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0);
  REFUSED(e, HAL_VERSION_MISMATCH, "hrt_tensor[0].struct_size is", "too-small hrt_tensor");
  /* Elements of different sizes: refused. */
  t[0].struct_size = t[2].struct_size = sizeof(hrt_tensor);
  t[1].struct_size = sizeof(hrt_tensor) + 8;
  e = hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0);
  REFUSED(e, HAL_INVALID_ARGUMENT, "hrt_tensor[1].struct_size", "mixed sizes");
  t[1].struct_size = sizeof(hrt_tensor);
  /* A caller built before struct_size passes `name` where struct_size is: refused, not read. */
  t[0].struct_size = (size_t)(uintptr_t) "a";
  e = hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0);
  REFUSED(e, HAL_VERSION_MISMATCH, "without struct_size", "pre-struct_size caller");
  t[0].struct_size = sizeof(hrt_tensor);
  bad.struct_size = sizeof(void*);
  e = hrt_run_op(dev, s, "vector_add", t, 3, &bad, 1);
  REFUSED(e, HAL_VERSION_MISMATCH, "hrt_param[0].struct_size is 8", "too-small hrt_param");

  /* A tensor's range is checked without wrapping: an offset near 2^64 made offset + bytes small
   * and let the kernel read (a) or write (c) just before the buffer. */
  {
    const uint64_t wrapping = UINT64_MAX - 15; /* + 4000 bytes wraps to 3984 */
    for (int i = 0; i < 3; i += 2) {
      t[i].offset = wrapping;
      e = hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0);
      REFUSED(e, HAL_OUT_OF_RANGE, i ? "'c': f32 [1000] needs 4000 bytes at offset 18446744073709551600" : "'a': f32",
              "hrt_run_op, an offset that wraps");
      prepared = (hrt_op)&bad;
      e = hrt_op_create(dev, "vector_add", t, 3, NULL, 0, &prepared);
      EXPECT(prepared == NULL, "a refused hrt_op_create leaves *out NULL");
      REFUSED(e, HAL_OUT_OF_RANGE, "needs 4000 bytes at offset", "hrt_op_create, an offset that wraps");
      t[i].offset = 4; /* in the buffer, its end past it */
      e = hrt_run_op(dev, s, "vector_add", t, 3, NULL, 0);
      REFUSED(e, HAL_OUT_OF_RANGE, "needs 4000 bytes at offset 4, its buffer has 4000", "hrt_run_op, 4 bytes past the end");
      t[i].offset = 0;
    }
  }

  /* One name twice: refused, where the later tensor or param silently replaced the first. */
  {
    hrt_tensor twice[4] = {t[0], t[1], t[2], t[2]};
    twice[3].name = "a";
    e = hrt_run_op(dev, s, "vector_add", twice, 4, NULL, 0);
    REFUSED(e, HAL_INVALID_ARGUMENT, "tensor 'a' is given twice", "a tensor name twice");
    e = hrt_op_create(dev, "vector_add", twice, 4, NULL, 0, &prepared);
    REFUSED(e, HAL_INVALID_ARGUMENT, "tensor 'a' is given twice", "a tensor name twice, prepared");
    hrt_param p2[2] = {{sizeof(hrt_param), NULL, "alpha", "1"}, {sizeof(hrt_param), NULL, "alpha", "2"}};
    e = hrt_run_op(dev, s, "vector_add", t, 3, p2, 2);
    REFUSED(e, HAL_INVALID_ARGUMENT, "param 'alpha' is given twice", "a param name twice");
  }

  /* DLPack export: negative dimensions and shapes past 2^63 - 1 bytes (whose element count
   * wrapped) are refused, as is another device's buffer (where a second device exists). */
  {
    hrt_tensor x = {sizeof(hrt_tensor), NULL, "x", ba, 0, HRT_F32, 2, {2, 2}};
    DLManagedTensor* out = NULL;
    if (ok(hrt_dlpack_export(dev, &x, &out), "export [2, 2]")) out->deleter(out);
    const int64_t shapes[3][2] = {{-2, -2}, {(int64_t)1 << 32, (int64_t)1 << 32}, {(int64_t)1 << 62, 4}};
    const hal_status want[3] = {HAL_INVALID_ARGUMENT, HAL_OUT_OF_RANGE, HAL_OUT_OF_RANGE};
    for (int i = 0; i < 3; ++i) {
      x.shape[0] = shapes[i][0], x.shape[1] = shapes[i][1];
      out = NULL;
      e = hrt_dlpack_export(dev, &x, &out);
      REFUSED(e, want[i], i ? "holds more than 2^63 bytes" : "negative dimension (-2)", "export of a bad shape");
      EXPECT(out == NULL, "a refused export returns no tensor");
    }
    x.shape[0] = x.shape[1] = 2;
    x.offset = UINT64_MAX - 7;
    e = hrt_dlpack_export(dev, &x, &out);
    REFUSED(e, HAL_OUT_OF_RANGE, "at offset 18446744073709551608", "export at an offset that wraps");
    x.offset = 0;
    hal_device other = NULL;
    hal_error* opened = hal_device_open("amdgpu-sim:0", &other);
    if (!opened) {
      hal_buffer foreign = alloc(other, 16);
      x.buffer = foreign;
      e = hrt_dlpack_export(dev, &x, &out);
      REFUSED(e, HAL_INVALID_ARGUMENT, "the buffer is memory of amdgpu-sim:0, the export is for cpu:0",
              "export of another device's buffer");
      ok(hal_buffer_release(foreign), "release");
      ok(hal_device_release(other), "release");
    } else {
      printf("no amdgpu-sim:0 here: the export of another device's buffer is not checked\n");
      hal_error_free(opened);
    }
  }

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
    REFUSED(e, HAL_OUT_OF_RANGE, NULL, "a too-small x buffer must be refused");
    hrt_moe_layer_destroy(layer);
  }
  /* Implementations by name (hrt_moe_layer_impls, ABI 1.10): "host" runs; an unknown name, an
   * operator without implementations, one operator twice and a NULL array are refused. */
  {
    hrt_op_impl named[2] = {{"moe_grouped_gemm", "host"}, {"moe_gate", "host"}};
    hrt_moe_layer_impls impls = {HRT_MOE_LAYER_IMPLS_SIZE, NULL, HRT_EXTENSION_MOE_LAYER_IMPLS, 2, named};
    d.next = &impls;
    if (ok(hrt_moe_layer_create(dev, &d, &layer), "hrt_moe_layer_create with implementations by name")) {
      ok(hrt_moe_layer_forward(layer, s, bx, by, T), "forward, implementations by name");
      hrt_moe_layer_destroy(layer);
    }
    named[1].impl = "nope";
    e = hrt_moe_layer_create(dev, &d, &layer);
    REFUSED(e, HAL_NOT_FOUND, "nope", "impl 'nope'");
    /* A name for an operator this (bf16) layer does not run is checked all the same. */
    named[1].op = "moe_grouped_gemm_fp8";
    e = hrt_moe_layer_create(dev, &d, &layer);
    REFUSED(e, HAL_NOT_FOUND, "no implementation of that name", "impl 'nope' of an operator not run");
    named[1].op = "no_such_op", named[1].impl = "host";
    e = hrt_moe_layer_create(dev, &d, &layer);
    REFUSED(e, HAL_NOT_FOUND, "no_such_op", "op 'no_such_op'");
    named[1].op = "moe_grouped_gemm";
    e = hrt_moe_layer_create(dev, &d, &layer);
    REFUSED(e, HAL_INVALID_ARGUMENT, "twice", "one op twice");
    impls.entries = NULL;
    e = hrt_moe_layer_create(dev, &d, &layer);
    REFUSED(e, HAL_INVALID_ARGUMENT, "NULL array", "NULL entries");
    d.next = NULL;
  }
  d.struct_size = 8;
  e = hrt_moe_layer_create(dev, &d, &layer);
  REFUSED(e, HAL_VERSION_MISMATCH, NULL, "old desc");
  d.struct_size = sizeof d;
  d.topk = 0;
  e = hrt_moe_layer_create(dev, &d, &layer);
  REFUSED(e, HAL_INVALID_ARGUMENT, "topk 0", "topk 0");
  d.topk = K;
  /* Sizes and ranges computed from the desc are checked for overflow, each naming its field:
   * local experts [2^62, 2^63) of 16 (expert_begin + local_experts wrapped negative); hidden
   * 2^60 (w_router's [H, E] bytes wrapped to 0); inter 2^62 (2 * inter wrapped). */
  d.expert_begin = d.local_experts = (int64_t)1 << 62;
  e = hrt_moe_layer_create(dev, &d, &layer);
  REFUSED(e, HAL_INVALID_ARGUMENT, "local experts [4611686018427387904, past 2^63) do not lie within [0, 16)",
          "local experts past int64");
  d.expert_begin = 0, d.local_experts = -1;
  d.hidden = (int64_t)1 << 60;
  e = hrt_moe_layer_create(dev, &d, &layer);
  REFUSED(e, HAL_OUT_OF_RANGE, "w_router [hidden, experts]: [1152921504606846976, 16] of bf16 holds more than 2^63 bytes",
          "hidden 2^60");
  d.hidden = H, d.inter = (int64_t)1 << 62;
  e = hrt_moe_layer_create(dev, &d, &layer);
  REFUSED(e, HAL_OUT_OF_RANGE, "w_gate_up", "inter 2^62");
  d.inter = I;
  d.topk = E + 1;
  e = hrt_moe_layer_create(dev, &d, &layer);
  REFUSED(e, HAL_INVALID_ARGUMENT, "topk 17 is more than experts 16", "topk > experts");
  d.topk = K;
  d.w_down = bwr; /* too small for [E, I, H]: named */
  e = hrt_moe_layer_create(dev, &d, &layer);
  REFUSED(e, HAL_OUT_OF_RANGE, "hrt_moe_layer_create: w_down: bf16 [16, 32, 64] needs 65536 bytes", "small w_down");
  d.w_down = bwd;
  if (ok(hrt_moe_layer_create(dev, &d, &layer), "hrt_moe_layer_create again")) {
    /* tokens * H * 2 wrapped to 0 bytes for 2^59 tokens: x is refused, not read. */
    e = hrt_moe_layer_forward(layer, s, bx, by, (int64_t)1 << 59);
    REFUSED(e, HAL_OUT_OF_RANGE, "x: [576460752303423488, 64] of bf16 holds more than 2^63 bytes", "2^59 tokens");
    e = hrt_moe_layer_forward(layer, s, bx, by, INT64_MAX);
    REFUSED(e, HAL_OUT_OF_RANGE, "x: ", "2^63 - 1 tokens");
    hrt_moe_layer_destroy(layer);
  }

  /* attention_decode through hrt_run_op: one visible key (block 1, slot 0) returns its v row
     for both query heads (GQA 2:1), and Hq not a multiple of Hkv is refused by name. */
  enum { AD = 64, ABS = 16, ANB = 2 };
  static uint16_t aq[3 * AD], akv[ANB * ABS * AD], aout[3 * AD];
  float alse[3];
  int32_t atable[1] = {1}, alen[1] = {1};
  for (int i = 0; i < 3 * AD; ++i) aq[i] = bf16(RND());
  for (int i = 0; i < ANB * ABS * AD; ++i) akv[i] = bf16(RND());
  hal_buffer bq = alloc(dev, sizeof aq), bk = alloc(dev, sizeof akv), bt = alloc(dev, 4), bl = alloc(dev, 4),
             bo = alloc(dev, sizeof aout), bs = alloc(dev, sizeof alse);
  ok(hal_stream_write(s, bq, 0, aq, sizeof aq), "write q");
  ok(hal_stream_write(s, bk, 0, akv, sizeof akv), "write kv");
  ok(hal_stream_write(s, bt, 0, atable, 4), "write table");
  ok(hal_stream_write(s, bl, 0, alen, 4), "write lens");
  hrt_tensor at[7] = {{sizeof(hrt_tensor), NULL, "q", bq, 0, HRT_BF16, 4, {1, 1, 2, AD}},
                      {sizeof(hrt_tensor), NULL, "k_cache", bk, 0, HRT_BF16, 4, {ANB, ABS, 1, AD}},
                      {sizeof(hrt_tensor), NULL, "v_cache", bk, 0, HRT_BF16, 4, {ANB, ABS, 1, AD}},
                      {sizeof(hrt_tensor), NULL, "block_table", bt, 0, HRT_I32, 2, {1, 1}},
                      {sizeof(hrt_tensor), NULL, "seq_lens", bl, 0, HRT_I32, 1, {1}},
                      {sizeof(hrt_tensor), NULL, "out", bo, 0, HRT_BF16, 4, {1, 1, 2, AD}},
                      {sizeof(hrt_tensor), NULL, "lse", bs, 0, HRT_F32, 3, {1, 1, 2}}};
  ok(hrt_run_op(dev, s, "attention_decode", at, 7, NULL, 0), "attention_decode");
  ok(hal_stream_read(s, bo, 0, aout, sizeof aout), "read out");
  ok(hal_stream_synchronize(s), "sync");
  for (int i = 0; i < 2 * AD; ++i)
    EXPECT(aout[i] == akv[ABS * AD + i % AD], "attention out[%d] = %04x, expected %04x", i, aout[i], akv[ABS * AD + i % AD]);
  at[0].shape[2] = 3;  /* Hq = 3 query heads over Hkv = 2 (one block: the buffers hold it) */
  at[1].shape[0] = at[2].shape[0] = 1;
  at[1].shape[2] = at[2].shape[2] = 2;
  at[5].shape[2] = 3;
  at[6].shape[2] = 3;
  e = hrt_run_op(dev, s, "attention_decode", at, 7, NULL, 0);
  EXPECT(e && strstr(hal_error_message(e), "Hq = 3"), "Hq 3 over Hkv 2: %s", e ? hal_error_message(e) : "accepted");
  hal_error_free(e);

  hal_buffer all[] = {ba, bb, bc, bwr, bgu, bwd, bx, by, bq, bk, bt, bl, bo, bs};
  for (unsigned i = 0; i < sizeof all / sizeof all[0]; ++i) ok(hal_buffer_release(all[i]), "release");
  ok(hal_stream_release(s), "release");
  ok(hal_device_release(dev), "release");
  printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
  return failures ? 1 : 0;
}
