// The generation side of one request: the tokens so far, and what each newly sampled token means
// for the client — the text it adds (complete UTF-8, with stop strings held back and cut) and
// whether generation is over and why.
//
// Shared by `baton generate`, the colocated worker and the decode worker so that every path stops
// for the same reasons and streams the same bytes.
// Thread-compatible: one per request.
#ifndef BATON_ENGINE_GENERATION_STATE_H_
#define BATON_ENGINE_GENERATION_STATE_H_

#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "engine/stop_matcher.h"
#include "engine/tokenizer.h"

namespace baton::engine {

enum class FinishReason {
  kNone,    // still generating
  kStop,    // end-of-generation token, a stop token id or a stop string
  kLength,  // max_tokens reached, or the model's context is full
};

std::string_view FinishReasonName(FinishReason reason);  // "", "stop", "length"

// The token-level stop rules, the one place they are written: after `token` was generated as the
// `n_generated`-th token, with `n_tokens` tokens (prompt + generated) in the sequence,
//  - kStop when it is an end-of-generation token (unless params.ignore_eos) or a stop token id;
//  - else kLength when max_tokens or `max_context` is reached;
//  - else kNone.
// Stop strings need the text and are GenerationState's business on top of this.
FinishReason FinishReasonAfterToken(const Tokenizer& tokenizer, const SamplingParams& params,
                                    TokenId token, int32_t n_generated, int32_t n_tokens,
                                    int32_t max_context);

class GenerationState {
 public:
  // `max_context` bounds prompt + generated tokens (the model's context length).
  GenerationState(const Tokenizer& tokenizer, const SamplingParams& params,
                  std::vector<TokenId> prompt, int32_t max_context);

  // Records a sampled token and returns the text it releases (may be empty). After the call,
  // finished() says whether generation is over. Programmer error once finished.
  std::string Accept(TokenId token);

  bool finished() const { return finish_reason_ != FinishReason::kNone; }
  FinishReason finish_reason() const { return finish_reason_; }
  const SamplingParams& params() const { return params_; }
  // Prompt followed by the generated tokens.
  const std::vector<TokenId>& tokens() const { return tokens_; }
  int32_t n_prompt() const { return n_prompt_; }
  int32_t n_generated() const { return static_cast<int32_t>(tokens_.size()) - n_prompt_; }

 private:
  const Tokenizer& tokenizer_;
  const SamplingParams params_;
  const int32_t n_prompt_;
  const int32_t max_context_;
  std::vector<TokenId> tokens_;
  IncrementalDetokenizer detokenizer_;
  StopMatcher stop_matcher_;
  FinishReason finish_reason_ = FinishReason::kNone;
};

}  // namespace baton::engine

#endif  // BATON_ENGINE_GENERATION_STATE_H_
