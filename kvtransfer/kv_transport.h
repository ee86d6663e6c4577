// The sending end: pushes one request's KV to a reservation, layer by layer, while the prefill
// forward pass computes the next layer. One interface, several transports: gRPC (the default,
// between processes), links (the blocks device to device over NCCL, the control on gRPC:
// kv_link.h), in-process (tests, and a worker pushing to itself), and the choice among them per
// destination (CreateAutoKvTransport).
//
// The blocks a push sends are read where they lie, off the caller's thread, and the network may
// hold views of them for a while after the push is over (gRPC keeps a message's slices until
// they are written to the socket, and a connection to a peer cut off keeps them until it
// fails). So blocks handed to SendLayer must stay as they are until the push's
// WhenBlocksReleased callback has run, which may be after the push is destroyed.
//
// Thread-safety: a KvTransport is thread-safe (many pushes at once). A KvPush is used by one
// thread at a time: SendLayer in the push's order, then Finish or Cancel, then
// WhenBlocksReleased. Every push is destroyed before its transport.
#ifndef BATON_KVTRANSFER_KV_TRANSPORT_H_
#define BATON_KVTRANSFER_KV_TRANSPORT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvtransfer/kv_link.h"
#include "kvtransfer/kv_push_spec.h"
#include "kvtransfer/kv_receiver.h"
#include "rpc/server_options.h"

namespace baton::kvtransfer {

struct KvPushStats {
  int64_t bytes_sent = 0;
  int32_t chunks_sent = 0;
  double seconds = 0;  // StartPush to the receiver's final acknowledgement
};

// Waits until the blocks of a SendLayer call hold their bytes, at most until `deadline`: OK, or
// why the push must fail (DEADLINE_EXCEEDED, or the copy's error).
using BlocksReady = std::function<absl::Status(std::chrono::system_clock::time_point deadline)>;

class KvPush {
 public:
  // Cancels the push unless it finished.
  virtual ~KvPush() = default;

  // How this push travels: "grpc", "nccl" or "in_process" (Timings.kv_transport, the metrics).
  virtual std::string_view transport_name() const = 0;

  // Whether SendLayer reads the blocks in the backend's own memory (a device's), where they lie:
  // true for links. False: it reads host memory, so a device's blocks must be staged there.
  virtual bool reads_device_memory() const { return false; }

  // Queues layer `layer` of the current block range for sending (the push's order,
  // kv_push_spec.h: range by range, layer by layer): `blocks[i]` points at block range_begin + i
  // of that layer (spec.layer_block_bytes() bytes each; one pointer per block of the range; for
  // a push of one range, every block). The transport may read the blocks later, off the caller's
  // thread: they must stay as they are until AwaitBlocksReleased returned true (the header's
  // rule). When `ready` is given, the blocks are still
  // being filled (a copy from a GPU in flight): the transport calls it, on any thread, before it
  // reads them, and fails the push with its error. Does not wait for the network: the gRPC
  // transport neither copies nor hashes nor waits for `ready` on the caller's thread; the
  // in-process one writes into the receiver at once. An error means the push has failed (the
  // receiver will free the reservation).
  virtual absl::Status SendLayer(int32_t layer, const std::vector<const uint8_t*>& blocks,
                                 BlocksReady ready = {}) = 0;

  // Waits until everything is acknowledged (EndPush succeeded on the receiver) or the push's
  // deadline passes. Must be called once, after the last range's last SendLayer.
  virtual absl::StatusOr<KvPushStats> Finish() = 0;

  // Abandons the push; the receiver frees the reservation. Returns at once. Safe to call at any
  // time, also after Finish.
  virtual void Cancel() = 0;

  // Calls `release` once the transport reads none of the blocks given to SendLayer any more: at
  // once, on this thread, when that is so already (in-process always; over gRPC after a
  // successful Finish, as a rule); otherwise later on a transport thread, when the network lets
  // go of its views of them (soon after a failure or Cancel, or when the push is destroyed: a
  // failed call may keep its messages until then; at worst when the connection to a peer that
  // was cut off fails). Once, after Finish or Cancel.
  virtual void WhenBlocksReleased(std::function<void()> release) = 0;
};

class KvTransport {
 public:
  virtual ~KvTransport() = default;
  // "grpc", "nccl", "in_process", or "auto" (a choice among them): the transport's kind.
  virtual std::string_view name() const = 0;
  // Opens a push to `destination` (host:port of a decode worker; ignored in-process).
  virtual absl::StatusOr<std::unique_ptr<KvPush>> StartPush(
      const std::string& destination, const KvPushSpec& spec,
      std::chrono::system_clock::time_point deadline) = 0;
};

// Which transport a prefill worker pushes over (--kv-transport): per destination the fastest
// both ends support (NCCL links between GPUs, gRPC otherwise), or one of them only.
enum class KvTransportChoice { kAuto, kGrpc, kNccl };
// "auto", "grpc", "nccl"; INVALID_ARGUMENT naming them otherwise.
absl::StatusOr<KvTransportChoice> ParseKvTransportChoice(std::string_view name);

struct GrpcKvTransportOptions {
  int64_t chunk_bytes = 1 << 20;  // payload bytes per KvChunk message at most (whole blocks)
  int n_streams = 1;              // parallel PushKv streams per push, each on a connection of
                                  // its own (at most n_layer are used); layers round-robin over
                                  // them
  rpc::ClientOptions client;      // token, TLS, message size limit
};

std::unique_ptr<KvTransport> CreateGrpcKvTransport(const GrpcKvTransportOptions& options);

struct LinkKvTransportOptions {
  rpc::ClientOptions client;  // token, TLS (the control path: OpenKvLink and PushKv)
  // Opening a link (OpenKvLink and the two ends connecting) takes at most this long.
  std::chrono::milliseconds connect_timeout{20000};
  // false: StartPush opens a missing link and waits for it. true: it does not wait: the link
  // opens on a thread of its own, and StartPush answers UNAVAILABLE while it does, then
  // FAILED_PRECONDITION (once) with why it failed; the caller pushes another way meanwhile
  // (CreateAutoKvTransport).
  bool open_in_background = false;
};

// Pushes whose blocks travel over links of `factory`'s kind (kv_link.h; NCCL between GPUs): one
// link per destination, opened on the first push there (OpenKvLink) and again after it broke
// (see open_in_background). StartPush fails with the destination's UNIMPLEMENTED or
// FAILED_PRECONDITION when it takes no links of that kind. `factory` must outlive the transport.
std::unique_ptr<KvTransport> CreateLinkKvTransport(LinkFactory* factory,
                                                   const LinkKvTransportOptions& options);

struct AutoKvTransportOptions {
  // How long a destination that refused the preferred transport is sent to over the fallback
  // before it is asked again.
  std::chrono::milliseconds recheck_after{60000};
};

// Per destination, the fastest transport both ends support: `preferred` (links: NCCL between
// GPUs) where it starts a push, `fallback` (gRPC) where it does not: for that push only when it
// answers UNAVAILABLE (a link still opening), for options.recheck_after otherwise (the
// destination takes no such links, or they would not connect). A bad spec (INVALID_ARGUMENT) is
// returned as it is. Each push says which it went over (KvPush::transport_name).
std::unique_ptr<KvTransport> CreateAutoKvTransport(std::unique_ptr<KvTransport> preferred,
                                                   std::unique_ptr<KvTransport> fallback,
                                                   const AutoKvTransportOptions& options = {});

// The transport for `choice`: gRPC (kGrpc, and kAuto without links), links of `links` (kNccl),
// or CreateAutoKvTransport of the two (kAuto). `links` null: this worker has none, for the
// reason `no_links`; kNccl then fails with FAILED_PRECONDITION saying it. `links` must outlive
// the transport.
absl::StatusOr<std::unique_ptr<KvTransport>> CreateChosenKvTransport(
    KvTransportChoice choice, const GrpcKvTransportOptions& grpc_options, LinkFactory* links,
    const absl::Status& no_links);

// A colocated worker's transport (role both): pushes to its own address (`is_self`, called on
// any thread) go in-process through `self`, pushes to other decode workers through `peers`.
std::unique_ptr<KvTransport> CreateColocatedKvTransport(
    std::unique_ptr<KvTransport> self, std::unique_ptr<KvTransport> peers,
    std::function<bool(const std::string& destination)> is_self);

// Writes straight into `receiver` (which must outlive the transport), synchronously.
std::unique_ptr<KvTransport> CreateInProcessKvTransport(KvReceiver* receiver);

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_TRANSPORT_H_
