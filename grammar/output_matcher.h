// One sequence's place in its output grammar (output_grammar.h): which tokens may come next, and
// the advance past each token drawn. The decode worker keeps one per constrained sequence; the
// prefill worker makes one for the first token.
//
// Drawing with the mask leaves the sampler's choice among the allowed tokens what it would have
// been (the masked logits are -inf, which the sampler never draws), so a seeded constrained
// request stays deterministic and batch-invariant. Speculative proposals need no rollback here:
// the matcher advances only past tokens the target's sampler drew, and a proposal the grammar
// forbids is never drawn, so it is rejected.
//
// Thread-safety: thread-compatible (one per sequence, used by one thread at a time).
#ifndef BATON_GRAMMAR_OUTPUT_MATCHER_H_
#define BATON_GRAMMAR_OUTPUT_MATCHER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/vocab.h"
#include "grammar/output_grammar.h"
#include "xgrammar/matcher.h"

namespace baton::grammar {

class OutputMatcher {
 public:
  // At the grammar's start, then past `output` (the tokens a migrated or resumed request has
  // generated already). INVALID_ARGUMENT when the grammar does not accept them.
  static absl::StatusOr<std::unique_ptr<OutputMatcher>> Create(
      std::shared_ptr<const CompiledOutputGrammar> grammar, int32_t n_vocab,
      std::span<const engine::TokenId> output);

  // Sets the logit of every token the grammar does not allow next to -inf. `logits` has n_vocab
  // entries. Returns false when no token is allowed at all (the grammar is at a dead end, or the
  // matcher ended with an end-of-generation token); the logits are then left as they were.
  bool MaskLogits(std::span<float> logits);

  // Advances past `token`. FAILED_PRECONDITION when the grammar does not allow it here.
  absl::Status Accept(engine::TokenId token);

  // Whether the output is complete (an end-of-generation token may end it now).
  bool IsComplete() const { return matcher_.IsCompleted(); }
  // Whether it ended: an end-of-generation token was accepted where it was complete.
  bool IsTerminated() const { return matcher_.IsTerminated(); }

 private:
  OutputMatcher(std::shared_ptr<const CompiledOutputGrammar> grammar, int32_t n_vocab);

  std::shared_ptr<const CompiledOutputGrammar> grammar_;  // what matcher_ reads
  xgrammar::GrammarMatcher matcher_;
  const int32_t n_vocab_;
  std::vector<int32_t> bitmask_;  // [ceil(n_vocab / 32)] bit i: token i allowed
};

// The matcher of a request drawing the token after `tokens` (its prompt, then what it generated)
// under `constraint`: compiled by `compiler` (slow the first time: off the engine loop), past the
// tokens that are output already (the prompt's last constraint.n_output_in_prompt, then
// `generated`). Null when the constraint's kind is kNone. INVALID_ARGUMENT when it does not
// compile, when n_output_in_prompt exceeds the prompt, or when the output so far does not match;
// FAILED_PRECONDITION when there is a constraint but no compiler.
absl::StatusOr<std::unique_ptr<OutputMatcher>> StartOutputMatcher(
    OutputGrammarCompiler* compiler, const engine::OutputConstraint& constraint,
    std::span<const engine::TokenId> prompt, std::span<const engine::TokenId> generated);

}  // namespace baton::grammar

#endif  // BATON_GRAMMAR_OUTPUT_MATCHER_H_
