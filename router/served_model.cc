#include "router/served_model.h"

#include <algorithm>

namespace baton::router {

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const std::string& path,
                                                               int32_t n_ctx) {
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path);
  if (!model.ok()) return model.status();
  std::unique_ptr<ServedModel> served(new ServedModel());
  served->model_ = std::move(*model);
  const int32_t n_ctx_train = served->model_->config().n_ctx_train;
  served->n_ctx_ = n_ctx > 0 ? std::min(n_ctx, n_ctx_train) : n_ctx_train;
  served->prompt_encoder_ =
      std::make_unique<engine::PromptEncoder>(&served->model_->tokenizer());
  return served;
}

}  // namespace baton::router
