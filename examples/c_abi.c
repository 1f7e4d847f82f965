/* examples/c_abi.c — halcyon from C, on the C ABI alone (hal.h + runtime.h):
 * open the best device, allocate, copy, run an operator (vector_add), check the result, run it
 * again as a prepared call (hrt_op_create / hrt_op_run) on new contents, and read the error that
 * a deliberate mistake returns. Exit status 0 when everything held.
 *
 *   cc -std=c11 c_abi.c $(pkg-config --cflags --libs halcyon) -o c_abi && ./c_abi [device-uri]
 */
#include <halcyon/hal.h>
#include <halcyon/runtime.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Prints and frees an error; returns 1 when there was one. */
static int failed(hal_error* e, const char* what) {
  if (e == NULL) return 0;
  fprintf(stderr, "c_abi: %s: %s: %s\n", what, hal_status_name(hal_error_status(e)), hal_error_message(e));
  hal_error_free(e);
  return 1;
}

/* The best device: the first real accelerator (not the CPU, not a simulator), else the CPU. */
static int best_device(char* uri, size_t capacity) {
  uint32_t count = 0;
  if (failed(hal_device_count(&count), "hal_device_count")) return 1;
  snprintf(uri, capacity, "cpu:0");
  for (uint32_t i = 0; i < count; ++i) {
    char u[64];
    hal_device d = NULL;
    bool simulator = true;
    if (hal_device_uri(i, u, sizeof u) != NULL || strncmp(u, "cpu", 3) == 0) continue;
    if (failed(hal_device_open(u, &d), u)) continue;
    hal_error_free(hal_device_has_capability(d, "simulator", &simulator));
    hal_error_free(hal_device_release(d));
    if (!simulator) {
      snprintf(uri, capacity, "%s", u);
      break;
    }
  }
  return 0;
}

static hrt_tensor tensor(const char* name, hal_buffer b, int64_t n) {
  hrt_tensor t;
  memset(&t, 0, sizeof t);
  t.struct_size = HRT_TENSOR_SIZE;
  t.name = name;
  t.buffer = b;
  t.dtype = HRT_F32;
  t.rank = 1;
  t.shape[0] = n;
  return t;
}

int main(int argc, char** argv) {
  enum { N = 1000 };
  static float a[N], b[N], c[N];
  char uri[64];
  hal_device dev = NULL;
  hal_stream stream = NULL;
  hal_buffer buf[3] = {NULL, NULL, NULL};
  int bad = 1;

  if (argc > 1) snprintf(uri, sizeof uri, "%s", argv[1]);
  else if (best_device(uri, sizeof uri)) return 1;
  if (failed(hal_device_open(uri, &dev), uri)) return 1;
  printf("device: %s\n", uri);
  if (failed(hal_stream_create(dev, NULL, &stream), "hal_stream_create")) goto out;

  hal_buffer_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = HAL_BUFFER_DESC_SIZE;
  desc.kind = HAL_MEMORY_DEVICE;
  desc.size = sizeof a;
  for (int i = 0; i < 3; ++i)
    if (failed(hal_buffer_create(dev, &desc, &buf[i]), "hal_buffer_create")) goto out;

  for (int i = 0; i < N; ++i) {
    a[i] = (float)i * 0.5f;
    b[i] = 1.0f - (float)i;
  }
  if (failed(hal_stream_write(stream, buf[0], 0, a, sizeof a), "write a") ||
      failed(hal_stream_write(stream, buf[1], 0, b, sizeof b), "write b"))
    goto out;

  hrt_tensor t[3] = {tensor("a", buf[0], N), tensor("b", buf[1], N), tensor("c", buf[2], N)};
  if (failed(hrt_run_op(dev, stream, "vector_add", t, 3, NULL, 0), "vector_add")) goto out;
  if (failed(hal_stream_read(stream, buf[2], 0, c, sizeof c), "read c") ||
      failed(hal_stream_synchronize(stream), "synchronize"))
    goto out;
  for (int i = 0; i < N; ++i) {
    if (fabsf(c[i] - (a[i] + b[i])) > 1e-6f * (1.0f + fabsf(a[i] + b[i]))) {
      fprintf(stderr, "c_abi: c[%d] = %g, expected %g\n", i, c[i], a[i] + b[i]);
      goto out;
    }
  }
  printf("vector_add: %d elements correct\n", N);

  /* The same call prepared once (checked, its implementation chosen) and run again on new
   * contents of the same buffers: what a server does for a step it repeats. */
  hrt_op step = NULL;
  if (failed(hrt_op_create(dev, "vector_add", t, 3, NULL, 0, &step), "hrt_op_create")) goto out;
  for (int i = 0; i < N; ++i) a[i] = 2.0f * (float)i;
  int wrong = failed(hal_stream_write(stream, buf[0], 0, a, sizeof a), "write a") ||
              failed(hrt_op_run(step, stream), "hrt_op_run") ||
              failed(hal_stream_read(stream, buf[2], 0, c, sizeof c), "read c") ||
              failed(hal_stream_synchronize(stream), "synchronize");
  for (int i = 0; i < N && !wrong; ++i)
    if (fabsf(c[i] - (a[i] + b[i])) > 1e-6f * (1.0f + fabsf(a[i] + b[i]))) {
      fprintf(stderr, "c_abi: prepared: c[%d] = %g, expected %g\n", i, c[i], a[i] + b[i]);
      wrong = 1;
    }
  printf("prepared vector_add (%s): %s\n", hrt_op_impl_name(step), wrong ? "wrong" : "correct");
  hrt_op_release(step);
  if (wrong) goto out;

  /* A deliberate mistake: read 16 bytes past the end of a buffer. It is an error value, not
   * a crash; its status and message say what was wrong. */
  hal_error* e = hal_stream_read(stream, buf[2], sizeof c - 16, c, 32);
  if (e == NULL || hal_error_status(e) != HAL_OUT_OF_RANGE) {
    fprintf(stderr, "c_abi: an out-of-range read was not refused with HAL_OUT_OF_RANGE\n");
    hal_error_free(e);
    goto out;
  }
  printf("deliberate mistake refused: %s: %s\n", hal_status_name(hal_error_status(e)), hal_error_message(e));
  hal_error_free(e);
  bad = 0;

out:
  for (int i = 0; i < 3; ++i)
    if (buf[i]) hal_error_free(hal_buffer_release(buf[i]));
  if (stream) hal_error_free(hal_stream_release(stream));
  hal_error_free(hal_device_release(dev));
  printf("%s\n", bad ? "c_abi: FAILED" : "c_abi: ok");
  return bad;
}
