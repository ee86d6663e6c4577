// The client side of `baton bench serve`: sends one streaming request to the router and reports
// what happened, timed by StreamTimer (bench/latency_stats.h). Two protocols:
//
//   grpc  baton.v1.Router/Generate (text prompt); output and prompt tokens from the last
//         message's usage, the router's own timings (queue, TTFT, KV hand-off) from its timings.
//   http  POST /v1/completions with "stream": true (OpenAI-compatible, server-sent events) and
//         "stream_options": {"include_usage": true}; tokens from the final usage chunk.
//
// Every request has a deadline (ServeClientOptions::timeout). Send never throws and never aborts:
// failures come back in the outcome, named by status code (gRPC code names, "HTTP_<status>",
// "CONNECTION" when no HTTP response came, "STREAM_ERROR" for an error event inside a stream).
//
// Thread-safety: Send is thread-safe (many requests at once, one thread each).
#ifndef BATON_BENCH_SERVE_CLIENT_H_
#define BATON_BENCH_SERVE_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "baton/v1/router.pb.h"
#include "bench/latency_stats.h"
#include "bench/serve_workload.h"

namespace baton::bench {

enum class ServeProtocol { kGrpc, kHttp };

struct ServeClientOptions {
  std::string server;                      // host:port of the router's gRPC or HTTP listener[s]
  ServeProtocol protocol = ServeProtocol::kGrpc;
  std::string token;                       // "authorization: Bearer TOKEN" when set
  std::string model;                       // sent as the model name when set
  std::chrono::milliseconds timeout{300000};  // per request, sent -> end of stream
  bool ignore_eos = true;                  // generate exactly max_tokens (as benchmarks do)
  float temperature = 0;                   // 0: greedy (as vLLM's bench serve by default)
  bool speculative = true;                 // false: opt every request out of speculation
  std::string json_schema;                 // set: every request's output follows this schema
};

class ServeClient {
 public:
  virtual ~ServeClient() = default;
  virtual RequestOutcome Send(const ServeRequest& request) = 0;
  // The router's view of its workers (their loads and prefix-cache counters); gRPC only
  // (UNIMPLEMENTED over HTTP, whose API has no such call).
  virtual absl::StatusOr<baton::v1::ClusterStatusResponse> ClusterStatus() = 0;
};

// `options.server` may list several routers of one cluster ("A:P,B:P"): requests then go to each
// in turn and ClusterStatus asks the first. INVALID_ARGUMENT for a malformed server address.
absl::StatusOr<std::unique_ptr<ServeClient>> CreateServeClient(const ServeClientOptions& options);

// "grpc" | "http".
absl::StatusOr<ServeProtocol> ParseServeProtocol(const std::string& name);
const char* ServeProtocolName(ServeProtocol protocol);

}  // namespace baton::bench

#endif  // BATON_BENCH_SERVE_CLIENT_H_
