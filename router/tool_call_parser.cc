#include "router/tool_call_parser.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/http_openai.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

constexpr absl::string_view kHermesStart = "<tool_call>";
constexpr absl::string_view kHermesEnd = "</tool_call>";
constexpr absl::string_view kPythonTag = "<|python_tag|>";
constexpr absl::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr absl::string_view kMistralArgs = "[ARGS]";

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t PartialMarkerSuffix(absl::string_view text, absl::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// A call from its JSON object: a string "name", arguments an object (or JSON text of one) under
// `arguments` or `parameters`, {} when absent.
std::optional<ParsedToolCall> CallOf(const json& call) {
  if (!call.is_object()) return std::nullopt;
  auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  auto arguments = call.find("arguments");
  if (arguments == call.end()) arguments = call.find("parameters");
  ParsedToolCall out{.name = name->get<std::string>(), .arguments = "{}"};
  if (arguments == call.end()) return out;
  if (arguments->is_string()) {
    absl::StatusOr<json> parsed = ParseJson(arguments->get_ref<const std::string&>());
    if (!parsed.ok() || !parsed->is_object()) return std::nullopt;
    out.arguments = parsed->dump();
  } else if (arguments->is_object()) {
    out.arguments = arguments->dump();
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<ParsedToolCall> CallOfText(absl::string_view text) {
  absl::StatusOr<json> parsed = ParseJson(std::string(text));
  if (!parsed.ok()) return std::nullopt;
  return CallOf(*parsed);
}

// The top-level JSON objects of `text`, separated by white space and ';' (llama3_json); none
// when anything else is there.
std::optional<std::vector<absl::string_view>> SplitObjects(absl::string_view text) {
  std::vector<absl::string_view> objects;
  size_t i = 0;
  while (true) {
    while (i < text.size() && (absl::ascii_isspace(text[i]) || text[i] == ';')) ++i;
    if (i == text.size()) break;
    if (text[i] != '{') return std::nullopt;
    const size_t begin = i;
    int depth = 0;
    bool in_string = false;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
        }
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        break;
      }
    }
    if (i >= text.size()) return std::nullopt;  // unterminated
    objects.push_back(text.substr(begin, ++i - begin));
  }
  return objects;
}

std::optional<std::vector<ParsedToolCall>> Llama3Calls(absl::string_view text) {
  std::optional<std::vector<absl::string_view>> objects = SplitObjects(text);
  if (!objects.has_value() || objects->empty()) return std::nullopt;
  std::vector<ParsedToolCall> calls;
  for (absl::string_view object : *objects) {
    std::optional<ParsedToolCall> call = CallOfText(object);
    if (!call.has_value()) return std::nullopt;
    calls.push_back(*std::move(call));
  }
  return calls;
}

// A non-empty JSON array of calls.
std::optional<std::vector<ParsedToolCall>> ArrayCalls(absl::string_view text) {
  absl::StatusOr<json> parsed = ParseJson(std::string(text));
  if (!parsed.ok() || !parsed->is_array() || parsed->empty()) return std::nullopt;
  std::vector<ParsedToolCall> calls;
  for (const json& item : *parsed) {
    std::optional<ParsedToolCall> call = CallOf(item);
    if (!call.has_value()) return std::nullopt;
    calls.push_back(*std::move(call));
  }
  return calls;
}

// After [TOOL_CALLS]: a JSON array of calls, or name[ARGS]{...} per call.
std::optional<std::vector<ParsedToolCall>> MistralCalls(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (absl::StartsWith(text, "[")) return ArrayCalls(text);
  std::vector<ParsedToolCall> calls;
  while (!text.empty()) {
    const size_t args = text.find(kMistralArgs);
    if (args == absl::string_view::npos) return std::nullopt;
    const absl::string_view name = absl::StripAsciiWhitespace(text.substr(0, args));
    absl::string_view rest = text.substr(args + kMistralArgs.size());
    const size_t next = rest.find(kMistralCalls);
    const absl::string_view arguments = rest.substr(0, next);
    std::optional<ParsedToolCall> call =
        CallOf(json{{"name", std::string(name)}, {"arguments", std::string(arguments)}});
    if (!call.has_value()) return std::nullopt;
    calls.push_back(*std::move(call));
    text = next == absl::string_view::npos ? absl::string_view()
                                           : rest.substr(next + kMistralCalls.size());
  }
  return calls.empty() ? std::nullopt : std::optional(std::move(calls));
}

}  // namespace

absl::StatusOr<ToolCallFormat> ToolCallFormatByName(absl::string_view name) {
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    if (name == ToolCallFormatName(format)) return format;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown tool call parser '", std::string(name),
                                                 "': hermes, llama3_json or mistral"));
}

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kJsonArray:
      return "json_array";
  }
  return "";
}

std::optional<ToolCallFormat> ToolCallFormatOfTemplate(absl::string_view source) {
  if (absl::StrContains(source, kHermesStart)) return ToolCallFormat::kHermes;
  if (absl::StrContains(source, kMistralCalls)) return ToolCallFormat::kMistral;
  if (absl::StrContains(source, kPythonTag) || absl::StrContains(source, "<|eom_id|>")) {
    return ToolCallFormat::kLlama3Json;
  }
  return std::nullopt;
}

void ToolCallStream::TakeContentBefore(absl::string_view marker, Delta& delta, bool final) {
  const size_t keep = final ? 0 : PartialMarkerSuffix(held_, marker);
  delta.content += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

void ToolCallStream::TakeHermes(Delta& delta, bool final) {
  while (true) {
    if (after_call_) {
      // White space right after a call is not content.
      const size_t text = held_.find_first_not_of(" \t\r\n\f\v");
      if (text == std::string::npos) {
        if (final) held_.clear();
        return;
      }
      held_.erase(0, text);
      after_call_ = false;
    }
    const size_t start = held_.find(kHermesStart.data(), 0, kHermesStart.size());
    if (start == std::string::npos) return TakeContentBefore(kHermesStart, delta, final);
    delta.content += held_.substr(0, start);
    held_.erase(0, start);
    const size_t end = held_.find(kHermesEnd.data(), 0, kHermesEnd.size());
    if (end == std::string::npos && !final) return;  // the call is not complete yet
    const absl::string_view body = absl::string_view(held_).substr(
        kHermesStart.size(),
        end == std::string::npos ? std::string::npos : end - kHermesStart.size());
    const size_t span = end == std::string::npos ? held_.size() : end + kHermesEnd.size();
    if (std::optional<ParsedToolCall> call = CallOfText(body); call.has_value()) {
      delta.tool_calls.push_back(*std::move(call));
      after_call_ = true;
    } else {
      delta.content += held_.substr(0, span);
    }
    held_.erase(0, span);
  }
}

ToolCallStream::Delta ToolCallStream::Feed(absl::string_view text) {
  Delta delta;
  held_.append(text.data(), text.size());
  switch (format_) {
    case ToolCallFormat::kHermes:
      TakeHermes(delta, /*final=*/false);
      break;
    case ToolCallFormat::kMistral:
      if (in_calls_) break;
      if (const size_t at = held_.find(kMistralCalls.data(), 0, kMistralCalls.size());
          at != std::string::npos) {
        delta.content = held_.substr(0, at);
        held_.erase(0, at + kMistralCalls.size());
        in_calls_ = true;
        break;
      }
      TakeContentBefore(kMistralCalls, delta, /*final=*/false);
      break;
    case ToolCallFormat::kJsonArray:
      break;  // the whole output is the calls: held to the end
    case ToolCallFormat::kLlama3Json: {
      if (started_) {
        if (!in_calls_) std::swap(delta.content, held_);
        break;
      }
      absl::string_view rest = absl::StripLeadingAsciiWhitespace(held_);
      if (rest.empty()) break;
      if (absl::StartsWith(rest, kPythonTag)) rest = rest.substr(kPythonTag.size());
      rest = absl::StripLeadingAsciiWhitespace(rest);
      if (rest.empty() || absl::StartsWith(kPythonTag, rest)) break;  // not decided yet
      started_ = true;
      in_calls_ = rest[0] == '{';
      if (!in_calls_) std::swap(delta.content, held_);
      break;
    }
  }
  return delta;
}

ToolCallStream::Delta ToolCallStream::Finish() {
  Delta delta;
  switch (format_) {
    case ToolCallFormat::kHermes:
      TakeHermes(delta, /*final=*/true);
      break;
    case ToolCallFormat::kMistral:
      if (!in_calls_) {
        std::swap(delta.content, held_);
      } else if (auto calls = MistralCalls(held_); calls.has_value()) {
        delta.tool_calls = *std::move(calls);
      } else {
        delta.content = absl::StrCat(kMistralCalls, held_);
      }
      break;
    case ToolCallFormat::kJsonArray:
      if (auto calls = ArrayCalls(held_); calls.has_value()) {
        delta.tool_calls = *std::move(calls);
      } else {
        delta.content = held_;
      }
      break;
    case ToolCallFormat::kLlama3Json: {
      absl::string_view rest = absl::StripLeadingAsciiWhitespace(held_);
      if (absl::StartsWith(rest, kPythonTag)) rest = rest.substr(kPythonTag.size());
      std::optional<std::vector<ParsedToolCall>> calls =
          in_calls_ ? Llama3Calls(rest) : std::nullopt;
      if (calls.has_value()) {
        delta.tool_calls = *std::move(calls);
      } else {
        delta.content = held_;
      }
      break;
    }
  }
  held_.clear();
  return delta;
}

ToolCallStream::Delta ParseToolCalls(ToolCallFormat format, absl::string_view output) {
  ToolCallStream stream(format);
  ToolCallStream::Delta all = stream.Feed(output);
  ToolCallStream::Delta last = stream.Finish();
  all.content += last.content;
  for (ParsedToolCall& call : last.tool_calls) all.tool_calls.push_back(std::move(call));
  return all;
}

}  // namespace baton::router
