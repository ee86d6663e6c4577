// `baton bench handoff`: what handing a prompt's KV from a prefill worker to a decode worker costs,
// per prompt length, measured three ways in one run:
//
//   transfer     the pure hand-off: a prompt's worth of KV pushed through kvtransfer's gRPC
//                transport (CreateGrpcKvTransport) on 127.0.0.1 into a decode worker's
//                ReservationTable served by the real KvTransfer service, in this process: bytes,
//                seconds (StartPush -> last acknowledgement), GB/s, and that rate's share of
//                plain TCP over 127.0.0.1 measured in the same run (tcp_loopback.h: the ceiling
//                of any loopback transport).
//   disaggregated  real requests through a router with one prefill and one decode worker (baton
//                processes): the router's kv_bytes and kv_transfer_seconds (push start -> last
//                acknowledgement, overlapped with the prefill compute layer by layer) and TTFT;
//                on 127.0.0.1, or wherever the caller's ProcessPlacements put the processes
//                (`--link`: across an emulated link between network namespaces).
//   colocated    the same prompts through a router with one colocated worker: TTFT.
//
// TTFT disaggregated / colocated is the cost of disaggregation for a lone request. By default the
// colocated worker gets the prefill worker's compute (one thread on the same core), so the ratio
// isolates the hand-off rather than comparing core counts.
//
// Processes are started through a ProcessLauncher that the caller provides (the CLI wraps its
// ChildProcess), so that bench/ does not depend on cli/.
//
// Thread-safety: RunHandoffBench is thread-compatible.
#ifndef BATON_BENCH_HANDOFF_BENCH_H_
#define BATON_BENCH_HANDOFF_BENCH_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace baton::bench {

// A started child process; destroying it stops it (and it must not outlive the run).
class BenchProcess {
 public:
  virtual ~BenchProcess() = default;
  // Reads the child's stdout until a line starts with `prefix`; returns the rest of the line.
  virtual absl::StatusOr<std::string> WaitForLine(const std::string& prefix,
                                                  std::chrono::milliseconds timeout) = 0;
};

// Starts argv (argv[0] the program), pinned to `cpus` when not empty.
using ProcessLauncher = std::function<absl::StatusOr<std::unique_ptr<BenchProcess>>(
    const std::vector<std::string>& argv, const std::vector<int>& cpus)>;

// How one process of the disaggregated cluster is started: an argv prefix (e.g. `ip netns exec
// NS`, empty: none) and the flags that say where it listens and what it advertises.
struct ProcessPlacement {
  std::vector<std::string> prefix;
  std::vector<std::string> listen = {"--host", "127.0.0.1", "--port", "0"};
};

struct HandoffBenchOptions {
  std::string model_path;
  std::vector<int32_t> prompt_tokens = {128, 512, 2048, 8192};
  int repeats = 3;                     // per prompt length and way; medians reported
  int32_t max_tokens = 16;             // end-to-end requests; prompts are capped at n_ctx - this
  int64_t kv_chunk_bytes = 1 << 20;    // gRPC transport chunk size (as the workers' default)
  int kv_streams = 1;                  // parallel PushKv streams (as the workers' default)
  // Where both ends' KV caches live (every worker's --device; the pure transfer's blocks), and
  // how KV travels (the prefill worker's --kv-transport; the pure transfer's transport: "auto"
  // measures what auto picks).
  std::string device = "cpu";
  std::string transport = "grpc";
  bool end_to_end = true;              // false: the pure transfer only (no processes)
  std::string baton_executable;        // the `baton` binary for the processes
  ProcessLauncher launcher;            // required when end_to_end
  std::string kv_cache_memory = "512M";  // each worker's --kv-cache-memory
  int colocated_threads = 1;           // the colocated worker's --threads
  std::chrono::seconds request_timeout{300};
  // The disaggregated cluster's router, prefill and decode worker (default: all on 127.0.0.1).
  // The CLI places them across an emulated link (`--link`); the colocated one stays on loopback.
  ProcessPlacement router_placement;
  ProcessPlacement prefill_placement;
  ProcessPlacement decode_placement;
  std::string link = "loopback";  // what joins prefill and decode, for the result
};

// One JSON object: model, kv_bytes_per_token, the settings, and "rows" (one per prompt length)
// with transfer / disaggregated / colocated figures and ttft_ratio_disaggregated_over_colocated.
// `log` gets progress lines.
absl::StatusOr<nlohmann::json> RunHandoffBench(const HandoffBenchOptions& options,
                                               std::ostream& log);

// The readable table of a result.
std::string FormatHandoffTable(const nlohmann::json& result);

}  // namespace baton::bench

#endif  // BATON_BENCH_HANDOFF_BENCH_H_
