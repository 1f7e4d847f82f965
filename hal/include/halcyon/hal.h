/*
 * halcyon/hal.h — the C ABI of halcyon.
 *
 * Two audiences build against this one header:
 *   - embedders (inference servers, tools) call the hal_* functions below;
 *   - vendors implement a backend by filling a hal_backend_api table (section "Backend
 *     plugin contract") and exporting one symbol, HAL_PLUGIN_ENTRY_SYMBOL.
 *
 * ABI rules (they are what lets a server and a plugin built years apart work together):
 *   - Every struct that crosses the boundary starts with `size_t struct_size` and a `next`
 *     extension pointer. Fields are only ever appended; a struct's meaning never changes.
 *   - Inputs: a reader accepts struct_size >= the struct's HAL_*_MIN_SIZE. Fields that lie past
 *     struct_size are taken as their documented default; bytes past what the reader knows
 *     (a newer caller) are ignored.
 *   - Outputs: the writer fills only the fields that fit inside the caller's struct_size, so
 *     an older caller with a smaller struct never has memory written past its end.
 *   - MAJOR changes break the ABI (a plugin of another MAJOR is refused, with both versions
 *     and the file named). MINOR additions are appended fields and appended table entries.
 *   - Enumerations are passed in structs as uint32_t, so that their size is fixed and a
 *     value this version does not know is an error, not undefined behaviour.
 *   - Errors are values: every fallible call returns hal_error* (NULL on success). No
 *     exception, abort or longjmp crosses this boundary.
 *   - Objects are opaque, reference-counted handles. A null, released or wrong-typed handle
 *     is reported as HAL_INVALID_HANDLE, never dereferenced.
 */
#ifndef HALCYON_HAL_H_
#define HALCYON_HAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HAL_ABI_MAJOR 1
#define HAL_ABI_MINOR 11 /* 1.6: runtime.h's prepared calls (hrt_op_create, hrt_op_run); 1.7: runtime.h's
                            hrt_call_options (hrt_run_op_with, hrt_op_create_with); 1.8: the device a
                            buffer or stream belongs to (hal_buffer_info / hal_stream_info.device_uri);
                            1.9: runtime.h's hrt_moe_fp8_weights.dequantize_elsewhere and
                            hrt_moe_layer_info.fp8_dequantized; 1.10: runtime.h's
                            hrt_moe_layer_impls (a layer's implementations by name); 1.11: a
                            stream's native handle (hal_stream_info.native,
                            hal_backend_api.stream_native) */

#if defined(_WIN32)
#define HAL_API __declspec(dllexport)
#else
#define HAL_API __attribute__((visibility("default")))
#endif

/* Size of a struct up to and including FIELD: the struct_size of the version whose last
 * field is FIELD. */
#define HAL_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))

/* ------------------------------------------------------------------------------------------
 * Errors
 * ---------------------------------------------------------------------------------------- */

typedef enum hal_status {
  HAL_OK = 0,
  HAL_INVALID_ARGUMENT = 1,  /* a value is out of its domain (the message names it) */
  HAL_INVALID_HANDLE = 2,    /* null, already released, or a handle of another type */
  HAL_OUT_OF_RANGE = 3,      /* offset/size past the end of a buffer, index past a count */
  HAL_OUT_OF_MEMORY = 4,
  HAL_NOT_FOUND = 5,         /* unknown device URI, kernel name, backend name */
  HAL_UNAVAILABLE = 6,       /* the backend cannot run on this machine (reason given) */
  HAL_UNSUPPORTED = 7,       /* the device or backend does not offer this feature */
  HAL_UNIMPLEMENTED = 8,     /* the backend has not implemented this entry point */
  HAL_VERSION_MISMATCH = 9,  /* plugin ABI or struct version not acceptable */
  HAL_ARCH_MISMATCH = 10,    /* module built for another architecture or format */
  HAL_DEVICE_ERROR = 11,     /* the vendor driver reported a failure */
  HAL_FAILED_PRECONDITION = 12, /* the call is valid but not in this state */
  HAL_INTERNAL = 13
} hal_status;

/* Opaque error value. NULL means success. The caller owns a non-NULL error and frees it. */
typedef struct hal_error_s hal_error;

HAL_API hal_status hal_error_status(const hal_error* error);   /* HAL_OK for NULL */
HAL_API const char* hal_error_message(const hal_error* error); /* "" for NULL; valid until freed */
HAL_API void hal_error_free(hal_error* error);                 /* NULL is a no-op */
HAL_API const char* hal_status_name(hal_status status);        /* "HAL_OUT_OF_RANGE", ... */
/* Makes an error; the message is copied. For embedders who forward errors through hal. */
HAL_API hal_error* hal_error_new(hal_status status, const char* message);

/* Extension chain element: every `next` pointer points at a struct that starts like this.
 * A reader ignores extension types it does not know. */
typedef struct hal_extension {
  size_t struct_size;
  const struct hal_extension* next;
  uint32_t type;
} hal_extension;

/* ------------------------------------------------------------------------------------------
 * Handles
 * ---------------------------------------------------------------------------------------- */

typedef struct hal_device_s* hal_device;
typedef struct hal_buffer_s* hal_buffer;
typedef struct hal_stream_s* hal_stream;
typedef struct hal_event_s* hal_event;
typedef struct hal_module_s* hal_module;
typedef struct hal_kernel_s* hal_kernel;
typedef struct hal_partition_s* hal_partition;
typedef struct hal_comm_s* hal_comm;  /* ABI 1.4: a communicator (section "Communicators") */

/* ------------------------------------------------------------------------------------------
 * Library, registry, logging
 * ---------------------------------------------------------------------------------------- */

HAL_API void hal_abi_version(uint32_t* major, uint32_t* minor);

typedef enum hal_log_level {
  HAL_LOG_DEBUG = 0,
  HAL_LOG_INFO = 1,
  HAL_LOG_WARNING = 2,
  HAL_LOG_ERROR = 3
} hal_log_level;

typedef void (*hal_log_fn)(void* user, hal_log_level level, const char* message);
/* Replaces the log sink (default: stderr for warnings and errors; hal_init_desc.log_level
 * moves that threshold). fn NULL restores the default. A callback gets every level. */
HAL_API void hal_set_log_callback(hal_log_fn fn, void* user);
/* Sends a message to the log sink (for layers above hal: runtime, tools). */
HAL_API void hal_log(hal_log_level level, const char* message);

enum {
  HAL_INIT_NO_BUILTIN_BACKENDS = 1u << 0, /* skip backends compiled into libhalcyon */
  HAL_INIT_NO_ENV_PATH = 1u << 1,         /* no effect since ABI 1.4: libhalcyon reads no
                                             environment variable (kept so old callers build) */
  HAL_INIT_NO_INSTALL_DIR = 1u << 2       /* skip the plugin folder (see hal_init) */
};

typedef struct hal_init_desc {
  size_t struct_size;
  const void* next;
  uint32_t flags;            /* HAL_INIT_* */
  const char* backend_path;  /* extra plugin files or folders, ':'-separated; searched first
                                after built-ins; NULL = none */
  /* ABI 1.4: options for the backends, "<backend>.<key>=<value>" entries separated by ';'
   * (e.g. "ze.loader=/opt/ze/libze_loader.so.1"). The core copies them and hands each backend
   * its own through hal_host_api.option when it creates it; a backend documents its keys and
   * reads every one of them while it is created. An entry without '.' or '=' makes hal_init
   * fail, and so does a key an available backend did not read then (a misspelling: the
   * error names it). NULL = none.
   * A later entry for the same key replaces an earlier one. Keys of this tree's backends:
   *   cuda.library=FILE        the driver library to dlopen (default libcuda.so.1)
   *   cuda.cache_dir=DIR|off   the persistent PTX JIT cache folder (default off: no cache;
   *                            the halcyon CLI passes $HALCYON_CACHE_DIR/ptx, else
   *                            $XDG_CACHE_HOME/halcyon/ptx, else ~/.cache/halcyon/ptx)
   *   ze.loader=FILE           the Level Zero loader (default libze_loader.so.1)
   *   hip.library=FILE         the HIP runtime to dlopen (default libamdhip64.so.6, .so.5, .so)
   *   hip.rccl=FILE            RCCL for the HIP communicator's all-to-all (default librccl.so.1)
   *   amdgpu-sim.max_instructions=N  per-launch instruction budget, 1..2^62 (default 2^34)
   *   amdgpu-sim.coverage=FILE append "<kernel> <mnemonic>" per executed instruction
   * A backend refuses a malformed value of its own keys (an empty file name, a number that is
   * not one) with HAL_INVALID_ARGUMENT naming the option, and hal_init returns that error. */
  const char* backend_options;
  /* ABI 1.4: the least severe message the default stderr sink prints: "debug", "info",
   * "warning" or "error" (anything else makes hal_init fail, naming it). NULL = "warning". */
  const char* log_level;
} hal_init_desc;
#define HAL_INIT_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_init_desc, flags)
#define HAL_INIT_DESC_SIZE HAL_SIZE_THROUGH(hal_init_desc, log_level)

/* Discovers backends: built-ins, then desc->backend_path, then the plugin folder:
 * <folder of libhalcyon's file>/halcyon/plugins (an install's lib/halcyon/plugins), or the
 * build tree's plugins/ folder when this libhalcyon is the one in its build tree. Optional:
 * the first call that needs the registry runs it with a NULL desc. Calling it again after
 * discovery is HAL_FAILED_PRECONDITION. libhalcyon and its backends read no environment
 * variable: every choice arrives through this desc (the halcyon CLI maps its documented
 * variables, HALCYON_BACKEND_PATH, HALCYON_LOG, ..., to these fields; tools/README.md).
 * A malformed desc (options, log_level) fails before discovery, so hal_init may be called
 * again; a backend refusing its option value (HAL_INVALID_ARGUMENT) fails it after discovery,
 * with that backend recorded unavailable and the others usable. An option naming a backend
 * that was not tried is logged at info level (a build may lack that backend). */
HAL_API hal_error* hal_init(const hal_init_desc* desc);

typedef enum hal_backend_state {
  HAL_BACKEND_AVAILABLE = 0,   /* loaded, devices may be opened */
  HAL_BACKEND_UNAVAILABLE = 1, /* loaded, but its probe said it cannot run here (reason) */
  HAL_BACKEND_REFUSED = 2      /* the file was not accepted as a plugin (reason) */
} hal_backend_state;

/* One line of the discovery log: every backend and every plugin file that was tried. */
typedef struct hal_backend_record {
  size_t struct_size;
  const void* next;
  char name[32];       /* URI scheme, e.g. "cpu"; "" when the file was refused before naming */
  char source[512];    /* "built-in" or the plugin file's path */
  uint32_t state;      /* hal_backend_state */
  char reason[512];    /* why it is unavailable or refused; what was accepted otherwise */
  uint32_t device_count;
  uint32_t abi_major;  /* the plugin's ABI version, 0 if unknown */
  uint32_t abi_minor;
} hal_backend_record;
#define HAL_BACKEND_RECORD_MIN_SIZE HAL_SIZE_THROUGH(hal_backend_record, device_count)
#define HAL_BACKEND_RECORD_SIZE HAL_SIZE_THROUGH(hal_backend_record, abi_minor)

HAL_API hal_error* hal_registry_count(uint32_t* count);
HAL_API hal_error* hal_registry_record(uint32_t index, hal_backend_record* out);
/* Loads one more plugin file after init; `out` (may be NULL) receives its record. A refused
 * file is an error (HAL_VERSION_MISMATCH, HAL_NOT_FOUND, ...) whose message says why. */
HAL_API hal_error* hal_registry_load_plugin(const char* path, hal_backend_record* out);

/* All devices of all available backends, in registry order: index -> URI ("cuda:0"). */
HAL_API hal_error* hal_device_count(uint32_t* count);
HAL_API hal_error* hal_device_uri(uint32_t index, char* uri, size_t uri_capacity);

/* ------------------------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------------------------- */

typedef struct hal_device_info {
  size_t struct_size;
  const void* next;
  char uri[64];                   /* "cuda:0" */
  char name[128];                 /* "NVIDIA H100 80GB HBM3" */
  char vendor[64];                /* "NVIDIA", "AMD", "Intel", "CPU", ... */
  char arch[32];                  /* "sm_90a", "gfx942", "x86_64" */
  uint32_t compute_units;         /* SMs, CUs, EUs, hardware threads */
  uint32_t simd_width;            /* warp / wavefront / sub-group width */
  uint64_t memory_bytes;
  uint32_t max_shared_per_block;  /* bytes of shared memory / LDS one block may use */
  uint32_t max_threads_per_block;
  uint32_t clock_khz;
  uint32_t reserved0;
  char capabilities[512];         /* space-separated tags: "module.ptx partition.enforced fp8" */
  uint64_t l2_cache_bytes;
  /* ABI 1.2: peak device-memory bandwidth in bytes per second, from the memory clock and bus
   * width the driver reports (what a kernel can approach, not a measurement); 0 = unknown. */
  uint64_t memory_bytes_per_s;
} hal_device_info;
#define HAL_DEVICE_INFO_MIN_SIZE HAL_SIZE_THROUGH(hal_device_info, next)
#define HAL_DEVICE_INFO_SIZE HAL_SIZE_THROUGH(hal_device_info, memory_bytes_per_s)

/* uri: "cpu", "cpu:0", "cuda:1", "hip:0", "ze:0", "amdgpu-sim:gfx942". A scheme without an
 * index means device 0. Opening a device that is open already (same backend and device,
 * however the URI spells it: "cpu" and "cpu:0") returns the same handle with one more
 * reference, as hal_device_retain would: each open needs its own hal_device_release, and the
 * device stays open while any reference or any object made from it lives. So every stream,
 * buffer and partition of one device shares one backend device (partitions stay disjoint,
 * buffers outlive the work queued on them); info.uri is the URI of the first open. */
HAL_API hal_error* hal_device_open(const char* uri, hal_device* out);
HAL_API hal_error* hal_device_retain(hal_device device);
HAL_API hal_error* hal_device_release(hal_device device);
HAL_API hal_error* hal_device_get_info(hal_device device, hal_device_info* out);
HAL_API hal_error* hal_device_has_capability(hal_device device, const char* tag, bool* out);
/* ABI 1.3. Whether a module of `format` (a hal_module_format) built for `target` ("sm_80",
 * "sm_90a", "gfx942", "host") runs on this device, asked before any load: *yes is set, and
 * when it is false and `reason` is not NULL, why not (NUL-terminated, cut to
 * reason_capacity). The one owner of that rule: registries and launchers ask it rather than
 * compare architecture names. A device that loads no modules of `format` (no capability
 * "module.<format>") says no. Otherwise the backend's rule (CUDA: PTX runs on its architecture
 * and later ones, 'a' targets only on that exact architecture, 'f' targets within their
 * family; a cubin within its major version); a backend without the entry (a plugin of ABI
 * 1.2 or older): yes exactly when `target` equals the device's arch. */
HAL_API hal_error* hal_device_can_run(hal_device device, uint32_t format, const char* target, bool* yes,
                                      char* reason, size_t reason_capacity);

/* ------------------------------------------------------------------------------------------
 * Compute partitions: a device split into disjoint sets of compute units
 * ---------------------------------------------------------------------------------------- */

typedef enum hal_partition_mechanism {
  HAL_PARTITION_WHOLE_DEVICE = 0, /* no split */
  HAL_PARTITION_GREEN_CONTEXT = 1,
  HAL_PARTITION_CU_MASK = 2,
  HAL_PARTITION_SUB_DEVICE = 3,
  HAL_PARTITION_THREAD_SET = 4,
  HAL_PARTITION_SOFT_CAP = 5      /* not enforced: kernels are asked to cap their grid */
} hal_partition_mechanism;

enum {
  /* Finer granularity where the hardware allows it at some cost (CUDA: steps of 2 SMs with
   * IGNORE_SM_COSCHEDULING instead of 8). */
  HAL_PARTITION_FINE_GRAINED = 1u << 0
};

typedef struct hal_partition_desc {
  size_t struct_size;
  const void* next;
  uint32_t units;   /* compute units wanted in the partition */
  uint32_t flags;   /* HAL_PARTITION_* flags */
} hal_partition_desc;
#define HAL_PARTITION_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_partition_desc, flags)
#define HAL_PARTITION_DESC_SIZE HAL_SIZE_THROUGH(hal_partition_desc, flags)

typedef struct hal_partition_info {
  size_t struct_size;
  const void* next;
  uint32_t units_requested;
  uint32_t units_granted;
  uint32_t mechanism;       /* hal_partition_mechanism */
  uint32_t enforced;        /* 1: work cannot run outside these units */
  uint32_t granularity;     /* units come in steps of this many */
  uint32_t first_unit;      /* lowest unit id when known, else UINT32_MAX */
  /* ABI 1.3 */
  char name[32];            /* the request's name (hal_device_split_n), else "" */
} hal_partition_info;
#define HAL_PARTITION_INFO_MIN_SIZE HAL_SIZE_THROUGH(hal_partition_info, next)
#define HAL_PARTITION_INFO_SIZE HAL_SIZE_THROUGH(hal_partition_info, name)

/* Partitions reserve their units: a split draws only on units that no live partition holds,
 * so partitions of one device are always disjoint, on every backend; releasing a partition
 * returns its units (CUDA: once every partition of the device is released, since the driver
 * cannot merge green contexts' SM sets back). A backend without an enforcing mechanism still
 * splits: its partitions are soft (mechanism HAL_PARTITION_SOFT_CAP, enforced 0), and kernels
 * launched on their streams are asked to size their grids to the partition's units
 * (hal_stream_get_info). */

/* Splits the device: *part gets at least desc->units units (rounded up to the granularity),
 * *remainder (optional, may be NULL) every unit still free after it. All are disjoint. */
HAL_API hal_error* hal_device_split(hal_device device, const hal_partition_desc* desc,
                                    hal_partition* part, hal_partition* remainder);
HAL_API hal_error* hal_partition_get_info(hal_partition partition, hal_partition_info* out);
HAL_API hal_error* hal_partition_retain(hal_partition partition);
HAL_API hal_error* hal_partition_release(hal_partition partition);

/* ---- ABI 1.3: what a split can grant, several named partitions in one call ---------------- */

/* What hal_device_split would grant on this device, asked before splitting. */
typedef struct hal_partition_caps {
  size_t struct_size;
  const void* next;
  uint32_t units;            /* compute units of the device */
  uint32_t units_free;       /* units no live partition holds */
  uint32_t min_units;        /* smallest partition a split grants (with the flags asked about) */
  uint32_t step_units;       /* partitions are min_units + k * step_units */
  uint32_t mechanism;        /* hal_partition_mechanism of a split */
  uint32_t enforced;         /* 1: work cannot leave its partition's units; 0: a soft cap */
  char mechanism_name[32];   /* "green_context", "cu_mask", "thread_set", "soft_cap", ... */
} hal_partition_caps;
#define HAL_PARTITION_CAPS_MIN_SIZE HAL_SIZE_THROUGH(hal_partition_caps, mechanism_name)
#define HAL_PARTITION_CAPS_SIZE HAL_SIZE_THROUGH(hal_partition_caps, mechanism_name)

/* flags: HAL_PARTITION_* (the granularity differs with HAL_PARTITION_FINE_GRAINED). */
HAL_API hal_error* hal_device_partition_caps(hal_device device, uint32_t flags,
                                             hal_partition_caps* out);

/* One partition of a hal_device_split_n call. */
typedef struct hal_partition_request {
  size_t struct_size;
  const void* next;
  const char* name;  /* reported in hal_partition_info.name (at most 31 bytes); NULL: "" */
  uint32_t units;    /* units wanted; 0: every unit the other requests leave (one request at most) */
  uint32_t flags;    /* HAL_PARTITION_* ; all requests of a call must agree */
} hal_partition_request;
#define HAL_PARTITION_REQUEST_MIN_SIZE HAL_SIZE_THROUGH(hal_partition_request, flags)
#define HAL_PARTITION_REQUEST_SIZE HAL_SIZE_THROUGH(hal_partition_request, flags)

/* Splits the device into `count` partitions at once ("comm" = 20, "compute" = the rest):
 * out[i] answers requests[i] (an array of pointers, so that each request may be a struct of
 * its caller's version). Either every partition is made or none (the error says which
 * request could not be granted and why). */
HAL_API hal_error* hal_device_split_n(hal_device device,
                                      const hal_partition_request* const* requests,
                                      uint32_t count, hal_partition* out);

/* ------------------------------------------------------------------------------------------
 * Buffers
 * ---------------------------------------------------------------------------------------- */

typedef enum hal_memory_kind {
  HAL_MEMORY_DEVICE = 0,      /* device memory; kernels take its device address */
  HAL_MEMORY_HOST_PINNED = 1  /* page-locked host memory; host_pointer is valid */
} hal_memory_kind;

typedef struct hal_buffer_desc {
  size_t struct_size;
  const void* next;
  uint32_t kind;       /* hal_memory_kind */
  uint32_t flags;      /* reserved, 0 */
  uint64_t size;       /* bytes; 0 is allowed (no storage, address 0) */
  uint64_t alignment;  /* optional; 0 = backend default (>= 256 on GPUs) */
} hal_buffer_desc;
#define HAL_BUFFER_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_buffer_desc, size)
#define HAL_BUFFER_DESC_SIZE HAL_SIZE_THROUGH(hal_buffer_desc, alignment)

typedef struct hal_buffer_info {
  size_t struct_size;
  const void* next;
  uint32_t kind;            /* hal_memory_kind */
  uint32_t reserved0;
  uint64_t size;
  uint64_t device_address;  /* what a kernel argument holds for this buffer */
  void* host_pointer;       /* HOST_PINNED (and CPU device memory): host-visible; else NULL */
  /* ABI 1.8: the device the buffer was created on or imported to, as its hal_device_info.uri
   * ("cuda:0"); a URI, not a handle, because the buffer may outlive every handle of its device.
   * Callers that take buffers from users (the runtime's operators) compare it with the device
   * they run on instead of letting a kernel read another device's address. */
  char device_uri[64];
} hal_buffer_info;
#define HAL_BUFFER_INFO_MIN_SIZE HAL_SIZE_THROUGH(hal_buffer_info, next)
#define HAL_BUFFER_INFO_SIZE HAL_SIZE_THROUGH(hal_buffer_info, device_uri)

HAL_API hal_error* hal_buffer_create(hal_device device, const hal_buffer_desc* desc,
                                     hal_buffer* out);
HAL_API hal_error* hal_buffer_get_info(hal_buffer buffer, hal_buffer_info* out);
/* Releasing the last reference never frees memory under queued work of the device that may
 * use it: the backend either waits for that work or orders the free after it (CUDA with a
 * memory pool: no host wait). Either way the release is not a synchronization point. */
HAL_API hal_error* hal_buffer_retain(hal_buffer buffer);
HAL_API hal_error* hal_buffer_release(hal_buffer buffer);

/* ABI 1.4: memory allocated by someone else (a PyTorch tensor's storage, through DLPack) as a
 * buffer, without a copy. The buffer refers to [device_address, device_address + size) of
 * `device`; the memory is not freed by halcyon: when the buffer's last reference goes (after
 * the device's work queued so far, as hal_buffer_release says), `release(release_user)` is
 * called once, and the owner may free it then. On an error return `release` is not called
 * (the caller still owns the memory). The backend checks that the address is memory of this
 * device where its driver can tell (CUDA: cuPointerGetAttributes; HIP: hipPointerGetAttributes;
 * Level Zero: zeMemGetAllocProperties and zeMemGetAddressRange in the backend's context, which is
 * the driver's default context where it has one, so memory of SYCL's full-platform contexts and
 * PyTorch's XPU tensors qualify); a backend that cannot import returns HAL_UNSUPPORTED. */
typedef void (*hal_release_fn)(void* user);
/* ABI 1.5, hal_buffer_import_desc.flags. */
typedef enum hal_buffer_import_flags {
  /* The owner orders its own reuse of the memory after the device work that uses it, as
   * PyTorch's caching allocator does for work queued on the tensor's stream (the stream a
   * caller then queues halcyon's work on, through hal_stream_import): the buffer's last
   * release need not wait for queued work before calling `release` (CUDA calls it at once;
   * the CPU backend, whose streams are host threads, still waits). Without it the release
   * waits (CUDA: for every stream of the device) before calling `release`. */
  HAL_BUFFER_IMPORT_OWNER_ORDERED = 1u << 0
} hal_buffer_import_flags;
typedef struct hal_buffer_import_desc {
  size_t struct_size;      /* HAL_BUFFER_IMPORT_DESC_SIZE */
  const void* next;        /* extension chain; NULL */
  uint32_t kind;           /* hal_memory_kind: HAL_MEMORY_DEVICE only, for now */
  uint32_t flags;          /* hal_buffer_import_flags (ABI 1.5); other bits reserved, 0 */
  uint64_t device_address; /* the memory's address on the device (the CPU's: a host pointer);
                              0 only when size is 0 */
  uint64_t size;           /* bytes */
  hal_release_fn release;  /* may be NULL: the caller keeps the memory alive otherwise */
  void* release_user;
} hal_buffer_import_desc;
#define HAL_BUFFER_IMPORT_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_buffer_import_desc, release_user)
#define HAL_BUFFER_IMPORT_DESC_SIZE HAL_SIZE_THROUGH(hal_buffer_import_desc, release_user)
HAL_API hal_error* hal_buffer_import(hal_device device, const hal_buffer_import_desc* desc,
                                     hal_buffer* out);

/* ------------------------------------------------------------------------------------------
 * Tensor maps (ABI 1.1): host-encoded descriptors of a tiled tensor in a buffer, which a
 * kernel passes to the device's tensor copy engine (NVIDIA: the tensor memory accelerator,
 * `cp.async.bulk.tensor`). Optional: a device without one reports HAL_UNSUPPORTED; devices
 * that have one advertise the capability tag "tensor_map".
 * ---------------------------------------------------------------------------------------- */

/* Size of an encoded tensor map. Opaque; kernels take it by value, as a 64-byte-aligned
 * parameter (PTX: `.param .align 64 .b8 tmap[128]`, CUDA C++: `const __grid_constant__`). */
#define HAL_TENSOR_MAP_BYTES 128

typedef enum hal_tensor_map_dtype {
  HAL_TENSOR_MAP_U8 = 1,
  HAL_TENSOR_MAP_U16,
  HAL_TENSOR_MAP_U32,
  HAL_TENSOR_MAP_I32,
  HAL_TENSOR_MAP_U64,
  HAL_TENSOR_MAP_I64,
  HAL_TENSOR_MAP_F16,
  HAL_TENSOR_MAP_BF16,
  HAL_TENSOR_MAP_F32,
  HAL_TENSOR_MAP_F64
} hal_tensor_map_dtype;

/* The shared-memory layout a copy writes, against bank conflicts: the box is laid out densely,
 * innermost dimension first, then 16-byte chunk c of each 128-byte line L of the destination
 * moves to chunk c ^ (L % (span / 16)), span = 32, 64 or 128 (so with 128B and 128-byte box
 * rows, chunk c of row r lands at chunk c ^ (r % 8)). The box's inner extent (box[0] times the
 * element size) must not exceed the span; align the destination to 1024 bytes. */
typedef enum hal_tensor_map_swizzle {
  HAL_TENSOR_MAP_SWIZZLE_NONE = 0,
  HAL_TENSOR_MAP_SWIZZLE_32B,
  HAL_TENSOR_MAP_SWIZZLE_64B,
  HAL_TENSOR_MAP_SWIZZLE_128B
} hal_tensor_map_swizzle;

/* How much the L2 cache fetches from memory per request the copy makes. */
typedef enum hal_tensor_map_l2 {
  HAL_TENSOR_MAP_L2_NONE = 0,
  HAL_TENSOR_MAP_L2_64B,
  HAL_TENSOR_MAP_L2_128B,
  HAL_TENSOR_MAP_L2_256B
} hal_tensor_map_l2;

typedef struct hal_tensor_map_desc {
  size_t struct_size;
  const void* next;
  hal_buffer buffer;      /* the tensor's first element is at buffer + offset */
  uint64_t offset;        /* bytes */
  uint32_t dtype;         /* hal_tensor_map_dtype */
  uint32_t rank;          /* 1..5 */
  uint64_t dims[5];       /* elements per dimension, innermost first; each >= 1 */
  uint64_t strides[5];    /* bytes between consecutive indices of dimension i; strides[0] must
                             be the element size (the innermost dimension is dense) */
  uint32_t box[5];        /* elements one copy moves in each dimension; each >= 1 (a box may
                             be larger than the tensor: elements outside it read as oob_nan says) */
  uint32_t swizzle;       /* hal_tensor_map_swizzle */
  uint32_t l2_promotion;  /* hal_tensor_map_l2 */
  uint32_t oob_nan;       /* 0: out-of-bounds elements read as zero; 1: as NaN (float dtypes only) */
} hal_tensor_map_desc;
#define HAL_TENSOR_MAP_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_tensor_map_desc, oob_nan)
#define HAL_TENSOR_MAP_DESC_SIZE HAL_SIZE_THROUGH(hal_tensor_map_desc, oob_nan)

/* Encodes a tiled tensor map of desc->buffer (a buffer of `device`) into out[0..127]
 * (out_size >= HAL_TENSOR_MAP_BYTES). Entries past desc->rank are ignored. The core checks the
 * handles, the ranges and values above, and that the whole tensor lies inside the buffer
 * (offset + sum of (dims[i] - 1) * strides[i] + element size <= buffer size); the backend adds
 * its hardware's limits (CUDA: 16-byte-aligned address and strides, box <= 256, ...), each
 * error naming the field and its value. Copy coordinates are the kernel's: on CUDA the innermost
 * one times the element size must be a multiple of 16 bytes (else an illegal instruction).
 * `out` is written only on success. The map holds the buffer's address, not a reference: it is
 * valid while the buffer lives. */
HAL_API hal_error* hal_device_encode_tensor_map(hal_device device, const hal_tensor_map_desc* desc,
                                                void* out, size_t out_size);

/* ------------------------------------------------------------------------------------------
 * Streams (in-order queues) and events
 * ---------------------------------------------------------------------------------------- */

typedef struct hal_stream_desc {
  size_t struct_size;
  const void* next;
  hal_partition partition;  /* NULL: the whole device */
  uint32_t flags;           /* reserved, 0 */
} hal_stream_desc;
#define HAL_STREAM_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_stream_desc, next)
#define HAL_STREAM_DESC_SIZE HAL_SIZE_THROUGH(hal_stream_desc, flags)

/* desc may be NULL: a stream on the whole device. */
HAL_API hal_error* hal_stream_create(hal_device device, const hal_stream_desc* desc,
                                     hal_stream* out);
HAL_API hal_error* hal_stream_retain(hal_stream stream);
HAL_API hal_error* hal_stream_release(hal_stream stream);  /* waits for its work (an imported stream: see hal_stream_import) */
HAL_API hal_error* hal_stream_synchronize(hal_stream stream);

/* ABI 1.3: where a stream's work runs. Kernels that size a persistent grid from the compute
 * units use `units`: a partition's units are the only ones its work may use, enforced or not. */
typedef struct hal_stream_info {
  size_t struct_size;
  const void* next;
  hal_partition partition;  /* borrowed (not retained); NULL: the whole device */
  uint32_t units;           /* compute units its work may use: the partition's, else the device's */
  uint32_t enforced;        /* 1: an enforced partition; 0: a soft cap or the whole device */
  uint32_t mechanism;       /* hal_partition_mechanism (HAL_PARTITION_WHOLE_DEVICE: none) */
  uint32_t reserved0;
  char device_uri[64];      /* ABI 1.8: the stream's device, as its hal_device_info.uri */
  uint64_t native;          /* ABI 1.11, when has_native: the backend's own handle of the stream
                               (CUDA: its CUstream; HIP: its hipStream_t; Level Zero: its immediate
                               ze_command_list_handle_t), valid while the stream lives: for the
                               caller's own work in order with the stream's (torch.cuda.
                               ExternalStream), or hal_stream_import */
  uint32_t has_native;      /* ABI 1.11: 1 when `native` is set; 0 where the backend has no native
                               stream (the CPU's are host queues) or predates 1.11 */
  uint32_t reserved1;
} hal_stream_info;
#define HAL_STREAM_INFO_MIN_SIZE HAL_SIZE_THROUGH(hal_stream_info, mechanism)
#define HAL_STREAM_INFO_SIZE HAL_SIZE_THROUGH(hal_stream_info, reserved1)
HAL_API hal_error* hal_stream_get_info(hal_stream stream, hal_stream_info* out);

/* ABI 1.5: a stream someone else owns (PyTorch's current CUDA stream, a serving framework's
 * CUstream) as a hal stream: work queued through it runs in order with the owner's work on
 * that stream, with no host wait between the two. `native` is the stream in the backend's
 * own type (CUDA: a CUstream of the device's primary context; 0 is the context's legacy
 * default stream, PyTorch's default stream, and 2 the per-thread one; HIP: a hipStream_t of
 * the device, 0 its null stream; Level Zero: an immediate ze_command_list_handle_t of the
 * device or a sub-device, in the backend's context); the backend checks it where its driver
 * can (CUDA: cuStreamGetCtx; HIP: hipStreamGetDevice, ROCm 6; Level Zero: the list queries of
 * 1.9). The hal stream does not own it: its last release does not destroy it and does not wait
 * for its work (unlike hal_stream_release of a created stream; CUDA without a memory pool
 * waits, as it cannot otherwise order later frees after that work), and the owner keeps it
 * alive until then and does not queue to it from another thread meanwhile. A backend that
 * cannot import streams returns HAL_UNSUPPORTED (the CPU's streams are host queues with no
 * native handle). A hal stream's own native handle is hal_stream_info.native (ABI 1.11). */
typedef struct hal_stream_import_desc {
  size_t struct_size;  /* HAL_STREAM_IMPORT_DESC_SIZE */
  const void* next;    /* extension chain; NULL */
  uint64_t native;     /* the backend's stream handle, as an integer */
  uint32_t flags;      /* reserved, 0 */
  uint32_t reserved0;  /* 0 */
} hal_stream_import_desc;
#define HAL_STREAM_IMPORT_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_stream_import_desc, flags)
#define HAL_STREAM_IMPORT_DESC_SIZE HAL_SIZE_THROUGH(hal_stream_import_desc, reserved0)
HAL_API hal_error* hal_stream_import(hal_device device, const hal_stream_import_desc* desc,
                                     hal_stream* out);

/* Stream-ordered transfers. Host memory passed to write/read must stay valid until the
 * stream has reached the operation (synchronize, or an event recorded after it). Every
 * offset/size pair is checked against the buffer's size before anything is queued.
 * C++: halcyon::Stream::write/read wait for the stream (the host memory may go when they
 * return); write_async/read_async are these calls as they are, for pinned memory or memory
 * whose lifetime the caller manages. */
HAL_API hal_error* hal_stream_write(hal_stream stream, hal_buffer dst, uint64_t dst_offset,
                                    const void* src, uint64_t size);
HAL_API hal_error* hal_stream_read(hal_stream stream, hal_buffer src, uint64_t src_offset,
                                   void* dst, uint64_t size);
HAL_API hal_error* hal_stream_copy(hal_stream stream, hal_buffer dst, uint64_t dst_offset,
                                   hal_buffer src, uint64_t src_offset, uint64_t size);
/* Repeats a 1-, 2- or 4-byte pattern; offset and size must be multiples of pattern_size. */
HAL_API hal_error* hal_stream_fill(hal_stream stream, hal_buffer dst, uint64_t offset,
                                   uint64_t size, const void* pattern, uint32_t pattern_size);

typedef struct hal_event_desc {
  size_t struct_size;
  const void* next;
  uint32_t flags;  /* HAL_EVENT_TIMING: the event can be used in hal_event_elapsed_ms */
} hal_event_desc;
#define HAL_EVENT_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_event_desc, flags)
#define HAL_EVENT_DESC_SIZE HAL_SIZE_THROUGH(hal_event_desc, flags)
enum { HAL_EVENT_TIMING = 1u << 0 };

/* desc may be NULL: a timing event. */
HAL_API hal_error* hal_event_create(hal_device device, const hal_event_desc* desc,
                                    hal_event* out);
HAL_API hal_error* hal_event_retain(hal_event event);
/* An event may be released while a record of it or a wait on it is still queued: the queued
 * command still runs (backends keep what it needs alive until then; CUDA's cuEventDestroy and
 * HIP's hipEventDestroy defer the release themselves, the CPU backend counts references). */
HAL_API hal_error* hal_event_release(hal_event event);
HAL_API hal_error* hal_event_record(hal_event event, hal_stream stream);
/* Later work on `stream` waits until `event`'s recorded point completes. Waiting on an
 * event that was never recorded is a no-op, as in CUDA. */
HAL_API hal_error* hal_stream_wait_event(hal_stream stream, hal_event event);
HAL_API hal_error* hal_event_query(hal_event event, bool* complete);
HAL_API hal_error* hal_event_synchronize(hal_event event);
/* Milliseconds between two recorded, completed timing events of one device. */
HAL_API hal_error* hal_event_elapsed_ms(hal_event start, hal_event end, float* ms);

/* ------------------------------------------------------------------------------------------
 * Communicators (ABI 1.4): ranks of one job, each a process with one device, that exchange
 * data (docs/expert_parallel.md)
 *
 * Rules:
 *   - A communicator has `size` ranks numbered 0..size-1; each rank is one process (or one
 *     thread) holding one device. All ranks name the same `rendezvous` string: that is how they
 *     find each other. The name travels through the API, never through the environment.
 *   - hal_comm_create is collective: it returns once every rank has joined, or fails after
 *     timeout_ms naming how many ranks arrived. A second process taking a rank already taken
 *     is an error, as is a size that disagrees with the first rank's.
 *   - Collective calls (create, barrier, all_gather, all_to_all) must be made by every rank
 *     in the same order; a rank that stops calling makes the others time out (an error, not
 *     a hang forever).
 *   - Peer memory: hal_comm_buffer_create makes a buffer that peers can map.
 *     hal_comm_buffer_export writes a handle (plain bytes, copyable to another process, e.g.
 *     through hal_comm_all_gather); hal_comm_buffer_import on a peer turns it into a hal_buffer
 *     whose device_address the peer's kernels read and write directly (CPU backend: POSIX
 *     shared memory; CUDA: cuMemCreate memory exported as a POSIX file descriptor). The
 *     imported mapping stays valid while the importer holds it, even after the owner releases
 *     its buffer; importing a handle whose owner has already released the buffer fails.
 *   - hal_comm_all_to_all is stream-ordered: it starts after the work queued before it on
 *     `stream`, and later work waits for it. A backend without device-side communication (the
 *     CPU) may block the calling thread until the exchange is done.
 * ---------------------------------------------------------------------------------------- */

enum { HAL_COMM_RENDEZVOUS_MAX = 200 }; /* bytes of a rendezvous name, without the NUL */

typedef struct hal_comm_desc {
  size_t struct_size;
  const void* next;
  uint32_t rank;           /* this process's rank, < size */
  uint32_t size;           /* ranks in the communicator, >= 1 */
  const char* rendezvous;  /* the name every rank of this communicator passes: [A-Za-z0-9._-],
                              1..HAL_COMM_RENDEZVOUS_MAX characters; unique per live job */
  uint32_t timeout_ms;     /* how long a collective waits for the other ranks; 0 = 30000 */
  uint32_t flags;          /* reserved, 0 */
} hal_comm_desc;
#define HAL_COMM_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_comm_desc, rendezvous)
#define HAL_COMM_DESC_SIZE HAL_SIZE_THROUGH(hal_comm_desc, flags)

typedef struct hal_comm_info {
  size_t struct_size;
  const void* next;
  uint32_t rank;
  uint32_t size;
  char transport[32];          /* "shm" (CPU), "nccl", "rccl", ... */
  uint64_t max_all_gather_bytes; /* largest `bytes` of one hal_comm_all_gather */
  uint32_t max_ranks;          /* largest size this backend's communicator takes */
  uint32_t reserved0;
} hal_comm_info;
#define HAL_COMM_INFO_MIN_SIZE HAL_SIZE_THROUGH(hal_comm_info, transport)
#define HAL_COMM_INFO_SIZE HAL_SIZE_THROUGH(hal_comm_info, reserved0)

/* An exported buffer: opaque bytes that another rank of the same communicator imports. */
enum { HAL_COMM_HANDLE_BYTES = 256 };
typedef struct hal_comm_handle {
  uint8_t bytes[HAL_COMM_HANDLE_BYTES];
} hal_comm_handle;

/* Collective. The device's backend must offer communicators (capability "comm"; otherwise
 * HAL_UNSUPPORTED). */
HAL_API hal_error* hal_comm_create(hal_device device, const hal_comm_desc* desc, hal_comm* out);
HAL_API hal_error* hal_comm_retain(hal_comm comm);
/* Not collective; the last rank to release cleans up what the rendezvous created. */
HAL_API hal_error* hal_comm_release(hal_comm comm);
HAL_API hal_error* hal_comm_get_info(hal_comm comm, hal_comm_info* out);
/* Collective: returns once every rank has called it. */
HAL_API hal_error* hal_comm_barrier(hal_comm comm);
/* Collective, host memory, blocking: recv (size * bytes) receives every rank's `bytes` bytes of
 * send, in rank order. Every rank passes the same `bytes` (at most max_all_gather_bytes). */
HAL_API hal_error* hal_comm_all_gather(hal_comm comm, const void* send, uint64_t bytes, void* recv);
/* Not collective: a buffer of `size` bytes on the communicator's device that peers can map. */
HAL_API hal_error* hal_comm_buffer_create(hal_comm comm, uint64_t size, hal_buffer* out);
/* Writes the handle peers import. `buffer` must come from hal_comm_buffer_create of `comm`. */
HAL_API hal_error* hal_comm_buffer_export(hal_comm comm, hal_buffer buffer, hal_comm_handle* out);
/* Maps the buffer that rank `peer` (!= this rank) exported as `handle`. */
HAL_API hal_error* hal_comm_buffer_import(hal_comm comm, uint32_t peer, const hal_comm_handle* handle,
                                          hal_buffer* out);
/* Collective, stream-ordered. Arrays of `size` entries indexed by peer rank: this rank sends
 * send_sizes[p] bytes from send + send_offsets[p] to rank p, which receives them at
 * recv + its recv_offsets[this rank]. Its recv_sizes[p] must equal what p sends it (checked:
 * a mismatch is HAL_INVALID_ARGUMENT naming both ranks and sizes). Ranges must lie in their
 * buffers; send and recv must not overlap. The entry for this rank itself is a local copy. */
HAL_API hal_error* hal_comm_all_to_all(hal_comm comm, hal_stream stream, hal_buffer send,
                                       const uint64_t* send_offsets, const uint64_t* send_sizes,
                                       hal_buffer recv, const uint64_t* recv_offsets,
                                       const uint64_t* recv_sizes);

/* ------------------------------------------------------------------------------------------
 * Modules and kernels
 * ---------------------------------------------------------------------------------------- */

typedef enum hal_module_format {
  HAL_MODULE_FORMAT_INVALID = 0,
  HAL_MODULE_PTX = 1,    /* NVIDIA PTX text, NUL-terminated or sized */
  HAL_MODULE_CUBIN = 2,  /* NVIDIA ELF cubin or fatbin */
  HAL_MODULE_HSACO = 3,  /* AMD HSA code object (ELF) */
  HAL_MODULE_SPIRV = 4,  /* SPIR-V binary */
  HAL_MODULE_HOST = 5    /* data is a hal_host_module_image: host functions by name */
} hal_module_format;

typedef struct hal_module_desc {
  size_t struct_size;
  const void* next;
  uint32_t format;       /* hal_module_format */
  uint32_t flags;        /* reserved, 0 */
  const char* target;    /* architecture the binary was built for: "sm_90a", "sm_80",
                            "gfx942", "host"; the backend refuses one its device cannot run,
                            naming both, before any driver call */
  const void* data;
  size_t size;
  const char* name;      /* for messages and caches, e.g. "moe_gate.sm_90a.ptx"; may be NULL */
} hal_module_desc;
#define HAL_MODULE_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_module_desc, name)
#define HAL_MODULE_DESC_SIZE HAL_SIZE_THROUGH(hal_module_desc, name)

typedef enum hal_arg_kind {
  HAL_ARG_VALUE = 0,    /* bytes copied as they are (scalars, small structs) */
  HAL_ARG_POINTER = 1   /* a device address (hal_buffer_info.device_address + offset) */
} hal_arg_kind;

/* One kernel parameter: where it sits in the packed argument blob. */
typedef struct hal_kernel_arg {
  uint32_t offset;
  uint32_t size;
  uint32_t kind;  /* hal_arg_kind */
} hal_kernel_arg;

typedef struct hal_kernel_info {
  size_t struct_size;
  const void* next;
  char name[128];
  uint32_t arg_count;
  uint32_t args_size;            /* bytes of the packed blob a launch must pass */
  uint32_t max_threads_per_block;
  uint32_t static_shared_bytes;
  uint32_t registers;            /* per thread, 0 if unknown */
  uint32_t reserved0;
} hal_kernel_info;
#define HAL_KERNEL_INFO_MIN_SIZE HAL_SIZE_THROUGH(hal_kernel_info, next)
#define HAL_KERNEL_INFO_SIZE HAL_SIZE_THROUGH(hal_kernel_info, reserved0)

HAL_API hal_error* hal_module_load(hal_device device, const hal_module_desc* desc,
                                   hal_module* out);
HAL_API hal_error* hal_module_retain(hal_module module);
HAL_API hal_error* hal_module_release(hal_module module);
HAL_API hal_error* hal_module_get_kernel(hal_module module, const char* name, hal_kernel* out);
HAL_API hal_error* hal_kernel_get_info(hal_kernel kernel, hal_kernel_info* out);
HAL_API hal_error* hal_kernel_get_arg(hal_kernel kernel, uint32_t index, hal_kernel_arg* out);
HAL_API hal_error* hal_kernel_retain(hal_kernel kernel);
HAL_API hal_error* hal_kernel_release(hal_kernel kernel);

typedef struct hal_launch_desc {
  size_t struct_size;
  const void* next;
  uint32_t grid[3];       /* blocks; each >= 1 */
  uint32_t block[3];      /* threads per block; each >= 1, product <= max_threads_per_block */
  uint32_t shared_bytes;  /* dynamic shared memory / LDS */
  uint32_t reserved0;
  const void* args;       /* packed blob laid out as hal_kernel_get_arg describes */
  size_t args_size;       /* must equal hal_kernel_info.args_size */
} hal_launch_desc;
#define HAL_LAUNCH_DESC_MIN_SIZE HAL_SIZE_THROUGH(hal_launch_desc, args_size)
#define HAL_LAUNCH_DESC_SIZE HAL_SIZE_THROUGH(hal_launch_desc, args_size)

HAL_API hal_error* hal_stream_launch(hal_stream stream, hal_kernel kernel,
                                     const hal_launch_desc* desc);

/* Host kernels (HAL_MODULE_HOST): plain functions that a host-executing backend (the CPU
 * backend, simulators) runs once per block. The argument blob is laid out as `args` says. */
typedef struct hal_host_launch_ctx {
  size_t struct_size;
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t block_id[3];
  uint32_t shared_bytes;
  void* shared;           /* shared_bytes of scratch private to this block */
} hal_host_launch_ctx;

typedef void (*hal_host_kernel_fn)(const hal_host_launch_ctx* ctx, const void* args);

typedef struct hal_host_kernel_entry {
  const char* name;
  hal_host_kernel_fn fn;
  uint32_t arg_count;
  const hal_kernel_arg* args;
  uint32_t args_size;
} hal_host_kernel_entry;

typedef struct hal_host_module_image {
  size_t struct_size;
  const void* next;
  uint32_t kernel_count;
  const hal_host_kernel_entry* kernels;
} hal_host_module_image;
#define HAL_HOST_MODULE_IMAGE_MIN_SIZE HAL_SIZE_THROUGH(hal_host_module_image, kernels)

/* ------------------------------------------------------------------------------------------
 * Backend plugin contract
 *
 * A backend is a table of functions over its own opaque objects. libhalcyon validates every
 * handle, struct_size, range and argument-blob size before calling into it, so a backend may
 * assume well-formed input (non-NULL objects it created, in-range offsets, blob sizes that
 * match the kernel). It reports failures by returning host->error_new(...), and logs through
 * host->log: a backend calls no hal_* function, so that a plugin file imports nothing from
 * libhalcyon and loads even where libhalcyon was opened RTLD_LOCAL (Python ctypes).
 *
 * A plugin shared library exports exactly one function, named HAL_PLUGIN_ENTRY_SYMBOL, of
 * type hal_plugin_entry_fn. It must not fail or touch a driver: probing happens in create().
 * ---------------------------------------------------------------------------------------- */

#define HAL_PLUGIN_ENTRY_SYMBOL "halcyon_backend_plugin"

typedef struct hal_host_api {
  size_t struct_size;
  const void* next;
  uint32_t abi_major;
  uint32_t abi_minor;
  hal_error* (*error_new)(hal_status status, const char* message);
  void (*log)(hal_log_level level, const char* message);
  /* ABI 1.4 (read it only when struct_size covers it): the value of option `key` given to
   * backend `backend` in hal_init_desc.backend_options, or NULL when it was not given. The
   * string lives as long as the process. */
  const char* (*option)(const char* backend, const char* key);
} hal_host_api;
#define HAL_HOST_API_SIZE HAL_SIZE_THROUGH(hal_host_api, option)

/* Backend-owned objects, opaque to libhalcyon. A backend must NOT define these structs:
 * several backends link into one library, and two definitions of one struct are an ODR
 * violation (their inline destructors would be merged). Use your own types and cast at the
 * table boundary; hal/include/halcyon/plugin.hpp's HAL_BACKEND_TYPE/HAL_BACKEND_FN do it. */
typedef struct hal_be_backend hal_be_backend;
typedef struct hal_be_device hal_be_device;
typedef struct hal_be_buffer hal_be_buffer;
typedef struct hal_be_stream hal_be_stream;
typedef struct hal_be_event hal_be_event;
typedef struct hal_be_module hal_be_module;
typedef struct hal_be_kernel hal_be_kernel;
typedef struct hal_be_partition hal_be_partition;
typedef struct hal_be_comm hal_be_comm;

/* Lifetime rule for backends: an object that a queued command refers to (an event recorded
 * or waited on, a buffer copied) must stay alive until that command has run, even when its
 * handle is released first; the core destroys a backend object as soon as its last handle
 * reference goes. */
typedef struct hal_backend_api {
  size_t struct_size;
  const void* next;
  uint32_t abi_major;        /* HAL_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;
  const char* name;          /* URI scheme: "cpu", "cuda", "hip", "ze", "amdgpu-sim" */
  const char* description;

  /* Probe and set up. If the backend cannot run here it returns HAL_UNAVAILABLE with the
   * reason ("libcuda.so.1 not found"); the registry records that and carries on. */
  hal_error* (*create)(const hal_host_api* host, hal_be_backend** out);
  void (*destroy)(hal_be_backend* backend);

  hal_error* (*device_count)(hal_be_backend* backend, uint32_t* out);
  /* Optional (NULL: the selector must be a decimal index). Maps the part of the URI after
   * the scheme ("0", "gfx942") to a device index. */
  hal_error* (*device_resolve)(hal_be_backend* backend, const char* selector, uint32_t* index);
  hal_error* (*device_open)(hal_be_backend* backend, uint32_t index, hal_be_device** out);
  void (*device_close)(hal_be_device* device);
  /* `out` is a full-size (this header's) struct, zeroed, uri already filled. */
  hal_error* (*device_info)(hal_be_device* device, hal_device_info* out);

  hal_error* (*buffer_create)(hal_be_device* device, const hal_buffer_desc* desc,
                              hal_be_buffer** out, uint64_t* device_address,
                              void** host_pointer);
  void (*buffer_destroy)(hal_be_buffer* buffer);

  hal_error* (*stream_create)(hal_be_device* device, hal_be_partition* partition,
                              const hal_stream_desc* desc, hal_be_stream** out);
  void (*stream_destroy)(hal_be_stream* stream);
  hal_error* (*stream_synchronize)(hal_be_stream* stream);
  hal_error* (*stream_write)(hal_be_stream* stream, hal_be_buffer* dst, uint64_t dst_offset,
                             const void* src, uint64_t size);
  hal_error* (*stream_read)(hal_be_stream* stream, hal_be_buffer* src, uint64_t src_offset,
                            void* dst, uint64_t size);
  hal_error* (*stream_copy)(hal_be_stream* stream, hal_be_buffer* dst, uint64_t dst_offset,
                            hal_be_buffer* src, uint64_t src_offset, uint64_t size);
  hal_error* (*stream_fill)(hal_be_stream* stream, hal_be_buffer* dst, uint64_t offset,
                            uint64_t size, uint32_t pattern, uint32_t pattern_size);
  hal_error* (*stream_wait_event)(hal_be_stream* stream, hal_be_event* event);
  hal_error* (*stream_launch)(hal_be_stream* stream, hal_be_kernel* kernel,
                              const hal_launch_desc* desc);

  hal_error* (*event_create)(hal_be_device* device, const hal_event_desc* desc,
                             hal_be_event** out);
  void (*event_destroy)(hal_be_event* event);
  hal_error* (*event_record)(hal_be_event* event, hal_be_stream* stream);
  hal_error* (*event_query)(hal_be_event* event, bool* complete);
  hal_error* (*event_synchronize)(hal_be_event* event);
  hal_error* (*event_elapsed_ms)(hal_be_event* start, hal_be_event* end, float* ms);

  hal_error* (*module_load)(hal_be_device* device, const hal_module_desc* desc,
                            hal_be_module** out);
  void (*module_destroy)(hal_be_module* module);
  /* Looks a kernel up. `info` is full-size and zeroed; the backend fills it and writes
   * info->arg_count entries into `args` (capacity args_capacity; if more are needed it
   * returns HAL_OUT_OF_RANGE stating the count). */
  hal_error* (*kernel_get)(hal_be_module* module, const char* name, hal_be_kernel** out,
                           hal_kernel_info* info, hal_kernel_arg* args,
                           uint32_t args_capacity);
  void (*kernel_destroy)(hal_be_kernel* kernel);

  /* Optional (NULL: the device cannot be split; hal_device_split returns HAL_UNSUPPORTED).
   * `remainder`/`remainder_info` are NULL when the caller does not want the rest. */
  hal_error* (*partition_split)(hal_be_device* device, const hal_partition_desc* desc,
                                hal_be_partition** part, hal_partition_info* part_info,
                                hal_be_partition** remainder, hal_partition_info* remainder_info);
  void (*partition_destroy)(hal_be_partition* partition);

  /* ---- ABI 1.1 (a plugin table of ABI 1.0's size still loads: these count as NULL) ---- */

  /* Optional (NULL: hal_device_encode_tensor_map returns HAL_UNSUPPORTED). `address` is the
   * buffer's device address + desc->offset; the core has checked every field as hal.h says
   * and that the tensor lies in the buffer. `out` is HAL_TENSOR_MAP_BYTES bytes, 64-byte
   * aligned; the core copies it to the caller's memory only when this returns NULL. */
  hal_error* (*tensor_map_encode)(hal_be_device* device, uint64_t address,
                                  const hal_tensor_map_desc* desc, void* out);

  /* ---- ABI 1.3 (a smaller table still loads: these count as NULL) ---- */

  /* Optional (NULL: hal_device_can_run answers yes exactly when target equals the device's
   * arch). Whether a module of `format` built for `target` runs on the device; the core has
   * checked the handle, that the device advertises "module.<format>", and that target is a
   * non-empty string. On no, write why into `reason` (capacity >= 1, NUL-terminate). */
  hal_error* (*device_can_run)(hal_be_device* device, uint32_t format, const char* target, bool* yes,
                               char* reason, size_t reason_capacity);

  /* Optional. The granularity and mechanism of partition_split for `flags`; `out` is
   * full-size and zeroed, and the core fills units and units_free itself. NULL: a backend
   * with partition_split reports steps of 1 from 1, enforced when it advertises
   * "partition.enforced"; one without it gets the core's soft partitions. */
  hal_error* (*partition_caps)(hal_be_device* device, uint32_t flags, hal_partition_caps* out);

  /* ---- ABI 1.4 (a smaller table still loads: these count as NULL) ---- */

  /* Optional (NULL: hal_buffer_import returns HAL_UNSUPPORTED). Wraps external memory; the
   * core has checked desc (kind, flags, a non-zero address when size > 0). The backend checks
   * what its driver can about the address (that it is this device's memory), never frees it,
   * and its buffer_destroy of such a buffer waits for (or orders after) queued work as for
   * its own; the core calls desc->release after buffer_destroy. `host_pointer` as in
   * buffer_create. */
  hal_error* (*buffer_import)(hal_be_device* device, const hal_buffer_import_desc* desc,
                              hal_be_buffer** out, void** host_pointer);

  /* ABI 1.4 too. */
  /* Communicators: all eight entries, or none (the core checks; a backend with none makes
   * hal_comm_create HAL_UNSUPPORTED). The core has checked every argument as hal.h says:
   * rank < size, the rendezvous name's characters and length, handles, ranges, that an
   * exported buffer came from comm_buffer_create of this communicator, that peer != rank.
   * `info` is full-size and zeroed; the backend fills transport, max_all_gather_bytes and
   * max_ranks (the core fills rank and size). */
  hal_error* (*comm_create)(hal_be_device* device, const hal_comm_desc* desc, hal_be_comm** out,
                            hal_comm_info* info);
  void (*comm_destroy)(hal_be_comm* comm);
  hal_error* (*comm_barrier)(hal_be_comm* comm);
  hal_error* (*comm_all_gather)(hal_be_comm* comm, const void* send, uint64_t bytes, void* recv);
  /* A peer-mappable buffer; destroyed through buffer_destroy like any other. */
  hal_error* (*comm_buffer_create)(hal_be_comm* comm, uint64_t size, hal_be_buffer** out,
                                   uint64_t* device_address, void** host_pointer);
  hal_error* (*comm_buffer_export)(hal_be_comm* comm, hal_be_buffer* buffer, hal_comm_handle* out);
  /* Maps a peer's exported buffer; *size gets its size. Destroyed through buffer_destroy. */
  hal_error* (*comm_buffer_import)(hal_be_comm* comm, uint32_t peer, const hal_comm_handle* handle,
                                   hal_be_buffer** out, uint64_t* size, uint64_t* device_address,
                                   void** host_pointer);
  hal_error* (*comm_all_to_all)(hal_be_comm* comm, hal_be_stream* stream, hal_be_buffer* send,
                                const uint64_t* send_offsets, const uint64_t* send_sizes,
                                hal_be_buffer* recv, const uint64_t* recv_offsets,
                                const uint64_t* recv_sizes);

  /* ---- ABI 1.5 (a smaller table still loads: this counts as NULL) ---- */

  /* Optional (NULL: hal_stream_import returns HAL_UNSUPPORTED). Wraps the owner's stream
   * `desc->native` (flags checked by the core); stream_destroy of it must not destroy the
   * native stream, and waits for it only where later frees cannot be ordered after its work. */
  hal_error* (*stream_import)(hal_be_device* device, const hal_stream_import_desc* desc,
                              hal_be_stream** out);

  /* ---- ABI 1.11 (a smaller table still loads: this counts as NULL) ---- */

  /* Optional (NULL: hal_stream_info.has_native is 0). The stream's native handle, as
   * hal_stream_import takes it (created streams and imported ones alike). */
  hal_error* (*stream_native)(hal_be_stream* stream, uint64_t* out);
} hal_backend_api;
#define HAL_BACKEND_API_MIN_SIZE HAL_SIZE_THROUGH(hal_backend_api, kernel_destroy)
/* ABI 1.0's table ended at partition_destroy. */
#define HAL_BACKEND_API_1_0_SIZE HAL_SIZE_THROUGH(hal_backend_api, partition_destroy)
/* ABI 1.1 and 1.2's table ended at tensor_map_encode. */
#define HAL_BACKEND_API_1_2_SIZE HAL_SIZE_THROUGH(hal_backend_api, tensor_map_encode)
/* ABI 1.3's table ended at partition_caps. */
#define HAL_BACKEND_API_1_3_SIZE HAL_SIZE_THROUGH(hal_backend_api, partition_caps)
/* ABI 1.4's table ended at comm_all_to_all. */
#define HAL_BACKEND_API_1_4_SIZE HAL_SIZE_THROUGH(hal_backend_api, comm_all_to_all)
/* ABI 1.5 to 1.10's table ended at stream_import. */
#define HAL_BACKEND_API_1_10_SIZE HAL_SIZE_THROUGH(hal_backend_api, stream_import)
#define HAL_BACKEND_API_SIZE HAL_SIZE_THROUGH(hal_backend_api, stream_native)

typedef const hal_backend_api* (*hal_plugin_entry_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HALCYON_HAL_H_ */
