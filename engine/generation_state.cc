#include "engine/generation_state.h"

#include <algorithm>

#include "absl/log/check.h"

namespace baton::engine {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "";
}

GenerationState::GenerationState(const Tokenizer& tokenizer, const SamplingParams& params,
                                 std::vector<TokenId> prompt, int32_t max_context)
    : tokenizer_(tokenizer),
      params_(params),
      n_prompt_(static_cast<int32_t>(prompt.size())),
      max_context_(max_context),
      tokens_(std::move(prompt)),
      detokenizer_(tokenizer),
      stop_matcher_(params.stop_strings) {}

std::string GenerationState::Accept(TokenId token) {
  CHECK(!finished()) << "token accepted after generation finished";
  tokens_.push_back(token);
  const bool stop_token =
      (!params_.ignore_eos && tokenizer_.IsEndOfGeneration(token)) ||
      std::find(params_.stop_token_ids.begin(), params_.stop_token_ids.end(), token) !=
          params_.stop_token_ids.end();
  std::string text;
  if (stop_token) {
    finish_reason_ = FinishReason::kStop;
  } else {
    StopMatcher::Result r = stop_matcher_.Feed(detokenizer_.Add(token));
    text = std::move(r.emit);
    if (r.stopped) finish_reason_ = FinishReason::kStop;
  }
  if (!finished() && (n_generated() >= params_.max_tokens ||
                      static_cast<int32_t>(tokens_.size()) >= max_context_)) {
    finish_reason_ = FinishReason::kLength;
  }
  if (finished() && !stop_matcher_.stopped()) {
    StopMatcher::Result r = stop_matcher_.Feed(detokenizer_.Flush());
    text += r.emit;
    if (!r.stopped) text += stop_matcher_.Flush();
  }
  return text;
}

}  // namespace baton::engine
