// The sending end of one link (kv_link.h): posts the sends of the chunks that pushes hand it, one
// at a time on a thread of its own, in the order they were handed over, each announced on its
// push's stream (KvChunk.link_sequence) just before it is posted.
//
// A transfer whose push was cancelled before its turn is skipped, and one whose blocks never
// became ready (within kLinkTransferTimeout) fails; neither was announced, so the link stays in
// step. A transfer posted but not completed in time, or whose push's stream was lost meanwhile
// (the receiver may never have seen its announcement), breaks the link: its endpoint is aborted,
// and every transfer after it fails with UNAVAILABLE. So does Break, which a push calls when its
// stream fails (a completed send says nothing of the receiver: NCCL buffers small ones). The
// sender opens a new link for the next push.
//
// Thread-safety: thread-safe. `done` callbacks run on the link's thread, or in Submit or the
// destructor once the link is broken.
#ifndef BATON_KVTRANSFER_LINK_SENDER_H_
#define BATON_KVTRANSFER_LINK_SENDER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/kv_link.h"
#include "kvtransfer/kv_transport.h"

namespace baton::kvtransfer {

struct LinkTransfer {
  std::vector<const uint8_t*> blocks;  // in the sender's memory
  size_t block_bytes = 0;
  BlocksReady ready;  // when given: waited for before the transfer is announced
  std::chrono::system_clock::time_point deadline;  // the push's
  // Queues the chunk's announcement (with its link sequence) on the push's stream; false when
  // the stream has ended (the transfer is then skipped).
  std::function<bool(uint64_t sequence)> announce;
  std::function<bool()> cancelled;  // the push was cancelled: skip unless posted already
  std::function<bool()> lost;       // the push's stream failed: the receiver may never receive
  std::function<void(const absl::Status&)> done;  // once: OK when the bytes have arrived
};

class LinkSender {
 public:
  LinkSender(std::string link_id, std::unique_ptr<LinkEndpoint> endpoint);
  // Breaks the link (transfers not yet done fail with UNAVAILABLE) and joins the thread.
  ~LinkSender();

  // Queues a transfer behind the ones queued before it.
  void Submit(LinkTransfer transfer);

  // Marks the link broken (keeping the first reason) and aborts the endpoint: the transfer in
  // flight gives up, queued ones fail, later ones fail at once, all with UNAVAILABLE.
  void Break(const absl::Status& why);

  bool broken() const;
  const std::string& link_id() const { return link_id_; }

 private:
  void Loop();
  // Runs one transfer to its end; returns how it ended.
  absl::Status Run(LinkTransfer& transfer);
  // OK, or the UNAVAILABLE status of a broken link.
  absl::Status Failure() const;

  const std::string link_id_;
  const std::unique_ptr<LinkEndpoint> endpoint_;
  uint64_t next_sequence_ = 1;  // the loop's

  mutable absl::Mutex mu_;
  std::deque<LinkTransfer> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // UNAVAILABLE once broken
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_LINK_SENDER_H_
