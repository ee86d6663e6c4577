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

FinishReason FinishReasonAfterToken(const Tokenizer& tokenizer, const SamplingParams& params,
                                    TokenId token, int32_t n_generated, int32_t n_tokens,
                                    int32_t max_context) {
  const bool stop_token =
      (!params.ignore_eos && tokenizer.IsEndOfGeneration(token)) ||
      std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
          params.stop_token_ids.end();
  if (stop_token) return FinishReason::kStop;
  if (n_generated >= params.max_tokens || n_tokens >= max_context) return FinishReason::kLength;
  return FinishReason::kNone;
}

GenerationState::GenerationState(const Tokenizer& tokenizer, const SamplingParams& params,
                                 std::vector<TokenId> prompt, int32_t max_context)
    : tokenizer_(tokenizer),
      params_(params),
      n_prompt_(static_cast<int32_t>(prompt.size())),
      max_context_(max_context),
      tokens_(std::move(prompt)),
      detokenizer_(tokenizer, /*render_special=*/!params.skip_special_tokens),
      stop_matcher_(params.stop_strings) {}

std::string GenerationState::Accept(TokenId token) {
  CHECK(!finished()) << "token accepted after generation finished";
  tokens_.push_back(token);
  const FinishReason by_token =
      FinishReasonAfterToken(tokenizer_, params_, token, n_generated(),
                             static_cast<int32_t>(tokens_.size()), max_context_);
  std::string text;
  if (by_token == FinishReason::kStop) {
    finish_reason_ = FinishReason::kStop;
  } else {
    StopMatcher::Result r = stop_matcher_.Feed(detokenizer_.Add(token));
    text = std::move(r.emit);
    finish_reason_ = r.stopped ? FinishReason::kStop : by_token;
  }
  if (finished() && !stop_matcher_.stopped()) {
    StopMatcher::Result r = stop_matcher_.Feed(detokenizer_.Flush());
    text += r.emit;
    if (!r.stopped) text += stop_matcher_.Flush();
  }
  return text;
}

}  // namespace baton::engine
