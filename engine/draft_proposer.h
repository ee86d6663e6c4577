// Draft-model proposals: a smaller model with the target's vocabulary guesses the next tokens
// greedily, one batched forward per guessed position over every sequence that asked.
//
// The draft keeps its own paged KV cache on the decode worker and computes the KV of each
// sequence's prompt itself, the first time the sequence asks (at most max_catch_up_tokens per
// call, so a long prompt delays only its own first proposals, not the batch). Shipping the draft's
// KV from the prefill worker instead would make every prefill worker load the draft and double
// the hand-off protocol, to save a draft prefill that costs the decode worker a fraction of one
// target forward per prompt token (the draft is small).
//
// Each call first brings a sequence's draft KV in line with its tokens: the longest common prefix
// of what the draft has computed and the sequence's tokens stays, the rest (guesses the target
// rejected) is dropped and the new tokens are fed. A sequence the draft cache has no room for gets
// no proposal, never an error.
//
// Thread-safety: one thread at a time (the decode engine thread).
#ifndef BATON_ENGINE_DRAFT_PROPOSER_H_
#define BATON_ENGINE_DRAFT_PROPOSER_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/proposer.h"
#include "kernels/backend.h"

namespace baton::engine {

struct DraftProposerOptions {
  int64_t kv_cache_bytes = 64LL << 20;  // the draft's own KV cache
  int32_t block_size = 16;
  int32_t max_catch_up_tokens = 256;    // tokens fed per sequence per call at most
};

// `draft` and `backend` must outlive the proposer. INVALID_ARGUMENT when the draft's vocabulary
// differs from `target` (size or any token's text) or its KV cache would hold no block.
absl::StatusOr<std::unique_ptr<Proposer>> CreateDraftProposer(const Model* draft,
                                                              const Model& target,
                                                              kernels::Backend* backend,
                                                              const DraftProposerOptions& options);

}  // namespace baton::engine

#endif  // BATON_ENGINE_DRAFT_PROPOSER_H_
