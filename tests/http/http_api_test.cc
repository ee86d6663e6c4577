// The router's OpenAI-compatible HTTP API against real `baton` processes on 127.0.0.1, with
// httplib's client: completions and chat, streaming (with usage) and not, the error objects and
// their HTTP statuses, /v1/models, /health, /metrics, and a client that goes away mid-stream.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "cli/cluster_config.h"
#include "nlohmann/json.hpp"
#include "tests/integration/local_cluster.h"

namespace baton {
namespace {

using json = nlohmann::json;
using test_support::LocalCluster;
using testing::HasSubstr;

constexpr char kApiKey[] = "sk-test-key";
constexpr char kModel[] = "SmolLM2-135M-Instruct.Q4_1";

// Host and port of "HOST:PORT".
std::pair<std::string, int> Split(const std::string& address) {
  const size_t colon = address.rfind(':');
  return {address.substr(0, colon), std::stoi(address.substr(colon + 1))};
}

class HttpClient {
 public:
  explicit HttpClient(const std::string& address) {
    auto [host, port] = Split(address);
    host_ = host;
    port_ = port;
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       const std::string& key = kApiKey) const {
    httplib::Client client(host_, port_);
    client.set_read_timeout(std::chrono::seconds(120));
    return client.Post(path.c_str(), Headers(key), body, "application/json");
  }
  httplib::Result Get(const std::string& path, const std::string& key = kApiKey) const {
    httplib::Client client(host_, port_);
    client.set_read_timeout(std::chrono::seconds(30));
    return client.Get(path.c_str(), Headers(key));
  }
  // POST whose body is read piece by piece; `receiver` returns false to hang up.
  httplib::Result PostStreaming(const std::string& path, const std::string& body,
                                std::function<bool(const char*, size_t)> receiver) const {
    httplib::Client client(host_, port_);
    client.set_read_timeout(std::chrono::seconds(120));
    httplib::Request request;
    request.method = "POST";
    request.path = path;
    request.headers = Headers(kApiKey);
    request.set_header("Content-Type", "application/json");
    request.body = body;
    request.content_receiver = [receiver](const char* data, size_t n, uint64_t, uint64_t) {
      return receiver(data, n);
    };
    return client.send(request);
  }

 private:
  static httplib::Headers Headers(const std::string& key) {
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
    return headers;
  }
  std::string host_;
  int port_ = 0;
};

// A parsed SSE stream: the JSON of every data event, whether it ended with [DONE] (last).
struct SseStream {
  std::vector<json> events;
  bool done = false;
  bool done_last = true;
};
SseStream ParseSse(const std::string& body) {
  SseStream out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event.empty() || event[0] == ':') continue;  // comments (pings)
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    const std::string data = event.substr(6);
    if (out.done) out.done_last = false;
    if (data == "[DONE]") {
      out.done = true;
      continue;
    }
    out.events.push_back(json::parse(data));
  }
  return out;
}

void ExpectError(const httplib::Result& result, int status, const std::string& type,
                 const std::string& param = "", const std::string& code = "") {
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, status) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  const json body = json::parse(result->body);
  ASSERT_TRUE(body.contains("error")) << result->body;
  const json& error = body["error"];
  ASSERT_TRUE(error.is_object());
  EXPECT_EQ(error.size(), 4u) << result->body;
  EXPECT_TRUE(error["message"].is_string());
  EXPECT_FALSE(error["message"].get<std::string>().empty());
  EXPECT_EQ(error["type"], type) << result->body;
  if (param.empty()) {
    EXPECT_TRUE(error["param"].is_null()) << result->body;
  } else {
    EXPECT_EQ(error["param"], param) << result->body;
  }
  if (code.empty()) {
    EXPECT_TRUE(error["code"].is_null()) << result->body;
  } else {
    EXPECT_EQ(error["code"], code) << result->body;
  }
}

absl::StatusOr<std::string> StartHttpRouter(LocalCluster& cluster,
                                            std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--http-port", "0", "--api-key", kApiKey};
  args.insert(args.end(), extra.begin(), extra.end());
  if (absl::Status s = cluster.StartRouter(args); !s.ok()) return s;
  return cluster.router().process->WaitForLine("http listening on ", std::chrono::seconds(30));
}

// A router with no workers: everything that is decided before a request reaches a worker.
class HttpRouterOnlyTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> http = StartHttpRouter(cluster_, {"--max-queued", "0"});
    ASSERT_TRUE(http.ok()) << http.status();
    client_ = std::make_unique<HttpClient>(*http);
  }
  LocalCluster cluster_{{}, {}};
  std::unique_ptr<HttpClient> client_;
};

TEST_F(HttpRouterOnlyTest, BadRequestsGetOpenAiErrors) {
  const HttpClient& c = *client_;
  ExpectError(c.Post("/v1/completions", "{not json"), 400, "invalid_request_error");
  ExpectError(c.Post("/v1/completions", R"({"prompt": "Hi", "n": 17})"), 400,
              "invalid_request_error", "n");
  ExpectError(c.Post("/v1/completions", R"({"prompt": "Hi", "temperature": -1})"), 400,
              "invalid_request_error", "temperature");
  ExpectError(c.Post("/v1/chat/completions",
                     R"({"messages": [{"role": "user", "content": "Hi"}], "top_logprobs": 2})"),
              400, "invalid_request_error", "top_logprobs");
  ExpectError(c.Post("/v1/completions", R"({"prompt": ""})"), 400, "invalid_request_error",
              "prompt");
  ExpectError(c.Post("/v1/completions", std::string("{\"prompt\": \"caf\xC3\"}")), 400,
              "invalid_request_error");
  ExpectError(c.Post("/v1/chat/completions", R"({"messages": []})"), 400,
              "invalid_request_error", "messages");
  // The router's intake: the context (prompt + max_tokens) and the vocabulary.
  httplib::Result too_long =
      c.Post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 1000000})");
  ExpectError(too_long, 400, "invalid_request_error");
  EXPECT_THAT(too_long->body, HasSubstr("context"));
  ExpectError(c.Post("/v1/completions", R"({"prompt": [1, 99999999]})"), 400,
              "invalid_request_error");
  // Model, auth, route, size.
  ExpectError(c.Post("/v1/completions", R"({"prompt": "Hi", "model": "gpt-4"})"), 404,
              "invalid_request_error", "model", "model_not_found");
  ExpectError(c.Post("/v1/completions", R"({"prompt": "Hi"})", /*key=*/""), 401,
              "invalid_request_error", "", "invalid_api_key");
  ExpectError(c.Post("/v1/completions", R"({"prompt": "Hi"})", "wrong-key"), 401,
              "invalid_request_error", "", "invalid_api_key");
  ExpectError(c.Get("/v1/models", "wrong-key"), 401, "invalid_request_error", "",
              "invalid_api_key");
  ExpectError(c.Get("/v1/nothing-here"), 404, "invalid_request_error", "", "not_found");
  const std::string huge = absl::StrCat(R"({"prompt": ")", std::string(5 << 20, 'a'), R"("})");
  ExpectError(c.Post("/v1/completions", huge), 413, "invalid_request_error", "",
              "request_too_large");
}

TEST_F(HttpRouterOnlyTest, FullQueueIsTooManyRequests) {
  // No decode worker has room and the router queue holds none (--max-queued 0).
  ExpectError(client_->Post("/v1/completions", R"({"prompt": "Hi", "max_tokens": 2})"), 429,
              "rate_limit_error", "", "rate_limit_exceeded");
  ExpectError(client_->Post("/v1/completions",
                            R"({"prompt": "Hi", "max_tokens": 2, "stream": true})"),
              429, "rate_limit_error", "", "rate_limit_exceeded");
}

TEST_F(HttpRouterOnlyTest, ModelsHealthAndMetrics) {
  httplib::Result models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200) << models->body;
  const json list = json::parse(models->body);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], kModel);
  EXPECT_EQ(list["data"][0]["object"], "model");
  EXPECT_TRUE(list["data"][0]["created"].is_number_integer());
  EXPECT_EQ(list["data"][0]["owned_by"], "baton");
  httplib::Result one = client_->Get(absl::StrCat("/v1/models/", kModel));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)["id"], kModel);
  ExpectError(client_->Get("/v1/models/gpt-4"), 404, "invalid_request_error", "model",
              "model_not_found");

  // No worker: not ready, and /health says why (no key needed).
  httplib::Result health = client_->Get("/health", /*key=*/"");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  const json why = json::parse(health->body);
  EXPECT_EQ(why["status"], "unavailable");
  EXPECT_THAT(why["reason"].get<std::string>(), HasSubstr("prefill"));

  httplib::Result metrics = client_->Get("/metrics", /*key=*/"");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4");
}

// A whole cluster: router, one prefill and one decode worker.
class HttpClusterTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> http = StartHttpRouter(cluster_);
    ASSERT_TRUE(http.ok()) << http.status();
    client_ = std::make_unique<HttpClient>(*http);
    absl::StatusOr<test_support::Proc*> prefill = cluster_.StartWorker("prefill");
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    absl::StatusOr<test_support::Proc*> decode = cluster_.StartWorker("decode");
    ASSERT_TRUE(decode.ok()) << decode.status();
    decode_ = *decode;
    ASSERT_TRUE(cluster_.WaitHealthy(2).ok());
  }

  // The router's gRPC Generate for the same prompt, for comparison.
  std::string GrpcText(const std::string& prompt, int max_tokens) {
    baton::v1::GenerateRequest request;
    request.set_prompt(prompt);
    request.mutable_sampling()->set_temperature(0);
    request.mutable_sampling()->set_max_tokens(max_tokens);
    auto stub = cluster_.RouterStub();
    grpc::ClientContext context;
    cluster_.Prepare(context);
    test_support::GenerateOutcome outcome = test_support::RunGenerate(*stub, context, request);
    EXPECT_TRUE(outcome.status.ok()) << outcome.status.error_message();
    return outcome.text;
  }

  LocalCluster cluster_{{}, {}};
  std::unique_ptr<HttpClient> client_;
  test_support::Proc* decode_ = nullptr;
};

TEST_F(HttpClusterTest, CompletionsAndChat) {
  httplib::Result health = client_->Get("/health", /*key=*/"");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << health->body;
  EXPECT_EQ(json::parse(health->body)["status"], "ok");

  const std::string prompt = "The capital of France is";
  httplib::Result r = client_->Post(
      "/v1/completions",
      json({{"model", kModel}, {"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}})
          .dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const json completion = json::parse(r->body);
  EXPECT_EQ(completion["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_TRUE(completion["created"].is_number_integer());
  EXPECT_EQ(completion["model"], kModel);
  ASSERT_EQ(completion["choices"].size(), 1u);
  const json& choice = completion["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_TRUE(choice["logprobs"].is_null());
  EXPECT_EQ(choice["finish_reason"], "length");
  // The same request path as gRPC: the same text at temperature 0.
  EXPECT_EQ(choice["text"], GrpcText(prompt, 8));
  const json& usage = completion["usage"];
  EXPECT_GT(usage["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(usage["completion_tokens"], 8);
  EXPECT_EQ(usage["total_tokens"].get<int>(),
            usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>());

  // A prompt of one string in an array, and as token ids, are the same prompt.
  r = client_->Post("/v1/completions",
                    json({{"prompt", {prompt}}, {"max_tokens", 8}, {"temperature", 0}}).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], choice["text"]);

  r = client_->Post("/v1/chat/completions", R"({
      "messages": [{"role": "system", "content": "You are brief."},
                   {"role": "user", "content": [{"type": "text", "text": "Say hello."}]}],
      "max_completion_tokens": 12, "temperature": 0, "seed": 3, "stop": ["\n\n"]})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json chat = json::parse(r->body);
  EXPECT_EQ(chat["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["model"], kModel);
  const json& message = chat["choices"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_FALSE(message["content"].get<std::string>().empty());
  EXPECT_THAT(chat["choices"][0]["finish_reason"].get<std::string>(),
              testing::AnyOf("stop", "length"));
  EXPECT_LE(chat["usage"]["completion_tokens"].get<int>(), 12);
}

// Echo with logprobs: the answer's text and tokens start with the prompt's, the first prompt
// token without a log-probability. Each prompt token's log-probability is what the model gives
// it after the tokens before it: the token the model generates greedily after a prompt P has,
// as the last token of the prompt P + token, the log-probability it had when generated.
TEST_F(HttpClusterTest, EchoWithLogprobsScoresThePrompt) {
  const std::string prompt = "The capital of France is";
  httplib::Result r = client_->Post("/tokenize", json({{"prompt", prompt}}).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::vector<int> prompt_ids = json::parse(r->body)["tokens"].get<std::vector<int>>();

  r = client_->Post("/v1/completions",
                    json({{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0},
                          {"logprobs", 2}})
                        .dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json generated = json::parse(r->body)["choices"][0];
  const std::string next = generated["logprobs"]["tokens"][0];
  const double next_logprob = generated["logprobs"]["token_logprobs"][0];

  r = client_->Post("/v1/completions",
                    json({{"prompt", prompt + next}, {"max_tokens", 1}, {"temperature", 0},
                          {"logprobs", 2}, {"echo", true}})
                        .dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json choice = json::parse(r->body)["choices"][0];
  const json& logprobs = choice["logprobs"];
  const size_t n_prompt = prompt_ids.size() + 1;
  ASSERT_EQ(logprobs["tokens"].size(), n_prompt + 1) << logprobs.dump();
  EXPECT_EQ(choice["text"].get<std::string>().rfind(prompt + next, 0), 0u) << choice["text"];
  EXPECT_TRUE(logprobs["token_logprobs"][0].is_null());
  EXPECT_TRUE(logprobs["top_logprobs"][0].is_null());
  std::string spelled;
  for (size_t i = 0; i < n_prompt; ++i) {
    EXPECT_EQ(logprobs["text_offset"][i].get<size_t>(), spelled.size()) << i;
    spelled += logprobs["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(spelled, prompt + next);
  EXPECT_EQ(logprobs["tokens"][n_prompt - 1], next);
  EXPECT_EQ(logprobs["token_logprobs"][n_prompt - 1].get<double>(), next_logprob);
  EXPECT_EQ(logprobs["text_offset"][n_prompt].get<size_t>(), spelled.size());
  for (size_t i = 1; i <= n_prompt; ++i) {
    // The most likely token and the scored one, at most.
    EXPECT_GE(logprobs["top_logprobs"][i].size(), 2u) << i;
    EXPECT_LE(logprobs["top_logprobs"][i].size(), 3u) << i;
    EXPECT_LE(logprobs["token_logprobs"][i].get<double>(), 0.0) << i;
  }
  EXPECT_EQ(json::parse(r->body)["usage"]["prompt_tokens"], n_prompt);

  // Echo alone: the text, no logprobs; with a stream: refused.
  r = client_->Post("/v1/completions",
                    json({{"prompt", prompt}, {"max_tokens", 2}, {"echo", true}}).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"].get<std::string>().rfind(prompt, 0), 0u);
  EXPECT_TRUE(json::parse(r->body)["choices"][0]["logprobs"].is_null());
  r = client_->Post("/v1/completions",
                    json({{"prompt", prompt}, {"echo", true}, {"stream", true}}).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "echo");
}

// A counter of the router's /metrics, whatever its labels (0 when absent).
double RouterCounter(HttpClient& client, const std::string& name) {
  httplib::Result metrics = client.Get("/metrics", /*key=*/"");
  EXPECT_TRUE(metrics && metrics->status == 200);
  if (!metrics) return 0;
  for (absl::string_view line : absl::StrSplit(metrics->body, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || line.empty() || (line[0] != ' ' && line[0] != '{')) {
      continue;
    }
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) << line;
    return value;
  }
  return 0;
}

// n choices: each is what the request alone gives with the request's seed plus the choice's
// index; the usage counts the prompt once; the choices after the first take the prompt's KV from
// the prefix cache. Streamed, each chunk names its choice. best_of answers the candidate whose
// tokens have the highest sum of log-probabilities.
TEST_F(HttpClusterTest, ChoicesShareThePromptAndEachHasItsSeed) {
  const std::string prompt =
      "Rivers carry water from mountains and hills down to lakes and the sea. Along the way they "
      "shape valleys, feed forests and farms, and give towns their water. Write about a river:";
  const json base = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 7}};
  auto complete = [&](json request) {
    httplib::Result r = client_->Post("/v1/completions", request.dump());
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  };
  std::vector<std::string> alone;  // the request alone, with seed 7 + i
  std::vector<double> alone_sums;  // and the sum of its tokens' log-probabilities
  int alone_tokens = 0;            // and their generated tokens
  for (int i = 0; i < 3; ++i) {
    json request = base;
    request["seed"] = 7 + i;
    request["logprobs"] = 0;
    const json answer = complete(request);
    alone.push_back(answer["choices"][0]["text"]);
    alone_tokens += answer["usage"]["completion_tokens"].get<int>();
    double sum = 0;
    for (const json& lp : answer["choices"][0]["logprobs"]["token_logprobs"]) {
      sum += lp.get<double>();
    }
    alone_sums.push_back(sum);
  }
  ASSERT_TRUE(alone[0] != alone[1] || alone[1] != alone[2]) << "seeds that draw alike";

  const double cached_before = RouterCounter(*client_, "baton:request_cached_prompt_tokens_total");
  json request = base;
  request["n"] = 3;
  request["prompt"] = prompt + " ";  // a prompt not cached yet, whose first choice computes it
  const json several = complete(request);
  ASSERT_EQ(several["choices"].size(), 3u);
  const int n_prompt = several["usage"]["prompt_tokens"];
  int completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(several["choices"][i]["index"], i);
    EXPECT_EQ(several["choices"][i]["finish_reason"], "length");
    completion += 6;
  }
  EXPECT_EQ(several["usage"]["completion_tokens"], completion);
  // Choices 1 and 2 found all but the prompt's last (partial) block cached.
  const double cached = RouterCounter(*client_, "baton:request_cached_prompt_tokens_total") -
                        cached_before;
  EXPECT_GE(cached, 2 * (n_prompt - 32)) << n_prompt;

  request = base;
  request["n"] = 3;
  const json same_prompt = complete(request);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(same_prompt["choices"][i]["text"], alone[i]) << i;

  // Streamed: the chunks of each choice add up to its text.
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  httplib::Result r = client_->Post("/v1/completions", request.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::string> streamed(3);
  json usage;
  for (absl::string_view event : absl::StrSplit(r->body, "\n\n", absl::SkipEmpty())) {
    ASSERT_TRUE(absl::ConsumePrefix(&event, "data: ")) << event;
    if (event == "[DONE]") break;
    const json chunk = json::parse(event);
    if (!chunk["usage"].is_null()) usage = chunk["usage"];
    for (const json& choice : chunk["choices"]) {
      streamed.at(choice["index"].get<size_t>()) += choice["text"].get<std::string>();
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(streamed[i], alone[i]) << i;
  EXPECT_EQ(usage["completion_tokens"], alone_tokens);
  EXPECT_EQ(usage["prompt_tokens"], same_prompt["usage"]["prompt_tokens"]);

  // best_of 3: the candidate of the highest sum, without the logprobs nobody asked for.
  request = base;
  request["best_of"] = 3;
  const json best = complete(request);
  ASSERT_EQ(best["choices"].size(), 1u);
  const size_t best_index =
      std::max_element(alone_sums.begin(), alone_sums.end()) - alone_sums.begin();
  EXPECT_EQ(best["choices"][0]["text"], alone[best_index]);
  EXPECT_TRUE(best["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(best["usage"]["completion_tokens"], alone_tokens);

  // Echo with logprobs: the prompt is scored once, by the first choice, and echoed for each; the
  // second takes the prompt's KV from the prefix cache.
  request = base;
  request["n"] = 2;
  request["echo"] = true;
  request["logprobs"] = 1;
  request["prompt"] = prompt + "  ";
  const double echo_cached_before =
      RouterCounter(*client_, "baton:request_cached_prompt_tokens_total");
  const json echoed = complete(request);
  ASSERT_EQ(echoed["choices"].size(), 2u);
  const size_t echo_prompt = echoed["usage"]["prompt_tokens"].get<size_t>();
  for (int i = 0; i < 2; ++i) {
    const json& logprobs = echoed["choices"][i]["logprobs"];
    EXPECT_EQ(echoed["choices"][i]["text"].get<std::string>().rfind(prompt + "  ", 0), 0u);
    ASSERT_GT(logprobs["tokens"].size(), echo_prompt);
    EXPECT_TRUE(logprobs["token_logprobs"][0].is_null());
    for (size_t t = 0; t < echo_prompt; ++t) {
      EXPECT_EQ(logprobs["tokens"][t], echoed["choices"][0]["logprobs"]["tokens"][t]);
      EXPECT_EQ(logprobs["token_logprobs"][t],
                echoed["choices"][0]["logprobs"]["token_logprobs"][t]);
    }
  }
  EXPECT_GE(RouterCounter(*client_, "baton:request_cached_prompt_tokens_total") -
                echo_cached_before,
            static_cast<double>(echo_prompt) - 32);

  // Chat too.
  r = client_->Post("/v1/chat/completions", json({{"messages", {{{"role", "user"},
                                                                 {"content", "Hi"}}}},
                                                  {"max_tokens", 4}, {"n", 2}, {"seed", 3}})
                                                .dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json chat = json::parse(r->body);
  ASSERT_EQ(chat["choices"].size(), 2u);
  EXPECT_EQ(chat["choices"][1]["index"], 1);
  EXPECT_EQ(chat["choices"][1]["message"]["role"], "assistant");
}

// Control tokens the model generates are left out of the text unless skip_special_tokens is
// false (vLLM's parameter).
TEST_F(HttpClusterTest, SkipSpecialTokensFalseKeepsControlTokensInTheText) {
  httplib::Result r = client_->Post("/tokenize", R"({"prompt": "<|im_start|>"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const int im_start = json::parse(r->body)["tokens"][0];
  json request = {{"prompt", "Hello"},
                  {"max_tokens", 2},
                  {"temperature", 0},
                  {"logit_bias", {{std::to_string(im_start), 100}}}};
  for (const bool skip : {true, false}) {
    if (!skip) request["skip_special_tokens"] = false;
    r = client_->Post("/v1/completions", request.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json answer = json::parse(r->body);
    EXPECT_EQ(answer["usage"]["completion_tokens"], 2);
    EXPECT_EQ(answer["choices"][0]["text"], skip ? "" : "<|im_start|><|im_start|>") << r->body;
  }
  request["skip_special_tokens"] = "no";
  r = client_->Post("/v1/completions", request.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "skip_special_tokens");
}

// What lm-evaluation-harness's remote tokenizer reads: the special tokens and the context.
TEST_F(HttpClusterTest, TokenizerInfoAndTokenizingWithoutSpecialTokens) {
  httplib::Result r = client_->Get("/tokenizer_info", "wrong-key");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);  // behind the API key, as the other endpoints
  r = client_->Get("/tokenizer_info");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json info = json::parse(r->body);
  EXPECT_EQ(info["eos_token"], "<|im_end|>");
  EXPECT_EQ(info["bos_token"], "<|im_start|>");
  EXPECT_EQ(info["add_bos_token"], false);
  EXPECT_GT(info["model_max_length"].get<int>(), 0);
  EXPECT_NE(info["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
  r = client_->Post("/tokenize", R"({"prompt": "<|im_end|>", "add_special_tokens": false})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["tokens"].size(), 1u);  // lm-eval's eos_token_id lookup
  r = client_->Post("/tokenize", R"({"prompt": "x", "add_special_tokens": "no"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
}

TEST_F(HttpClusterTest, StreamingEqualsNonStreamingAndEndsWithUsage) {
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = path == "/v1/chat/completions";
    json request = {{"max_tokens", 10}, {"temperature", 0}};
    if (chat) {
      request["messages"] = {{{"role", "user"}, {"content", "Write one sentence about rivers."}}};
    } else {
      request["prompt"] = "Rivers are";
    }
    httplib::Result whole = client_->Post(path, request.dump());
    ASSERT_TRUE(whole);
    ASSERT_EQ(whole->status, 200) << whole->body;
    const json expected = json::parse(whole->body);

    request["stream"] = true;
    request["stream_options"] = {{"include_usage", true}};
    httplib::Result streamed = client_->Post(path, request.dump());
    ASSERT_TRUE(streamed);
    ASSERT_EQ(streamed->status, 200) << streamed->body;
    EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
    const SseStream sse = ParseSse(streamed->body);
    EXPECT_TRUE(sse.done);
    EXPECT_TRUE(sse.done_last);
    ASSERT_GE(sse.events.size(), 3u);
    std::string text;
    std::string finish_reason;
    for (size_t i = 0; i + 1 < sse.events.size(); ++i) {
      const json& chunk = sse.events[i];
      EXPECT_EQ(chunk["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(chunk["id"], sse.events[0]["id"]);
      EXPECT_EQ(chunk["model"], kModel);
      EXPECT_TRUE(chunk["usage"].is_null());
      ASSERT_EQ(chunk["choices"].size(), 1u);
      const json& choice = chunk["choices"][0];
      if (chat) {
        EXPECT_EQ(choice["delta"].contains("role"), i == 0);
        if (i == 0) {
          EXPECT_EQ(choice["delta"]["role"], "assistant");
        }
        if (choice["delta"].contains("content")) text += choice["delta"]["content"];
      } else {
        text += choice["text"];
      }
      if (!choice["finish_reason"].is_null()) {
        EXPECT_EQ(i + 2, sse.events.size()) << "the finish reason comes in the last choice";
        finish_reason = choice["finish_reason"];
      }
    }
    const json& last = sse.events.back();
    EXPECT_EQ(last["choices"], json::array());
    // The same counts; the streamed request repeats the prompt, so a prompt of a block or more
    // is cached now.
    json usage = last["usage"];
    EXPECT_GE(usage["prompt_tokens_details"]["cached_tokens"].get<int>(),
              expected["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>());
    usage["prompt_tokens_details"] = expected["usage"]["prompt_tokens_details"];
    EXPECT_EQ(usage, expected["usage"]);
    const json& choice = expected["choices"][0];
    EXPECT_EQ(text, chat ? choice["message"]["content"] : choice["text"]);
    EXPECT_EQ(finish_reason, choice["finish_reason"]);
  }
}

TEST_F(HttpClusterTest, ClientGoneMidStreamCancelsEverywhere) {
  // Far more tokens than the worker generates in the time the test waits below (about a minute
  // of decoding on a CPU core): only a cancellation frees the blocks that soon.
  const std::string body =
      R"({"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true,
          "stream": true})";
  int chunks = 0;
  httplib::Result r = client_->PostStreaming("/v1/completions", body,
                                             [&](const char* data, size_t n) {
                                               return ++chunks < 4;  // then hang up
                                             });
  EXPECT_FALSE(r);  // we hung up
  EXPECT_EQ(chunks, 4);
  // The router cancelled the request: the decode worker released the reservation, every block
  // is free, and the router holds nothing for it.
  EXPECT_EQ(cluster_.WaitEveryWorkerFree(std::chrono::seconds(15)), absl::OkStatus());
  auto stub = cluster_.RouterStub();
  grpc::ClientContext context;
  cluster_.Prepare(context);
  baton::v1::ClusterStatusResponse status;
  ASSERT_TRUE(stub->ClusterStatus(&context, {}, &status).ok());
  EXPECT_EQ(status.active_requests(), 0);
  EXPECT_EQ(status.queued_requests(), 0);
}

TEST(HttpClusterConfigTest, RouterHttpPort) {
  absl::StatusOr<cli::ClusterConfig> config = cli::ParseClusterConfig(
      "router:\n  port: 7000\n  http_port: 8000\nprefill: [{}]\ndecode: [{}]\n", "test.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->router.http_port, 8000);
  config = cli::ParseClusterConfig("prefill: [{}]\ndecode: [{}]\n", "test.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->router.http_port, 0);  // any free port
  config = cli::ParseClusterConfig(
      "router:\n  http_port: 70000\nprefill: [{}]\ndecode: [{}]\n", "test.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("http_port"));
  // Workers have no HTTP API.
  config = cli::ParseClusterConfig("prefill: [{http_port: 1}]\ndecode: [{}]\n", "test.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("unknown key 'http_port'"));
}

}  // namespace
}  // namespace baton
