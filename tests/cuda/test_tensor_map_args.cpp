// The arguments cuTensorMapEncodeTiled gets for a hal_tensor_map_desc, and the driver's
// documented limits checked before it: no GPU needed.
#include <doctest/doctest.h>

#include <halcyon/tensor_map.hpp>

#include "tensor_map.hpp"

#include <string>

using namespace halcyon::cuda;

namespace {

hal_tensor_map_desc bf16_2d() {
  auto d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_BF16, {200, 150}, {64, 64}, {416});
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_128B;
  d.l2_promotion = HAL_TENSOR_MAP_L2_256B;
  return d;
}

// What cuTensorMapEncodeTiled gets for `d`, which must be accepted.
TiledTensorMap accepted(const hal_tensor_map_desc& d) {
  TiledTensorMap t;
  std::string why = tiled_tensor_map(d, 0x1000, &t);
  REQUIRE_MESSAGE(why.empty(), why);
  return t;
}

// The reason tiled_tensor_map gives for `d` at `address` (empty: accepted).
std::string why(const hal_tensor_map_desc& d, uint64_t address = 0x7f0000000000) {
  TiledTensorMap t;
  return tiled_tensor_map(d, address, &t);
}

}  // namespace

TEST_CASE("tensor map args: a 2-D bf16 map with 128-byte swizzle") {
  TiledTensorMap t;
  REQUIRE(tiled_tensor_map(bf16_2d(), 0x7f0000001000, &t).empty());
  CHECK(t.dtype == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  CHECK(t.rank == 2);
  CHECK(t.address == reinterpret_cast<void*>(uintptr_t(0x7f0000001000)));
  CHECK(t.dims[0] == 200);
  CHECK(t.dims[1] == 150);
  CHECK(t.strides[0] == 416);  // the driver takes the strides of dimensions 1.., not 0
  CHECK(t.box[0] == 64);
  CHECK(t.box[1] == 64);
  CHECK(t.element_strides[0] == 1);
  CHECK(t.element_strides[1] == 1);
  CHECK(t.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE);
  CHECK(t.swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
  CHECK(t.l2_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  CHECK(t.oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CHECK(describe_tensor_map(bf16_2d()) == "rank 2 bf16, dims {200, 150}, strides {2, 416}, box {64, 64}, swizzle 128B");
}

TEST_CASE("tensor map args: every dtype, swizzle, L2 size and the NaN fill map to the driver's") {
  const std::pair<uint32_t, CUtensorMapDataType> dtypes[] = {
      {HAL_TENSOR_MAP_U8, CU_TENSOR_MAP_DATA_TYPE_UINT8},     {HAL_TENSOR_MAP_U16, CU_TENSOR_MAP_DATA_TYPE_UINT16},
      {HAL_TENSOR_MAP_U32, CU_TENSOR_MAP_DATA_TYPE_UINT32},   {HAL_TENSOR_MAP_I32, CU_TENSOR_MAP_DATA_TYPE_INT32},
      {HAL_TENSOR_MAP_U64, CU_TENSOR_MAP_DATA_TYPE_UINT64},   {HAL_TENSOR_MAP_I64, CU_TENSOR_MAP_DATA_TYPE_INT64},
      {HAL_TENSOR_MAP_F16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16},  {HAL_TENSOR_MAP_BF16, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16},
      {HAL_TENSOR_MAP_F32, CU_TENSOR_MAP_DATA_TYPE_FLOAT32},  {HAL_TENSOR_MAP_F64, CU_TENSOR_MAP_DATA_TYPE_FLOAT64}};
  const uint32_t sizes[] = {1, 2, 4, 4, 8, 8, 2, 2, 4, 8};
  for (size_t i = 0; i < std::size(dtypes); ++i) {
    hal_tensor_map_desc d = bf16_2d();
    d.dtype = dtypes[i].first;
    d.strides[0] = sizes[i];
    d.box[0] = 128 / sizes[i];  // 128 bytes: the whole swizzle span
    CHECK(accepted(d).dtype == dtypes[i].second);
  }
  // Indexed by hal_tensor_map_swizzle and hal_tensor_map_l2 (0 to 3).
  const CUtensorMapSwizzle swizzles[] = {CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_SWIZZLE_64B,
                                         CU_TENSOR_MAP_SWIZZLE_128B};
  const CUtensorMapL2promotion l2s[] = {CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B};
  for (uint32_t v = HAL_TENSOR_MAP_SWIZZLE_NONE; v <= HAL_TENSOR_MAP_SWIZZLE_128B; ++v) {
    hal_tensor_map_desc d = bf16_2d();
    d.swizzle = v;
    d.l2_promotion = v;
    d.box[0] = 16;  // 32 bytes: fits every span
    TiledTensorMap t = accepted(d);
    CHECK(t.swizzle == swizzles[v]);
    CHECK(t.l2_promotion == l2s[v]);
  }
  hal_tensor_map_desc d = bf16_2d();
  d.oob_nan = 1;
  CHECK(accepted(d).oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA);
}

TEST_CASE("tensor map args: a 5-D map passes strides 1..4 and ignores what lies past a smaller rank") {
  auto d = halcyon::tensor_map_desc(nullptr, HAL_TENSOR_MAP_U8, {4, 4, 4, 4, 4}, {16, 16, 16, 16, 16},
                                    {64, 256, 1024, 4096});
  TiledTensorMap t = accepted(d);
  CHECK(t.strides[0] == 64);
  CHECK(t.strides[3] == 4096);
  d.rank = 1;
  d.strides[1] = 3;  // not a multiple of 16, but not a stride of a 1-D map
  d.box[1] = 1000;
  t = accepted(d);
  CHECK(t.rank == 1);
  CHECK(t.dims[1] == 0);
}

TEST_CASE("tensor map args: the driver's documented limits, each naming the field") {
  CHECK(why(bf16_2d(), 0x1008) == "the tensor's address 0x1008 (buffer address + offset 0) is not 16-byte aligned");
  auto d = bf16_2d();
  d.strides[1] = 402;
  CHECK(why(d) == "strides[1] is 402 bytes, not a multiple of 16");
  d.strides[1] = uint64_t(1) << 40;
  CHECK(why(d) == "strides[1] is 1099511627776 bytes, not below 2^40");
  d = bf16_2d();
  d.dims[1] = (uint64_t(1) << 32) + 1;
  CHECK(why(d) == "dims[1] is 4294967297, more than 2^32");
  d.dims[1] = uint64_t(1) << 32;
  CHECK(why(d).empty());
  d = bf16_2d();
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_NONE;
  d.box[1] = 257;
  CHECK(why(d) == "box[1] is 257, more than 256");
  d.box[1] = 256;
  CHECK(why(d).empty());
  d.box[0] = 4;
  CHECK(why(d) == "box[0] is 4 bf16 elements = 8 bytes; the box's inner extent must be a multiple of 16 bytes");
  d = bf16_2d();
  d.box[0] = 128;
  CHECK(why(d) == "box[0] is 128 bf16 elements = 256 bytes, more than the 128-byte span of swizzle 128B");
  d.swizzle = HAL_TENSOR_MAP_SWIZZLE_32B;
  d.box[0] = 32;
  CHECK(why(d) == "box[0] is 32 bf16 elements = 64 bytes, more than the 32-byte span of swizzle 32B");
  d.box[0] = 16;
  CHECK(why(d).empty());
}
