// The receiving end of one link (kv_link.h): posts the receives of the chunks that pushes
// announce, in the link's order (KvChunk.link_sequence), whatever order the pushes' streams
// deliver the announcements in.
//
// Any failure breaks the link for good (its endpoint is aborted): a receive that does not
// complete in time, an announcement whose turn never comes, a sequence seen twice. Pushes on a
// broken link fail with UNAVAILABLE, and the sender opens a new link for the next one.
//
// Thread-safety: thread-safe. Receives run one at a time, in sequence order; Break may be
// called from any thread, also while a receive runs.
#ifndef BATON_KVTRANSFER_LINK_RECEIVER_H_
#define BATON_KVTRANSFER_LINK_RECEIVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvtransfer/kv_link.h"

namespace baton::kvtransfer {

class LinkReceiver {
 public:
  LinkReceiver(std::string link_id, std::unique_ptr<LinkEndpoint> endpoint);
  ~LinkReceiver();  // breaks the link

  // Receives transfer `sequence` (>= 1) into `blocks` (`block_bytes` each, in the receiver's
  // memory): waits until transfers 1..sequence-1 have been received, posts it, and waits until
  // it is complete; all of it at most until `deadline`. OK, or UNAVAILABLE "link L: ..." once
  // the link is broken (by this call's failure or an earlier one).
  absl::Status Receive(uint64_t sequence, std::span<uint8_t* const> blocks, size_t block_bytes,
                       absl::Time deadline);

  // Breaks the link: a receive in flight returns at once with UNAVAILABLE, and so do later
  // ones. The first reason is kept. Idempotent.
  void Break(const absl::Status& why);

  bool broken() const { return broken_.load(); }

 private:
  bool TurnOf(uint64_t sequence) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the link broken (keeping the first reason) and aborts the endpoint; returns the
  // UNAVAILABLE status receives report from now on.
  absl::Status MarkBroken(const absl::Status& why);
  absl::Status Failure() const;

  const std::string link_id_;
  const std::unique_ptr<LinkEndpoint> endpoint_;
  std::atomic<bool> broken_{false};

  mutable absl::Mutex failure_mu_;
  absl::Status failure_ ABSL_GUARDED_BY(failure_mu_);  // UNAVAILABLE once broken

  absl::Mutex mu_;  // held by the receive in flight; others wait for their turn on it
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_LINK_RECEIVER_H_
