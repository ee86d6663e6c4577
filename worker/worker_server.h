// One worker process: the model, the compute (backend, KV cache, transformer) on one engine loop
// thread, and the gRPC services of both sides — prefill and decode — of which its role (prefill,
// decode, or both: colocated) says which take new work; the role changes in place on the
// WorkerControl service's ChangeRole (worker/role_switch.h). Plus registration and heartbeats
// with its routers when they are named (worker/router_links.h).
//
// Thread-safety: Start/Shutdown from the owning thread.
#ifndef BATON_WORKER_WORKER_SERVER_H_
#define BATON_WORKER_WORKER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "baton/v1/common.pb.h"
#include "engine/kv_budget.h"
#include "engine/model.h"
#include "kernels/device.h"
#include "kvtransfer/kv_transport.h"
#include "rpc/server_options.h"

namespace baton::worker {

// Speculative decoding on a decode worker (decode_worker/decode_batch.h).
struct SpeculativeOptions {
  enum class Method { kOff, kNgram, kDraft };
  Method method = Method::kOff;
  std::string draft_model_path;         // kDraft: a GGUF with the served model's vocabulary
  int64_t draft_kv_cache_bytes = 64LL << 20;
  int32_t num_speculative_tokens = 4;   // per sequence and step at most
  int32_t disable_batch_size = 4;       // steps with more sequences decode plainly
  // One proposed token's cost relative to a decode step (decode_worker/speculation_length.h);
  // < 0: learned (a verification row's share of the batch's own step times, plus the draft's
  // share of the weight bytes).
  double token_cost = -1;
};

struct WorkerOptions {
  baton::v1::WorkerRole role = baton::v1::WORKER_ROLE_BOTH;  // at start; may change in place
  std::string model_path;
  engine::LoadOptions load;              // how model_path is loaded (quantize a checkpoint)
  rpc::ServerOptions server;
  rpc::ClientOptions peers;              // to the router and to decode workers (KV pushes)
  std::string advertise_address;         // what the router should dial; default host:port
  // Register and heartbeat with these routers when set: an address spec (rpc/address_spec.h:
  // HOST:PORT[,...], dns:NAME:PORT or k8s:SERVICE:PORT; worker/router_links.h).
  std::string routers;
  kernels::Device device;                // where the model and its KV cache live
  int n_threads = 0;                     // the CPU backend's pool (0: every core)
  // > 1: the model runs as a tensor-parallel group of this many ranks (CPU only, threads of
  // this process sharing n_threads; engine/tensor_parallel_group.h). The KV hand-off carries
  // whole-model blocks, so workers of any two sizes exchange KV.
  int32_t tensor_parallel = 1;
  int64_t kv_cache_bytes = 512LL << 20;  // decode: reservations; prefill: scratch
  int32_t block_size = 16;
  int32_t max_batch_tokens = 2048;       // prefill token budget per forward
  int32_t max_decode_batch = 64;
  // decode: generated tokens' KV held at admission (-1: all); reported to the router
  int32_t kv_reserve_ahead = engine::kDefaultReserveAheadTokens;
  // decode: a KV push silent (no chunk) this long is freed; its prefill fails over
  std::chrono::milliseconds kv_stall_timeout{30000};
  SpeculativeOptions speculative;        // decode
  // Prefix caching (engine/prefix_cache.h): finished prompts and sequences leave their full KV
  // blocks cached for later requests with the same prefix.
  bool prefix_caching = true;
  // Cached block hashes sent to the router in each heartbeat / status answer at most (8 bytes
  // each).
  int32_t prefix_cache_advertise = 4096;
  int64_t kv_chunk_bytes = 1 << 20;
  int kv_streams = 1;
  // prefill: how KV travels to decode workers (kvtransfer/kv_transport.h). kAuto: NCCL links to
  // decode workers on GPUs that take them when this worker's KV is on a GPU too, gRPC otherwise;
  // kNccl: links only (start-up fails without NCCL). Decode workers on a GPU take links when
  // NCCL loads, whatever this says.
  kvtransfer::KvTransportChoice kv_transport = kvtransfer::KvTransportChoice::kAuto;
  std::chrono::milliseconds heartbeat_interval{500};
  // GET /metrics (Prometheus text) and /health over HTTP: >= 0 serves them on this port (0: any
  // free one), -1: not served.
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
};

class WorkerServer {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options);
  ~WorkerServer();

  int port() const;
  std::string address() const;
  // host:port of the metrics HTTP endpoint; empty when options.metrics_port was -1.
  std::string metrics_address() const;
  // Stops accepting calls, lets calls in flight finish (up to `grace`), stops the engine.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));

  struct Impl;

 private:
  explicit WorkerServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton::worker

#endif  // BATON_WORKER_WORKER_SERVER_H_
