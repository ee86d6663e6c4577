// The OpenAI wire format of the router's HTTP API: request bodies of POST /v1/completions and
// POST /v1/chat/completions turned into a v1::GenerateRequest (what the gRPC API takes, so both
// front ends share the request's way), and the router's GenerateResponse messages turned into
// OpenAI response objects and server-sent-event chunks.
//
// Request parsing checks shapes and ranges and names the offending field (the status carries it
// as the error's "param", http_errors.h); what depends on the model (tokens, context length) is
// left to the router's intake (request_intake.h). Unknown fields are ignored; known but
// unsupported ones (tool_choice "required", echo with stream, best_of with stream, ...) are
// refused with INVALID_ARGUMENT instead of being silently dropped.
//
// Thread-safety: pure functions; an OpenAiStreamEncoder is used by one thread at a time.
#ifndef BATON_ROUTER_HTTP_OPENAI_H_
#define BATON_ROUTER_HTTP_OPENAI_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "baton/v1/router.pb.h"
#include "nlohmann/json.hpp"
#include "router/openai_endpoint.h"
#include "router/openai_logprobs.h"
#include "router/tool_call_parser.h"

namespace baton::router {

// OpenAI's default max_tokens for /v1/completions; chat requests without one get the router's
// default (kDefaultMaxTokens).
inline constexpr int32_t kCompletionsDefaultMaxTokens = 16;

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  // model (when given), one input (prompt, chat or prompt_tokens) and the sampling settings;
  // unset fields keep the wire's "unset" meaning (router defaults).
  v1::GenerateRequest generate;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // /v1/completions' echo: the answer's text starts with the prompt, and its logprobs (when
  // asked for) with the prompt's tokens (generate.sampling.prompt_logprobs is set to them).
  bool echo = false;
  // Choices to answer (OpenAI's n) and, on /v1/completions, candidates to generate of which the
  // n with the highest sum of log-probabilities are answered (best_of; n when absent).
  int32_t n = 1;
  int32_t best_of = 1;
  // Chat with `tools`: whether the model's output is read for tool calls ("auto") or not
  // ("none", and when there are no tools); parallel_tool_calls false keeps the first call only.
  bool parse_tool_calls = false;
  bool parallel_tool_calls = true;
  // tool_choice "required" or a named function: the output is constrained to a JSON array of
  // calls (openai_structured_output.h) and read as ToolCallFormat::kJsonArray.
  bool tool_calls_forced = false;
};

// Tools a chat request may bring at most (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;

// n and best_of at most (vLLM has no bound; each choice is a request of its own here).
inline constexpr int32_t kMaxChoices = 16;

// JSON objects and arrays nest at most this deep in a request body (OpenAI requests need about 5).
inline constexpr int kMaxJsonDepth = 32;

// Parses and checks a request body. INVALID_ARGUMENT (with the field as param) for malformed
// JSON, JSON nested deeper than kMaxJsonDepth, wrong types, out-of-range values and unsupported features; NOT_FOUND (code
// "model_not_found") when `model` names neither `model_id` nor `model_alias`.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, const std::string& body,
                                                 absl::string_view model_id,
                                                 absl::string_view model_alias);
// The same, of a body ParseJsonBody has read.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint,
                                                 const nlohmann::ordered_json& root,
                                                 absl::string_view model_id,
                                                 absl::string_view model_alias);

// A request body as a JSON object: INVALID_ARGUMENT for malformed JSON, JSON nested deeper than
// kMaxJsonDepth, or a body that is not an object. The one reading of every JSON body.
absl::StatusOr<nlohmann::ordered_json> ParseJsonBody(const std::string& body);
// Any JSON text (model output too), with the same limits; INVALID_ARGUMENT saying what is wrong.
absl::StatusOr<nlohmann::ordered_json> ParseJson(const std::string& text);

// What every response object of one request repeats.
struct OpenAiResponseContext {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
  std::string system_fingerprint;
};

// "stop" | "length" (anything else that ends a request successfully counts as "stop").
const char* OpenAiFinishReason(v1::FinishReason reason);

nlohmann::ordered_json OpenAiUsage(const v1::Usage& usage);

// One choice of a whole answer; `logprobs` is the choice's (router/openai_logprobs.h), null when
// the request asked for none. A chat choice with `tool_calls` has them in its message (its
// content null when empty) and finishes with "tool_calls".
nlohmann::ordered_json OpenAiChoice(OpenAiEndpoint endpoint, int index, const std::string& text,
                                    v1::FinishReason finish_reason,
                                    nlohmann::ordered_json logprobs = nullptr,
                                    const std::vector<ParsedToolCall>& tool_calls = {});

// OpenAI's tool_calls entries: {"id": "call_...", "type": "function", "function": {"name",
// "arguments"}}, each with a new id; streamed ones (`first_index` >= 0) also carry their index
// in the choice's calls, counting from first_index.
nlohmann::ordered_json OpenAiToolCalls(const std::vector<ParsedToolCall>& calls,
                                       int first_index = -1);

// How a chat's output is read for tool calls: the model's format, and whether more than one call
// is kept (parallel_tool_calls).
struct ToolCallReading {
  ToolCallFormat format = ToolCallFormat::kHermes;
  bool parallel = true;
};

// The whole answer of a non-streaming request: a "text_completion" or "chat.completion" of
// `choices` (OpenAiChoice's).
nlohmann::ordered_json OpenAiCompletion(const OpenAiResponseContext& context,
                                        nlohmann::ordered_json choices, const v1::Usage& usage);
// The same, of one choice.
nlohmann::ordered_json OpenAiCompletion(const OpenAiResponseContext& context,
                                        const std::string& text, v1::FinishReason finish_reason,
                                        const v1::Usage& usage,
                                        nlohmann::ordered_json logprobs = nullptr);

// The usage of choices generated for one prompt: the prompt (and its cached tokens) once, as the
// first choice's, the generated tokens of all.
v1::Usage CombinedUsage(const std::vector<v1::Usage>& choices);

// "data: <json>\n\n"
std::string SseData(const nlohmann::ordered_json& value);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// Turns the GenerateResponse messages of a request's `n_choices` choices into streaming chunks
// ("text_completion" or "chat.completion.chunk"), each naming its choice's index: a chat
// choice's first chunk carries the role, every chunk with text a content delta (with the
// log-probabilities of the message's tokens when `logprobs` is given, then also for tokens whose
// text is still held back), the last message a chunk with the finish reason; then End() adds the
// usage chunk (empty choices; CombinedUsage) when include_usage was asked for and every choice
// finished, or the error as an in-band {"error": ...} event, and the closing [DONE]. With
// `tool_calls`, a chat choice's text is read for calls as it streams (ToolCallStream): text that
// may be a call is held, and each call goes out whole in a {"tool_calls": [...]} delta.
class OpenAiStreamEncoder {
 public:
  OpenAiStreamEncoder(OpenAiResponseContext context, bool include_usage,
                      std::optional<OpenAiLogprobs> logprobs = std::nullopt, int n_choices = 1,
                      std::optional<ToolCallReading> tool_calls = std::nullopt);

  std::string Message(const v1::GenerateResponse& message, int choice = 0);
  std::string End(const absl::Status& status);

 private:
  struct Choice {
    std::optional<OpenAiLogprobs> logprobs;
    std::optional<ToolCallStream> tool_calls;  // reads the text when the request has tools
    int calls_sent = 0;
    bool sent_role = false;
    std::optional<v1::Usage> usage;  // once it finished
  };
  nlohmann::ordered_json Chunk(nlohmann::ordered_json choice) const;

  const OpenAiResponseContext context_;
  const bool include_usage_;
  const bool parallel_tool_calls_;
  std::vector<Choice> choices_;
};

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_OPENAI_H_
