// baton.v1.SamplingParams <-> engine::SamplingParams, with the wire format's "unset" defaults.
//
// Thread-safety: pure functions.
#ifndef BATON_RPC_SAMPLING_PARAMS_PROTO_H_
#define BATON_RPC_SAMPLING_PARAMS_PROTO_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "baton/v1/common.pb.h"
#include "engine/sampling_params.h"

namespace baton::rpc {

// Unset (zero) fields take their documented defaults: top_p 1, repetition_penalty 1, max_tokens
// 256; an unset seed becomes `default_seed`. The result is validated
// (engine::ValidateSamplingParams) for a vocabulary of n_vocab tokens.
absl::StatusOr<engine::SamplingParams> SamplingParamsFromProto(
    const baton::v1::SamplingParams& proto, int32_t n_vocab,
    uint64_t default_seed = engine::kDefaultSamplingSeed);

baton::v1::SamplingParams SamplingParamsToProto(const engine::SamplingParams& params);

}  // namespace baton::rpc

#endif  // BATON_RPC_SAMPLING_PARAMS_PROTO_H_
