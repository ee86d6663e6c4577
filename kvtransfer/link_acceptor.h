// A receiver's links (kv_link.h), by the ids their senders gave them: OpenKvLink makes one, a
// push that names it (KvPushHeader.link_id) finds it.
//
// A link holds resources at both ends (an NCCL communicator: device buffers, a proxy thread), and
// a sender that restarted or gave up leaves its end behind. So at most `max_links` are kept
// (opening one more breaks and forgets the least recently used), a link unused for
// `idle_timeout` is broken and forgotten, and so is a broken one, as soon as Open or Find notices.
//
// Thread-safety: thread-safe.
#ifndef BATON_KVTRANSFER_LINK_ACCEPTOR_H_
#define BATON_KVTRANSFER_LINK_ACCEPTOR_H_

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
#include "kvtransfer/kv_link.h"
#include "kvtransfer/link_receiver.h"

namespace baton::kvtransfer {

class LinkAcceptor {
 public:
  // Links of `factory`'s kind (which must outlive the acceptor).
  explicit LinkAcceptor(LinkFactory* factory, int32_t max_links = 16,
                        absl::Duration idle_timeout = absl::Minutes(10));

  // OpenKvLink: accepts the link and waits (at most until `deadline`) until both ends are
  // connected, then keeps it under its id (breaking a link of the same id). INVALID_ARGUMENT
  // for a bad id or bootstrap; UNIMPLEMENTED for a kind other than the factory's; the factory's
  // FAILED_PRECONDITION; UNAVAILABLE or DEADLINE_EXCEEDED when the ends did not connect.
  absl::Status Open(const v1::OpenKvLinkRequest& request, absl::Time deadline);

  // The link opened under `link_id`; FAILED_PRECONDITION when there is none (never opened,
  // broken, or evicted): the sender must open a new one.
  absl::StatusOr<std::shared_ptr<LinkReceiver>> Find(const std::string& link_id);

  // Links kept that are not broken.
  size_t size() const;

 private:
  // Takes the broken, idle and least recently used links beyond max_links out of the map; the
  // caller breaks them once the mutex is released (an abort may take a while).
  std::vector<std::shared_ptr<LinkReceiver>> EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Entry {
    std::shared_ptr<LinkReceiver> link;
    uint64_t last_used = 0;  // a counter: larger is more recent
    absl::Time last_used_at;
  };
  LinkFactory& factory_;
  const int32_t max_links_;
  const absl::Duration idle_timeout_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> links_ ABSL_GUARDED_BY(mu_);
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_LINK_ACCEPTOR_H_
