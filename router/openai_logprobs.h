// OpenAI's `logprobs` objects, built from the router's GenerateResponse messages (their tokens and
// the TokenLogprobs beside them, which the router checked against the vocabulary):
//  - chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
//                 "logprob", "bytes"}, ...]}, ...]}
//  - completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}],
//                 "text_offset": [...]}; each top_logprobs entry also holds the generated token,
//                 as OpenAI's legacy API does ("up to logprobs + 1 elements").
// A token's text is its tokenizer piece, special tokens rendered ("<|im_end|>"); "bytes" are the
// piece's bytes, for pieces that are part of a UTF-8 character. A log-probability of -inf (a token
// the logits mask) is written -9999.0, as vLLM does: JSON has no infinity.
//
// Thread-compatible: one per choice of a response.
#ifndef BATON_ROUTER_OPENAI_LOGPROBS_H_
#define BATON_ROUTER_OPENAI_LOGPROBS_H_

#include <cstdint>

#include "baton/v1/router.pb.h"
#include "engine/tokenizer.h"
#include "nlohmann/json.hpp"
#include "router/openai_endpoint.h"

namespace baton::router {

class OpenAiLogprobs {
 public:
  // `tokenizer` outlives this.
  OpenAiLogprobs(OpenAiEndpoint endpoint, const engine::Tokenizer* tokenizer)
      : endpoint_(endpoint), tokenizer_(tokenizer) {}

  // An object of no tokens, in the endpoint's shape.
  nlohmann::ordered_json Empty() const;

  // Appends the entries of `message`'s tokens to `object` (from Empty()). Completions' text
  // offsets count on from the tokens appended before, to any object.
  void Append(const v1::GenerateResponse& message, nlohmann::ordered_json& object);

 private:
  nlohmann::ordered_json ChatEntry(int32_t token, const v1::TokenLogprobs& logprobs) const;
  void AppendCompletionsEntry(int32_t token, const v1::TokenLogprobs& logprobs,
                              nlohmann::ordered_json& object);

  OpenAiEndpoint endpoint_;
  const engine::Tokenizer* tokenizer_;
  int64_t text_offset_ = 0;  // completions: characters in the pieces of the tokens so far
};

}  // namespace baton::router

#endif  // BATON_ROUTER_OPENAI_LOGPROBS_H_
