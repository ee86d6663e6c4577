// The router's OpenAI-compatible HTTP API, beside its gRPC API and feeding the same request path:
// each generation request goes through the router's intake (PrepareRequest), admission
// (CreateDriver / LaunchDriver) and a RequestDriver, with an HttpSink as its ResponseSink.
//
//   POST /v1/completions, POST /v1/chat/completions   OpenAI requests, JSON or SSE streams
//   GET  /v1/models, GET /v1/models/{id}              the served model
//   POST /tokenize, POST /detokenize                  vLLM's: a prompt or chat to its token ids,
//                                                     ids to text (router/http_tokenize.h)
//   GET  /health                                      200 when the router can serve a request:
//                                                     not draining, a healthy prefill-capable and
//                                                     a healthy decode-capable worker; else 503
//   GET  /metrics                                     metrics::Registry::Global(), Prometheus text
//
// /v1/ routes and /tokenize, /detokenize require "Authorization: Bearer KEY" when
// options.api_keys is not empty; /health and
// /metrics never do (probes and scrapers). Errors are OpenAI error objects (http_errors.h), those
// of the HTTP layer too (router/http_connection.h, router/http_listener.h): 400 for a malformed
// request or a bad Content-Length, 408 for one that does not arrive within header_timeout /
// body_timeout, 411 for a POST without a length, 413 past max_body_bytes (before the body is
// read), 431 past max_header_bytes, 503 at once past max_connections or
// max_connections_per_client.
//
// A streaming request answers with its status once the first message (or the end) is there, or
// after stream_status_wait at the latest: a bad request or a full queue gets its own HTTP status,
// and a failure after that comes in-band as a data: {"error": ...} event, then [DONE]. While no
// token flows the stream carries an SSE comment every ping_interval. A client that goes away
// (reset, failed write, or a closed socket found by the connection's probes) cancels its request
// everywhere, streaming or not: Release reaches the decode worker, every block is freed. A client
// that only half-closes after its request still gets its answer.
//
// Threads: io_threads run every connection's I/O (Boost.Beast over one Asio io_context; a
// connection's handlers run on its strand and never block); handler_threads parse and tokenize
// generation requests and admit them; the request then runs on the router's request pool, and
// its HttpSink hands each message over to the connection's strand (asio::post). A client that
// does not read holds its request's driver back (HttpSink's queue), nobody else.
//
// Thread-safety: Start() once; then port()/address() from any thread; Shutdown() from one thread
// that is not one of the server's (idempotent; the destructor runs it).
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
#include "router/http_sink.h"

namespace boost::asio {
class io_context;
class thread_pool;
}  // namespace boost::asio

namespace baton::router {

class HttpListener;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                          // 0: any free port
  std::vector<std::string> api_keys;     // accepted bearer keys; empty: none required
  int backlog = 1024;                    // listen() backlog
  int max_connections = 512;             // open at once; past it new ones get 503
  int max_connections_per_client = 64;   // open at once from one IP address; past it 503
  size_t max_header_bytes = size_t{16} << 10;   // larger headers: 431
  size_t max_body_bytes = size_t{4} << 20;      // larger bodies: 413
  absl::Duration header_timeout = absl::Seconds(10);  // a request's headers (and keep-alive idle)
  absl::Duration body_timeout = absl::Seconds(10);    // its body, once the headers are in
  absl::Duration write_timeout = absl::Seconds(30);   // one write to a client that does not read
  int io_threads = 2;                    // connections' I/O
  int handler_threads = 2;               // parsing, tokenizing and admitting generation requests
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

  // Binds and starts serving. INVALID_ARGUMENT for bad options; UNAVAILABLE when the address
  // cannot be bound.
  absl::Status Start();

  int port() const { return port_; }
  std::string address() const;  // host:port, [host]:port for IPv6

  // Stops accepting connections, lets the requests in flight finish until `deadline`, cancels
  // the rest (their clients get the error), closes every connection, then joins the server's
  // threads. Call after the router started draining (new requests then get 503).
  void Shutdown(absl::Time deadline);

 private:
  class Api;           // the routes (http_server.cc)
  class GenerateCall;  // one generation request
  class InFlight;

  std::shared_ptr<InFlight> Track(std::shared_ptr<HttpSink> sink);
  void Untrack(HttpSink* sink);
  // True once nothing is in flight; false at `deadline`.
  bool WaitIdle(absl::Time deadline);

  const HttpServerOptions options_;
  const GenerateEnv& env_;
  const int64_t created_;  // Unix seconds, the models' "created"
  // Destroyed in reverse: the listener before the pools and the io_context.
  std::unique_ptr<boost::asio::io_context> io_;
  std::unique_ptr<boost::asio::thread_pool> handler_pool_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<HttpListener> listener_;
  std::vector<std::thread> io_threads_;
  int port_ = 0;
  bool started_ = false;
  bool shut_down_ = false;

  absl::Mutex mu_;
  absl::flat_hash_map<HttpSink*, std::shared_ptr<HttpSink>> in_flight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::router

#endif  // BATON_ROUTER_HTTP_SERVER_H_
