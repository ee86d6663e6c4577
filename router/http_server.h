// The router's OpenAI-compatible HTTP API (cpp-httplib), beside its gRPC API and feeding the same
// request path: each generation request goes through the router's intake (PrepareRequest),
// admission (CreateDriver / LaunchDriver) and a RequestDriver, with an HttpSink as its
// ResponseSink.
//
//   POST /v1/completions, POST /v1/chat/completions   OpenAI requests, JSON or SSE streams
//   GET  /v1/models, GET /v1/models/{id}              the served model
//   GET  /health                                      200 when the router can serve a request:
//                                                     not draining, a healthy prefill-capable and
//                                                     a healthy decode-capable worker; else 503
//   GET  /metrics                                     metrics::Registry::Global(), Prometheus text
//
// /v1/ routes require "Authorization: Bearer KEY" when options.api_keys is not empty; /health and
// /metrics never do (probes and scrapers). Errors are OpenAI error objects (http_errors.h).
//
// A streaming request answers with its status once the first message (or the end) is there, or
// after stream_status_wait at the latest: a bad request or a full queue gets its own HTTP status,
// and a failure after that comes in-band as a data: {"error": ...} event, then [DONE]. While no
// token flows the stream carries an SSE comment every ping_interval; a failed write (the client
// went away) cancels the request everywhere (Release reaches the decode worker, every block is
// freed). A non-streaming request runs to its end (bounded by max_tokens and the request
// deadline) even if its client goes away: httplib 0.11 gives a handler no way to notice.
//
// Handlers run on httplib's threads (n_threads, one per connection being served) and block only
// on their own HttpSink, never on a router lock for long.
//
// Thread-safety: Start() once; then port()/address() from any thread; Shutdown() from one thread
// (idempotent; the destructor runs it).
#ifndef BATON_ROUTER_HTTP_SERVER_H_
#define BATON_ROUTER_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/generate_reactor.h"
#include "router/http_openai.h"
#include "router/http_sink.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace baton::router {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                          // 0: any free port
  std::vector<std::string> api_keys;     // accepted bearer keys; empty: none required
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies: 413
  absl::Duration read_timeout = absl::Seconds(30);   // reading a request
  absl::Duration write_timeout = absl::Seconds(30);  // one write to a client that does not read
  int n_threads = 64;                    // connections served at once
  absl::Duration ping_interval = absl::Seconds(1);        // SSE comment while no token flows
  absl::Duration stream_status_wait = absl::Seconds(1);   // see the header comment
};

class HttpServer {
 public:
  // `env` (and all it points to) must outlive the server.
  HttpServer(HttpServerOptions options, const GenerateEnv* env);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. INVALID_ARGUMENT for a bad port; UNAVAILABLE when the address
  // cannot be bound.
  absl::Status Start();

  int port() const { return port_; }
  std::string address() const;  // host:port, [host]:port for IPv6

  // Stops accepting connections, lets the requests in flight finish until `deadline`, cancels
  // the rest (their clients get the error), then joins the server's threads. Call after the
  // router started draining (new requests then get 503).
  void Shutdown(absl::Time deadline);

 private:
  class InFlight;

  void HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& request,
                      httplib::Response& response);
  void HandleModels(const httplib::Request& request, httplib::Response& response);
  void HandleModel(const httplib::Request& request, httplib::Response& response);
  void HandleHealth(const httplib::Request& request, httplib::Response& response);
  void HandleMetrics(const httplib::Request& request, httplib::Response& response);

  absl::Status CheckAuth(const httplib::Request& request) const;
  std::shared_ptr<InFlight> Track(std::shared_ptr<HttpSink> sink);
  void Untrack(HttpSink* sink);

  const HttpServerOptions options_;
  const GenerateEnv& env_;
  const int64_t created_;  // Unix seconds, the models' "created"
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
  bool shut_down_ = false;

  absl::Mutex mu_;
  absl::flat_hash_map<HttpSink*, std::shared_ptr<HttpSink>> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_SERVER_H_
