/* libhalcyon opened with dlopen(RTLD_LOCAL), as Python's ctypes and most plugin hosts do: its
 * hal_* symbols are then invisible to every later dlopen(), so a plugin that imported one (as
 * they all did with hal_error_new) was refused with "undefined symbol". Here the backends come
 * only from plugin files, through the normal discovery, and each one does real work.
 *
 * usage: test_rtld_local LIBHALCYON CPU_PLUGIN MODE [SIM_PLUGIN_FOLDER SIM_CODE_OBJECT]
 *   MODE desc: the CPU plugin is named in hal_init_desc.backend_path;
 *        env:  it is named only in HALCYON_BACKEND_PATH (set by the caller), which libhalcyon
 *              must ignore (it reads no environment): no cpu backend may appear.
 *   amdgpu-sim (when SIM_PLUGIN_FOLDER is given) must come from the plugin folder libhalcyon
 *   finds by itself; SIM_CODE_OBJECT is kernels/gcn's assembled halcyon_vector_add_f32 (gfx942).
 * Nothing links libhalcyon: every function is looked up with dlsym. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <halcyon/hal.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entry points used, looked up by name. */
#define HAL_FUNCTIONS(X)                                                                        \
  X(hal_init) X(hal_error_status) X(hal_error_message) X(hal_error_free) X(hal_status_name)     \
  X(hal_registry_count) X(hal_registry_record) X(hal_device_open) X(hal_device_release)         \
  X(hal_device_get_info) X(hal_buffer_create) X(hal_buffer_release) X(hal_stream_create)        \
  X(hal_stream_release) X(hal_stream_write) X(hal_stream_read) X(hal_stream_copy)               \
  X(hal_stream_synchronize) X(hal_module_load) X(hal_module_release) X(hal_module_get_kernel)   \
  X(hal_kernel_release) X(hal_stream_launch) X(hal_buffer_get_info)

#define DECLARE(f) static __typeof__(f)* p_##f;
HAL_FUNCTIONS(DECLARE)

/* c_check.h's helpers call the functions by name: here, through the pointers. */
#define hal_status_name p_hal_status_name
#define hal_error_status p_hal_error_status
#define hal_error_message p_hal_error_message
#define hal_error_free p_hal_error_free
#define hal_buffer_create p_hal_buffer_create
#include "../unit/c_check.h"

/* 1 with the record of backend `name` in *out, or 0. */
static int find_record(const char* name, hal_backend_record* out) {
  uint32_t n = 0;
  if (!ok(p_hal_registry_count(&n), "hal_registry_count")) return 0;
  for (uint32_t i = 0; i < n; ++i) {
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    if (ok(p_hal_registry_record(i, out), "hal_registry_record") && strcmp(out->name, name) == 0) return 1;
  }
  return 0;
}

static void print_records(void) {
  uint32_t n = 0;
  if (!ok(p_hal_registry_count(&n), "hal_registry_count")) return;
  for (uint32_t i = 0; i < n; ++i) {
    hal_backend_record r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    if (ok(p_hal_registry_record(i, &r), "hal_registry_record"))
      fprintf(stderr, "  record: %s from %s: state %u: %s\n", r.name[0] ? r.name : "?", r.source, r.state, r.reason);
  }
}

/* y[i] = 2 * x[i] + y[i], one block of up to 64 elements: a host kernel, defined here. */
typedef struct {
  uint64_t x, y; /* device addresses: host pointers on the CPU backend */
  uint32_t n;
} axpy_args;

static void axpy(const hal_host_launch_ctx* ctx, const void* blob) {
  axpy_args a;
  memcpy(&a, blob, sizeof a);
  const float* x = (const float*)(uintptr_t)a.x;
  float* y = (float*)(uintptr_t)a.y;
  for (uint32_t i = ctx->block_id[0] * 64; i < a.n && i < (ctx->block_id[0] + 1) * 64; ++i) y[i] = 2.0f * x[i] + y[i];
}

static void run_cpu(const char* cpu_plugin) {
  hal_backend_record r;
  if (!find_record("cpu", &r)) {
    EXPECT(0, "no record of the cpu backend");
    return;
  }
  EXPECT(r.state == HAL_BACKEND_AVAILABLE, "cpu backend not available: %s", r.reason);
  EXPECT(strcmp(r.source, cpu_plugin) == 0, "cpu backend came from %s, not from %s", r.source, cpu_plugin);

  hal_device dev = NULL;
  hal_stream s = NULL;
  if (!ok(p_hal_device_open("cpu", &dev), "open cpu") || !ok(p_hal_stream_create(dev, NULL, &s), "cpu stream")) return;
  enum { N = 200 };
  float x[N], y[N], out[N];
  for (int i = 0; i < N; ++i) x[i] = (float)i, y[i] = 1.0f - (float)i, out[i] = -1.0f;
  hal_buffer bx = alloc(dev, sizeof x), by = alloc(dev, sizeof y), bz = alloc(dev, sizeof y);
  ok(p_hal_stream_write(s, bx, 0, x, sizeof x), "write x");
  ok(p_hal_stream_write(s, bz, 0, y, sizeof y), "write y");
  ok(p_hal_stream_copy(s, by, 0, bz, 0, sizeof y), "copy y");

  static const hal_kernel_arg args[3] = {{0, 8, HAL_ARG_POINTER}, {8, 8, HAL_ARG_POINTER}, {16, 4, HAL_ARG_VALUE}};
  static const hal_host_kernel_entry entry = {"axpy", axpy, 3, args, sizeof(axpy_args)};
  static const hal_host_module_image image = {sizeof(hal_host_module_image), NULL, 1, &entry};
  hal_module_desc md;
  memset(&md, 0, sizeof md);
  md.struct_size = sizeof md;
  md.format = HAL_MODULE_HOST;
  md.target = "host";
  md.data = &image;
  md.size = sizeof image;
  md.name = "rtld_local_test";
  hal_module mod = NULL;
  hal_kernel k = NULL;
  if (ok(p_hal_module_load(dev, &md, &mod), "load host module") && ok(p_hal_module_get_kernel(mod, "axpy", &k), "get axpy")) {
    hal_buffer_info ix, iy;
    memset(&ix, 0, sizeof ix);
    memset(&iy, 0, sizeof iy);
    ix.struct_size = iy.struct_size = sizeof ix;
    ok(p_hal_buffer_get_info(bx, &ix), "info x");
    ok(p_hal_buffer_get_info(by, &iy), "info y");
    axpy_args a;
    memset(&a, 0, sizeof a);
    a.x = ix.device_address;
    a.y = iy.device_address;
    a.n = N;
    hal_launch_desc ld;
    memset(&ld, 0, sizeof ld);
    ld.struct_size = sizeof ld;
    ld.grid[0] = (N + 63) / 64, ld.grid[1] = ld.grid[2] = 1;
    ld.block[0] = ld.block[1] = ld.block[2] = 1;
    ld.args = &a;
    ld.args_size = sizeof a;
    ok(p_hal_stream_launch(s, k, &ld), "launch axpy");
  }
  ok(p_hal_stream_read(s, by, 0, out, sizeof out), "read y");
  ok(p_hal_stream_synchronize(s), "sync");
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += out[i] != 2.0f * x[i] + y[i];
  EXPECT(bad == 0, "cpu axpy: %d of %d elements wrong (y[1] = %g, expected %g)", bad, N, out[1], 2.0f * x[1] + y[1]);
  printf("cpu (plugin %s): allocate, write, copy, host-kernel launch, read: %s\n", cpu_plugin, bad ? "FAILED" : "ok");
  if (k) ok(p_hal_kernel_release(k), "release kernel");
  if (mod) ok(p_hal_module_release(mod), "release module");
  ok(p_hal_buffer_release(bx), "release x");
  ok(p_hal_buffer_release(by), "release y");
  ok(p_hal_buffer_release(bz), "release z");
  ok(p_hal_stream_release(s), "release stream");
  ok(p_hal_device_release(dev), "release device");
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = n > 0 ? malloc((size_t)n) : NULL;
  if (data && fread(data, 1, (size_t)n, f) != (size_t)n) {
    free(data);
    data = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return data;
}

static void run_sim(const char* folder, const char* code_object) {
  hal_backend_record r;
  if (!find_record("amdgpu-sim", &r)) {
    EXPECT(0, "no record of the amdgpu-sim backend");
    return;
  }
  EXPECT(r.state == HAL_BACKEND_AVAILABLE, "amdgpu-sim not available: %s", r.reason);
  EXPECT(strncmp(r.source, folder, strlen(folder)) == 0, "amdgpu-sim came from %s, not from the plugin folder %s",
         r.source, folder);

  hal_device dev = NULL;
  hal_stream s = NULL;
  if (!ok(p_hal_device_open("amdgpu-sim:gfx942", &dev), "open amdgpu-sim:gfx942") ||
      !ok(p_hal_stream_create(dev, NULL, &s), "sim stream"))
    return;
  enum { N = 300 };
  float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) a[i] = 0.25f * (float)i, b[i] = 7.0f - (float)i, c[i] = -1.0f;
  hal_buffer ba = alloc(dev, sizeof a), bb = alloc(dev, sizeof b), bc = alloc(dev, sizeof c), tmp = alloc(dev, sizeof b);
  ok(p_hal_stream_write(s, ba, 0, a, sizeof a), "write a");
  ok(p_hal_stream_write(s, tmp, 0, b, sizeof b), "write b");
  ok(p_hal_stream_copy(s, bb, 0, tmp, 0, sizeof b), "copy b");

  size_t size = 0;
  void* co = read_file(code_object, &size);
  EXPECT(co != NULL, "cannot read %s", code_object);
  hal_module mod = NULL;
  hal_kernel k = NULL;
  hal_module_desc md;
  memset(&md, 0, sizeof md);
  md.struct_size = sizeof md;
  md.format = HAL_MODULE_HSACO;
  md.target = "gfx942";
  md.data = co;
  md.size = size;
  md.name = "halcyon_vector_add_f32.gfx942.hsaco";
  if (co && ok(p_hal_module_load(dev, &md, &mod), "load code object") &&
      ok(p_hal_module_get_kernel(mod, "halcyon_vector_add_f32", &k), "get halcyon_vector_add_f32")) {
    hal_buffer_info info;
    unsigned char blob[28];
    hal_buffer bufs[3] = {ba, bb, bc};
    for (int i = 0; i < 3; ++i) {
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      ok(p_hal_buffer_get_info(bufs[i], &info), "buffer info");
      memcpy(blob + 8 * i, &info.device_address, 8);
    }
    uint32_t count = N;
    memcpy(blob + 24, &count, 4);
    hal_launch_desc ld;
    memset(&ld, 0, sizeof ld);
    ld.struct_size = sizeof ld;
    ld.grid[0] = (N + 255) / 256, ld.grid[1] = ld.grid[2] = 1;
    ld.block[0] = 256, ld.block[1] = ld.block[2] = 1;
    ld.args = blob;
    ld.args_size = sizeof blob;
    ok(p_hal_stream_launch(s, k, &ld), "launch vector_add");
  }
  ok(p_hal_stream_read(s, bc, 0, c, sizeof c), "read c");
  ok(p_hal_stream_synchronize(s), "sync");
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += c[i] != a[i] + b[i];
  EXPECT(bad == 0, "amdgpu-sim vector_add: %d of %d elements wrong (c[3] = %g, expected %g)", bad, N, c[3], a[3] + b[3]);
  printf("amdgpu-sim (plugin folder %s): allocate, write, copy, code-object launch, read: %s\n", folder,
         bad ? "FAILED" : "ok");
  free(co);
  if (k) ok(p_hal_kernel_release(k), "release kernel");
  if (mod) ok(p_hal_module_release(mod), "release module");
  hal_buffer all[4] = {ba, bb, bc, tmp};
  for (int i = 0; i < 4; ++i) ok(p_hal_buffer_release(all[i]), "release buffer");
  ok(p_hal_stream_release(s), "release stream");
  ok(p_hal_device_release(dev), "release device");
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 6) {
    fprintf(stderr, "usage: %s LIBHALCYON CPU_PLUGIN desc|env [SIM_PLUGIN_FOLDER SIM_CODE_OBJECT]\n", argv[0]);
    return 2;
  }
  const char *lib = argv[1], *cpu_plugin = argv[2], *mode = argv[3];
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 1;
  }
  /* RTLD_LOCAL indeed: the library's symbols are not in the global scope. */
  EXPECT(dlsym(RTLD_DEFAULT, "hal_init") == NULL, "hal_init is visible globally although %s was opened RTLD_LOCAL", lib);
#define LOOKUP(f)                                                  \
  {                                                                \
    void* sym = dlsym(h, #f);                                      \
    memcpy(&p_##f, &sym, sizeof sym);                              \
  }                                                                \
  if (!p_##f) {                                                    \
    fprintf(stderr, "%s has no symbol %s\n", lib, #f);             \
    return 1;                                                      \
  }
  HAL_FUNCTIONS(LOOKUP)

  hal_init_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.flags = HAL_INIT_NO_BUILTIN_BACKENDS; /* every backend from a plugin file */
  if (strcmp(mode, "desc") == 0) {
    d.flags |= HAL_INIT_NO_ENV_PATH;
    d.backend_path = cpu_plugin;
  } else if (strcmp(mode, "env") == 0) {
    const char* env = getenv("HALCYON_BACKEND_PATH");
    EXPECT(env && strcmp(env, cpu_plugin) == 0, "mode env needs HALCYON_BACKEND_PATH=%s", cpu_plugin);
    if (!ok(p_hal_init(&d), "hal_init")) return 1;
    uint32_t n = 0;
    if (ok(p_hal_registry_count(&n), "hal_registry_count"))
      for (uint32_t i = 0; i < n; ++i) {
        hal_backend_record r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        if (ok(p_hal_registry_record(i, &r), "hal_registry_record"))
          EXPECT(strcmp(r.name, "cpu") != 0, "backend cpu came from %s: libhalcyon read HALCYON_BACKEND_PATH", r.source);
      }
    if (failures) return 1;
    printf("HALCYON_BACKEND_PATH was ignored: libhalcyon reads no environment\n");
    return 0;
  } else {
    fprintf(stderr, "unknown mode '%s'\n", mode);
    return 2;
  }
  if (!ok(p_hal_init(&d), "hal_init")) return 1;

  run_cpu(cpu_plugin);
  if (argc == 6) run_sim(argv[4], argv[5]);
  if (failures) {
    fprintf(stderr, "%d failure(s); the discovery log:\n", failures);
    print_records();
    return 1;
  }
  printf("all backends loaded as plugins next to an RTLD_LOCAL libhalcyon work\n");
  return 0;
}
