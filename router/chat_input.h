// The chat a GenerateRequest carries, as its chat template's input (engine/chat_template.h).
//
// Each message becomes {"role", "content", ...}: content left out of an assistant message that
// has tool calls and no text (OpenAI's clients send null there, which transformers drops); each
// tool call as {"id", "type": "function", "function": {"name", "arguments"}} (the arguments' JSON
// text, which the template's input takes as an object); tool_call_id, name and reasoning_content
// where set.
// template_kwargs becomes the template's extra variables, tools its `tools`; add_generation_prompt
// is true unless set false.
//
// Thread-safety: pure functions.
#ifndef BATON_ROUTER_CHAT_INPUT_H_
#define BATON_ROUTER_CHAT_INPUT_H_

#include "absl/status/statusor.h"
#include "baton/v1/router.pb.h"
#include "engine/chat_template.h"

namespace baton::router {

// INVALID_ARGUMENT when template_kwargs is not a JSON object or tools not a JSON array (or either
// nests deeper than engine::kMaxChatInputDepth).
absl::StatusOr<engine::ChatTemplateInput> ChatInput(const v1::ChatMessages& chat);

}  // namespace baton::router

#endif  // BATON_ROUTER_CHAT_INPUT_H_
