#include "router/http_tokenize.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "router/chat_input.h"
#include "router/http_errors.h"
#include "router/http_openai.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

absl::Status Invalid(absl::string_view param, absl::string_view message) {
  return WithParam(absl::InvalidArgumentError(message), param);
}

absl::StatusOr<std::vector<engine::TokenId>> Encode(const v1::GenerateRequest& request,
                                                    const ServedModel& model) {
  switch (request.input_case()) {
    case v1::GenerateRequest::kChat: {
      absl::StatusOr<engine::ChatTemplateInput> chat = ChatInput(request.chat());
      if (!chat.ok()) return chat.status();
      return model.prompt_encoder().EncodeChat(*chat);
    }
    case v1::GenerateRequest::kPrompt:
      return model.prompt_encoder().EncodeText(request.prompt());
    default:
      return Invalid("prompt", "'prompt' must be text here: token ids are tokens already");
  }
}

// vLLM's "add_special_tokens" (default true).
absl::StatusOr<bool> AddSpecialTokens(const json& root) {
  auto v = root.find("add_special_tokens");
  if (v == root.end()) return true;
  if (!v->is_boolean()) {
    return Invalid("add_special_tokens", "'add_special_tokens' must be a boolean");
  }
  return v->get<bool>();
}

// A special token's text, or null where the vocabulary has none.
json TokenText(const engine::Tokenizer& tokenizer, engine::TokenId id) {
  if (id < 0 || id >= tokenizer.vocab().size()) return nullptr;
  return tokenizer.TokenToPiece(id, /*render_special=*/true);
}

}  // namespace

absl::StatusOr<json> TokenizeBody(const std::string& body, const ServedModel& model) {
  absl::StatusOr<json> root = ParseJsonBody(body);
  if (!root.ok()) return root.status();
  const bool chat = root->contains("messages");
  // The OpenAI parser checks the fields (types, the model's name) and reads the prompt or the
  // chat the way generation does.
  absl::StatusOr<OpenAiRequest> request =
      ParseOpenAiRequest(chat ? OpenAiEndpoint::kChatCompletions : OpenAiEndpoint::kCompletions,
                         *root, model.id(), model.general_name());
  if (!request.ok()) return request.status();
  absl::StatusOr<std::vector<engine::TokenId>> ids = Encode(request->generate, model);
  if (!ids.ok()) return WithParam(ids.status(), chat ? "messages" : "prompt");
  absl::StatusOr<bool> add_special = AddSpecialTokens(*root);
  if (!add_special.ok()) return add_special.status();
  const engine::Vocab& vocab = model.tokenizer().vocab();
  if (!*add_special && !chat && vocab.add_bos && !ids->empty() && ids->front() == vocab.bos_id) {
    ids->erase(ids->begin());
  }
  return json{{"count", ids->size()}, {"max_model_len", model.n_ctx()}, {"tokens", *ids}};
}

absl::StatusOr<json> DetokenizeBody(const std::string& body, const ServedModel& model) {
  absl::StatusOr<json> root = ParseJsonBody(body);
  if (!root.ok()) return root.status();
  auto tokens = root->find("tokens");
  if (tokens == root->end() || !tokens->is_array()) {
    return Invalid("tokens", "'tokens' must be an array of token ids");
  }
  std::vector<engine::TokenId> ids;
  ids.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& id = (*tokens)[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= model.n_vocab()) {
      return Invalid("tokens", absl::StrCat("'tokens[", i, "]' must be a token id in [0, ",
                                            model.n_vocab(), ")"));
    }
    ids.push_back(static_cast<engine::TokenId>(id.get<int64_t>()));
  }
  return json{{"prompt", model.tokenizer().Decode(ids, /*render_special=*/true)}};
}

json TokenizerInfo(const ServedModel& model) {
  const engine::Tokenizer& tokenizer = model.tokenizer();
  const engine::Vocab& vocab = tokenizer.vocab();
  const absl::StatusOr<engine::ChatTemplate>& chat_template =
      model.prompt_encoder().chat_template();
  return json{{"tokenizer_class", "baton"},
              {"bos_token", TokenText(tokenizer, vocab.bos_id)},
              {"eos_token", TokenText(tokenizer, vocab.eos_id)},
              {"pad_token", TokenText(tokenizer, vocab.pad_id)},
              {"add_bos_token", vocab.add_bos},
              {"model_max_length", model.n_ctx()},
              {"chat_template",
               chat_template.ok() ? json(chat_template->source()) : json(nullptr)}};
}

}  // namespace baton::router
