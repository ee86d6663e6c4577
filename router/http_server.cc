#include "router/http_server.h"

#include <httplib.h>

#include <optional>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "metrics/metrics.h"
#include "nlohmann/json.hpp"
#include "router/http_errors.h"
#include "router/request_admission.h"
#include "router/request_intake.h"
#include "rpc/auth.h"

namespace baton::router {
namespace {

using json = nlohmann::ordered_json;

constexpr char kJson[] = "application/json";

void SendJson(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

void SendError(httplib::Response& response, const absl::Status& status) {
  const HttpError error = HttpErrorFromStatus(status);
  if (error.http_status == 401) response.set_header("WWW-Authenticate", "Bearer");
  SendJson(response, error.http_status, HttpErrorJson(error));
}

uint64_t RandomSeed() {
  thread_local absl::BitGen gen;
  return absl::Uniform<uint64_t>(gen);
}

std::string NewResponseId(OpenAiEndpoint endpoint) {
  thread_local absl::BitGen gen;
  return absl::StrFormat("%s-%016x%08x",
                         endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl" : "cmpl",
                         absl::Uniform<uint64_t>(gen), absl::Uniform<uint32_t>(gen));
}

// What the streaming content provider works with; lives as long as the response.
struct StreamState {
  std::shared_ptr<HttpSink> sink;
  OpenAiStreamEncoder encoder;
  std::optional<HttpSink::Event> first;  // taken out while deciding the status
  std::shared_ptr<void> in_flight;
};

}  // namespace

// Keeps a request in the server's in-flight set while it lives.
class HttpServer::InFlight {
 public:
  InFlight(HttpServer* server, HttpSink* sink) : server_(server), sink_(sink) {}
  ~InFlight() { server_->Untrack(sink_); }

 private:
  HttpServer* const server_;
  HttpSink* const sink_;
};

HttpServer::HttpServer(HttpServerOptions options, const GenerateEnv* env)
    : options_(std::move(options)), env_(*env), created_(absl::ToUnixSeconds(absl::Now())) {}

HttpServer::~HttpServer() { Shutdown(absl::Now()); }

absl::Status HttpServer::Start() {
  if (options_.port < 0 || options_.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP port must be in [0, 65535], got ", options_.port));
  }
  server_ = std::make_unique<httplib::Server>();
  const int n_threads = std::max(1, options_.n_threads);
  server_->new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(absl::ToChronoSeconds(options_.read_timeout));
  server_->set_write_timeout(absl::ToChronoSeconds(options_.write_timeout));
  server_->set_keep_alive_max_count(100);
  server_->set_tcp_nodelay(true);

  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(OpenAiEndpoint::kCompletions, req, res);
  });
  server_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleGenerate(OpenAiEndpoint::kChatCompletions, req, res);
                });
  server_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    HandleModels(req, res);
  });
  server_->Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    HandleModel(req, res);
  });
  server_->Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    HandleHealth(req, res);
  });
  server_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    HandleMetrics(req, res);
  });
  // httplib's own refusals (no route, body too large, malformed HTTP) as OpenAI errors; a
  // response a handler already filled is left as it is.
  const size_t max_body = options_.max_body_bytes;
  server_->set_error_handler(httplib::Server::HandlerWithResponse(
      [max_body](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        HttpError error;
        error.http_status = res.status;
        error.type = "invalid_request_error";
        switch (res.status) {
          case 404:
            error.message = absl::StrCat("no route for ", req.method, " ", req.path);
            error.code = "not_found";
            break;
          case 413:
            error.message = absl::StrCat("the request body is larger than the ", max_body,
                                         " bytes this server accepts");
            error.code = "request_too_large";
            break;
          default:
            error.message = absl::StrCat("the request failed with HTTP status ", res.status);
            if (res.status >= 500) error.type = "server_error";
            break;
        }
        res.set_content(HttpErrorJson(error).dump(-1, ' ', false, json::error_handler_t::replace),
                        kJson);
        return httplib::Server::HandlerResponse::Handled;
      }));
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        SendError(res, absl::InternalError(absl::StrCat("internal error: ", what)));
      });

  const int port = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                                      : (server_->bind_to_port(options_.host, options_.port)
                                             ? options_.port
                                             : -1);
  if (port <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options_.host, ":",
                                               options_.port));
  }
  port_ = port;
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

std::string HttpServer::address() const {
  const std::string& host = options_.host;
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port_)
                                             : absl::StrCat(host, ":", port_);
}

void HttpServer::Shutdown(absl::Time deadline) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->stop();  // no new connections; the threads finish what they serve
  std::vector<std::shared_ptr<HttpSink>> remaining;
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() { return in_flight_.empty(); };
    if (!mu_.AwaitWithDeadline(absl::Condition(&idle), deadline)) {
      for (auto& [key, sink] : in_flight_) remaining.push_back(sink);
    }
  }
  for (const std::shared_ptr<HttpSink>& sink : remaining) sink->Cancel();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<HttpServer::InFlight> HttpServer::Track(std::shared_ptr<HttpSink> sink) {
  HttpSink* key = sink.get();
  {
    absl::MutexLock lock(&mu_);
    in_flight_.emplace(key, std::move(sink));
  }
  return std::make_shared<InFlight>(this, key);
}

void HttpServer::Untrack(HttpSink* sink) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(sink);
}

absl::Status HttpServer::CheckAuth(const httplib::Request& request) const {
  if (options_.api_keys.empty()) return absl::OkStatus();
  const std::string header = request.get_header_value("Authorization");
  if (header.empty()) {
    return absl::UnauthenticatedError(
        "no API key given: send the header 'Authorization: Bearer YOUR_KEY'");
  }
  constexpr absl::string_view kScheme = "bearer ";
  if (header.size() > kScheme.size() &&
      absl::EqualsIgnoreCase(absl::string_view(header).substr(0, kScheme.size()), kScheme)) {
    const std::string key(absl::StripLeadingAsciiWhitespace(
        absl::string_view(header).substr(kScheme.size())));
    bool match = false;
    for (const std::string& accepted : options_.api_keys) {
      match |= rpc::TokensEqual(key, accepted);  // no early exit: constant time per key
    }
    if (match) return absl::OkStatus();
  }
  return absl::UnauthenticatedError("incorrect API key provided");
}

void HttpServer::HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& req,
                                httplib::Response& res) {
  const absl::Time received = absl::Now();
  if (absl::Status s = CheckAuth(req); !s.ok()) return SendError(res, s);
  if (env_.draining != nullptr && env_.draining->load()) {
    return SendError(res, absl::UnavailableError("the router is shutting down"));
  }
  const ServedModel& model = *env_.driver.model;
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(endpoint, req.body, model.id(), model.general_name());
  if (!parsed.ok()) return SendError(res, parsed.status());

  // The router's intake runs here, before any response is started, so that a bad request gets
  // its 400; the driver then gets the prompt as token ids (not tokenized twice).
  absl::StatusOr<PreparedRequest> prepared = PrepareRequest(parsed->generate, model, RandomSeed());
  if (!prepared.ok()) return SendError(res, prepared.status());
  const std::string id = NewResponseId(endpoint);
  v1::GenerateRequest request;
  request.set_model(parsed->generate.model());
  request.set_request_id(id);
  request.mutable_prompt_tokens()->mutable_ids()->Assign(prepared->prompt.begin(),
                                                         prepared->prompt.end());
  *request.mutable_sampling() = prepared->wire;
  for (const std::string& stop : prepared->params.stop_strings) {
    request.mutable_sampling()->add_stop(stop);
  }

  auto sink = std::make_shared<HttpSink>();
  absl::StatusOr<std::shared_ptr<RequestDriver>> driver = CreateDriver(
      env_, request, id, received, received + env_.request_timeout, sink.get());
  if (!driver.ok()) return SendError(res, driver.status());
  sink->set_driver(*driver);
  std::shared_ptr<InFlight> in_flight = Track(sink);
  if (absl::Status s = LaunchDriver(env_, *std::move(driver), sink); !s.ok()) {
    return SendError(res, s);
  }

  OpenAiResponseContext context{.endpoint = endpoint,
                                .id = id,
                                .created = absl::ToUnixSeconds(received),
                                .model = model.id(),
                                .system_fingerprint = model.fingerprint()};
  if (!parsed->stream) {
    std::string text;
    v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
    v1::Usage usage;
    while (true) {
      HttpSink::Event event = sink->Next(absl::InfiniteFuture());
      if (event.kind == HttpSink::Event::Kind::kMessage) {
        text += event.message.text();
        if (event.message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
          finish_reason = event.message.finish_reason();
          usage = event.message.usage();
        }
        continue;
      }
      if (!event.status.ok()) return SendError(res, event.status);
      break;
    }
    return SendJson(res, 200, OpenAiCompletion(context, text, finish_reason, usage));
  }

  // Streaming: the status is decided by the first event, if it comes soon.
  HttpSink::Event first = sink->Next(absl::Now() + options_.stream_status_wait);
  if (first.kind == HttpSink::Event::Kind::kClosed && !first.status.ok()) {
    return SendError(res, first.status);
  }
  auto state = std::make_shared<StreamState>(StreamState{
      .sink = sink,
      .encoder = OpenAiStreamEncoder(std::move(context), parsed->include_usage),
      .first = first.kind == HttpSink::Event::Kind::kNone ? std::nullopt
                                                           : std::optional(std::move(first)),
      .in_flight = std::move(in_flight)});
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const absl::Duration ping_interval = options_.ping_interval;
  res.set_chunked_content_provider(
      "text/event-stream",
      [state, ping_interval](size_t /*offset*/, httplib::DataSink& out) {
        auto write = [&out](const std::string& bytes) {
          return bytes.empty() || out.write(bytes.data(), bytes.size());
        };
        while (true) {
          HttpSink::Event event;
          if (state->first.has_value()) {
            event = *std::move(state->first);
            state->first.reset();
          } else {
            event = state->sink->Next(absl::Now() + ping_interval);
          }
          std::string bytes;
          switch (event.kind) {
            case HttpSink::Event::Kind::kNone:
              // Keeps proxies from timing out, and finds out whether the client is still there.
              bytes = ": ping\n\n";
              break;
            case HttpSink::Event::Kind::kMessage:
              bytes = state->encoder.Message(event.message);
              break;
            case HttpSink::Event::Kind::kClosed:
              bytes = state->encoder.End(event.status);
              break;
          }
          if (!write(bytes)) {
            // The client went away: stop the request everywhere.
            state->sink->Abandon();
            return false;
          }
          if (event.kind == HttpSink::Event::Kind::kClosed) {
            out.done();
            return true;
          }
        }
      },
      [state](bool success) {
        if (!success) state->sink->Abandon();
      });
}

void HttpServer::HandleModels(const httplib::Request& req, httplib::Response& res) {
  if (absl::Status s = CheckAuth(req); !s.ok()) return SendError(res, s);
  const ServedModel& model = *env_.driver.model;
  SendJson(res, 200,
           {{"object", "list"},
            {"data", json::array({{{"id", model.id()},
                                   {"object", "model"},
                                   {"created", created_},
                                   {"owned_by", "baton"}}})}});
}

void HttpServer::HandleModel(const httplib::Request& req, httplib::Response& res) {
  if (absl::Status s = CheckAuth(req); !s.ok()) return SendError(res, s);
  const ServedModel& model = *env_.driver.model;
  const std::string name = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
  if (name != model.id() && (model.general_name().empty() || name != model.general_name())) {
    return SendError(
        res, WithErrorCode(WithParam(absl::NotFoundError(absl::StrCat(
                                         "The model '", name, "' does not exist; this server "
                                         "serves '", model.id(), "'")),
                                     "model"),
                           "model_not_found"));
  }
  SendJson(res, 200,
           {{"id", model.id()}, {"object", "model"}, {"created", created_}, {"owned_by", "baton"}});
}

void HttpServer::HandleHealth(const httplib::Request& req, httplib::Response& res) {
  if (env_.draining != nullptr && env_.draining->load()) {
    return SendJson(res, 503,
                    {{"status", "unavailable"}, {"reason", "the router is shutting down"}});
  }
  int n_prefill = 0;
  int n_decode = 0;
  for (const WorkerSnapshot& w : env_.driver.registry->Snapshot()) {
    if (!w.healthy) continue;
    n_prefill += ServesPrefill(w.role);
    n_decode += ServesDecode(w.role);
  }
  const bool ready = n_prefill > 0 && n_decode > 0;
  json body = {{"status", ready ? "ok" : "unavailable"}};
  if (!ready) {
    body["reason"] = n_prefill == 0 && n_decode == 0 ? "no healthy prefill-capable worker and no "
                                                       "healthy decode-capable worker"
                     : n_prefill == 0 ? "no healthy prefill-capable worker"
                                      : "no healthy decode-capable worker";
  }
  body["prefill_workers"] = n_prefill;
  body["decode_workers"] = n_decode;
  SendJson(res, ready ? 200 : 503, body);
}

void HttpServer::HandleMetrics(const httplib::Request& req, httplib::Response& res) {
  res.status = 200;
  res.set_content(metrics::Registry::Global().RenderText(), "text/plain; version=0.0.4");
}

}  // namespace baton::router
