#include "router/request_intake.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/chat_template.h"
#include "engine/unicode.h"

namespace baton::router {
namespace {

absl::StatusOr<std::vector<engine::TokenId>> Tokenize(const v1::GenerateRequest& request,
                                                     const ServedModel& model) {
  const engine::Tokenizer& tokenizer = model.tokenizer();
  const engine::EncodeOptions encode{.add_bos = tokenizer.vocab().add_bos, .parse_special = true};
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt: {
      const std::string& text = request.prompt();
      if (text.empty()) return absl::InvalidArgumentError("prompt is empty");
      if (!engine::unicode::IsValidUtf8(text)) {
        return absl::InvalidArgumentError("prompt is not valid UTF-8");
      }
      return tokenizer.Encode(text, encode);
    }
    case v1::GenerateRequest::kChat: {
      const auto& messages = request.chat().messages();
      if (messages.empty()) return absl::InvalidArgumentError("prompt is empty: chat has no messages");
      std::vector<engine::ChatMessage> chat;
      chat.reserve(messages.size());
      for (int i = 0; i < messages.size(); ++i) {
        const v1::ChatMessage& m = messages[i];
        if (m.role().empty()) {
          return absl::InvalidArgumentError(absl::StrCat("chat message ", i, " has no role"));
        }
        if (!engine::unicode::IsValidUtf8(m.role()) || !engine::unicode::IsValidUtf8(m.content())) {
          return absl::InvalidArgumentError(
              absl::StrCat("chat message ", i, " is not valid UTF-8"));
        }
        chat.push_back({m.role(), m.content()});
      }
      if (!model.chat_template().ok()) return model.chat_template().status();
      const std::string text = engine::ApplyChatTemplate(
          *model.chat_template(), chat, /*add_generation_prompt=*/true, model.default_system());
      return tokenizer.Encode(text, encode);
    }
    case v1::GenerateRequest::kPromptTokens: {
      const auto& ids = request.prompt_tokens().ids();
      const int32_t n_vocab = model.n_vocab();
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
          return absl::InvalidArgumentError(absl::StrCat("prompt_tokens[", i, "] = ", ids[i],
                                                         " is outside the vocabulary [0, ",
                                                         n_vocab, ")"));
        }
      }
      return std::vector<engine::TokenId>(ids.begin(), ids.end());
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("prompt is empty: set one of prompt, chat, prompt_tokens");
}

}  // namespace

engine::SamplingParams SamplingFromProto(const v1::SamplingParams& wire, uint64_t random_seed) {
  engine::SamplingParams p;
  p.temperature = wire.temperature();
  p.top_k = wire.top_k();
  p.top_p = wire.top_p() == 0.0f ? 1.0f : wire.top_p();
  p.min_p = wire.min_p();
  p.repetition_penalty = wire.repetition_penalty() == 0.0f ? 1.0f : wire.repetition_penalty();
  p.frequency_penalty = wire.frequency_penalty();
  p.presence_penalty = wire.presence_penalty();
  p.seed = wire.has_seed() ? wire.seed() : random_seed;
  p.max_tokens = wire.max_tokens() == 0 ? kDefaultMaxTokens : wire.max_tokens();
  p.stop_token_ids.assign(wire.stop_token_ids().begin(), wire.stop_token_ids().end());
  p.stop_strings.assign(wire.stop().begin(), wire.stop().end());
  p.ignore_eos = wire.ignore_eos();
  return p;
}

v1::SamplingParams SamplingToProto(const engine::SamplingParams& params) {
  v1::SamplingParams wire;
  wire.set_temperature(params.temperature);
  wire.set_top_k(params.top_k);
  wire.set_top_p(params.top_p);
  wire.set_min_p(params.min_p);
  wire.set_repetition_penalty(params.repetition_penalty);
  wire.set_frequency_penalty(params.frequency_penalty);
  wire.set_presence_penalty(params.presence_penalty);
  wire.set_seed(params.seed);
  wire.set_max_tokens(params.max_tokens);
  for (int32_t id : params.stop_token_ids) wire.add_stop_token_ids(id);
  wire.set_ignore_eos(params.ignore_eos);
  return wire;
}

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const ServedModel& model, uint64_t random_seed) {
  if (!request.model().empty() && request.model() != model.id() &&
      request.model() != model.general_name()) {
    return absl::NotFoundError(absl::StrCat("model '", request.model(),
                                            "' is not served here; this router serves '",
                                            model.id(), "'"));
  }
  PreparedRequest prepared;
  absl::StatusOr<std::vector<engine::TokenId>> prompt = Tokenize(request, model);
  if (!prompt.ok()) return prompt.status();
  if (prompt->empty()) return absl::InvalidArgumentError("prompt is empty");
  prepared.prompt = std::move(*prompt);
  prepared.params = SamplingFromProto(request.sampling(), random_seed);
  if (absl::Status s = engine::ValidateSamplingParams(prepared.params, model.n_vocab()); !s.ok()) {
    return s;
  }
  const int64_t n_prompt = static_cast<int64_t>(prepared.prompt.size());
  if (n_prompt + prepared.params.max_tokens > model.n_ctx()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", n_prompt, " tokens) + max_tokens (", prepared.params.max_tokens,
        ") = ", n_prompt + prepared.params.max_tokens, " exceeds the model's context of ",
        model.n_ctx(), " tokens"));
  }
  prepared.wire = SamplingToProto(prepared.params);
  return prepared;
}

}  // namespace baton::router
