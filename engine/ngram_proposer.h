// Prompt-lookup proposals (vLLM's "ngram" method, llama.cpp's lookup decoding): no second model.
// The guess for what follows a sequence is what followed the earlier occurrence of its last tokens
// that matches the most of them, in the prompt or the output so far. It pays where output copies
// from input: summaries, edits of a given text or code, quoting. The longest match, not merely
// the latest, matters in code, where short runs ("    total = ") recur with different
// continuations: replaying the greedy outputs of bench/datasets/copy_edit.jsonl offline, it
// raised the acceptance of 4 proposals from 81% (the latest match of the last 4..2 tokens) to 84%.
//
// Cost: O(tokens * max_n) comparisons per proposal, no memory kept between calls.
// Thread-safety: stateless; one thread at a time per Proposer like every proposer.
#ifndef BATON_ENGINE_NGRAM_PROPOSER_H_
#define BATON_ENGINE_NGRAM_PROPOSER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/proposer.h"

namespace baton::engine {

struct NgramOptions {
  int32_t min_n = 2;   // shortest match that proposes anything
  int32_t max_n = 16;  // matches are compared up to this many tokens; longer ones tie
};

// The match at an end e < tokens.size() - 1 is the number n of tokens, at most max_n, for which
// tokens[e-n+1, e] equals the last n tokens. The end with the longest match of at least min_n
// (the latest among equal ones) gives tokens[e+1, e+1+max_tokens) (fewer at the end of the
// sequence). Empty when no end matches min_n tokens or max_tokens <= 0.
std::vector<TokenId> PromptLookup(std::span<const TokenId> tokens, int32_t max_tokens,
                                  const NgramOptions& options);

std::unique_ptr<Proposer> CreateNgramProposer(const NgramOptions& options = {});

}  // namespace baton::engine

#endif  // BATON_ENGINE_NGRAM_PROPOSER_H_
