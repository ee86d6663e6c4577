#include "bench/serve_client.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/v1/router.grpc.pb.h"
#include "bench/sse_parser.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "rpc/server_options.h"
#include "rpc/status.h"

namespace baton::bench {
namespace {

using Clock = StreamTimer::Clock;

RequestOutcome Failure(std::string code, std::string message) {
  RequestOutcome r;
  r.ok = false;
  r.error = std::move(code);
  r.error_message = std::move(message);
  return r;
}

class GrpcServeClient final : public ServeClient {
 public:
  GrpcServeClient(const ServeClientOptions& options, std::shared_ptr<grpc::Channel> channel)
      : options_(options), stub_(baton::v1::Router::NewStub(std::move(channel))) {
    client_.auth_token = options.token;
  }

  RequestOutcome Send(const ServeRequest& request) override {
    baton::v1::GenerateRequest message;
    message.set_prompt(request.prompt);
    if (!options_.model.empty()) message.set_model(options_.model);
    baton::v1::SamplingParams& sampling = *message.mutable_sampling();
    sampling.set_temperature(options_.temperature);
    sampling.set_max_tokens(request.max_tokens);
    sampling.set_ignore_eos(options_.ignore_eos);
    sampling.set_disable_speculation(!options_.speculative);
    if (!options_.json_schema.empty()) {
      sampling.mutable_constraint()->set_json_schema(options_.json_schema);
      sampling.mutable_constraint()->set_strict(true);
    }

    grpc::ClientContext context;
    rpc::PrepareContext(context, client_, std::chrono::system_clock::now() + options_.timeout);
    const Clock::time_point sent = Clock::now();
    StreamTimer timer(sent);
    std::unique_ptr<grpc::ClientReader<baton::v1::GenerateResponse>> reader =
        stub_->Generate(&context, message);
    baton::v1::GenerateResponse response;
    baton::v1::GenerateResponse last;
    bool have_last = false;
    std::string text;
    while (reader->Read(&response)) {
      timer.OnChunk(Clock::now(), response.tokens_size() > 0);
      text += response.text();
      if (response.has_usage() ||
          response.finish_reason() != baton::v1::FINISH_REASON_UNSPECIFIED) {
        last = response;
        have_last = true;
      }
    }
    const grpc::Status status = reader->Finish();
    timer.OnEnd(Clock::now());
    if (!status.ok()) {
      const absl::Status s = rpc::FromGrpcStatus(status);
      return Failure(absl::StatusCodeToString(s.code()), std::string(s.message()));
    }
    if (have_last && last.finish_reason() == baton::v1::FINISH_REASON_ERROR) {
      return Failure("FINISH_ERROR", "the stream ended with finish_reason ERROR");
    }
    RequestOutcome outcome;
    outcome.ok = true;
    timer.Fill(outcome);
    outcome.prompt_tokens = last.usage().prompt_tokens();
    outcome.output_tokens = last.usage().completion_tokens();
    if (!have_last || !last.has_usage()) outcome.output_tokens = timer.n_token_chunks();
    const baton::v1::Timings& t = last.timings();
    outcome.server_queue_s = t.queue_seconds();
    outcome.server_ttft_s = t.ttft_seconds();
    outcome.kv_bytes = t.kv_bytes();
    outcome.kv_transfer_s = t.kv_transfer_seconds();
    outcome.kv_tail_s = t.kv_tail_seconds();
    outcome.spec_draft_tokens = t.spec_draft_tokens();
    outcome.spec_accepted_tokens = t.spec_accepted_tokens();
    outcome.mask_s = t.mask_seconds();
    outcome.prefill_cached_tokens = t.prefill_cached_tokens();
    outcome.decode_cached_tokens = t.decode_cached_tokens();
    outcome.text = std::move(text);
    return outcome;
  }

  absl::StatusOr<baton::v1::ClusterStatusResponse> ClusterStatus() override {
    grpc::ClientContext context;
    rpc::PrepareContext(context, client_,
                        std::chrono::system_clock::now() + std::chrono::seconds(10));
    baton::v1::ClusterStatusResponse response;
    const grpc::Status status =
        stub_->ClusterStatus(&context, baton::v1::ClusterStatusRequest(), &response);
    if (!status.ok()) return rpc::FromGrpcStatus(status);
    return response;
  }

 private:
  const ServeClientOptions options_;
  rpc::ClientOptions client_;
  std::unique_ptr<baton::v1::Router::Stub> stub_;
};

class HttpServeClient final : public ServeClient {
 public:
  HttpServeClient(const ServeClientOptions& options, std::string host, int port)
      : options_(options), host_(std::move(host)), port_(port) {}

  RequestOutcome Send(const ServeRequest& request) override {
    nlohmann::json body = {
        {"prompt", request.prompt},
        {"max_tokens", request.max_tokens},
        {"temperature", options_.temperature},
        {"stream", true},
        {"stream_options", {{"include_usage", true}}},
        {"ignore_eos", options_.ignore_eos},
        {"speculative", options_.speculative},
    };
    if (!options_.model.empty()) body["model"] = options_.model;
    if (!options_.json_schema.empty()) {
      body["structured_outputs"] = {{"json", options_.json_schema}};
    }
    httplib::Request http;
    http.method = "POST";
    http.path = "/v1/completions";
    http.body = body.dump();
    http.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
    if (!options_.token.empty()) {
      http.headers.emplace("Authorization", absl::StrCat("Bearer ", options_.token));
    }

    const Clock::time_point sent = Clock::now();
    const Clock::time_point deadline = sent + options_.timeout;
    StreamTimer timer(sent);
    SseParser parser;
    int status = 0;
    std::string error_body;
    bool deadline_passed = false;
    bool done = false;
    std::string stream_error;
    nlohmann::json usage;
    int32_t text_chunks = 0;
    std::string generated;
    http.response_handler = [&](const httplib::Response& response) {
      status = response.status;
      return true;
    };
    http.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      const Clock::time_point now = Clock::now();
      if (now > deadline) {
        deadline_passed = true;
        return false;
      }
      if (status != 200) {
        if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(size, 4096));
        return true;
      }
      for (const std::string& event : parser.Feed({data, size})) {
        if (event == "[DONE]") {
          done = true;
          continue;
        }
        nlohmann::json chunk = nlohmann::json::parse(event, nullptr, /*allow_exceptions=*/false);
        if (chunk.is_discarded() || !chunk.is_object()) {
          stream_error = absl::StrCat("not JSON: ", event.substr(0, 200));
          return false;
        }
        if (auto e = chunk.find("error"); e != chunk.end()) {
          stream_error = e->dump().substr(0, 500);
          return false;
        }
        bool has_text = false;
        if (auto choices = chunk.find("choices"); choices != chunk.end() && choices->is_array()) {
          for (const nlohmann::json& c : *choices) {
            auto text = c.find("text");
            if (text != c.end() && text->is_string() && !text->get_ref<const std::string&>().empty()) {
              has_text = true;
              generated += text->get_ref<const std::string&>();
            }
          }
        }
        if (has_text) ++text_chunks;
        timer.OnChunk(now, has_text);
        if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) usage = *u;
      }
      return true;
    };

    httplib::Client client(host_, port_);
    client.set_connection_timeout(std::chrono::seconds(10));
    client.set_read_timeout(options_.timeout);
    client.set_write_timeout(std::chrono::seconds(30));
    httplib::Result result = client.send(http);
    timer.OnEnd(Clock::now());
    if (deadline_passed) {
      return Failure("DEADLINE_EXCEEDED", absl::StrCat("no end of stream within ",
                                                       options_.timeout.count(), " ms"));
    }
    if (!stream_error.empty()) return Failure("STREAM_ERROR", stream_error);
    if (!result) {
      const httplib::Error e = result.error();
      if (e == httplib::Error::Read && Clock::now() >= deadline) {
        return Failure("DEADLINE_EXCEEDED", "read timed out");
      }
      return Failure(e == httplib::Error::Connection || e == httplib::Error::ConnectionTimeout
                         ? "CONNECTION"
                         : absl::StrCat("HTTP_CLIENT_", httplib::to_string(e)),
                     httplib::to_string(e));
    }
    if (status != 200) {
      return Failure(absl::StrCat("HTTP_", status), error_body.substr(0, 500));
    }
    if (!done) return Failure("STREAM_ERROR", "the stream ended without data: [DONE]");
    RequestOutcome outcome;
    outcome.ok = true;
    timer.Fill(outcome);
    auto number = [&](const char* key) -> int32_t {
      auto it = usage.find(key);
      return it != usage.end() && it->is_number_integer() ? it->get<int32_t>() : -1;
    };
    outcome.prompt_tokens = std::max(0, usage.is_object() ? number("prompt_tokens") : 0);
    const int32_t completion = usage.is_object() ? number("completion_tokens") : -1;
    // Without usage (a server ignoring include_usage) count text chunks instead.
    outcome.output_tokens = completion >= 0 ? completion : text_chunks;
    outcome.text = std::move(generated);
    return outcome;
  }

  absl::StatusOr<baton::v1::ClusterStatusResponse> ClusterStatus() override {
    return absl::UnimplementedError("the HTTP API has no cluster status (use --protocol grpc)");
  }

 private:
  const ServeClientOptions options_;
  const std::string host_;
  const int port_;
};

// Several routers serving the same workers: each request goes to the next one in turn, so that a
// conversation's turns land on different routers. The cluster's view comes from the first.
class RotatingServeClient final : public ServeClient {
 public:
  explicit RotatingServeClient(std::vector<std::unique_ptr<ServeClient>> clients)
      : clients_(std::move(clients)) {}

  RequestOutcome Send(const ServeRequest& request) override {
    return clients_[next_.fetch_add(1) % clients_.size()]->Send(request);
  }
  absl::StatusOr<baton::v1::ClusterStatusResponse> ClusterStatus() override {
    return clients_.front()->ClusterStatus();
  }

 private:
  const std::vector<std::unique_ptr<ServeClient>> clients_;
  std::atomic<uint64_t> next_{0};
};

absl::StatusOr<std::unique_ptr<ServeClient>> CreateOneServeClient(
    const ServeClientOptions& options) {
  const size_t colon = options.server.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(options.server).substr(colon + 1), &port) || port <= 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server: '", options.server, "' is not HOST:PORT"));
  }
  if (options.protocol == ServeProtocol::kHttp) {
    std::string host = options.server.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    return std::make_unique<HttpServeClient>(options, std::move(host), port);
  }
  rpc::ClientOptions client;
  client.auth_token = options.token;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::MakeChannel(options.server, client);
  if (!channel.ok()) return channel.status();
  return std::make_unique<GrpcServeClient>(options, std::move(*channel));
}

}  // namespace

absl::StatusOr<ServeProtocol> ParseServeProtocol(const std::string& name) {
  if (name == "grpc") return ServeProtocol::kGrpc;
  if (name == "http") return ServeProtocol::kHttp;
  return absl::InvalidArgumentError(absl::StrCat("--protocol: '", name, "' is not grpc or http"));
}

const char* ServeProtocolName(ServeProtocol protocol) {
  return protocol == ServeProtocol::kGrpc ? "grpc" : "http";
}

absl::StatusOr<std::unique_ptr<ServeClient>> CreateServeClient(const ServeClientOptions& options) {
  const std::vector<std::string> servers = absl::StrSplit(options.server, ',');
  if (servers.size() == 1) return CreateOneServeClient(options);
  std::vector<std::unique_ptr<ServeClient>> clients;
  for (const std::string& server : servers) {
    ServeClientOptions one = options;
    one.server = server;
    absl::StatusOr<std::unique_ptr<ServeClient>> client = CreateOneServeClient(one);
    if (!client.ok()) return client.status();
    clients.push_back(std::move(*client));
  }
  return std::make_unique<RotatingServeClient>(std::move(clients));
}

}  // namespace baton::bench
