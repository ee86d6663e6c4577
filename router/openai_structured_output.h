// Structured output in OpenAI-style requests, as the wire's v1::OutputConstraint:
//   response_format     OpenAI's: {"type": "text"} (none), {"type": "json_object"}, or
//                       {"type": "json_schema", "json_schema": {"name": ..., "schema": {...},
//                       "strict": bool}}
//   structured_outputs  vLLM's: {"json": schema (object or JSON text), "regex": "...",
//                       "choice": ["...", ...], "grammar": "EBNF", "json_object": true}, one key
//   guided_json, guided_regex, guided_choice, guided_grammar: vLLM's older names of the same
// and the constraint that tool_choice "required" or a named function puts on the output: a JSON
// array of calls [{"name": ..., "parameters": {...}}, ...] (vLLM's form for them) of the tools
// allowed, with their parameter schemas, read back by ToolCallFormat::kJsonArray.
// A request names at most one constraint. Whether a schema, regular expression or grammar compiles
// is checked later, at intake (grammar::CheckOutputConstraint).
//
// Thread-safety: pure functions.
#ifndef BATON_ROUTER_OPENAI_STRUCTURED_OUTPUT_H_
#define BATON_ROUTER_OPENAI_STRUCTURED_OUTPUT_H_

#include <string>

#include "absl/status/status.h"
#include "baton/v1/common.pb.h"
#include "nlohmann/json.hpp"

namespace baton::router {

// Sets sampling.constraint from the request body's structured-output fields; leaves it unset when
// there are none. INVALID_ARGUMENT naming the field for malformed ones or more than one.
absl::Status ParseStructuredOutput(const nlohmann::ordered_json& body,
                                   baton::v1::SamplingParams& sampling);

// The constraint of tool_choice "required" (`function` empty: any of `tools`) or of the named
// `function`: a JSON array of one call (`parallel` false, or a named function) or more. `tools`
// is the request's tools array, already checked (names unique). INVALID_ARGUMENT (param
// tool_choice) when `function` names none of them, or when the request has another constraint.
absl::Status ConstrainToToolCalls(const nlohmann::ordered_json& tools, const std::string& function,
                                  bool parallel, baton::v1::SamplingParams& sampling);

}  // namespace baton::router

#endif  // BATON_ROUTER_OPENAI_STRUCTURED_OUTPUT_H_
