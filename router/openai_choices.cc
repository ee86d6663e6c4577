#include "router/openai_choices.h"

#include <algorithm>
#include <numeric>

namespace baton::router {

using json = nlohmann::ordered_json;

OpenAiChoices::OpenAiChoices(OpenAiEndpoint endpoint, int n, int n_candidates,
                             std::optional<OpenAiLogprobs> logprobs,
                             std::optional<EchoedPrompt> echo,
                             std::optional<ToolCallReading> tool_calls)
    : endpoint_(endpoint),
      n_(n),
      echo_(std::move(echo)),
      tool_calls_(tool_calls),
      candidates_(n_candidates) {
  for (Candidate& candidate : candidates_) {
    if (echo_.has_value()) candidate.text = echo_->text;
    if (!logprobs.has_value()) continue;
    candidate.builder = logprobs;
    candidate.logprobs = logprobs->Empty();
    candidate.prompt_pending = echo_.has_value();
  }
}

void OpenAiChoices::Add(int index, const v1::GenerateResponse& message) {
  Candidate& candidate = candidates_.at(static_cast<size_t>(index));
  candidate.text += message.text();
  for (const v1::TokenLogprobs& logprobs : message.logprobs()) {
    candidate.logprob_sum += logprobs.logprob();
  }
  if (index == 0 && message.prompt_logprobs_size() > 0) {
    prompt_logprobs_ = message.prompt_logprobs();
  }
  if (candidate.builder.has_value()) {
    if (candidate.prompt_pending) {
      candidate.builder->AppendPrompt(echo_->tokens, prompt_logprobs_, echo_->added_bos,
                                      Utf8Characters(echo_->text), candidate.logprobs);
      candidate.prompt_pending = false;
    }
    candidate.builder->Append(message, candidate.logprobs);
  }
  if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    candidate.finish_reason = message.finish_reason();
    candidate.usage = message.usage();
  }
}

json OpenAiChoices::Answer(const OpenAiResponseContext& context) const {
  std::vector<size_t> order(candidates_.size());
  std::iota(order.begin(), order.end(), 0);
  if (static_cast<int>(candidates_.size()) > n_) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return candidates_[a].logprob_sum > candidates_[b].logprob_sum;
    });
    order.resize(static_cast<size_t>(n_));
  }
  json choices = json::array();
  for (size_t i = 0; i < order.size(); ++i) {
    const Candidate& candidate = candidates_[order[i]];
    ToolCallStream::Delta read{.content = candidate.text};
    if (tool_calls_.has_value()) {
      read = ParseToolCalls(tool_calls_->format, candidate.text);
      if (!tool_calls_->parallel && read.tool_calls.size() > 1) read.tool_calls.resize(1);
    }
    choices.push_back(OpenAiChoice(endpoint_, static_cast<int>(i), read.content,
                                   candidate.finish_reason, candidate.logprobs, read.tool_calls));
  }
  std::vector<v1::Usage> usages;
  for (const Candidate& candidate : candidates_) usages.push_back(candidate.usage);
  return OpenAiCompletion(context, std::move(choices), CombinedUsage(usages));
}

}  // namespace baton::router
