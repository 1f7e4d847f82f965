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

}  // namespace halcyon::rt
