// Prompt-lookup proposals (vLLM's "ngram" method, llama.cpp's lookup decoding): no second model.
// The guess for what follows a sequence is what followed the most recent earlier occurrence of
// its last n tokens, in the prompt or the output so far. It pays where output copies from input:
// summaries, edits of a given text or code, quoting.
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
  int32_t min_n = 2;  // shortest suffix that may match
  int32_t max_n = 4;  // longest suffix tried first
};

// For n from max_n down to min_n: the latest start p with tokens[p, p+n) equal to the last n
// tokens (p + n < tokens.size(), so not the suffix itself) gives tokens[p+n, p+n+max_tokens)
// (fewer at the end of the sequence). Empty when no n matches or max_tokens <= 0.
std::vector<TokenId> PromptLookup(std::span<const TokenId> tokens, int32_t max_tokens,
                                  const NgramOptions& options);

std::unique_ptr<Proposer> CreateNgramProposer(const NgramOptions& options = {});

}  // namespace baton::engine

#endif  // BATON_ENGINE_NGRAM_PROPOSER_H_
