// Server side of a KV push that arrives over one or more PushKv streams: puts the streams' chunks
// back into the push's order (kv_push_spec.h), calls EndPush once the last chunk has arrived,
// and AbortPush once if anything goes wrong.
//
// Multi-stream protocol (see KvPushHeader in kv_transfer.proto): layer L travels on stream
// L % n_streams, its chunks in the push's order (block range, layer, block). The assembler keeps
// a write cursor (push_cursor.h). A chunk at the cursor is written at once. A chunk further on in
// the order while the cursor's layer belongs to another stream is parked: the stream stops
// reading (at most one parked chunk per stream, so memory stays bounded by the flow-control
// windows) until the other streams' chunks move the cursor to it; whoever moves the cursor
// writes the parked chunk and wakes its stream. This cannot deadlock: the stream owning the
// cursor's layer is never parked. Anything else (a layer on the wrong stream, a chunk spanning
// two ranges, a gap, a duplicate, a stream that ends before its chunks arrived) is
// INVALID_ARGUMENT and fails the push. A stream whose sender half-closed after all its chunks
// were written waits (parked without a chunk) for the push's outcome, so every stream answers
// with the outcome of the whole push, and a push whose other streams never come is failed when
// the waiting stream's deadline cancels it. Past the push's deadline nothing more is written and
// EndPush is not called (DEADLINE_EXCEEDED): the sender has given up by then, and must not
// report a failure for a push the receiver admitted.
//
// A push over a link (PushHeaderInfo::link_id, kv_link.h) has one stream whose chunks carry no
// data: each is received over the link into the receiver's blocks (KvReceiver::FillBlocks), at
// most kLinkTransferTimeout per chunk. Its failure breaks the link (the sender may have posted
// transfers this end will never receive), except when the sender ended the stream early: it
// announced every transfer it posted, and each was received.
//
// Thread-safety: thread-safe. Every KvReceiver call for one push is made under the assembler's
// mutex, so they come from one thread at a time as the receiver contract asks. Wakeups are
// returned to the caller, who runs them after the call, outside every lock.
#ifndef BATON_KVTRANSFER_PUSH_ASSEMBLER_H_
#define BATON_KVTRANSFER_PUSH_ASSEMBLER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/v1/kv_transfer.pb.h"
#include "kvtransfer/kv_receiver.h"
#include "kvtransfer/kv_wire.h"
#include "kvtransfer/link_acceptor.h"
#include "kvtransfer/link_receiver.h"
#include "kvtransfer/push_cursor.h"

namespace baton::kvtransfer {

// A parked stream. Parked with a chunk: Wake(OK) means the chunk was written, read on. Parked at
// its end (EndStream): Wake(OK) means the whole push completed. Wake(error): the push failed,
// finish the stream with `status`. Called at most once per parking, outside every lock.
class KvStreamWaiter {
 public:
  virtual ~KvStreamWaiter() = default;
  virtual void Wake(const absl::Status& status) = 0;
};

struct KvStreamWakeup {
  KvStreamWaiter* waiter = nullptr;
  absl::Status status;
};
using KvStreamWakeups = std::vector<KvStreamWakeup>;

// Runs (and clears) the wakeups an assembler call returned.
void RunWakeups(KvStreamWakeups& wakeups);

class PushRegistry;

// How long one chunk's receive over a link may wait for its turn and its bytes.
inline constexpr absl::Duration kLinkTransferTimeout = absl::Seconds(30);

class PushAssembler {
 public:
  // Use PushRegistry::Join. `link`: the link the push's bytes come over; null: in the messages.
  PushAssembler(PushRegistry* registry, KvReceiver* receiver, const PushHeaderInfo& info,
                absl::Time deadline, std::shared_ptr<LinkReceiver> link = nullptr);
  PushAssembler(const PushAssembler&) = delete;
  PushAssembler& operator=(const PushAssembler&) = delete;

  // A verified chunk (kv_wire.h VerifyChunk) that arrived on `stream_index`. Returns false when
  // it was written (read the next message), true when it was parked (the assembler now owns
  // `waiter` until it wakes it), or the error that failed the push (finish the stream with it).
  absl::StatusOr<bool> Offer(int32_t stream_index, KvStreamWaiter* waiter, ReceivedChunk chunk,
                             KvStreamWakeups* wakeups);

  // The stream's sender half-closed. False when the push has completed (finish OK); true when
  // the stream's own chunks are in but other streams' are not: it is parked until the push
  // concludes, and woken with the outcome. The push's failure, or INVALID_ARGUMENT (failing the
  // push) when some of the stream's own layers never arrived.
  absl::StatusOr<bool> EndStream(int32_t stream_index, KvStreamWaiter* waiter,
                                 KvStreamWakeups* wakeups);

  // The stream broke (cancelled, deadline, transport error) or sent garbage: fails the push with
  // `why` unless it already completed. True when the stream was parked: it is then not woken,
  // and the caller finishes it. Idempotent.
  bool BreakStream(int32_t stream_index, const absl::Status& why, KvStreamWakeups* wakeups);

  const KvPushSpec& spec() const { return spec_; }
  bool over_link() const { return link_ != nullptr; }

 private:
  friend class PushRegistry;
  enum class StreamState { kAbsent, kLive, kEnded };
  struct Parked {
    int32_t stream_index;
    KvStreamWaiter* waiter;
    bool has_chunk;  // false: parked at its end, waiting for the outcome
    ReceivedChunk chunk;
  };

  absl::Status AddStreamLocked(const PushHeaderInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when `chunk` is exactly at the cursor.
  absl::Status CheckAtCursorLocked(const ReceivedChunk& chunk) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The chunk's bytes into the receiver: from its data, or over the link.
  absl::Status WriteChunkLocked(const ReceivedChunk& chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes a chunk at the cursor, advances it, ends the push after the last layer.
  absl::Status WriteLocked(const ReceivedChunk& chunk, KvStreamWakeups* wakeups)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DEADLINE_EXCEEDED once the push's deadline has passed.
  absl::Status CheckDeadline() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes parked chunks that the cursor has reached.
  void DrainLocked(KvStreamWakeups* wakeups) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes the streams parked at their end once EndPush succeeded.
  void CompleteLocked(KvStreamWakeups* wakeups) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // First failure: AbortPush (when the receiver began the push), wake every parked stream, and
  // break the link unless `link_in_step` (both ends agree on its transfers so far).
  void FailLocked(const absl::Status& why, KvStreamWakeups* wakeups, bool link_in_step = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ConcludeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PushRegistry* const registry_;
  KvReceiver* const receiver_;
  const std::shared_ptr<LinkReceiver> link_;  // null: the data come in the messages
  const KvPushSpec spec_;
  const int32_t n_streams_;
  const absl::Time deadline_;  // the first stream's; nothing is written or ended past it

  absl::Mutex mu_;
  bool begun_ ABSL_GUARDED_BY(mu_) = false;     // BeginPush succeeded
  absl::Status failure_ ABSL_GUARDED_BY(mu_);   // set once, never cleared
  bool complete_ ABSL_GUARDED_BY(mu_) = false;  // EndPush succeeded
  std::vector<StreamState> streams_ ABSL_GUARDED_BY(mu_);
  PushCursor cursor_ ABSL_GUARDED_BY(mu_);
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
};

// The pushes in flight on one service, by reservation id. The first stream of a push calls
// KvReceiver::BeginPush; later streams join the same assembler. A push leaves the registry when
// it completes or fails, so a later push to the same reservation meets the receiver's verdict.
//
// Thread-safety: thread-safe. Lock order: an assembler's mutex before the registry's.
class PushRegistry {
 public:
  // `links`: where pushes over a link find it (must outlive the registry); null: no links.
  explicit PushRegistry(KvReceiver* receiver, LinkAcceptor* links = nullptr)
      : receiver_(receiver), links_(links) {}

  // Joins the stream a header opened; `deadline` is the call's. FAILED_PRECONDITION for a link
  // this receiver does not have (LinkAcceptor::Find); a push over a link that is refused breaks
  // the link. The receiver's BeginPush error
  // for a new push; INVALID_ARGUMENT when the header disagrees with the push's other streams;
  // FAILED_PRECONDITION when that stream index already joined (a second push to a reservation
  // that is receiving).
  absl::StatusOr<std::shared_ptr<PushAssembler>> Join(const PushHeaderInfo& info,
                                                      absl::Time deadline = absl::InfiniteFuture());

  size_t size() const;

 private:
  friend class PushAssembler;
  // Join once the link (if any) is found.
  absl::StatusOr<std::shared_ptr<PushAssembler>> JoinPush(const PushHeaderInfo& info,
                                                          absl::Time deadline,
                                                          std::shared_ptr<LinkReceiver> link);
  void Remove(const std::string& reservation_id, const PushAssembler* assembler);

  KvReceiver* const receiver_;
  LinkAcceptor* const links_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<PushAssembler>> pushes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_PUSH_ASSEMBLER_H_
