// The whole answer of several choices (router/openai_choices.h) and the stream of several choices
// (OpenAiStreamEncoder): which candidates best_of keeps and in what order, the usage counting the
// prompt once, echo on every choice, and each streamed chunk naming its choice.
#include "router/openai_choices.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/http_openai.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

// The last message of a candidate: `text`, tokens with these log-probabilities, a finish reason
// and the usage of a 5-token prompt (2 of them cached).
v1::GenerateResponse Last(const std::string& text, const std::vector<float>& logprobs) {
  v1::GenerateResponse m;
  m.set_text(text);
  for (float logprob : logprobs) {
    m.add_tokens(1);
    m.add_logprobs()->set_logprob(logprob);
  }
  m.set_finish_reason(v1::FINISH_REASON_LENGTH);
  m.mutable_usage()->set_prompt_tokens(5);
  m.mutable_usage()->set_cached_prompt_tokens(2);
  m.mutable_usage()->set_completion_tokens(static_cast<int32_t>(logprobs.size()));
  return m;
}

const OpenAiResponseContext kContext = {.endpoint = OpenAiEndpoint::kCompletions, .id = "cmpl-1"};

TEST(OpenAiChoicesTest, EveryChoiceInOrderWhenAllAreAnswered) {
  OpenAiChoices choices(OpenAiEndpoint::kCompletions, 2, 2, std::nullopt, std::nullopt);
  choices.Add(1, Last(" b", {-5.0f}));
  choices.Add(0, Last(" a", {-1.0f, -1.0f}));
  const json answer = choices.Answer(kContext);
  ASSERT_EQ(answer["choices"].size(), 2u);
  EXPECT_EQ(answer["choices"][0]["index"], 0);
  EXPECT_EQ(answer["choices"][0]["text"], " a");
  EXPECT_EQ(answer["choices"][1]["index"], 1);
  EXPECT_EQ(answer["choices"][1]["text"], " b");
  EXPECT_EQ(answer["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(answer["usage"]["completion_tokens"], 3);
  EXPECT_EQ(answer["usage"]["total_tokens"], 8);
  EXPECT_EQ(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(OpenAiChoicesTest, BestOfKeepsTheHighestSumsHighestFirst) {
  OpenAiChoices choices(OpenAiEndpoint::kCompletions, 2, 4, std::nullopt, std::nullopt);
  v1::GenerateResponse first;  // a candidate's tokens may come in several messages
  first.set_text(" one");
  first.add_tokens(1);
  first.add_logprobs()->set_logprob(-2.0f);
  choices.Add(0, first);
  v1::GenerateResponse more = Last(" more", {-2.0f});  // -4 in all
  more.mutable_usage()->set_completion_tokens(2);
  choices.Add(0, more);
  choices.Add(1, Last(" two", {-0.5f, -0.5f, -0.5f}));  // -1.5
  choices.Add(2, Last(" three", {-3.0f}));
  choices.Add(3, Last(" four", {-1.0f, -0.5f}));  // -1.5, the same as " two": after it
  const json answer = choices.Answer(kContext);
  ASSERT_EQ(answer["choices"].size(), 2u);
  EXPECT_EQ(answer["choices"][0]["text"], " two");
  EXPECT_EQ(answer["choices"][0]["index"], 0);
  EXPECT_EQ(answer["choices"][1]["text"], " four");
  EXPECT_EQ(answer["choices"][1]["index"], 1);
  EXPECT_EQ(answer["choices"][1]["finish_reason"], "length");
  EXPECT_TRUE(answer["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(answer["usage"]["completion_tokens"], 8);  // every candidate's tokens
}

TEST(OpenAiChoicesTest, EveryChoiceEchoesThePrompt) {
  OpenAiChoices chat(OpenAiEndpoint::kChatCompletions, 1, 1, std::nullopt, std::nullopt);
  chat.Add(0, Last("Hi", {}));
  EXPECT_EQ(chat.Answer({.endpoint = OpenAiEndpoint::kChatCompletions})["choices"][0]["message"],
            json({{"role", "assistant"}, {"content", "Hi"}}));
  OpenAiChoices echoed(OpenAiEndpoint::kCompletions, 2, 2, std::nullopt,
                       EchoedPrompt{.text = "Say", .tokens = {7}});
  echoed.Add(0, Last(" a", {}));
  echoed.Add(1, Last(" b", {}));
  const json answer = echoed.Answer(kContext);
  EXPECT_EQ(answer["choices"][0]["text"], "Say a");
  EXPECT_EQ(answer["choices"][1]["text"], "Say b");
}

const char kTwoCalls[] =
    "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Rome\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
    "</tool_call>";

// A chat whose tools are read: the calls in the message, the text before them as content,
// finish_reason "tool_calls"; parallel_tool_calls false keeps the first; none read: all text.
TEST(OpenAiChoicesTest, ToolCallsOfAWholeAnswer) {
  const OpenAiResponseContext chat = {.endpoint = OpenAiEndpoint::kChatCompletions};
  OpenAiChoices choices(OpenAiEndpoint::kChatCompletions, 1, 1, std::nullopt, std::nullopt,
                        ToolCallReading{.format = ToolCallFormat::kHermes});
  choices.Add(0, Last(kTwoCalls, {}));
  json answer = choices.Answer(chat);
  const json& message = answer["choices"][0]["message"];
  EXPECT_EQ(message["content"], "Checking.\n");
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_NE(message["tool_calls"][0]["id"], message["tool_calls"][1]["id"]);
  EXPECT_EQ(message["tool_calls"][0]["function"],
            json({{"name", "get_weather"}, {"arguments", R"({"city":"Rome"})"}}));
  EXPECT_EQ(message["tool_calls"][1]["function"]["name"], "get_time");
  EXPECT_FALSE(message["tool_calls"][0].contains("index"));
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "tool_calls");

  OpenAiChoices one(OpenAiEndpoint::kChatCompletions, 1, 1, std::nullopt, std::nullopt,
                    ToolCallReading{.format = ToolCallFormat::kHermes, .parallel = false});
  one.Add(0, Last(std::string(kTwoCalls).substr(10), {}));  // no content before the calls
  answer = one.Answer(chat);
  EXPECT_TRUE(answer["choices"][0]["message"]["content"].is_null());
  ASSERT_EQ(answer["choices"][0]["message"]["tool_calls"].size(), 1u);

  OpenAiChoices unread(OpenAiEndpoint::kChatCompletions, 1, 1, std::nullopt, std::nullopt);
  unread.Add(0, Last(kTwoCalls, {}));
  answer = unread.Answer(chat);
  EXPECT_EQ(answer["choices"][0]["message"]["content"], kTwoCalls);
  EXPECT_FALSE(answer["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");
}

// The JSON payloads of "data: ..." events, [DONE] as the string "[DONE]".
std::vector<json> Events(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end + 2;
  }
  return out;
}

TEST(OpenAiChoicesTest, StreamedChunksNameTheirChoiceAndUsageWaitsForAll) {
  OpenAiStreamEncoder encoder({.endpoint = OpenAiEndpoint::kChatCompletions, .id = "c"},
                              /*include_usage=*/true, std::nullopt, /*n_choices=*/2);
  v1::GenerateResponse hello;
  hello.set_text("Hello");
  std::string sse = encoder.Message(hello, 1);
  sse += encoder.Message(Last("Hi", {-1.0f}), 0);
  sse += encoder.Message(Last("!", {-1.0f, -1.0f}), 1);
  sse += encoder.End(absl::OkStatus());
  const std::vector<json> events = Events(sse);
  ASSERT_EQ(events.size(), 7u);
  // Each choice's first chunk names the role.
  EXPECT_EQ(events[0]["choices"][0]["index"], 1);
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "Hello"}}));
  EXPECT_EQ(events[1]["choices"][0]["index"], 0);
  EXPECT_EQ(events[1]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "Hi"}}));
  EXPECT_EQ(events[2]["choices"][0]["index"], 0);
  EXPECT_EQ(events[2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events[3]["choices"][0]["index"], 1);
  EXPECT_EQ(events[3]["choices"][0]["delta"], json({{"content", "!"}}));
  EXPECT_EQ(events[4]["choices"][0]["index"], 1);
  EXPECT_EQ(events[4]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events[5]["choices"], json::array());
  EXPECT_EQ(events[5]["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(events[5]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(events[6], "[DONE]");

  // A choice that never finished (the stream ends in error): no usage chunk.
  OpenAiStreamEncoder unfinished({.endpoint = OpenAiEndpoint::kCompletions, .id = "c"},
                                 /*include_usage=*/true, std::nullopt, /*n_choices=*/2);
  sse = unfinished.Message(Last(" a", {}), 0);
  sse += unfinished.End(absl::UnavailableError("decode worker gone"));
  const std::vector<json> failed = Events(sse);
  ASSERT_EQ(failed.size(), 4u);
  EXPECT_TRUE(failed[2].contains("error"));
  EXPECT_EQ(failed[3], "[DONE]");
}

// Streamed: text that may be a call is held; each call goes out whole, with its index among the
// choice's calls; the choice finishes with "tool_calls".
TEST(OpenAiChoicesTest, StreamedToolCallsGoOutWholeWithTheirIndex) {
  OpenAiStreamEncoder encoder({.endpoint = OpenAiEndpoint::kChatCompletions, .id = "c"},
                              /*include_usage=*/false, std::nullopt, /*n_choices=*/1,
                              ToolCallReading{.format = ToolCallFormat::kHermes});
  const std::string output = kTwoCalls;
  std::string sse;
  for (size_t i = 0; i < output.size(); i += 7) {
    v1::GenerateResponse piece;
    piece.set_text(output.substr(i, 7));
    if (i + 7 >= output.size()) piece = Last(output.substr(i), {});
    sse += encoder.Message(piece);
  }
  sse += encoder.End(absl::OkStatus());
  std::string content;
  std::vector<json> calls;
  std::string finish;
  for (const json& event : Events(sse)) {
    if (event == "[DONE]") break;
    const json& choice = event["choices"][0];
    if (choice["delta"].contains("content")) content += choice["delta"]["content"];
    if (choice["delta"].contains("tool_calls")) {
      for (const json& call : choice["delta"]["tool_calls"]) calls.push_back(call);
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    EXPECT_EQ(choice["delta"].value("content", std::string()).find('<'), std::string::npos);
  }
  EXPECT_EQ(content, "Checking.\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city":"Rome"})");
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_EQ(finish, "tool_calls");
}

}  // namespace
}  // namespace baton::router
