// Intake of a Generate request: from what the client sent to the prompt's tokens and checked
// sampling settings, or a clear INVALID_ARGUMENT / NOT_FOUND saying what is wrong.
//
//  - prompt: tokenized as llama.cpp does (BOS per the model, special-token text recognized);
//  - chat: rendered with the model's chat template, then tokenized the same way;
//  - prompt_tokens: taken as they are, every id checked against the vocabulary.
// Checks: a set model name must be the served one (NOT_FOUND); the prompt must be non-empty and
// valid UTF-8; the sampling settings must pass engine::ValidateSamplingParams; prompt + max_tokens
// must fit the context; a cache salt must be at most engine::kMaxCacheSaltBytes; an output
// constraint must parse (grammar::CheckOutputConstraint).
//
// The wire's "unset" values become their documented defaults (rpc/sampling_params_proto.h); no
// seed -> the caller's random seed.
//
// Thread-safety: pure functions.
#ifndef BATON_ROUTER_REQUEST_INTAKE_H_
#define BATON_ROUTER_REQUEST_INTAKE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/v1/common.pb.h"
#include "baton/v1/router.pb.h"
#include "engine/sampling_params.h"
#include "engine/vocab.h"
#include "router/served_model.h"

namespace baton::router {

struct PreparedRequest {
  std::vector<engine::TokenId> prompt;
  std::string cache_salt;         // the prefix-cache salt (engine/block_hash.h); empty: none
  engine::SamplingParams params;  // defaults applied, validated
  v1::SamplingParams wire;        // what workers get: defaults applied, seed set, no stop strings
};

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const ServedModel& model, uint64_t random_seed);

}  // namespace baton::router

#endif  // BATON_ROUTER_REQUEST_INTAKE_H_
