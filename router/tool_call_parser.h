// Tool calls in a model's output, read the way each model family writes them (vLLM's tool
// parsers of the same names):
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one tag per call
//                (Qwen2.5, Qwen3, Hermes); text outside the tags is content
//   llama3_json  an output that is {"name": ..., "parameters": {...}} (or "arguments"), several
//                joined by ";", optionally after <|python_tag|> (Llama 3.1 - 3.3)
//   mistral      [TOOL_CALLS] then [{"name": ..., "arguments": {...}}, ...] (Mistral v3
//                tokenizers) or name[ARGS]{...} per call (v11); text before it is content
//   json_array   an output that is [{"name": ..., "parameters": {...}}, ...]: what tool_choice
//                "required" and named functions constrain the output to (vLLM's form); not a
//                model family's, so not among --tool-call-parser's choices
// A call is an object with a string "name"; its arguments are handed on as JSON text of an object
// ({} when absent). Output whose calls do not parse stays content, as in vLLM: a model that
// writes half a call has written text. Model output is JSON-checked with the request bodies'
// depth limit (kMaxJsonDepth).
//
// Thread-compatible: a ToolCallStream per choice.
#ifndef BATON_ROUTER_TOOL_CALL_PARSER_H_
#define BATON_ROUTER_TOOL_CALL_PARSER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::router {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral, kJsonArray };

// By vLLM's --tool-call-parser name ("hermes", "llama3_json", "mistral"); INVALID_ARGUMENT
// naming the known ones otherwise.
absl::StatusOr<ToolCallFormat> ToolCallFormatByName(absl::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
// The format a chat template teaches its model, from the markers it writes; none when it
// shows none.
std::optional<ToolCallFormat> ToolCallFormatOfTemplate(absl::string_view source);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object
};

// Reads an output as it streams: text goes out as content until a call may begin (a suffix that
// could be the start of a call's marker is held back); from there it is held, and a call goes
// out once it is complete (hermes) or the output ends (the others: their calls run to the end).
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format) : format_(format) {}

  struct Delta {
    std::string content;
    std::vector<ParsedToolCall> tool_calls;
    bool empty() const { return content.empty() && tool_calls.empty(); }
  };
  // The next text of the output.
  Delta Feed(absl::string_view text);
  // The output ended: what is held, parsed (or as content when it does not parse).
  Delta Finish();

 private:
  // hermes: takes complete <tool_call>...</tool_call> spans and the content before them.
  void TakeHermes(Delta& delta, bool final);
  // Where the held text may hold a call's start: content before it goes out.
  void TakeContentBefore(absl::string_view marker, Delta& delta, bool final);

  const ToolCallFormat format_;
  std::string held_;
  bool in_calls_ = false;    // llama3_json, mistral: the output is (now) calls
  bool after_call_ = false;  // hermes: a call was just read (white space after it is dropped)
  bool started_ = false;     // llama3_json: a non-space character was seen
};

// The whole output at once: the stream's deltas together.
ToolCallStream::Delta ParseToolCalls(ToolCallFormat format, absl::string_view output);

}  // namespace baton::router

#endif  // BATON_ROUTER_TOOL_CALL_PARSER_H_
