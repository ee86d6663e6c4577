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

}  // namespace
}  // namespace baton::router
