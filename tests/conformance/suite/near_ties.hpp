// Near-ties that a contract lets go either way. moe_gate's contract: "a mismatch of two ids whose
// selection scores differ by a few ulps is a near-tie, not a bug". Random logits make such ties
// rare, not impossible: the CTS met one on 2026-11-29 (ze through pocl, moe_gate case 8, two
// experts' selection scores 3e-8 apart, a quarter of an fp32 ulp, ranked the other way round).
//
// Before the outputs are compared, each row where the device's answer differs from the
// reference's is checked to be a correct answer when selection scores within kTieUlps fp32 ulps
// of each other may rank either way; if it is, the reference's row is replaced by what that
// answer implies (the device's ids, the weights recomputed from them in fp64), and the row is
// counted. A row that is not such an answer stays, and the comparison fails as before.
#pragma once

#include <halcyon/ops/contract.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace halcyon::cts {

using HostTensors = std::map<std::string, std::vector<uint8_t>>;

// Selection scores this close (in fp32 ulps of the larger) may rank either way.
inline constexpr double kTieUlps = 8;

// The rows of `want` replaced by the device's near-tied answers (0 for contracts without ties).
int64_t accept_near_ties(const ops::Contract& c, const ops::Binding& b, const HostTensors& inputs,
                         const HostTensors& got, HostTensors& want);

// moe_gate, one token: whether `ids` (topk of them) is a correct answer within ties, given the
// token's logits [E] and bias [E] (nullptr: none). Exposed for the suite's own tests.
bool gate_ids_valid_within_ties(const float* logits, const float* bias, int64_t E, bool softmax, int64_t n_groups,
                                int64_t topk_groups, const int32_t* ids, int64_t topk);

}  // namespace halcyon::cts
