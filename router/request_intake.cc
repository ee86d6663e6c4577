#include "router/request_intake.h"

#include "engine/block_hash.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grammar/output_grammar.h"
#include "router/chat_input.h"
#include "rpc/sampling_params_proto.h"

namespace baton::router {
namespace {

absl::StatusOr<std::vector<engine::TokenId>> Tokenize(const v1::GenerateRequest& request,
                                                     const ServedModel& model) {
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      return model.prompt_encoder().EncodeText(request.prompt());
    case v1::GenerateRequest::kChat: {
      absl::StatusOr<engine::ChatTemplateInput> chat = ChatInput(request.chat());
      if (!chat.ok()) return chat.status();
      return model.prompt_encoder().EncodeChat(*chat);
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

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& request,
                                               const ServedModel& model, uint64_t random_seed) {
  if (!request.model().empty() && request.model() != model.id() &&
      request.model() != model.general_name()) {
    return absl::NotFoundError(absl::StrCat("model '", request.model(),
                                            "' is not served here; this router serves '",
                                            model.id(), "'"));
  }
  if (request.cache_salt().size() > engine::kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cache_salt of ", request.cache_salt().size(),
                                                   " bytes exceeds ", engine::kMaxCacheSaltBytes));
  }
  PreparedRequest prepared;
  prepared.cache_salt = request.cache_salt();
  absl::StatusOr<std::vector<engine::TokenId>> prompt = Tokenize(request, model);
  if (!prompt.ok()) return prompt.status();
  if (prompt->empty()) return absl::InvalidArgumentError("prompt is empty");
  prepared.prompt = std::move(*prompt);
  absl::StatusOr<engine::SamplingParams> params =
      rpc::SamplingParamsFromProto(request.sampling(), model.n_vocab(), random_seed);
  if (!params.ok()) return params.status();
  prepared.params = *std::move(params);
  if (prepared.params.constraint.n_output_in_prompt != 0) {
    return absl::InvalidArgumentError(
        "sampling.constraint.n_output_in_prompt is the router's to set (for migrated requests)");
  }
  if (absl::Status s = grammar::CheckOutputConstraint(prepared.params.constraint); !s.ok()) {
    return s;
  }
  const int64_t n_prompt = static_cast<int64_t>(prepared.prompt.size());
  if (n_prompt + prepared.params.max_tokens > model.n_ctx()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", n_prompt, " tokens) + max_tokens (", prepared.params.max_tokens,
        ") = ", n_prompt + prepared.params.max_tokens, " exceeds the model's context of ",
        model.n_ctx(), " tokens"));
  }
  prepared.wire = rpc::SamplingParamsToProto(prepared.params);
  prepared.wire.clear_stop();  // stop strings are the router's business
  return prepared;
}

}  // namespace baton::router
