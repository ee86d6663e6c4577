// A link: a point-to-point data path between one sender and one receiver (NCCL between two GPUs)
// that KV pushes share. The pushes' control messages stay on their PushKv streams; only the
// blocks' bytes travel over the link, from the sender's block memory straight into the
// receiver's (kv_transfer.proto: KvPushHeader.link_id, KvChunk.link_sequence).
//
// A link's transfers pair up by order: the n-th send posted at one end fills the n-th receive
// posted at the other. Nothing on the link says which push a transfer belongs to, so an end that
// can no longer tell whether its peer posted a transfer (a push failed midway) must break the
// link; both ends then open a new one (link_sender.h, link_receiver.h).
//
// Thread-safety: a LinkEndpoint is posted to and polled by one thread at a time; Abort may be
// called from any thread at any time. A LinkFactory is thread-safe.
#ifndef BATON_KVTRANSFER_KV_LINK_H_
#define BATON_KVTRANSFER_KV_LINK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace baton::kvtransfer {

class LinkEndpoint {
 public:
  // Aborts the link unless it was aborted already.
  virtual ~LinkEndpoint() = default;

  // Waits until the two ends are connected, at most until `deadline`. UNAVAILABLE (or
  // DEADLINE_EXCEEDED) saying why not; the endpoint is then unusable.
  virtual absl::Status AwaitConnected(absl::Time deadline) = 0;

  // Starts moving `blocks` (`block_bytes` each, in this end's memory: device memory for NCCL)
  // to the peer, or from it into `blocks`; returns without waiting for the peer. The blocks must
  // stay as they are until Idle() says the transfer is complete. An error breaks the link.
  virtual absl::Status PostSend(std::span<const uint8_t* const> blocks, size_t block_bytes) = 0;
  virtual absl::Status PostReceive(std::span<uint8_t* const> blocks, size_t block_bytes) = 0;

  // True when every transfer posted so far is complete at this end, false while some still
  // run, or the error that broke the link. A send may complete before the peer has posted its
  // receive (NCCL buffers small ones), so a completed send does not mean the peer received it.
  virtual absl::StatusOr<bool> Idle() = 0;

  // Breaks the link for good: transfers in flight are abandoned (their blocks are no longer
  // read or written once Abort returns, also when it returns to a second caller while a first
  // one's abort is under way), later posts fail. Idempotent.
  virtual void Abort() = 0;
};

class LinkFactory {
 public:
  virtual ~LinkFactory() = default;

  // "nccl": OpenKvLinkRequest.kind, Timings.kv_transport and the metrics' label.
  virtual std::string_view kind() const = 0;

  // The sending end of a new link: an endpoint that connects in the background, and in
  // `bootstrap` what the receiving end needs to connect to it (OpenKvLinkRequest.bootstrap).
  virtual absl::StatusOr<std::unique_ptr<LinkEndpoint>> Offer(std::string* bootstrap) = 0;

  // The receiving end, from the sender's bootstrap. INVALID_ARGUMENT for a bootstrap this kind
  // cannot read; FAILED_PRECONDITION when this end cannot serve the link (saying why).
  virtual absl::StatusOr<std::unique_ptr<LinkEndpoint>> Accept(std::string_view bootstrap) = 0;
};

// Polls `endpoint` until its transfers are complete: OK; the link's error; DEADLINE_EXCEEDED
// when `deadline` passes first; ABORTED when `abandon` (when given) returns true first. Does
// not abort the link: the caller decides.
absl::Status AwaitIdle(LinkEndpoint& endpoint, absl::Time deadline,
                       const std::function<bool()>& abandon = {});

// Whether `link_id` is a valid OpenKvLinkRequest.link_id; INVALID_ARGUMENT saying why not.
absl::Status ValidateLinkId(std::string_view link_id);

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_LINK_H_
