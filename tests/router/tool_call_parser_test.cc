// Tool calls read from model output in each family's format (router/tool_call_parser.h): whole
// outputs, the same outputs streamed in pieces of every size (the deltas add up to the whole
// parse), content around calls, and outputs whose calls do not parse staying content.
#include "router/tool_call_parser.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::router {
namespace {

using testing::ElementsAre;
using testing::Field;

auto Call(const std::string& name, const std::string& arguments) {
  return testing::AllOf(Field(&ParsedToolCall::name, name),
                        Field(&ParsedToolCall::arguments, arguments));
}

// The output fed in pieces of `size` bytes: content and calls in the order they went out.
ToolCallStream::Delta Streamed(ToolCallFormat format, const std::string& output, size_t size) {
  ToolCallStream stream(format);
  ToolCallStream::Delta all;
  auto add = [&](ToolCallStream::Delta delta) {
    all.content += delta.content;
    for (ParsedToolCall& call : delta.tool_calls) all.tool_calls.push_back(std::move(call));
  };
  for (size_t i = 0; i < output.size(); i += size) add(stream.Feed(output.substr(i, size)));
  add(stream.Finish());
  return all;
}

// Whole and streamed in pieces of 1 to 13 bytes, the same result.
ToolCallStream::Delta Parse(ToolCallFormat format, const std::string& output) {
  const ToolCallStream::Delta whole = ParseToolCalls(format, output);
  for (size_t size = 1; size <= 13; ++size) {
    const ToolCallStream::Delta streamed = Streamed(format, output, size);
    EXPECT_EQ(streamed.content, whole.content) << "pieces of " << size << ": " << output;
    EXPECT_EQ(streamed.tool_calls.size(), whole.tool_calls.size()) << size << ": " << output;
  }
  return whole;
}

TEST(ToolCallParserTest, HermesCallsAndTheContentBeforeThem) {
  // Qwen2.5's way: content, then one tag per call, a newline between them.
  ToolCallStream::Delta d =
      Parse(ToolCallFormat::kHermes,
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
            "\"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(d.content, "Let me check.\n");
  EXPECT_THAT(d.tool_calls, ElementsAre(Call("get_weather", R"({"city":"Paris","unit":"c"})"),
                                        Call("get_time", "{}")));
  // Only text: all content, even with a '<' that starts no tag.
  d = Parse(ToolCallFormat::kHermes, "1 < 2 and <tool is a word");
  EXPECT_EQ(d.content, "1 < 2 and <tool is a word");
  EXPECT_TRUE(d.tool_calls.empty());
  // A call cut off by the end of generation still counts when its JSON is whole.
  d = Parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}");
  EXPECT_EQ(d.content, "");
  EXPECT_THAT(d.tool_calls, ElementsAre(Call("f", R"({"x":1})")));
}

TEST(ToolCallParserTest, HermesCallsThatDoNotParseStayContent) {
  for (const std::string bad : {
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": </tool_call>",  // bad JSON
           "<tool_call>{\"arguments\": {}}</tool_call>",                        // no name
           "<tool_call>{\"name\": 7}</tool_call>",                              // name not text
           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",      // not an object
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1",             // cut off
       }) {
    const ToolCallStream::Delta d = Parse(ToolCallFormat::kHermes, bad);
    EXPECT_EQ(d.content, bad);
    EXPECT_TRUE(d.tool_calls.empty()) << bad;
  }
  // Arguments given as JSON text of an object are taken.
  const ToolCallStream::Delta d =
      Parse(ToolCallFormat::kHermes,
            R"(<tool_call>{"name": "f", "arguments": "{\"x\": 2}"}</tool_call>)");
  EXPECT_THAT(d.tool_calls, ElementsAre(Call("f", R"({"x":2})")));
}

TEST(ToolCallParserTest, HermesNestingPastTheLimitIsContent) {
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": ";
  for (int i = 0; i < 40; ++i) deep += "{\"a\": ";
  deep += "1";
  for (int i = 0; i < 41; ++i) deep += "}";
  deep += "</tool_call>";
  const ToolCallStream::Delta d = ParseToolCalls(ToolCallFormat::kHermes, deep);
  EXPECT_EQ(d.content, deep);
  EXPECT_TRUE(d.tool_calls.empty());
}

TEST(ToolCallParserTest, Llama3JsonCalls) {
  ToolCallStream::Delta d =
      Parse(ToolCallFormat::kLlama3Json,
            "  {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; "
            "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"CET\"}}");
  EXPECT_EQ(d.content, "");
  EXPECT_THAT(d.tool_calls, ElementsAre(Call("get_weather", R"({"city":"Oslo"})"),
                                        Call("get_time", R"({"zone":"CET"})")));
  d = Parse(ToolCallFormat::kLlama3Json,
            "<|python_tag|>{\"name\": \"f\", \"arguments\": {\"s\": \"a } b\"}}");
  EXPECT_THAT(d.tool_calls, ElementsAre(Call("f", R"({"s":"a } b"})")));
  // Text is text; an object that is not a call is text too.
  d = Parse(ToolCallFormat::kLlama3Json, "The weather is {sunny}.");
  EXPECT_EQ(d.content, "The weather is {sunny}.");
  EXPECT_TRUE(d.tool_calls.empty());
  d = Parse(ToolCallFormat::kLlama3Json, "{\"weather\": \"sunny\"}");
  EXPECT_EQ(d.content, "{\"weather\": \"sunny\"}");
  EXPECT_TRUE(d.tool_calls.empty());
  d = Parse(ToolCallFormat::kLlama3Json, "{\"name\": \"f\"} and more");
  EXPECT_EQ(d.content, "{\"name\": \"f\"} and more");
}

TEST(ToolCallParserTest, MistralCallsInBothOfItsFormats) {
  ToolCallStream::Delta d =
      Parse(ToolCallFormat::kMistral,
            "Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
            "{\"name\": \"get_time\", \"arguments\": {}}]");
  EXPECT_EQ(d.content, "Sure.");
  EXPECT_THAT(d.tool_calls,
              ElementsAre(Call("get_weather", R"({"city":"Rome"})"), Call("get_time", "{}")));
  d = Parse(ToolCallFormat::kMistral,
            "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[ARGS]{}");
  EXPECT_THAT(d.tool_calls,
              ElementsAre(Call("get_weather", R"({"city":"Rome"})"), Call("get_time", "{}")));
  d = Parse(ToolCallFormat::kMistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": ");
  EXPECT_EQ(d.content, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": ");
  EXPECT_TRUE(d.tool_calls.empty());
  d = Parse(ToolCallFormat::kMistral, "No calls [TOOL here.");
  EXPECT_EQ(d.content, "No calls [TOOL here.");
}

// What tool_choice "required" and named functions constrain the output to: all of it calls.
TEST(ToolCallParserTest, JsonArrayCalls) {
  ToolCallStream::Delta d = Parse(
      ToolCallFormat::kJsonArray,
      R"([{"name": "get_weather", "parameters": {"city": "Rome"}}, {"name": "get_time", )"
      R"("parameters": {}}])");
  EXPECT_EQ(d.content, "");
  EXPECT_THAT(d.tool_calls,
              ElementsAre(Call("get_weather", R"({"city":"Rome"})"), Call("get_time", "{}")));
  d = Parse(ToolCallFormat::kJsonArray, R"([{"name": "f", "parameters": )");
  EXPECT_EQ(d.content, R"([{"name": "f", "parameters": )");  // cut short: stays content
  EXPECT_TRUE(d.tool_calls.empty());
  d = Parse(ToolCallFormat::kJsonArray, "[]");
  EXPECT_EQ(d.content, "[]");
  EXPECT_TRUE(d.tool_calls.empty());
}

// Outputs stitched at random from the formats' markers and pieces of JSON: every one reads the
// same whole and streamed in pieces of every size, and nothing is lost: what is not a call is
// content, and the calls' text is no longer there.
TEST(ToolCallParserTest, RandomOutputsReadTheSameWholeAndStreamed) {
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "<tool_", "call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>",
      "{\"name\": \"f\", \"arguments\": {\"x\": 1}}", "{\"name\": \"g\"}", "{", "}", "[", "]", "\"",
      "\\", ";", " ", "\n", "text", "<", "\xC3\xA9", "{\"name\": 3}",
      // Whole calls in each format.
      "<tool_call>{\"name\": \"h\", \"arguments\": {\"s\": \"<tool_call>\"}}</tool_call>",
      "[TOOL_CALLS][{\"name\": \"m\", \"arguments\": {}}]", "[TOOL_CALLS]m[ARGS]{\"k\": [1]}",
      "{\"name\": \"l\", \"parameters\": {\"q\": \"a;b\"}}",
      "[{\"name\": \"j\", \"parameters\": {}}]"};
  std::mt19937 random(47);
  int with_calls = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string output;
    const int n = 1 + static_cast<int>(random() % 12);
    for (int i = 0; i < n; ++i) output += pieces[random() % pieces.size()];
    for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                                  ToolCallFormat::kMistral, ToolCallFormat::kJsonArray}) {
      const ToolCallStream::Delta whole = ParseToolCalls(format, output);
      if (whole.tool_calls.empty()) {
        EXPECT_EQ(whole.content, output) << ToolCallFormatName(format);  // all of it content
      } else {
        EXPECT_LT(whole.content.size(), output.size()) << output;
        ++with_calls;
      }
      for (size_t size : {size_t{1}, size_t{3}, size_t{8}}) {
        const ToolCallStream::Delta streamed = Streamed(format, output, size);
        ASSERT_EQ(streamed.content, whole.content) << ToolCallFormatName(format) << " " << output;
        ASSERT_EQ(streamed.tool_calls.size(), whole.tool_calls.size()) << output;
        for (size_t c = 0; c < whole.tool_calls.size(); ++c) {
          EXPECT_EQ(streamed.tool_calls[c].name, whole.tool_calls[c].name);
          EXPECT_EQ(streamed.tool_calls[c].arguments, whole.tool_calls[c].arguments);
        }
      }
    }
  }
  EXPECT_GT(with_calls, 300);  // the outputs hold calls often enough to test them
}

TEST(ToolCallParserTest, FormatsByNameAndFromTemplates) {
  for (const char* name : {"hermes", "llama3_json", "mistral"}) {
    absl::StatusOr<ToolCallFormat> format = ToolCallFormatByName(name);
    ASSERT_TRUE(format.ok()) << format.status();
    EXPECT_STREQ(ToolCallFormatName(*format), name);
  }
  absl::StatusOr<ToolCallFormat> unknown = ToolCallFormatByName("pythonic");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), testing::HasSubstr("pythonic"));
  EXPECT_EQ(ToolCallFormatOfTemplate("... <tool_call>\\n{{ tool_call | tojson }} ..."),
            ToolCallFormat::kHermes);
  EXPECT_EQ(ToolCallFormatOfTemplate("{{ '[TOOL_CALLS]' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(ToolCallFormatOfTemplate("{{- '<|python_tag|>' }}"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ToolCallFormatOfTemplate("{{ messages[0]['content'] }}"), std::nullopt);
}

}  // namespace
}  // namespace baton::router
