// engine::TokenLogprobs -> baton.v1.TokenLogprobs: the one conversion, for the workers that report
// a generated token's log-probabilities (the prefill worker's first token, the decode stream's).
//
// Thread-safety: pure function.
#ifndef BATON_RPC_TOKEN_LOGPROBS_PROTO_H_
#define BATON_RPC_TOKEN_LOGPROBS_PROTO_H_

#include "baton/v1/common.pb.h"
#include "engine/sampler.h"

namespace baton::rpc {

void TokenLogprobsToProto(const engine::TokenLogprobs& logprobs, baton::v1::TokenLogprobs* proto);

}  // namespace baton::rpc

#endif  // BATON_RPC_TOKEN_LOGPROBS_PROTO_H_
