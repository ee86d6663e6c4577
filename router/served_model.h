// The model a router serves, as far as the router needs it: the tokenizer and chat template to
// turn requests into tokens, the context length to check them against, the name clients use, and
// the fingerprint workers must match. The router never runs the model.
//
// Thread-safety: immutable after Load(); share it freely between threads.
#ifndef BATON_ROUTER_SERVED_MODEL_H_
#define BATON_ROUTER_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model.h"
#include "engine/prompt_encoder.h"
#include "engine/tokenizer.h"
#include "router/tool_call_parser.h"

namespace baton::router {

class ServedModel {
 public:
  // Opens the GGUF file at `path` (mapped; no weight is read). `n_ctx` > 0 caps the context the
  // router allows per request (prompt + max_tokens); 0 means the model's training context.
  // `chat_template` names the template chats are rendered with: a built-in name or a file
  // (engine/chat_template_source.h); empty: the model's own. An error naming it when it cannot be
  // read or does not parse.
  // `tool_call_parser` names how chat outputs are read for tool calls (tool_call_parser.h);
  // empty: the format the chat template shows, if any.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Load(
      const std::string& path, int32_t n_ctx = 0, const std::string& chat_template = "",
      const std::string& tool_call_parser = "", const engine::LoadOptions& load = {});

  // What clients call the model: the file's name without ".gguf" (general.name if that is empty).
  const std::string& id() const { return model_->id(); }
  // general.name, may be empty. Requests may name the model by it too.
  const std::string& general_name() const { return model_->config().name; }
  const std::string& fingerprint() const { return model_->fingerprint(); }
  int32_t n_ctx() const { return n_ctx_; }
  int32_t n_vocab() const { return model_->config().n_vocab; }
  const engine::Tokenizer& tokenizer() const { return model_->tokenizer(); }
  // Text and chats to prompt tokens, with the model's own chat template (or the one named).
  const engine::PromptEncoder& prompt_encoder() const { return *prompt_encoder_; }
  // How the model writes tool calls; none: chats with tools are served only with tool_choice
  // "none".
  std::optional<ToolCallFormat> tool_call_format() const { return tool_call_format_; }

 private:
  ServedModel() = default;
  std::unique_ptr<engine::Model> model_;
  int32_t n_ctx_ = 0;
  std::unique_ptr<engine::PromptEncoder> prompt_encoder_;
  std::optional<ToolCallFormat> tool_call_format_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_SERVED_MODEL_H_
