#include "router/served_model.h"

#include <algorithm>

#include "engine/chat_template.h"

namespace baton::router {

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const std::string& path,
                                                               int32_t n_ctx,
                                                               const std::string& chat_template) {
  if (!chat_template.empty()) {
    if (absl::Status s = engine::ParseChatTemplateName(chat_template).status(); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path);
  if (!model.ok()) return model.status();
  std::unique_ptr<ServedModel> served(new ServedModel());
  served->model_ = std::move(*model);
  const int32_t n_ctx_train = served->model_->config().n_ctx_train;
  served->n_ctx_ = n_ctx > 0 ? std::min(n_ctx, n_ctx_train) : n_ctx_train;
  served->prompt_encoder_ =
      std::make_unique<engine::PromptEncoder>(&served->model_->tokenizer(), chat_template);
  return served;
}

}  // namespace baton::router
