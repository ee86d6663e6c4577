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
#include "router/openai_choices.h"
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

// One generation request, from its body to its answer: one request to the cluster per choice
// (n, or best_of candidates). The first choice is launched at once, the others once its decode
// has started (its second message) or it ended: by then its prompt's KV is in both workers'
// prefix caches, which the others take it from (the choices share the prompt's KV blocks), each
// with its own seed (the request's + its index). Runs on its connection's strand, except
// Prepare(), which runs on the handler pool and hands its result back to the strand.
class HttpServer::GenerateCall final : public std::enable_shared_from_this<GenerateCall> {
 public:
  GenerateCall(HttpServer* server, std::shared_ptr<HttpConnection> connection,
               OpenAiEndpoint endpoint);
  ~GenerateCall();

  void Start();

 private:
  // One choice's request to the cluster.
  struct Run {
    v1::GenerateRequest request;
    std::shared_ptr<HttpSink> sink;          // once launched
    std::shared_ptr<InFlight> in_flight;
    int messages = 0;
    bool closed = false;  // its sink was closed and its end taken
  };
  // What Prepare() hands back: an error to answer, or the runs with the first launched.
  struct Launch {
    absl::Status status;
    std::vector<Run> runs;
    OpenAiResponseContext context;
    bool stream = false;
    bool include_usage = false;
    int n = 1;
    std::optional<OpenAiLogprobs> logprobs;  // when the request asked for them
    std::optional<EchoedPrompt> echo;        // when the request asked for it
    std::optional<ToolCallReading> tool_calls;  // when its output is read for tool calls
  };
  Launch Prepare();
  // Starts `run` (its sink pumps this call); the error when the router cannot take it.
  absl::Status LaunchRun(Run& run);
  void Launched(Launch launch);
  // Launches the choices after the first once the first's decode has started or it ended.
  void LaunchRest();
  void OnClientGone();
  void AbandonRuns();
  void Pump();
  // Takes what every launched run has: (run, taken) for those with news.
  std::vector<std::pair<size_t, HttpSink::Taken>> TakeAll();
  // Records `taken` of run `index` as seen (messages counted, closure and its status).
  void Note(size_t index, const HttpSink::Taken& taken);
  bool AllClosed() const;
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

  std::vector<Run> runs_;
  size_t launched_ = 0;     // runs_[0, launched_) were launched
  absl::Status failure_;    // the first run's failure: the answer's
  OpenAiResponseContext context_;
  bool stream_ = false;
  std::optional<OpenAiStreamEncoder> encoder_;
  std::optional<OpenAiChoices> choices_;  // non-streaming: the answer so far
  bool streaming_ = false;   // the 200 head is out
  bool wrote_ = false;       // since the last ping tick
  bool done_ = false;        // answered, or the client is gone
  asio::steady_timer status_timer_;
  asio::steady_timer ping_timer_;
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
    if (!w.healthy || w.draining) continue;  // a draining worker takes no new request
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
  for (Run& run : runs_) {
    if (run.sink == nullptr) continue;
    run.sink->Detach();
    if (!run.closed) run.sink->Abandon();  // the client went away, or the server is gone
  }
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
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(endpoint_, body_, model.id(), model.general_name());
  if (!parsed.ok()) return {.status = parsed.status()};
  // The router's intake runs here, before any response is started, so that a bad request gets
  // its 400; the drivers then get the prompt as token ids (not tokenized again).
  absl::StatusOr<PreparedRequest> prepared = PrepareRequest(parsed->generate, model, RandomSeed());
  if (!prepared.ok()) return {.status = prepared.status()};
  std::optional<ToolCallReading> tool_calls;
  if (parsed->tool_calls_forced) {
    tool_calls = ToolCallReading{.format = ToolCallFormat::kJsonArray,
                                 .parallel = parsed->parallel_tool_calls};
  } else if (parsed->parse_tool_calls) {
    if (!model.tool_call_format().has_value()) {
      return {.status = WithParam(
                  absl::InvalidArgumentError(
                      "this model's chat template shows no tool-call format: send "
                      "'tool_choice': \"none\", or start the router with --tool-call-parser"),
                  "tool_choice")};
    }
    tool_calls = ToolCallReading{.format = *model.tool_call_format(),
                                 .parallel = parsed->parallel_tool_calls};
  }
  const std::string id = NewResponseId(endpoint_);
  v1::GenerateRequest request;
  request.set_model(parsed->generate.model());
  request.set_cache_salt(prepared->cache_salt);
  request.mutable_prompt_tokens()->mutable_ids()->Assign(prepared->prompt.begin(),
                                                         prepared->prompt.end());
  *request.mutable_sampling() = prepared->wire;
  for (const std::string& stop : prepared->params.stop_strings) {
    request.mutable_sampling()->add_stop(stop);
  }
  // The mistral format's [TOOL_CALLS] is a control token: its text must be there to be read.
  if (tool_calls.has_value() && tool_calls->format == ToolCallFormat::kMistral) {
    request.mutable_sampling()->set_skip_special_tokens(false);
  }
  // best_of ranks candidates by their tokens' log-probabilities.
  if (parsed->best_of > parsed->n && !request.sampling().has_logprobs()) {
    request.mutable_sampling()->set_logprobs(0);
  }
  Launch launch{
      .context = {.endpoint = endpoint_,
                  .id = id,
                  .created = absl::ToUnixSeconds(received_),
                  .model = model.id(),
                  .system_fingerprint = model.fingerprint()},
      .stream = parsed->stream,
      .include_usage = parsed->include_usage,
      .n = parsed->n,
      .logprobs = prepared->params.logprobs >= 0
                      ? std::optional(OpenAiLogprobs(endpoint_, &model.tokenizer()))
                      : std::nullopt,
      .echo = parsed->echo ? std::optional(EchoPrompt(parsed->generate, prepared->prompt,
                                                      model.tokenizer()))
                           : std::nullopt,
      .tool_calls = tool_calls};
  for (int i = 0; i < parsed->best_of; ++i) {
    Run& run = launch.runs.emplace_back(Run{.request = request});
    run.request.set_request_id(i == 0 ? id : absl::StrCat(id, "-", i));
    run.request.mutable_sampling()->set_seed(prepared->wire.seed() + static_cast<uint64_t>(i));
    // The prompt is scored once, by the first choice (OpenAiChoices echoes it for all).
    if (i > 0) run.request.mutable_sampling()->clear_prompt_logprobs();
  }
  if (absl::Status s = LaunchRun(launch.runs[0]); !s.ok()) return {.status = s};
  return launch;
}

absl::Status HttpServer::GenerateCall::LaunchRun(Run& run) {
  const GenerateEnv& env = server_.env_;
  auto sink = std::make_shared<HttpSink>([call = weak_from_this(), executor = executor_] {
    asio::post(executor, [call] {
      if (std::shared_ptr<GenerateCall> self = call.lock()) self->Pump();
    });
  });
  absl::StatusOr<std::shared_ptr<RequestDriver>> driver =
      CreateDriver(env, run.request, run.request.request_id(), received_,
                   received_ + env.request_timeout, sink.get());
  if (!driver.ok()) return driver.status();
  sink->set_driver(*driver);
  run.in_flight = server_.Track(sink);
  run.sink = sink;
  return LaunchDriver(env, *std::move(driver), std::move(sink));
}

void HttpServer::GenerateCall::Launched(Launch launch) {
  if (!launch.status.ok()) return Answer(ErrorResponse(launch.status));
  runs_ = std::move(launch.runs);
  launched_ = 1;
  if (done_) {  // the client went away meanwhile
    AbandonRuns();
    for (Run& run : runs_) run.in_flight.reset();
    return;
  }
  context_ = std::move(launch.context);
  stream_ = launch.stream;
  if (stream_) {
    encoder_.emplace(context_, launch.include_usage, std::move(launch.logprobs),
                     static_cast<int>(runs_.size()), launch.tool_calls);
    status_timer_.expires_after(Chrono(server_.options_.stream_status_wait));
    status_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->done_ && !self->streaming_) self->StartStreaming();
    });
  } else {
    choices_.emplace(endpoint_, launch.n, static_cast<int>(runs_.size()),
                     std::move(launch.logprobs), std::move(launch.echo), launch.tool_calls);
  }
  Pump();
}

void HttpServer::GenerateCall::LaunchRest() {
  if (launched_ == runs_.size() || !failure_.ok()) return;
  if (!runs_[0].closed && runs_[0].messages < 2) return;
  for (; launched_ < runs_.size(); ++launched_) {
    Run& run = runs_[launched_];
    if (absl::Status s = LaunchRun(run); !s.ok()) {
      run.closed = true;
      failure_ = s;
      return;
    }
  }
}

void HttpServer::GenerateCall::OnClientGone() {
  if (done_) return;
  AbandonRuns();  // cancels the requests everywhere
  Done();
}

void HttpServer::GenerateCall::AbandonRuns() {
  for (Run& run : runs_) {
    if (run.sink != nullptr && !run.closed) run.sink->Abandon();
  }
}

void HttpServer::GenerateCall::Pump() {
  if (done_ || runs_.empty()) return;
  try {
    stream_ ? PumpStream() : PumpWhole();
  } catch (const std::exception& e) {
    AbandonRuns();
    if (streaming_) {
      connection_->Abort();
      return Done();
    }
    Answer(ErrorResponse(absl::InternalError(absl::StrCat("internal error: ", e.what()))));
  }
}

std::vector<std::pair<size_t, HttpSink::Taken>> HttpServer::GenerateCall::TakeAll() {
  std::vector<std::pair<size_t, HttpSink::Taken>> news;
  for (size_t i = 0; i < launched_; ++i) {
    if (runs_[i].closed || runs_[i].sink == nullptr) continue;
    HttpSink::Taken taken = runs_[i].sink->Take();
    if (!taken.messages.empty() || taken.closed) news.emplace_back(i, std::move(taken));
  }
  return news;
}

void HttpServer::GenerateCall::Note(size_t index, const HttpSink::Taken& taken) {
  Run& run = runs_[index];
  run.messages += static_cast<int>(taken.messages.size());
  if (!taken.closed) return;
  run.closed = true;
  if (failure_.ok()) failure_ = taken.status;
}

bool HttpServer::GenerateCall::AllClosed() const {
  return std::all_of(runs_.begin(), runs_.end(), [](const Run& run) { return run.closed; });
}

void HttpServer::GenerateCall::PumpWhole() {
  for (auto& [index, taken] : TakeAll()) {
    for (const v1::GenerateResponse& message : taken.messages) {
      choices_->Add(static_cast<int>(index), message);
    }
    Note(index, taken);
  }
  LaunchRest();
  if (!failure_.ok()) {
    AbandonRuns();
    return Answer(ErrorResponse(failure_));
  }
  if (AllClosed()) Answer(JsonResponse(200, choices_->Answer(context_)));
}

// Takes messages only once the previous write is out: a client that does not read fills the
// sinks' queues, which holds the drivers back.
void HttpServer::GenerateCall::PumpStream() {
  if (streaming_ && connection_->write_pending()) return;  // on_drained pumps again
  std::vector<std::pair<size_t, HttpSink::Taken>> news = TakeAll();
  if (news.empty()) return;
  if (!streaming_) {
    // The first events decide the status: an error before any message gets its own.
    bool any_message = false;
    for (const auto& [index, taken] : news) any_message |= !taken.messages.empty();
    for (const auto& [index, taken] : news) {
      if (!any_message && !taken.status.ok()) {
        Note(index, taken);
        AbandonRuns();
        return Answer(ErrorResponse(taken.status));
      }
    }
    StartStreaming();
  }
  std::string bytes;
  for (auto& [index, taken] : news) {
    for (const v1::GenerateResponse& message : taken.messages) {
      bytes += encoder_->Message(message, static_cast<int>(index));
    }
    Note(index, taken);
  }
  LaunchRest();
  const bool end = !failure_.ok() || AllClosed();
  if (end) {
    AbandonRuns();
    bytes += encoder_->End(failure_);
  }
  if (!bytes.empty()) {
    wrote_ = true;
    connection_->WriteChunk(std::move(bytes));
  }
  if (end) {
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
  for (Run& run : runs_) run.in_flight.reset();
}

}  // namespace baton::router
