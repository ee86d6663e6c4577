// Speculative decoding's proposers: cheap guesses of a sequence's next tokens, which the target
// model then verifies in one forward pass (decode_worker/decode_batch.h), keeping the guesses it
// would have produced itself.
//
// A proposer is deterministic: the same tokens give the same proposal. The verifier relies on
// that: with a deterministic proposal, "accept a proposed token exactly when the target's own
// sampler draws it at that position" is the standard speculative rejection rule (a one-hot draft
// distribution q: accept x with probability p(x)/q(x) = p(x), otherwise draw from the residual p
// without x), and because the sampler's random number depends only on (seed, position), the output
// is the one non-speculative decoding gives, token for token.
//
// Thread-safety: one thread at a time (the decode engine thread).
#ifndef BATON_ENGINE_PROPOSER_H_
#define BATON_ENGINE_PROPOSER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "engine/vocab.h"

namespace baton::engine {

// One sequence's request for a proposal.
struct ProposalRequest {
  uint64_t sequence = 0;            // stable key of the sequence while it lives
  std::span<const TokenId> tokens;  // prompt + generated so far (the last one not yet verified)
  int32_t max_tokens = 0;           // propose at most this many (>= 1)
  std::vector<TokenId> proposal;    // out: 0..max_tokens guesses of the tokens after `tokens`
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Fills every request's proposal (possibly empty: nothing worth guessing).
  virtual void Propose(std::span<ProposalRequest> requests) = 0;
  // The sequence ended or was preempted: drop whatever is kept for it.
  virtual void Forget(uint64_t sequence) = 0;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_PROPOSER_H_
