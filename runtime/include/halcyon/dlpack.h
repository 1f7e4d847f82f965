/*
 * halcyon/dlpack.h — DLPack (dlpack/dlpack.h, DLManagedTensor of DLPack 0.6 to 0.8) for the
 * runtime's tensors: exchange with PyTorch, NumPy, JAX, CuPy... without a copy.
 *
 * Rules:
 * - Export: a DLManagedTensor viewing an hrt_tensor (a region of a hal buffer; a whole hal
 *   buffer exports as `u8 [size]`; an e4m3 tensor as uint8, its bits: DLPack 0.6-0.8 has no FP8
 *   type). It holds a reference on the buffer until its deleter is
 *   called; shape and strides (compact row-major, in elements) live in the same allocation.
 * - Import: wraps the memory a DLManagedTensor describes as a hal buffer (hal_buffer_import),
 *   no copy. Checked first: the DLPack device is the hal device (kDLCPU for "cpu", kDLCUDA n
 *   for "cuda:n", kDLROCM n for "hip:n"), the dtype has an hrt_dtype (lanes 1), the strides are
 *   compact row-major (NULL, or what a contiguous tensor has; size-1 dimensions may have any),
 *   rank <= HRT_MAX_RANK, shape entries >= 0, no size overflow. Each failure is an error naming
 *   the tensor and the value (HAL_INVALID_ARGUMENT; a non-contiguous tensor's message says to
 *   make it contiguous). On success the hal buffer owns the DLManagedTensor: its deleter is
 *   called once the buffer's last reference goes, after the device's queued work. On an
 *   error nothing is taken: the caller still owns it (and calls its deleter).
 * - Synchronisation is the caller's: DLPack's producer stream is not known here. Make the
 *   producer's work on the memory complete (or ordered before) the hal stream's work, or
 *   queue halcyon's work on the producer's own stream (hal_stream_import) and import with
 *   HAL_BUFFER_IMPORT_OWNER_ORDERED (hrt_dlpack_import_flags): no host wait either way round.
 */
#ifndef HALCYON_DLPACK_H_
#define HALCYON_DLPACK_H_

#include <dlpack/dlpack.h>
#include <halcyon/runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* hrt_dlpack_import's dtype_override: take the DLPack dtype as it is. */
#define HRT_DTYPE_FROM_DLPACK 0xffffffffu

/* `tensor` must be a region of a buffer of `device`: another device's buffer is
 * HAL_INVALID_ARGUMENT naming both devices; a negative dimension HAL_INVALID_ARGUMENT; a shape
 * of more than 2^63 - 1 bytes, strides past int64 or a region outside the buffer (compared
 * without wrapping) HAL_OUT_OF_RANGE. *out: a new DLManagedTensor. */
HAL_API hal_error* hrt_dlpack_export(hal_device device, const hrt_tensor* tensor, DLManagedTensor** out);

/* `name`: the tensor's name in error messages and out->name (not copied). dtype_override: an
 * hrt_dtype of the same element size to read the memory as (uint16 from NumPy as bf16, uint8
 * or torch.float8_e4m3fn's bits as HRT_E4M3), or HRT_DTYPE_FROM_DLPACK. out->buffer is a new
 * reference the caller releases. */
HAL_API hal_error* hrt_dlpack_import(hal_device device, DLManagedTensor* managed, const char* name,
                                     uint32_t dtype_override, hrt_tensor* out);
/* As hrt_dlpack_import, with hal_buffer_import_flags for the buffer (ABI 1.5): a producer whose
 * allocator orders reuse after the work on its stream (PyTorch's, with halcyon's work queued
 * on that stream through hal_stream_import) passes HAL_BUFFER_IMPORT_OWNER_ORDERED, so that
 * releasing the buffer calls the deleter at once instead of waiting for the device. */
HAL_API hal_error* hrt_dlpack_import_flags(hal_device device, DLManagedTensor* managed, const char* name,
                                           uint32_t dtype_override, uint32_t import_flags, hrt_tensor* out);

#ifdef __cplusplus
}
#endif

#endif /* HALCYON_DLPACK_H_ */
