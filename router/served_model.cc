#include "router/served_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "engine/chat_template.h"
#include "engine/chat_template_source.h"

namespace baton::router {

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(
    const std::string& path, int32_t n_ctx, const std::string& chat_template,
    const std::string& tool_call_parser, const engine::LoadOptions& load) {
  // The router never runs the model: its config, tokenizer and fingerprint are all it reads.
  engine::LoadOptions describe = load;
  describe.weights = false;
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path, describe);
  if (!model.ok()) return model.status();
  // A template the operator names must be usable; the model's own may not be (chats are then
  // refused, saying why, and text prompts still served).
  absl::StatusOr<std::string> source =
      engine::ChatTemplateSource(chat_template, (*model)->tokenizer().vocab().chat_template);
  if (!chat_template.empty() && !source.ok()) return source.status();
  std::unique_ptr<ServedModel> served(new ServedModel());
  served->model_ = std::move(*model);
  const int32_t n_ctx_train = served->model_->config().n_ctx_train;
  served->n_ctx_ = n_ctx > 0 ? std::min(n_ctx, n_ctx_train) : n_ctx_train;
  served->prompt_encoder_ =
      std::make_unique<engine::PromptEncoder>(&served->model_->tokenizer(), source);
  const absl::Status usable = served->prompt_encoder_->chat_template().status();
  if (!usable.ok()) {
    if (!chat_template.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--chat-template ", chat_template, ": ", usable.message()));
    }
    BATON_LOG(WARNING) << "chat requests will be refused: " << usable.message();
  }
  if (!tool_call_parser.empty()) {
    absl::StatusOr<ToolCallFormat> format = ToolCallFormatByName(tool_call_parser);
    if (!format.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tool-call-parser: ", format.status().message()));
    }
    served->tool_call_format_ = *format;
  } else if (usable.ok()) {
    served->tool_call_format_ =
        ToolCallFormatOfTemplate(served->prompt_encoder_->chat_template()->source());
  }
  return served;
}

}  // namespace baton::router
