// OpenAI's `logprobs` objects, built from the router's GenerateResponse messages (their tokens and
// the TokenLogprobs beside them, which the router checked against the vocabulary):
//  - chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
//                 "logprob", "bytes"}, ...]}, ...]}
//  - completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}],
//                 "text_offset": [...]}; each top_logprobs entry also holds the generated token,
//                 as OpenAI's legacy API does ("up to logprobs + 1 elements"). With `echo`, the
//                 prompt's tokens come first, the first of them with a null log-probability and
//                 null top_logprobs (nothing predicts it), and text offsets count over the echoed
//                 text: a BOS the tokenizer added to a text prompt takes none of it.
// A token's text is its tokenizer piece, special tokens rendered ("<|im_end|>"); "bytes" are the
// piece's bytes, for pieces that are part of a UTF-8 character. A log-probability of -inf (a token
// the logits mask) is written -9999.0, as vLLM does: JSON has no infinity.
//
// Thread-compatible: one per choice of a response.
#ifndef BATON_ROUTER_OPENAI_LOGPROBS_H_
#define BATON_ROUTER_OPENAI_LOGPROBS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/v1/router.pb.h"
#include "engine/tokenizer.h"
#include "nlohmann/json.hpp"
#include "router/openai_endpoint.h"

namespace baton::router {

// Characters of UTF-8 text (its bytes that are not continuation bytes): the unit of completions'
// text offsets.
int64_t Utf8Characters(const std::string& text);

// What /v1/completions' echo puts before the generated text: the prompt as the client sent it
// (token ids decoded), its tokens, and whether the first of them is a BOS the tokenizer added.
struct EchoedPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  bool added_bos = false;
};
// `prompt`: the request's tokens, as the router's intake made them.
EchoedPrompt EchoPrompt(const v1::GenerateRequest& request, std::vector<int32_t> prompt,
                        const engine::Tokenizer& tokenizer);

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

  // Completions with echo, before any generated token: the entries of the prompt `tokens`, whose
  // `logprobs` (GenerateResponse.prompt_logprobs) are those of tokens 1, 2, ...; the text
  // offsets of the tokens after them start at `echo_characters`, the echoed text's length.
  // `added_bos`: tokens[0] is a BOS the tokenizer added, not part of the echoed text.
  void AppendPrompt(const std::vector<int32_t>& tokens,
                    const google::protobuf::RepeatedPtrField<v1::TokenLogprobs>& logprobs,
                    bool added_bos, int64_t echo_characters, nlohmann::ordered_json& object);

 private:
  nlohmann::ordered_json ChatEntry(int32_t token, const v1::TokenLogprobs& logprobs) const;
  // `logprobs` null: the prompt's first token, which nothing predicts.
  void AppendCompletionsEntry(int32_t token, const v1::TokenLogprobs* logprobs,
                              nlohmann::ordered_json& object);

  OpenAiEndpoint endpoint_;
  const engine::Tokenizer* tokenizer_;
  int64_t text_offset_ = 0;  // completions: characters in the pieces of the tokens so far
};

}  // namespace baton::router

#endif  // BATON_ROUTER_OPENAI_LOGPROBS_H_
