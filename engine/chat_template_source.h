// Where a chat template's source comes from: the model's file (tokenizer.chat_template), a
// template built in under a name, or a file the user names (--chat-template NAME|FILE).
//
// Thread-safety: pure functions.
#ifndef BATON_ENGINE_CHAT_TEMPLATE_SOURCE_H_
#define BATON_ENGINE_CHAT_TEMPLATE_SOURCE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace baton::engine {

// The templates built in, for models whose files carry none:
//   chatml  <|im_start|>role\ncontent<|im_end|>\n per message (no default system message);
//   llama3  Meta-Llama-3-8B-Instruct's;
//   gemma   Gemma 3's (google/gemma-3-270m-it's tokenizer_config.json).
inline constexpr char kBuiltinChatTemplateNames[] = "chatml, llama3, gemma";

// `choice` empty: `model_template` (the model's own), or NOT_FOUND saying how to name one when
// the model has none. A built-in name: that template. Otherwise a path: the file's text, or an
// error naming the file (INVALID_ARGUMENT when it is empty, too large or not valid UTF-8).
absl::StatusOr<std::string> ChatTemplateSource(std::string_view choice,
                                               std::string_view model_template);

}  // namespace baton::engine

#endif  // BATON_ENGINE_CHAT_TEMPLATE_SOURCE_H_
