// vLLM's /tokenize, /detokenize and /tokenizer_info on the router's HTTP API: what a prompt or a
// chat becomes (the very ids the router would prefill), ids back to text, and the tokenizer's
// special tokens.
//
//   POST /tokenize    {"prompt": "..."} or {"messages": [...], "add_generation_prompt": true,
//                     "chat_template_kwargs": {...}}, "model" optional
//                     -> {"count": N, "max_model_len": CTX, "tokens": [...]}
//                     "add_special_tokens": false leaves out the BOS a text prompt would get
//   POST /detokenize  {"tokens": [...]} -> {"prompt": "..."} (special tokens written out)
//   GET /tokenizer_info -> {"tokenizer_class", "bos_token", "eos_token", "pad_token",
//                     "add_bos_token", "model_max_length", "chat_template"} (what
//                     lm-evaluation-harness's remote tokenizer reads; absent tokens are null)
//
// Bodies are read with the OpenAI API's parser and limits (router/http_openai.h), so a chat here
// is rendered and checked exactly as /v1/chat/completions renders it.
//
// Thread-safety: pure functions.
#ifndef BATON_ROUTER_HTTP_TOKENIZE_H_
#define BATON_ROUTER_HTTP_TOKENIZE_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/served_model.h"

namespace baton::router {

// The response body, or INVALID_ARGUMENT / NOT_FOUND as the OpenAI endpoints give them.
absl::StatusOr<nlohmann::ordered_json> TokenizeBody(const std::string& body,
                                                    const ServedModel& model);
absl::StatusOr<nlohmann::ordered_json> DetokenizeBody(const std::string& body,
                                                      const ServedModel& model);
nlohmann::ordered_json TokenizerInfo(const ServedModel& model);

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_TOKENIZE_H_
