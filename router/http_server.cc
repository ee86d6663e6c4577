#include "router/http_server.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <utility>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "metrics/metrics.h"
#include "nlohmann/json.hpp"
#include "router/http_connection.h"
#include "router/http_errors.h"
#include "router/http_listener.h"
#include "router/http_openai.h"
#include "router/http_tokenize.h"
#include "router/request_admission.h"
#include "router/request_intake.h"
#include "rpc/auth.h"

namespace baton::router {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::ordered_json;

constexpr char kJson[] = "application/json";
// How long Shutdown() waits, past its deadline, for cancelled requests to answer and for
// connections to close.
constexpr absl::Duration kShutdownGrace = absl::Seconds(5);

HttpResponse JsonResponse(int status, const json& body) {
  return {.status = status,
          .content_type = kJson,
          .body = body.dump(-1, ' ', false, json::error_handler_t::replace)};
}

HttpResponse ErrorResponse(const HttpError& error) {
  HttpResponse response = JsonResponse(error.http_status, HttpErrorJson(error));
  if (error.http_status == 401) response.headers.emplace_back("WWW-Authenticate", "Bearer");
  return response;
}

HttpResponse ErrorResponse(const absl::Status& status) {
  return ErrorResponse(HttpErrorFromStatus(status));
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

// The path of a request target, without its query, %XX-decoded.
std::string PathOf(absl::string_view target) {
  target = target.substr(0, target.find('?'));
  std::string path;
  for (size_t i = 0; i < target.size(); ++i) {
    int byte = 0;
    if (target[i] == '%' && i + 2 < target.size() &&
        absl::SimpleHexAtoi(target.substr(i + 1, 2), &byte)) {
      path.push_back(static_cast<char>(byte));
      i += 2;
    } else {
      path.push_back(target[i]);
    }
  }
  return path;
}

std::chrono::nanoseconds Chrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

absl::string_view View(boost::beast::string_view s) { return {s.data(), s.size()}; }

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

// The routes. Called on the connections' strands; only the generation requests leave them.
class HttpServer::Api final : public HttpApplication {
 public:
  explicit Api(HttpServer* server) : server_(*server) {}

  void Handle(std::shared_ptr<HttpConnection> connection) override;
  HttpResponse Refusal(const HttpRefusal& refusal) override;

  absl::Status CheckAuth(const HttpRequest& request) const;

 private:
  HttpResponse Route(const HttpRequest& request, const std::string& path);
  HttpResponse Models(const HttpRequest& request) const;
  HttpResponse Model(const HttpRequest& request, absl::string_view name) const;
  HttpResponse Health() const;

  HttpServer& server_;
};

// One generation request, from its body to its answer. Runs on its connection's strand, except
// Prepare(), which runs on the handler pool and hands its result back to the strand.
class HttpServer::GenerateCall final : public std::enable_shared_from_this<GenerateCall> {
 public:
  GenerateCall(HttpServer* server, std::shared_ptr<HttpConnection> connection,
               OpenAiEndpoint endpoint);
  ~GenerateCall();

  void Start();

 private:
  // What Prepare() hands back: an error to answer, or a launched request.
  struct Launch {
    absl::Status status;
    std::shared_ptr<HttpSink> sink;
    std::shared_ptr<InFlight> in_flight;
    OpenAiResponseContext context;
    bool stream = false;
    bool include_usage = false;
    std::optional<OpenAiLogprobs> logprobs;  // when the request asked for them
    std::optional<EchoedPrompt> echo;        // when the request asked for it
  };
  Launch Prepare();
  void Launched(Launch launch);
  void OnClientGone();
  void Pump();
  void PumpWhole();
  void PumpStream();
  void StartStreaming();
  void Ping();
  void Answer(HttpResponse response);
  void Done();

  HttpServer& server_;
  const OpenAiEndpoint endpoint_;
  const asio::any_io_executor executor_;  // the connection's strand
  const absl::Time received_;
  std::shared_ptr<HttpConnection> connection_;  // until the answer is complete
  std::string body_;                            // Prepare()'s

  std::shared_ptr<HttpSink> sink_;
  std::shared_ptr<InFlight> in_flight_;
  OpenAiResponseContext context_;
  bool stream_ = false;
  std::optional<OpenAiStreamEncoder> encoder_;
  bool streaming_ = false;   // the 200 head is out
  bool wrote_ = false;       // since the last ping tick
  bool finished_ = false;    // the sink was closed and its end taken
  bool done_ = false;        // answered, or the client is gone
  asio::steady_timer status_timer_;
  asio::steady_timer ping_timer_;
  // Non-streaming: the answer so far.
  std::string text_;
  std::optional<OpenAiLogprobs> logprobs_builder_;
  nlohmann::ordered_json logprobs_;  // null unless the request asked for them
  std::optional<EchoedPrompt> echo_;  // until its logprobs entries are in (the first message)
  v1::FinishReason finish_reason_ = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage_;
};

// HttpServer.

HttpServer::HttpServer(HttpServerOptions options, const GenerateEnv* env)
    : options_(std::move(options)), env_(*env), created_(absl::ToUnixSeconds(absl::Now())) {}

HttpServer::~HttpServer() { Shutdown(absl::Now()); }

absl::Status HttpServer::Start() {
  if (options_.port < 0 || options_.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP port must be in [0, 65535], got ", options_.port));
  }
  if (options_.max_connections < 1 || options_.max_connections_per_client < 1 ||
      options_.backlog < 1 || options_.io_threads < 1 || options_.handler_threads < 1) {
    return absl::InvalidArgumentError(
        "HTTP connection limits, backlog and thread counts must be at least 1");
  }
  io_ = std::make_unique<asio::io_context>(options_.io_threads);
  handler_pool_ = std::make_unique<asio::thread_pool>(options_.handler_threads);
  api_ = std::make_unique<Api>(this);
  listener_ = std::make_unique<HttpListener>(
      *io_,
      HttpListenerOptions{.host = options_.host,
                          .port = options_.port,
                          .backlog = options_.backlog,
                          .max_connections = options_.max_connections,
                          .max_connections_per_client = options_.max_connections_per_client},
      HttpConnectionOptions{.max_header_bytes = options_.max_header_bytes,
                            .max_body_bytes = options_.max_body_bytes,
                            .header_timeout = options_.header_timeout,
                            .body_timeout = options_.body_timeout,
                            .write_timeout = options_.write_timeout,
                            .probe_interval = options_.ping_interval},
      api_.get());
  if (absl::Status s = listener_->Listen(); !s.ok()) return s;
  port_ = listener_->port();
  listener_->Accept();
  for (int i = 0; i < options_.io_threads; ++i) {
    io_threads_.emplace_back([io = io_.get()] {
      auto work = asio::make_work_guard(*io);
      while (true) {
        try {
          io->run();
          return;
        } catch (const std::exception& e) {
          BATON_LOG(ERROR) << "HTTP server: " << e.what();
        }
      }
    });
  }
  started_ = true;
  return absl::OkStatus();
}

std::string HttpServer::address() const {
  const std::string& host = options_.host;
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port_)
                                             : absl::StrCat(host, ":", port_);
}

void HttpServer::Shutdown(absl::Time deadline) {
  if (shut_down_ || !started_) return;
  shut_down_ = true;
  listener_->StopAccepting();
  if (!WaitIdle(deadline)) {
    std::vector<std::shared_ptr<HttpSink>> remaining;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [key, sink] : in_flight_) remaining.push_back(sink);
    }
    for (const std::shared_ptr<HttpSink>& sink : remaining) sink->Cancel();
    WaitIdle(std::max(deadline, absl::Now()) + kShutdownGrace);  // their clients hear of it
  }
  listener_->AbortAll();  // idle keep-alive connections, slow clients
  listener_->WaitForNoConnections(absl::Now() + kShutdownGrace);
  handler_pool_->join();
  io_->stop();
  for (std::thread& t : io_threads_) t.join();
  // What is left is destroyed here, while the in-flight set still exists: the handlers the
  // io_context still holds, with their connections and requests.
  listener_.reset();
  io_.reset();
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

bool HttpServer::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_.empty(); };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

// Api.

void HttpServer::Api::Handle(std::shared_ptr<HttpConnection> connection) {
  const HttpRequest& request = connection->request();
  const std::string path = PathOf(View(request.target()));
  if (request.method() == http::verb::post &&
      (path == "/v1/completions" || path == "/v1/chat/completions")) {
    const OpenAiEndpoint endpoint = path == "/v1/completions" ? OpenAiEndpoint::kCompletions
                                                              : OpenAiEndpoint::kChatCompletions;
    return std::make_shared<GenerateCall>(&server_, std::move(connection), endpoint)->Start();
  }
  HttpResponse response;
  try {
    response = Route(request, path);
  } catch (const std::exception& e) {
    response = ErrorResponse(absl::InternalError(absl::StrCat("internal error: ", e.what())));
  }
  connection->Respond(std::move(response));
}

HttpResponse HttpServer::Api::Route(const HttpRequest& request, const std::string& path) {
  if (request.method() == http::verb::post && (path == "/tokenize" || path == "/detokenize")) {
    if (absl::Status s = CheckAuth(request); !s.ok()) return ErrorResponse(s);
    const ServedModel& model = *server_.env_.driver.model;
    absl::StatusOr<json> answer = path == "/tokenize" ? TokenizeBody(request.body(), model)
                                                      : DetokenizeBody(request.body(), model);
    return answer.ok() ? JsonResponse(200, *answer) : ErrorResponse(answer.status());
  }
  if (request.method() == http::verb::get) {
    if (path == "/health") return Health();
    if (path == "/metrics") {
      return {.status = 200,
              .content_type = "text/plain; version=0.0.4",
              .body = metrics::Registry::Global().RenderText()};
    }
    if (path == "/v1/models") return Models(request);
    if (path == "/tokenizer_info") {
      if (absl::Status s = CheckAuth(request); !s.ok()) return ErrorResponse(s);
      return JsonResponse(200, TokenizerInfo(*server_.env_.driver.model));
    }
    constexpr absl::string_view kModelPrefix = "/v1/models/";
    if (absl::StartsWith(path, kModelPrefix) && path.size() > kModelPrefix.size()) {
      return Model(request, absl::string_view(path).substr(kModelPrefix.size()));
    }
  }
  return ErrorResponse(HttpError{
      .http_status = 404,
      .type = "invalid_request_error",
      .message = absl::StrCat("no route for ", std::string(request.method_string()), " ", path),
      .code = "not_found"});
}

HttpResponse HttpServer::Api::Refusal(const HttpRefusal& refusal) {
  return ErrorResponse(HttpError{
      .http_status = refusal.status,
      .type = refusal.status == 503 ? "service_unavailable_error" : "invalid_request_error",
      .message = refusal.message,
      .code = refusal.code});
}

absl::Status HttpServer::Api::CheckAuth(const HttpRequest& request) const {
  if (server_.options_.api_keys.empty()) return absl::OkStatus();
  const absl::string_view header = View(request[http::field::authorization]);
  if (header.empty()) {
    return absl::UnauthenticatedError(
        "no API key given: send the header 'Authorization: Bearer YOUR_KEY'");
  }
  constexpr absl::string_view kScheme = "bearer ";
  if (header.size() > kScheme.size() &&
      absl::EqualsIgnoreCase(header.substr(0, kScheme.size()), kScheme)) {
    const std::string key(absl::StripLeadingAsciiWhitespace(header.substr(kScheme.size())));
    bool match = false;
    for (const std::string& accepted : server_.options_.api_keys) {
      match |= rpc::TokensEqual(key, accepted);  // no early exit: constant time per key
    }
    if (match) return absl::OkStatus();
  }
  return absl::UnauthenticatedError("incorrect API key provided");
}

HttpResponse HttpServer::Api::Models(const HttpRequest& request) const {
  if (absl::Status s = CheckAuth(request); !s.ok()) return ErrorResponse(s);
  const ServedModel& model = *server_.env_.driver.model;
  return JsonResponse(200, {{"object", "list"},
                            {"data", json::array({{{"id", model.id()},
                                                   {"object", "model"},
                                                   {"created", server_.created_},
                                                   {"owned_by", "baton"}}})}});
}

HttpResponse HttpServer::Api::Model(const HttpRequest& request, absl::string_view name) const {
  if (absl::Status s = CheckAuth(request); !s.ok()) return ErrorResponse(s);
  const ServedModel& model = *server_.env_.driver.model;
  if (name != model.id() && (model.general_name().empty() || name != model.general_name())) {
    return ErrorResponse(WithErrorCode(
        WithParam(absl::NotFoundError(absl::StrCat("The model '", name,
                                                   "' does not exist; this server serves '",
                                                   model.id(), "'")),
                  "model"),
        "model_not_found"));
  }
  return JsonResponse(200, {{"id", model.id()},
                            {"object", "model"},
                            {"created", server_.created_},
                            {"owned_by", "baton"}});
}

HttpResponse HttpServer::Api::Health() const {
  const GenerateEnv& env = server_.env_;
  if (env.draining != nullptr && env.draining->load()) {
    return JsonResponse(503,
                        {{"status", "unavailable"}, {"reason", "the router is shutting down"}});
  }
  int n_prefill = 0;
  int n_decode = 0;
  for (const WorkerSnapshot& w : env.driver.registry->Snapshot()) {
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
  return JsonResponse(ready ? 200 : 503, body);
}

// GenerateCall.

HttpServer::GenerateCall::GenerateCall(HttpServer* server,
                                       std::shared_ptr<HttpConnection> connection,
                                       OpenAiEndpoint endpoint)
    : server_(*server),
      endpoint_(endpoint),
      executor_(connection->executor()),
      received_(absl::Now()),
      connection_(std::move(connection)),
      status_timer_(executor_),
      ping_timer_(executor_) {}

HttpServer::GenerateCall::~GenerateCall() {
  if (sink_ == nullptr) return;
  sink_->Detach();
  if (!finished_) sink_->Abandon();  // the client went away, or the server is gone
}

void HttpServer::GenerateCall::Start() {
  connection_->set_on_client_gone([self = shared_from_this()] { self->OnClientGone(); });
  if (absl::Status s = server_.api_->CheckAuth(connection_->request()); !s.ok()) {
    return Answer(ErrorResponse(s));
  }
  if (server_.env_.draining != nullptr && server_.env_.draining->load()) {
    return Answer(ErrorResponse(absl::UnavailableError("the router is shutting down")));
  }
  body_ = std::move(connection_->request().body());
  asio::post(*server_.handler_pool_, [self = shared_from_this()] {
    Launch launch;
    try {
      launch = self->Prepare();
    } catch (const std::exception& e) {
      launch.status = absl::InternalError(absl::StrCat("internal error: ", e.what()));
    }
    asio::post(self->executor_, [self, launch = std::move(launch)]() mutable {
      self->Launched(std::move(launch));
    });
  });
}

HttpServer::GenerateCall::Launch HttpServer::GenerateCall::Prepare() {
  const GenerateEnv& env = server_.env_;
  const ServedModel& model = *env.driver.model;
  Launch launch;
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(endpoint_, body_, model.id(), model.general_name());
  if (!parsed.ok()) return {.status = parsed.status()};
  // The router's intake runs here, before any response is started, so that a bad request gets
  // its 400; the driver then gets the prompt as token ids (not tokenized twice).
  absl::StatusOr<PreparedRequest> prepared = PrepareRequest(parsed->generate, model, RandomSeed());
  if (!prepared.ok()) return {.status = prepared.status()};
  const std::string id = NewResponseId(endpoint_);
  v1::GenerateRequest request;
  request.set_model(parsed->generate.model());
  request.set_request_id(id);
  request.set_cache_salt(prepared->cache_salt);
  request.mutable_prompt_tokens()->mutable_ids()->Assign(prepared->prompt.begin(),
                                                         prepared->prompt.end());
  *request.mutable_sampling() = prepared->wire;
  for (const std::string& stop : prepared->params.stop_strings) {
    request.mutable_sampling()->add_stop(stop);
  }

  auto sink = std::make_shared<HttpSink>([call = weak_from_this(), executor = executor_] {
    asio::post(executor, [call] {
      if (std::shared_ptr<GenerateCall> self = call.lock()) self->Pump();
    });
  });
  absl::StatusOr<std::shared_ptr<RequestDriver>> driver = CreateDriver(
      env, request, id, received_, received_ + env.request_timeout, sink.get());
  if (!driver.ok()) return {.status = driver.status()};
  sink->set_driver(*driver);
  std::shared_ptr<InFlight> in_flight = server_.Track(sink);
  if (absl::Status s = LaunchDriver(env, *std::move(driver), sink); !s.ok()) return {.status = s};
  return {.sink = std::move(sink),
          .in_flight = std::move(in_flight),
          .context = {.endpoint = endpoint_,
                      .id = id,
                      .created = absl::ToUnixSeconds(received_),
                      .model = model.id(),
                      .system_fingerprint = model.fingerprint()},
          .stream = parsed->stream,
          .include_usage = parsed->include_usage,
          .logprobs = prepared->params.logprobs >= 0
                          ? std::optional(OpenAiLogprobs(endpoint_, &model.tokenizer()))
                          : std::nullopt,
          .echo = parsed->echo ? std::optional(EchoPrompt(parsed->generate, prepared->prompt,
                                                          model.tokenizer()))
                               : std::nullopt};
}

void HttpServer::GenerateCall::Launched(Launch launch) {
  if (!launch.status.ok()) return Answer(ErrorResponse(launch.status));
  sink_ = std::move(launch.sink);
  in_flight_ = std::move(launch.in_flight);
  if (done_) {  // the client went away meanwhile
    sink_->Abandon();
    in_flight_.reset();
    return;
  }
  context_ = std::move(launch.context);
  stream_ = launch.stream;
  if (stream_) {
    encoder_.emplace(context_, launch.include_usage, std::move(launch.logprobs));
    status_timer_.expires_after(Chrono(server_.options_.stream_status_wait));
    status_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->done_ && !self->streaming_) self->StartStreaming();
    });
  } else {
    if (launch.logprobs.has_value()) {
      logprobs_builder_ = std::move(launch.logprobs);
      logprobs_ = logprobs_builder_->Empty();
    }
    echo_ = std::move(launch.echo);
    if (echo_.has_value()) text_ = echo_->text;
  }
  Pump();
}

void HttpServer::GenerateCall::OnClientGone() {
  if (done_) return;
  if (sink_ != nullptr) sink_->Abandon();  // cancels the request everywhere
  Done();
}

void HttpServer::GenerateCall::Pump() {
  if (done_ || sink_ == nullptr) return;
  try {
    stream_ ? PumpStream() : PumpWhole();
  } catch (const std::exception& e) {
    sink_->Abandon();
    if (streaming_) {
      connection_->Abort();
      return Done();
    }
    Answer(ErrorResponse(absl::InternalError(absl::StrCat("internal error: ", e.what()))));
  }
}

void HttpServer::GenerateCall::PumpWhole() {
  HttpSink::Taken taken = sink_->Take();
  for (const v1::GenerateResponse& message : taken.messages) {
    text_ += message.text();
    if (echo_.has_value() && logprobs_builder_.has_value()) {
      logprobs_builder_->AppendPrompt(echo_->tokens, message.prompt_logprobs(), echo_->added_bos,
                                      Utf8Characters(echo_->text), logprobs_);
    }
    echo_.reset();
    if (logprobs_builder_.has_value()) logprobs_builder_->Append(message, logprobs_);
    if (message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      finish_reason_ = message.finish_reason();
      usage_ = message.usage();
    }
  }
  if (!taken.closed) return;
  finished_ = true;
  if (!taken.status.ok()) return Answer(ErrorResponse(taken.status));
  Answer(JsonResponse(200, OpenAiCompletion(context_, text_, finish_reason_, usage_, logprobs_)));
}

// Takes messages only once the previous write is out: a client that does not read fills the
// sink's queue, which holds the driver back.
void HttpServer::GenerateCall::PumpStream() {
  if (streaming_ && connection_->write_pending()) return;  // on_drained pumps again
  HttpSink::Taken taken = sink_->Take();
  if (!streaming_) {
    if (taken.messages.empty() && !taken.closed) return;
    // The first event decides the status: an error before any message gets its own.
    if (taken.messages.empty() && !taken.status.ok()) {
      finished_ = true;
      return Answer(ErrorResponse(taken.status));
    }
    StartStreaming();
  }
  std::string bytes;
  for (const v1::GenerateResponse& message : taken.messages) bytes += encoder_->Message(message);
  if (taken.closed) bytes += encoder_->End(taken.status);
  if (!bytes.empty()) {
    wrote_ = true;
    connection_->WriteChunk(std::move(bytes));
  }
  if (taken.closed) {
    finished_ = true;
    connection_->FinishStream();
    Done();
  }
}

void HttpServer::GenerateCall::StartStreaming() {
  streaming_ = true;
  status_timer_.cancel();
  connection_->set_on_drained([self = shared_from_this()] { self->Pump(); });
  connection_->StartStream({.status = 200,
                            .content_type = "text/event-stream",
                            .headers = {{"Cache-Control", "no-cache"},
                                        {"X-Accel-Buffering", "no"}}});
  wrote_ = true;
  Ping();
}

// Every ping_interval: an SSE comment unless something was written since the last tick. It keeps
// proxies from timing out, and finds out whether the client is still there.
void HttpServer::GenerateCall::Ping() {
  if (done_) return;
  if (!wrote_ && !connection_->write_pending()) connection_->WriteChunk(": ping\n\n");
  wrote_ = false;
  ping_timer_.expires_after(Chrono(server_.options_.ping_interval));
  ping_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->Ping();
  });
}

void HttpServer::GenerateCall::Answer(HttpResponse response) {
  if (done_) return;
  connection_->Respond(std::move(response));
  Done();
}

void HttpServer::GenerateCall::Done() {
  done_ = true;
  status_timer_.cancel();
  ping_timer_.cancel();
  connection_.reset();
  in_flight_.reset();
}

}  // namespace baton::router
