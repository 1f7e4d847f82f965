/*
 * halcyon/runtime.h — the C ABI of the runtime: run any operator, and the MoE layer, on
 * hal handles. Same rules as hal.h: struct_size first, errors as values (hal_error*).
 *
 * That includes the structs passed in arrays (hrt_tensor, hrt_param). They are the ones most
 * likely to grow (strides for non-contiguous tensors, say), and without struct_size each
 * addition would need a new entry point and leave old callers' arrays unreadable. So an array
 * is read at a stride of its first element's struct_size, every element must carry that same
 * size, and, as in hal.h, a reader accepts any size from the struct's *_MIN_SIZE on: fields
 * past an older caller's struct_size take their defaults, bytes past what the reader knows
 * (a newer caller's) are ignored. A struct_size below the minimum, or too large to be one
 * (a caller built against the runtime.h before struct_size, whose first field was `name`), is
 * refused with HAL_VERSION_MISMATCH naming the struct, the element and both sizes.
 */
#ifndef HALCYON_RUNTIME_H_
#define HALCYON_RUNTIME_H_

#include <halcyon/hal.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hrt_dtype {
  HRT_F32 = 0,
  HRT_F16 = 1,
  HRT_BF16 = 2,
  HRT_I32 = 3,
  HRT_I64 = 4,
  HRT_U8 = 5,
  HRT_F64 = 6,
  HRT_E4M3 = 7  /* OCP FP8 e4m3 (FN: max 448, no inf), 1 byte; appended */
} hrt_dtype;

#define HRT_MAX_RANK 8

/* A named tensor argument of an operator: a region of a buffer, row-major. */
typedef struct hrt_tensor {
  size_t struct_size;   /* HRT_TENSOR_SIZE (sizeof(hrt_tensor)) */
  const void* next;     /* extension chain; NULL */
  const char* name;     /* the contract's input or output name */
  hal_buffer buffer;
  uint64_t offset;      /* bytes */
  uint32_t dtype;       /* hrt_dtype */
  uint32_t rank;
  int64_t shape[HRT_MAX_RANK];
} hrt_tensor;
#define HRT_TENSOR_MIN_SIZE HAL_SIZE_THROUGH(hrt_tensor, shape)
#define HRT_TENSOR_SIZE HAL_SIZE_THROUGH(hrt_tensor, shape)

typedef struct hrt_param {
  size_t struct_size;   /* HRT_PARAM_SIZE (sizeof(hrt_param)) */
  const void* next;     /* extension chain; NULL */
  const char* name;
  const char* value;    /* as text: "8", "sigmoid", "true", "2.5" */
} hrt_param;
#define HRT_PARAM_MIN_SIZE HAL_SIZE_THROUGH(hrt_param, value)
#define HRT_PARAM_SIZE HAL_SIZE_THROUGH(hrt_param, value)

/* Runs operator `op` on `stream`: inputs and pre-allocated outputs by contract name.
 * `tensors` and `params` are arrays read at the stride of their first element's struct_size
 * (see above). A tensor in another device's memory, or a stream of another device, is
 * HAL_INVALID_ARGUMENT naming it (since ABI 1.8; hrt_op_create and hrt_op_run likewise). So is
 * a tensor or param name given twice. A negative dimension is HAL_INVALID_ARGUMENT; a shape of
 * more than 2^63 - 1 bytes, or a region [offset, offset + bytes) that does not lie in its
 * buffer (compared without wrapping), is HAL_OUT_OF_RANGE naming the tensor. */
HAL_API hal_error* hrt_run_op(hal_device device, hal_stream stream, const char* op,
                              const hrt_tensor* tensors, uint32_t tensor_count,
                              const hrt_param* params, uint32_t param_count);

/* A prepared call: operator `op` with its tensors and params checked against its contract and
 * its implementation chosen once, by hrt_op_create (which takes what hrt_run_op takes, less the
 * stream: nothing runs), then queued by hrt_op_run as often as asked, each time reading and
 * writing the memory its tensors name. For a caller that repeats one call on fixed buffers whose
 * contents change (an inference server's decode step): a run repeats no check and no choice, so
 * its host cost is the implementation's launch work alone. Shapes, dtypes and params are fixed
 * at create; device-side values (block tables, lengths) are read at each run. The op holds a
 * reference on every tensor's buffer until hrt_op_release. One thread runs an op at a time (its
 * runs write the same outputs). A NULL op is HAL_INVALID_HANDLE. */
typedef struct hrt_op_s* hrt_op;
HAL_API hal_error* hrt_op_create(hal_device device, const char* op, const hrt_tensor* tensors,
                                 uint32_t tensor_count, const hrt_param* params, uint32_t param_count,
                                 hrt_op* out);
/* ABI 1.7: how a call is made (hrt_run_op_with, hrt_op_create_with). `impl` names the
 * implementation, as `halcyon run --impl` and `halcyon cts --impls all` do ("sm90.tall", "host";
 * the names are listed by an error for an unknown one): a kernel pinned for reproducibility or a
 * comparison, or one a vendor certifies. An unknown name is HAL_NOT_FOUND, a name that cannot run
 * the call (its device, shapes or alignment) HAL_UNSUPPORTED; both errors list the operator's
 * implementations on the device and why each was refused. NULL options, or a NULL or empty
 * `impl`: the registry's choice, as hrt_run_op and hrt_op_create make it. */
typedef struct hrt_call_options {
  size_t struct_size;  /* HRT_CALL_OPTIONS_SIZE */
  const void* next;    /* extension chain; NULL */
  const char* impl;    /* an implementation's name; NULL or "": the registry's choice */
} hrt_call_options;
#define HRT_CALL_OPTIONS_MIN_SIZE HAL_SIZE_THROUGH(hrt_call_options, impl)
#define HRT_CALL_OPTIONS_SIZE HAL_SIZE_THROUGH(hrt_call_options, impl)
/* hrt_run_op and hrt_op_create with options (NULL: the same as those). */
HAL_API hal_error* hrt_run_op_with(hal_device device, hal_stream stream, const char* op,
                                   const hrt_tensor* tensors, uint32_t tensor_count,
                                   const hrt_param* params, uint32_t param_count,
                                   const hrt_call_options* options);
HAL_API hal_error* hrt_op_create_with(hal_device device, const char* op, const hrt_tensor* tensors,
                                      uint32_t tensor_count, const hrt_param* params,
                                      uint32_t param_count, const hrt_call_options* options,
                                      hrt_op* out);
/* Queues the prepared call on `stream` (a stream of the device it was created on). */
HAL_API hal_error* hrt_op_run(hrt_op op, hal_stream stream);
/* The name of the implementation chosen at create ("sm90.tma.k128", "host"), owned by the op;
 * NULL for a NULL op. */
HAL_API const char* hrt_op_impl_name(hrt_op op);
HAL_API void hrt_op_release(hrt_op op);

typedef struct hrt_moe_layer_s* hrt_moe_layer;

typedef struct hrt_moe_layer_desc {
  size_t struct_size;
  const void* next;
  int64_t hidden;
  int64_t inter;
  int64_t experts;
  int64_t topk;
  int64_t n_groups;
  int64_t topk_groups;
  int64_t expert_begin;
  int64_t local_experts;  /* -1: all */
  uint32_t softmax;       /* 0: sigmoid scores, 1: softmax */
  uint32_t normalize;
  double routed_scale;
  hal_buffer w_router;    /* [hidden, experts] bf16 */
  hal_buffer bias;        /* [experts] f32, or NULL */
  hal_buffer w_gate_up;   /* [local, hidden, 2*inter] bf16; NULL allowed with FP8 weights (below) */
  hal_buffer w_down;      /* [local, inter, hidden] bf16; NULL allowed with FP8 weights (below) */
} hrt_moe_layer_desc;
#define HRT_MOE_LAYER_DESC_MIN_SIZE HAL_SIZE_THROUGH(hrt_moe_layer_desc, w_down)
#define HRT_MOE_LAYER_DESC_SIZE HAL_SIZE_THROUGH(hrt_moe_layer_desc, w_down)

/* FP8 experts, an extension in hrt_moe_layer_desc's `next` chain (it starts like hal.h's
 * hal_extension; hrt_moe_layer_create ignores extension types it does not know): the experts as
 * DeepSeek-V3 stores them, e4m3 (OCP, max 448) with one f32 scale per 128 x 128 block of each
 * expert's [rows, K] matrix (docs/kernels/fp8.md). The layer then runs FP8 experts where the
 * device implements every FP8 operator, its activations quantized per 1 x 128 group on the way;
 * elsewhere (no FP8 tensor cores) the desc's bf16 w_gate_up / w_down, and where those are NULL
 * hrt_moe_layer_create fails with the reason. hrt_moe_layer_get_info says which runs. Each
 * buffer holds its tensor from byte 0, row-major; the layer keeps a reference on each. */
#define HRT_EXTENSION_MOE_FP8_WEIGHTS 0x48520001u
typedef struct hrt_moe_fp8_weights {
  size_t struct_size;          /* HRT_MOE_FP8_WEIGHTS_SIZE */
  const void* next;            /* further extensions; NULL */
  uint32_t type;               /* HRT_EXTENSION_MOE_FP8_WEIGHTS */
  hal_buffer w_gate_up;        /* [local, 2*inter, hidden] e4m3: rows [0, inter) gate, then up */
  hal_buffer w_gate_up_scale;  /* [local, ceil(2*inter / 128), ceil(hidden / 128)] f32 */
  hal_buffer w_down;           /* [local, hidden, inter] e4m3 */
  hal_buffer w_down_scale;     /* [local, ceil(hidden / 128), ceil(inter / 128)] f32 */
  /* ABI 1.9. 1: where the device cannot run the FP8 experts and the desc gives no bf16 ones,
   * dequantize these once at create into bf16 expert weights the layer owns (each weight its
   * e4m3 value times its block's scale, the fp32 product rounded to bf16; through the host) and
   * run those: more device memory (the bf16 weights), the bf16 experts' speed. 0: fail there. */
  uint32_t dequantize_elsewhere;
} hrt_moe_fp8_weights;
#define HRT_MOE_FP8_WEIGHTS_MIN_SIZE HAL_SIZE_THROUGH(hrt_moe_fp8_weights, w_down_scale)
#define HRT_MOE_FP8_WEIGHTS_SIZE HAL_SIZE_THROUGH(hrt_moe_fp8_weights, dequantize_elsewhere)

/* ABI 1.10: the implementation of some of the layer's operators, by name, an extension in
 * hrt_moe_layer_desc's `next` chain (MoeLayerOptions::impl in C++): a kernel pinned for
 * reproducibility or a comparison, one a vendor certifies, or an operator's implementation that
 * cannot run the FP8 experts, so the layer takes its bf16 path (or, with
 * hrt_moe_fp8_weights.dequantize_elsewhere, dequantizes). Names as hrt_call_options.impl takes
 * them. hrt_moe_layer_create refuses an operator without implementations (HAL_NOT_FOUND), two
 * entries for one operator, and a name the layer's calls cannot run (the errors of
 * hrt_run_op_with). A library older than 1.10 skips this extension, as every unknown one
 * (hal_abi_version says which library runs). */
#define HRT_EXTENSION_MOE_LAYER_IMPLS 0x48520002u
typedef struct hrt_op_impl {
  const char* op;    /* an operator the layer runs ("moe_grouped_gemm_fp8") */
  const char* impl;  /* the name of its implementation ("sm90.tall", "host") */
} hrt_op_impl;
typedef struct hrt_moe_layer_impls {
  size_t struct_size;           /* HRT_MOE_LAYER_IMPLS_SIZE */
  const void* next;             /* further extensions; NULL */
  uint32_t type;                /* HRT_EXTENSION_MOE_LAYER_IMPLS */
  uint32_t count;               /* entries in `entries` */
  const hrt_op_impl* entries;   /* count entries; read during hrt_moe_layer_create only */
} hrt_moe_layer_impls;
#define HRT_MOE_LAYER_IMPLS_MIN_SIZE HAL_SIZE_THROUGH(hrt_moe_layer_impls, entries)
#define HRT_MOE_LAYER_IMPLS_SIZE HAL_SIZE_THROUGH(hrt_moe_layer_impls, entries)

/* Checks the desc before sizing anything from it, each error naming the field: hidden, inter,
 * experts, topk >= 1 and topk <= experts, the local experts within [0, experts), and every
 * weight's byte count at most 2^63 - 1 (HAL_OUT_OF_RANGE); then each weight buffer against its
 * shape (HAL_OUT_OF_RANGE naming the weight). */
HAL_API hal_error* hrt_moe_layer_create(hal_device device, const hrt_moe_layer_desc* desc,
                                        hrt_moe_layer* out);
/* x [tokens, hidden] bf16 -> out [tokens, hidden] bf16, queued on stream. x or out too small
 * for tokens x hidden, or tokens x hidden past 2^63 - 1 bytes: HAL_OUT_OF_RANGE naming it. */
HAL_API hal_error* hrt_moe_layer_forward(hrt_moe_layer layer, hal_stream stream, hal_buffer x,
                                         hal_buffer out, int64_t tokens);
HAL_API void hrt_moe_layer_destroy(hrt_moe_layer layer);

/* What a layer runs, chosen at create (an output: filled up to info->struct_size). */
typedef struct hrt_moe_layer_info {
  size_t struct_size;    /* HRT_MOE_LAYER_INFO_SIZE */
  const void* next;      /* NULL */
  uint32_t fp8_experts;  /* 1: FP8 experts (hrt_moe_fp8_weights given, and the device runs them) */
  uint32_t gather;       /* 1: the up projection reads each expert's token rows in place (no copy) */
  uint32_t fp8_dequantized;  /* ABI 1.9. 1: the FP8 weights were dequantized to bf16 at create
                              * (hrt_moe_fp8_weights.dequantize_elsewhere) */
} hrt_moe_layer_info;
#define HRT_MOE_LAYER_INFO_MIN_SIZE HAL_SIZE_THROUGH(hrt_moe_layer_info, next)
#define HRT_MOE_LAYER_INFO_SIZE HAL_SIZE_THROUGH(hrt_moe_layer_info, fp8_dequantized)
HAL_API hal_error* hrt_moe_layer_get_info(hrt_moe_layer layer, hrt_moe_layer_info* info);

#ifdef __cplusplus
}
#endif

#endif /* HALCYON_RUNTIME_H_ */
