// The whole answer of a non-streaming OpenAI request of one or more choices (n, best_of), built
// from each choice's GenerateResponse messages: its text (after the echoed prompt, with echo),
// its logprobs object (router/openai_logprobs.h), finish reason and usage, and the sum of its
// generated tokens' log-probabilities; a chat's text read for tool calls when the request has
// tools (router/tool_call_parser.h). The answer holds every choice, or with best_of > n the n
// with the highest sums, highest first (vLLM's order), renumbered 0..n-1; the usage counts the
// prompt once and the tokens of every candidate generated.
//
// Thread-compatible: one per request.
#ifndef BATON_ROUTER_OPENAI_CHOICES_H_
#define BATON_ROUTER_OPENAI_CHOICES_H_

#include <optional>
#include <string>
#include <vector>

#include "baton/v1/router.pb.h"
#include "nlohmann/json.hpp"
#include "router/http_openai.h"
#include "router/openai_logprobs.h"

namespace baton::router {

class OpenAiChoices {
 public:
  // `n_candidates` choices are generated and `n` answered. `logprobs`: the request asked for
  // them (a candidate's sum needs its messages' logprobs either way). `echo`: what each choice
  // starts with.
  OpenAiChoices(OpenAiEndpoint endpoint, int n, int n_candidates,
                std::optional<OpenAiLogprobs> logprobs, std::optional<EchoedPrompt> echo,
                std::optional<ToolCallReading> tool_calls = std::nullopt);

  // The next message of candidate `index`, in order. With echo and logprobs, the prompt's
  // log-probabilities come with candidate 0's first message only (the others do not ask for
  // them: GenerateCall), which comes before any other candidate's.
  void Add(int index, const v1::GenerateResponse& message);

  // Once every candidate has finished.
  nlohmann::ordered_json Answer(const OpenAiResponseContext& context) const;

 private:
  struct Candidate {
    std::string text;
    std::optional<OpenAiLogprobs> builder;
    nlohmann::ordered_json logprobs;  // null unless the request asked for them
    bool prompt_pending = false;      // echo: the prompt's logprobs entries are still to come
    v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
    v1::Usage usage;
    double logprob_sum = 0;
  };

  OpenAiEndpoint endpoint_;
  int n_;
  std::optional<EchoedPrompt> echo_;
  std::optional<ToolCallReading> tool_calls_;
  std::vector<Candidate> candidates_;
  // Candidate 0's prompt log-probabilities, the echo of every candidate.
  google::protobuf::RepeatedPtrField<v1::TokenLogprobs> prompt_logprobs_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_OPENAI_CHOICES_H_
