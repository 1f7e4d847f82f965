// What cuTensorMapEncodeTiled is given for a hal_tensor_map_desc. The driver's documented
// limits are checked first, so that an error names the field and its value instead of the
// driver's bare CUDA_ERROR_INVALID_VALUE. Pure functions: unit-tested without a GPU.
#pragma once

#include <halcyon/hal.h>

#include <cuda.h>

#include <string>

namespace halcyon::cuda {

struct TiledTensorMap {
  CUtensorMapDataType dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  cuuint32_t rank = 0;
  void* address = nullptr;
  cuuint64_t dims[5] = {};
  cuuint64_t strides[4] = {};        // bytes, of dimensions 1..rank-1 (dimension 0 is dense)
  cuuint32_t box[5] = {};
  cuuint32_t element_strides[5] = {};  // all 1: every element of the box
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

// `desc` has passed the core's checks (hal.h); `address` is the buffer's device address plus
// desc.offset. Empty when cuTensorMapEncodeTiled's documented requirements hold (address and
// strides 16-byte aligned, strides < 2^40, dims <= 2^32, box <= 256, the box's inner extent a
// multiple of 16 bytes and within the swizzle span); then *out holds the call's arguments.
// Otherwise what is wrong, naming the field and its value.
std::string tiled_tensor_map(const hal_tensor_map_desc& desc, uint64_t address, TiledTensorMap* out);

// "rank 2 bf16, dims {200, 150}, strides {2, 416}, box {64, 64}, swizzle 128B", for messages.
std::string describe_tensor_map(const hal_tensor_map_desc& desc);

}  // namespace halcyon::cuda
