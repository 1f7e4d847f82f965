// The MoE layer computed directly with the reference code (kernels/reference), on host
// arrays, with no HAL, device or dispatch in between: the oracle for MoeLayer on any device.
#pragma once

#include <halcyon/result.hpp>
#include <halcyon/runtime/moe_layer.hpp>

#include <cstdint>
#include <vector>

namespace halcyon::rt {

struct MoeHostWeights {
  std::vector<uint16_t> w_router;   // [H, E] bf16 bits
  std::vector<float> bias;          // [E] or empty
  std::vector<uint16_t> w_gate_up;  // [EL, H, 2I]
  std::vector<uint16_t> w_down;     // [EL, I, H]
};

// The routing alone: router GEMM and gate. ids [T, K], weights [T, K].
Status moe_routing_reference(const MoeLayerConfig& c, const MoeHostWeights& w, const std::vector<uint16_t>& x,
                             int64_t tokens, std::vector<int32_t>* ids, std::vector<float>* weights);

// x [T, H] bf16 bits -> out [T, H] bf16 bits.
Status moe_layer_reference(const MoeLayerConfig& c, const MoeHostWeights& w, const std::vector<uint16_t>& x,
                           int64_t tokens, std::vector<uint16_t>* out);

// FP8 experts on the host (MoeFp8Weights' layouts, docs/kernels/fp8.md): e4m3 bytes, f32 scales
// per 128 x 128 block.
struct MoeHostFp8Weights {
  std::vector<uint8_t> w_gate_up;      // [EL, 2I, H] e4m3: rows [0, I) gate, [I, 2I) up
  std::vector<float> w_gate_up_scale;  // [EL, ceil(2I / 128), ceil(H / 128)]
  std::vector<uint8_t> w_down;         // [EL, H, I] e4m3
  std::vector<float> w_down_scale;     // [EL, ceil(H / 128), ceil(I / 128)]
};

// The layer with FP8 experts (MoeLayer with MoeLayerWeights::fp8): the routing of `w` (its
// router and bias; its bf16 experts are not read), the tokens quantized per 1x128 group, the
// block-scaled SwiGLU GEMM reading each row's token (the gather form: on the CPU the layer's
// both paths equal it bit for bit), its output quantized, the block-scaled down GEMM, combine.
Status moe_layer_reference_fp8(const MoeLayerConfig& c, const MoeHostWeights& w, const MoeHostFp8Weights& f,
                               const std::vector<uint16_t>& x, int64_t tokens, std::vector<uint16_t>* out);

}  // namespace halcyon::rt
