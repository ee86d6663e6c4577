// The OpenAI wire format of the router's HTTP API, without a server: request bodies to
// GenerateRequests (and their errors, with param and code), responses and stream chunks, and the
// one Status -> HTTP error mapping.
#include <string>

#include "gmock/gmock.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "router/http_errors.h"
#include "router/http_openai.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;
using testing::HasSubstr;

constexpr char kModel[] = "SmolLM2-135M-Instruct.Q4_1";

absl::StatusOr<OpenAiRequest> Completions(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, kModel, "SmolLM2 135M");
}
absl::StatusOr<OpenAiRequest> Chat(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body, kModel, "SmolLM2 135M");
}

// The error a client would get for `status`.
HttpError ErrorOf(const absl::StatusOr<OpenAiRequest>& parsed) {
  EXPECT_FALSE(parsed.ok());
  return HttpErrorFromStatus(parsed.status());
}

TEST(HttpOpenAiTest, CompletionsRequestBecomesGenerateRequest) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({
      "model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "Hello", "max_tokens": 7,
      "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42,
      "stop": ["\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.5, "n": 1,
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": null,
      "user": "someone", "unknown_field": {"ignored": true}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  const v1::GenerateRequest& g = r->generate;
  EXPECT_EQ(g.model(), kModel);
  EXPECT_EQ(g.prompt(), "Hello");
  EXPECT_EQ(g.sampling().max_tokens(), 7);
  EXPECT_FLOAT_EQ(g.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().top_p(), 0.9f);
  EXPECT_EQ(g.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(g.sampling().min_p(), 0.05f);
  ASSERT_TRUE(g.sampling().has_seed());
  EXPECT_EQ(g.sampling().seed(), 42u);
  EXPECT_THAT(g.sampling().stop(), testing::ElementsAre("\n", "END"));
  EXPECT_FLOAT_EQ(g.sampling().presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(g.sampling().frequency_penalty(), -0.5f);
}

TEST(HttpOpenAiTest, DefaultsFollowOpenAi) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "Hi"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->generate.sampling().max_tokens(), kCompletionsDefaultMaxTokens);
  EXPECT_FLOAT_EQ(r->generate.sampling().temperature(), 1.0f);
  EXPECT_FALSE(r->generate.sampling().has_seed());
  EXPECT_TRUE(r->generate.model().empty());
  // Chat leaves max_tokens to the router's default; max_completion_tokens wins over max_tokens.
  r = Chat(R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().max_tokens(), 0);
  r = Chat(R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
               "max_completion_tokens": 9})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().max_tokens(), 9);
  // The model may be named by general.name too.
  EXPECT_TRUE(Completions(R"({"prompt": "Hi", "model": "SmolLM2 135M"})").ok());
}

TEST(HttpOpenAiTest, PromptForms) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": ["one string"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.prompt(), "one string");
  r = Completions(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->generate.prompt_tokens().ids(), testing::ElementsAre(1, 2, 3));
  r = Completions(R"({"prompt": [[4, 5]]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->generate.prompt_tokens().ids(), testing::ElementsAre(4, 5));

  for (const char* body : {R"({"prompt": ""})", R"({"prompt": []})", R"({"prompt": [""]})",
                           R"({"prompt": [[]]})", R"({})", R"({"prompt": null})"}) {
    const HttpError e = ErrorOf(Completions(body));
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.param, "prompt") << body;
  }
  HttpError e = ErrorOf(Completions(R"({"prompt": ["a", "b"]})"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_THAT(e.message, HasSubstr("one prompt per request"));
  e = ErrorOf(Completions(R"({"prompt": [1, "x"]})"));
  EXPECT_EQ(e.param, "prompt[1]");
  e = ErrorOf(Completions(R"({"prompt": 12})"));
  EXPECT_EQ(e.param, "prompt");
}

TEST(HttpOpenAiTest, ChatMessages) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "},
                                   {"type": "text", "text": "world"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": "again", "name": "bob"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::ChatMessages& chat = r->generate.chat();
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(0).content(), "Be brief.");
  EXPECT_EQ(chat.messages(1).content(), "Hello, world");
  EXPECT_EQ(chat.messages(2).role(), "assistant");
  EXPECT_EQ(chat.messages(2).content(), "");
  EXPECT_EQ(chat.messages(3).content(), "again");

  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {
           Case{R"({"messages": []})", "messages"},
           Case{R"({"messages": "hi"})", "messages"},
           Case{R"({})", "messages"},
           Case{R"({"messages": [{"content": "x"}]})", "messages[0].role"},
           Case{R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
           Case{R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content"},
           Case{R"({"messages": [{"role": "user", "content": [{"type": "image_url",
                 "image_url": {"url": "http://x"}}]}]})",
                "messages[0].content[0]"},
           Case{R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
                "messages[0].content[0]"},
       }) {
    const HttpError e = ErrorOf(Chat(c.body));
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
  }
}

// What a tool-calling conversation carries back: an assistant's tool calls (arguments as the
// JSON text OpenAI's clients send), a tool message's call id and name, reasoning, and vLLM's
// chat_template_kwargs for the template.
TEST(HttpOpenAiTest, ToolMessagesAndTemplateArguments) {
  absl::StatusOr<OpenAiRequest> r = Chat(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "Call the tool.",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                      {"id": "call_2", "type": "function",
                       "function": {"name": "get_time", "arguments": {"tz": "CET"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21 C"}],
      "chat_template_kwargs": {"enable_thinking": false, "b": 1}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::ChatMessages& chat = r->generate.chat();
  ASSERT_EQ(chat.messages_size(), 3);
  const v1::ChatMessage& assistant = chat.messages(1);
  EXPECT_EQ(assistant.content(), "");
  EXPECT_EQ(assistant.reasoning_content(), "Call the tool.");
  ASSERT_EQ(assistant.tool_calls_size(), 2);
  EXPECT_EQ(assistant.tool_calls(0).id(), "call_1");
  EXPECT_EQ(assistant.tool_calls(0).name(), "get_weather");
  EXPECT_EQ(assistant.tool_calls(0).arguments(), R"({"city": "Paris"})");
  EXPECT_EQ(assistant.tool_calls(1).arguments(), R"({"tz":"CET"})");
  EXPECT_EQ(chat.messages(2).tool_call_id(), "call_1");
  EXPECT_EQ(chat.messages(2).name(), "get_weather");
  EXPECT_EQ(chat.template_kwargs(), R"({"enable_thinking":false,"b":1})");
  EXPECT_FALSE(chat.has_add_generation_prompt());
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.chat().add_generation_prompt());
  EXPECT_EQ(ErrorOf(Chat(R"({"messages": [{"role": "user", "content": "x"}],
                             "add_generation_prompt": 1})")).param,
            "add_generation_prompt");

  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {
           Case{R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})",
                "chat_template_kwargs"},
           Case{R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
                "messages[0].tool_calls"},
           Case{R"({"messages": [{"role": "assistant", "tool_calls": {}}]})",
                "messages[0].tool_calls"},
           Case{R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]})",
                "messages[0].tool_calls[0]"},
           Case{R"({"messages": [{"role": "assistant", "tool_calls": [{"id": 1,
                 "function": {"name": "f"}}]}]})",
                "messages[0].tool_calls[0].id"},
           Case{R"({"messages": [{"role": "tool", "content": "x", "tool_call_id": 7}]})",
                "messages[0].tool_call_id"},
       }) {
    const HttpError e = ErrorOf(Chat(c.body));
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
  }
}

TEST(HttpOpenAiTest, DeeplyNestedJsonIsRefusedAtParse) {
  const int too_deep = kMaxJsonDepth + 1;
  std::string body = R"({"prompt": "x", "user": )";
  body += std::string(too_deep, '[') + std::string(too_deep, ']') + "}";
  absl::StatusOr<OpenAiRequest> r = Completions(body);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr(absl::StrCat("more than ", kMaxJsonDepth, " levels deep")));
  // 70,000 levels, as a hostile client sends: refused the same way, without a crash.
  const std::string hostile =
      R"({"x": )" + std::string(70000, '[') + std::string(70000, ']') + "}";
  EXPECT_EQ(Completions(hostile).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HttpOpenAiTest, BadParametersNameTheParameter) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {
           Case{R"({"prompt": "x", "n": 17})", "n"},
           Case{R"({"prompt": "x", "n": 0})", "n"},
           Case{R"({"prompt": "x", "n": "2"})", "n"},
           Case{R"({"prompt": "x", "temperature": -1})", "temperature"},
           Case{R"({"prompt": "x", "temperature": 2.5})", "temperature"},
           Case{R"({"prompt": "x", "temperature": "hot"})", "temperature"},
           Case{R"({"prompt": "x", "top_p": 0})", "top_p"},
           Case{R"({"prompt": "x", "top_p": 1.5})", "top_p"},
           Case{R"({"prompt": "x", "top_k": -2})", "top_k"},
           Case{R"({"prompt": "x", "min_p": 2})", "min_p"},
           Case{R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
           Case{R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
           Case{R"({"prompt": "x", "seed": "seven"})", "seed"},
           Case{R"({"prompt": "x", "stop": 5})", "stop"},
           Case{R"({"prompt": "x", "stop": [""]})", "stop"},
           Case{R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
           Case{R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
           Case{R"({"prompt": "x", "stream": "yes"})", "stream"},
           Case{R"({"prompt": "x", "stream_options": {"include_usage": true}})",
                "stream_options"},
           Case{R"({"prompt": "x", "logprobs": 21})", "logprobs"},
           Case{R"({"prompt": "x", "logprobs": -1})", "logprobs"},
           Case{R"({"prompt": "x", "logprobs": true})", "logprobs"},
           Case{R"({"prompt": "x", "echo": true, "stream": true})", "echo"},
           Case{R"({"prompt": "x", "echo": 1})", "echo"},
           Case{R"({"prompt": "x", "best_of": 17})", "best_of"},
           Case{R"({"prompt": "x", "n": 3, "best_of": 2})", "best_of"},
           Case{R"({"prompt": "x", "best_of": 2, "stream": true})", "best_of"},
           Case{R"({"prompt": "x", "logit_bias": {"abc": -100}})", "logit_bias"},
           Case{R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias"},
           Case{R"({"prompt": "x", "logit_bias": {"5": "up"}})", "logit_bias"},
           Case{R"({"prompt": "x", "logit_bias": [5, 1]})", "logit_bias"},
           Case{R"({"prompt": "x", "model": 5})", "model"},
       }) {
    const HttpError e = ErrorOf(Completions(c.body));
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_FALSE(e.message.empty()) << c.body;
  }
  HttpError e = ErrorOf(Chat(R"({"messages": [{"role": "user", "content": "x"}],
                                 "top_logprobs": 2})"));
  EXPECT_EQ(e.param, "top_logprobs");
  EXPECT_THAT(e.message, HasSubstr("'logprobs': true"));
  e = ErrorOf(Chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})"));
  EXPECT_EQ(e.param, "logprobs");
  e = ErrorOf(Chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
                       "top_logprobs": 21})"));
  EXPECT_EQ(e.param, "top_logprobs");
  e = ErrorOf(Chat(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})"));
  EXPECT_THAT(e.message, HasSubstr("not supported"));
  e = ErrorOf(Chat(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})"));
  EXPECT_EQ(e.param, "tools[0].type");
  // Off is fine.
  EXPECT_TRUE(Chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false,
                      "tools": [], "response_format": {"type": "text"}, "n": null})")
                  .ok());
}

// Completions' logprobs count; chat's logprobs switch with its top_logprobs count. Unset or off:
// the wire's logprobs stays unset.
TEST(HttpOpenAiTest, LogprobsOfBothEndpoints) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "x", "logprobs": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->generate.sampling().has_logprobs());
  EXPECT_EQ(r->generate.sampling().logprobs(), 3);
  r = Completions(R"({"prompt": "x", "logprobs": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().logprobs(), 0);
  r = Completions(R"({"prompt": "x", "logprobs": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.sampling().has_logprobs());

  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  r = Chat(absl::StrCat("{", user, R"(, "logprobs": true, "top_logprobs": 20})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().logprobs(), 20);
  r = Chat(absl::StrCat("{", user, R"(, "logprobs": true})"));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->generate.sampling().has_logprobs());
  EXPECT_EQ(r->generate.sampling().logprobs(), 0);
  r = Chat(absl::StrCat("{", user, R"(, "logprobs": false})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.sampling().has_logprobs());
  r = Chat(absl::StrCat("{", user, "}"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.sampling().has_logprobs());
}

// Completions' echo: on its own it asks for no log-probabilities; with logprobs k, the prompt's
// are asked for too, with the same k. Off by default and when false.
TEST(HttpOpenAiTest, EchoAsksForThePromptsLogprobsWhenLogprobsAreAsked) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "x", "echo": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo);
  EXPECT_FALSE(r->generate.sampling().has_prompt_logprobs());
  EXPECT_FALSE(r->generate.sampling().has_logprobs());
  r = Completions(R"({"prompt": "x", "echo": true, "logprobs": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(r->generate.sampling().prompt_logprobs(), 3);
  EXPECT_EQ(r->generate.sampling().logprobs(), 3);
  for (const char* body : {R"({"prompt": "x", "logprobs": 3})",
                           R"({"prompt": "x", "echo": false, "logprobs": 3})"}) {
    r = Completions(body);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->echo) << body;
    EXPECT_FALSE(r->generate.sampling().has_prompt_logprobs()) << body;
  }
}

// n choices, and on completions best_of candidates (n when absent; as many as n may stream).
TEST(HttpOpenAiTest, ChoicesAndCandidates) {
  absl::StatusOr<OpenAiRequest> r = Completions(R"({"prompt": "x"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 1);
  EXPECT_EQ(r->best_of, 1);
  r = Completions(R"({"prompt": "x", "n": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->best_of, 3);
  r = Completions(R"({"prompt": "x", "n": 2, "best_of": 16})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->best_of, 16);
  r = Completions(R"({"prompt": "x", "n": 4, "best_of": 4, "stream": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->best_of, 4);
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "n": 16})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 16);
  const HttpError e = ErrorOf(Chat(R"({"messages": [{"role": "user", "content": "x"}],
                                       "best_of": 2})"));
  EXPECT_EQ(e.param, "best_of");
}

// Chat tools reach the template as sent; their output is read for calls unless tool_choice is
// "none"; what would need constrained decoding, and malformed tools, are 400s naming the field.
TEST(HttpOpenAiTest, ToolsAndToolChoice) {
  const std::string messages = R"("messages": [{"role": "user", "content": "Weather?"}])";
  const std::string tool =
      R"({"type": "function", "function": {"name": "get_weather", "description": "d",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";
  absl::StatusOr<OpenAiRequest> r = Chat("{" + messages + R"(, "tools": [)" + tool + "]}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->parse_tool_calls);
  EXPECT_TRUE(r->parallel_tool_calls);
  const json tools = json::parse(r->generate.chat().tools());
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(tools[0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  r = Chat("{" + messages + R"(, "tools": [)" + tool +
           R"(], "tool_choice": "auto", "parallel_tool_calls": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->parse_tool_calls);
  EXPECT_FALSE(r->parallel_tool_calls);
  r = Chat("{" + messages + R"(, "tools": [)" + tool + R"(], "tool_choice": "none"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->parse_tool_calls);
  EXPECT_FALSE(r->generate.chat().tools().empty());  // still shown to the model
  r = Chat("{" + messages + "}");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->parse_tool_calls);
  EXPECT_TRUE(r->generate.chat().tools().empty());

  std::string many = "[";
  for (int i = 0; i <= static_cast<int>(kMaxTools); ++i) {
    if (i > 0) many += ",";
    many += absl::StrCat(R"({"type": "function", "function": {"name": "f)", i, R"("}})");
  }
  many += "]";
  struct Case {
    std::string extra;
    std::string param;
  };
  for (const Case& c : {
           Case{R"("tools": {})", "tools"},
           Case{R"("tools": )" + many, "tools"},
           Case{R"("tools": [{"type": "code"}])", "tools[0].type"},
           Case{R"("tools": [{"type": "function"}])", "tools[0].function"},
           Case{R"("tools": [{"type": "function", "function": {}}])", "tools[0].function.name"},
           Case{R"("tools": [{"type": "function", "function": {"name": "a b"}}])",
                "tools[0].function.name"},
           Case{R"("tools": [)" + tool + "," + tool + "]", "tools[1].function.name"},
           Case{R"("tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}])",
                "tools[0].function.parameters"},
           Case{R"("tools": [)" + tool + R"(], "tool_choice": {"type": "function", )" +
                    R"("function": {"name": "get_time"}})",
                "tool_choice"},
           Case{R"("tools": [)" + tool + R"(], "tool_choice": {"type": "function"})",
                "tool_choice"},
           Case{R"("tool_choice": "required")", "tool_choice"},
           Case{R"("tools": [)" + tool + R"(], "tool_choice": "required", )" +
                    R"("response_format": {"type": "json_object"})",
                "tool_choice"},
           Case{R"("tools": [)" + tool + R"(], "tool_choice": "sometimes")", "tool_choice"},
           Case{R"("tool_choice": "auto")", "tool_choice"},
           Case{R"("tools": [)" + tool + R"(], "parallel_tool_calls": "yes")",
                "parallel_tool_calls"},
           Case{R"("functions": [{"name": "f"}])", "functions"},
       }) {
    const HttpError e = ErrorOf(Chat("{" + messages + ", " + c.extra + "}"));
    EXPECT_EQ(e.http_status, 400) << c.extra;
    EXPECT_EQ(e.param, c.param) << c.extra;
  }
  EXPECT_EQ(ErrorOf(Completions(R"({"prompt": "x", "tools": []})")).param, "tools");
}

// tool_choice "required" and a named function constrain the output to a JSON array of calls of
// the tools allowed (vLLM's form), read back as such.
TEST(HttpOpenAiTest, RequiredAndNamedToolChoiceConstrainTheOutputToCalls) {
  const std::string body = R"({"messages": [{"role": "user", "content": "Weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}}},
                {"type": "function", "function": {"name": "get_time"}}], )";
  absl::StatusOr<OpenAiRequest> r = Chat(body + R"("tool_choice": "required"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->tool_calls_forced);
  const v1::OutputConstraint& required = r->generate.sampling().constraint();
  EXPECT_TRUE(required.strict());
  json schema = json::parse(required.json_schema());
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_FALSE(schema.contains("maxItems"));
  ASSERT_EQ(schema["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["enum"][0], "get_weather");
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["parameters"]["required"][0], "city");
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"], json::object());

  r = Chat(body + R"("tool_choice": "required", "parallel_tool_calls": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(json::parse(r->generate.sampling().constraint().json_schema())["maxItems"], 1);

  r = Chat(body + R"("tool_choice": {"type": "function", "function": {"name": "get_time"}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  schema = json::parse(r->generate.sampling().constraint().json_schema());
  ASSERT_EQ(schema["items"]["anyOf"].size(), 1u);
  EXPECT_EQ(schema["items"]["anyOf"][0]["properties"]["name"]["enum"][0], "get_time");
  EXPECT_EQ(schema["maxItems"], 1);
}

// response_format (OpenAI's) and structured_outputs / guided_* (vLLM's) on both endpoints.
TEST(HttpOpenAiTest, StructuredOutputOfEveryKind) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  absl::StatusOr<OpenAiRequest> r = Chat(chat + R"("response_format": {"type": "json_object"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.sampling().constraint().json_object());

  r = Chat(chat + R"("response_format": {"type": "json_schema", "json_schema": {"name": "p",
      "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}, "strict": true}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(json::parse(r->generate.sampling().constraint().json_schema())["properties"]["a"]
                ["type"], "integer");
  EXPECT_TRUE(r->generate.sampling().constraint().strict());
  r = Chat(chat + R"("response_format": {"type": "json_schema", "json_schema": {"name": "p",
      "schema": {"type": "integer"}}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.sampling().constraint().strict());

  r = Completions(R"({"prompt": "x", "structured_outputs": {"regex": "[0-9]+"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().constraint().regex(), "[0-9]+");
  r = Completions(R"({"prompt": "x", "structured_outputs": {"choice": ["yes", "no"]}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->generate.sampling().constraint().choice().choices(),
              testing::ElementsAre("yes", "no"));
  r = Completions(R"({"prompt": "x", "structured_outputs": {"grammar": "root ::= \"a\""}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().constraint().grammar(), "root ::= \"a\"");
  r = Completions(R"({"prompt": "x", "structured_outputs": {"json": "{\"type\": \"string\"}"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().constraint().json_schema(), R"({"type": "string"})");
  r = Completions(R"({"prompt": "x", "guided_json": {"type": "string"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(json::parse(r->generate.sampling().constraint().json_schema())["type"], "string");
  r = Chat(chat + R"("guided_choice": ["a"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().constraint().choice().choices_size(), 1);
  r = Completions(R"({"prompt": "x", "guided_regex": "a|b", "response_format": {"type": "text"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.sampling().constraint().regex(), "a|b");
  r = Completions(R"({"prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->generate.sampling().has_constraint());

  struct Case {
    std::string body;
    std::string param;
  };
  for (const Case& c : {
           Case{R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format"},
           Case{R"({"prompt": "x", "response_format": "json"})", "response_format"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema"}})",
                "response_format.json_schema"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema",
                 "json_schema": {"name": "n"}}})",
                "response_format.json_schema.schema"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema",
                 "json_schema": {"schema": 5}}})",
                "response_format.json_schema.schema"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_schema",
                 "json_schema": {"schema": {}, "strict": "yes"}}})",
                "response_format.json_schema.strict"},
           Case{R"({"prompt": "x", "structured_outputs": []})", "structured_outputs"},
           Case{R"({"prompt": "x", "structured_outputs": {"xml": "a"}})",
                "structured_outputs.xml"},
           Case{R"({"prompt": "x", "structured_outputs": {"regex": ""}})",
                "structured_outputs.regex"},
           Case{R"({"prompt": "x", "structured_outputs": {"choice": []}})",
                "structured_outputs.choice"},
           Case{R"({"prompt": "x", "structured_outputs": {"choice": ["a", 1]}})",
                "structured_outputs.choice"},
           Case{R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["a"]}})",
                "structured_outputs.choice"},
           Case{R"({"prompt": "x", "response_format": {"type": "json_object"},
                 "guided_regex": "a"})",
                "guided_regex"},
           Case{R"({"prompt": "x", "guided_json": 5})", "guided_json"},
       }) {
    const HttpError e = ErrorOf(Completions(c.body));
    EXPECT_EQ(e.http_status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
  }
}

TEST(HttpOpenAiTest, LogitBiasMapsTokenIdsToBiases) {
  absl::StatusOr<OpenAiRequest> r =
      Completions(R"({"prompt": "x", "logit_bias": {"50256": -100, "7": 2.5, "0": 100}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& bias = r->generate.sampling().logit_bias();
  ASSERT_EQ(bias.size(), 3u);
  EXPECT_EQ(bias.at(50256), -100.0f);  // the vocabulary is checked at intake
  EXPECT_EQ(bias.at(7), 2.5f);
  EXPECT_EQ(bias.at(0), 100.0f);
  r = Chat(R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->generate.sampling().logit_bias().empty());
  std::string many = R"({"prompt": "x", "logit_bias": {)";
  for (int i = 0; i <= 300; ++i) absl::StrAppend(&many, i == 0 ? "" : ", ", "\"", i, "\": 1");
  EXPECT_EQ(ErrorOf(Completions(many + "}}")).param, "logit_bias");
}

TEST(HttpOpenAiTest, MalformedBodies) {
  for (const std::string& body : {std::string("{bad"), std::string("[1, 2]"), std::string(""),
                                 std::string("\"text\""),
                                 std::string("{\"prompt\": \"caf\xC3\"}"),  // ill-formed UTF-8
                                 std::string(R"({"prompt": "\ud800"})")}) {  // lone surrogate
    const HttpError e = ErrorOf(Completions(body));
    EXPECT_EQ(e.http_status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error") << body;
  }
}

TEST(HttpOpenAiTest, UnknownModelIsModelNotFound) {
  const HttpError e = ErrorOf(Completions(R"({"prompt": "x", "model": "gpt-4"})"));
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.param, "model");
  EXPECT_THAT(e.message, HasSubstr("gpt-4"));
}

TEST(HttpOpenAiTest, StatusMapping) {
  struct Case {
    absl::Status status;
    int http;
    const char* type;
  };
  for (const Case& c : {
           Case{absl::InvalidArgumentError("x"), 400, "invalid_request_error"},
           Case{absl::FailedPreconditionError("x"), 400, "invalid_request_error"},
           Case{absl::OutOfRangeError("x"), 400, "invalid_request_error"},
           Case{absl::UnauthenticatedError("x"), 401, "invalid_request_error"},
           Case{absl::PermissionDeniedError("x"), 403, "invalid_request_error"},
           Case{absl::NotFoundError("x"), 404, "invalid_request_error"},
           Case{absl::ResourceExhaustedError("router queue full"), 429, "rate_limit_error"},
           Case{absl::UnavailableError("x"), 503, "service_unavailable_error"},
           Case{absl::CancelledError("x"), 503, "service_unavailable_error"},
           Case{absl::DeadlineExceededError("x"), 504, "timeout_error"},
           Case{absl::InternalError("x"), 500, "server_error"},
           Case{absl::UnknownError("x"), 500, "server_error"},
       }) {
    const HttpError e = HttpErrorFromStatus(c.status);
    EXPECT_EQ(e.http_status, c.http) << c.status;
    EXPECT_EQ(e.type, c.type) << c.status;
  }
  const json j = HttpErrorJson(HttpErrorFromStatus(
      WithErrorCode(WithParam(absl::InvalidArgumentError("bad"), "top_p"), "some_code")));
  EXPECT_EQ(j.dump(), R"({"error":{"message":"bad","type":"invalid_request_error",)"
                      R"("param":"top_p","code":"some_code"}})");
  EXPECT_EQ(HttpErrorJson(HttpErrorFromStatus(absl::InternalError("boom"))).dump(),
            R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})");
}

OpenAiResponseContext Context(OpenAiEndpoint endpoint) {
  return {.endpoint = endpoint,
          .id = endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-1" : "cmpl-1",
          .created = 1700000000,
          .model = kModel,
          .system_fingerprint = "fp"};
}

v1::GenerateResponse Message(const std::string& text, v1::FinishReason reason = {},
                             int prompt = 0, int completion = 0) {
  v1::GenerateResponse m;
  m.set_text(text);
  m.set_finish_reason(reason);
  if (reason != v1::FINISH_REASON_UNSPECIFIED) {
    m.mutable_usage()->set_prompt_tokens(prompt);
    m.mutable_usage()->set_completion_tokens(completion);
  }
  return m;
}

TEST(HttpOpenAiTest, NonStreamingResponses) {
  v1::Usage usage;
  usage.set_prompt_tokens(5);
  usage.set_completion_tokens(3);
  usage.set_cached_prompt_tokens(2);
  EXPECT_EQ(OpenAiCompletion(Context(OpenAiEndpoint::kCompletions), " Paris",
                             v1::FINISH_REASON_LENGTH, usage)
                .dump(),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,)"
            R"("model":"SmolLM2-135M-Instruct.Q4_1","system_fingerprint":"fp",)"
            R"("choices":[{"index":0,"text":" Paris","logprobs":null,"finish_reason":"length"}],)"
            R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,)"
            R"("prompt_tokens_details":{"cached_tokens":2}}})");
  EXPECT_EQ(OpenAiCompletion(Context(OpenAiEndpoint::kChatCompletions), "Hi!",
                             v1::FINISH_REASON_STOP, usage)
                .dump(),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":1700000000,)"
            R"("model":"SmolLM2-135M-Instruct.Q4_1","system_fingerprint":"fp",)"
            R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hi!"},)"
            R"("logprobs":null,"finish_reason":"stop"}],)"
            R"("usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,)"
            R"("prompt_tokens_details":{"cached_tokens":2}}})");
}

// The JSON payloads of "data: ..." events, [DONE] as the string "[DONE]".
std::vector<json> Events(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string event = sse.substr(pos, end - pos);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    const std::string data = event.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end + 2;
  }
  return out;
}

TEST(HttpOpenAiTest, ChatStreamWithUsage) {
  OpenAiStreamEncoder encoder(Context(OpenAiEndpoint::kChatCompletions), /*include_usage=*/true);
  std::string sse = encoder.Message(Message(""));  // first token not yet complete text
  sse += encoder.Message(Message("Hel"));
  sse += encoder.Message(Message("lo", v1::FINISH_REASON_STOP, 4, 3));
  sse += encoder.End(absl::OkStatus());
  const std::vector<json> events = Events(sse);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(events[0]["usage"].is_null());
  EXPECT_EQ(events[1]["choices"][0]["delta"], json({{"content", "Hel"}}));
  EXPECT_EQ(events[2]["choices"][0]["delta"], json({{"content", "lo"}}));
  EXPECT_TRUE(events[2]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(events[3]["choices"][0]["delta"], json::object());
  EXPECT_EQ(events[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(events[4]["choices"], json::array());
  EXPECT_EQ(events[4]["usage"],
            json({{"prompt_tokens", 4},
                  {"completion_tokens", 3},
                  {"total_tokens", 7},
                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_EQ(events[5], "[DONE]");
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(events[i]["id"], "chatcmpl-1");
    EXPECT_EQ(events[i]["created"], 1700000000);
    EXPECT_EQ(events[i]["model"], kModel);
  }
}

TEST(HttpOpenAiTest, CompletionStreamWithoutUsageAndInBandError) {
  OpenAiStreamEncoder encoder(Context(OpenAiEndpoint::kCompletions), /*include_usage=*/false);
  std::string sse = encoder.Message(Message(" Par"));
  sse += encoder.End(absl::UnavailableError("decode worker 127.0.0.1:1 unavailable"));
  const std::vector<json> events = Events(sse);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0]["object"], "text_completion");
  EXPECT_EQ(events[0]["choices"][0]["text"], " Par");
  EXPECT_FALSE(events[0].contains("usage"));
  EXPECT_EQ(events[1]["error"]["type"], "service_unavailable_error");
  EXPECT_THAT(events[1]["error"]["message"].get<std::string>(), HasSubstr("unavailable"));
  EXPECT_EQ(events[2], "[DONE]");

  OpenAiStreamEncoder done(Context(OpenAiEndpoint::kCompletions), /*include_usage=*/false);
  sse = done.Message(Message(" Paris", v1::FINISH_REASON_LENGTH, 5, 1));
  sse += done.End(absl::OkStatus());
  const std::vector<json> finished = Events(sse);
  ASSERT_EQ(finished.size(), 3u);
  EXPECT_EQ(finished[1]["choices"][0]["text"], "");
  EXPECT_EQ(finished[1]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(finished[2], "[DONE]");
}

}  // namespace
}  // namespace baton::router
