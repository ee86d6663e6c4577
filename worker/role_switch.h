// A worker's role, changed in place (docs/CAPACITY.md, "Role changes in place"): every worker
// builds both the prefill and the decode side over one model, one KV pool and one prefix cache;
// its role says which side takes new work. Change() switches the role at once, so that the
// dropped side's services refuse new work from then on (rpc::CheckServes: ABORTED, the router
// places it elsewhere), and drains what the dropped side still holds in the background:
//  - prefill: the queued prompts finish (the router bounds each by its --prefill-timeout);
//  - decode: the running sequences and reservations get `drain_timeout` to finish; after it every
//    sequence still held, and any a reservation admits later, ends with ABORTED, which the router
//    migrates to another pair with identical output. A reservation never claimed expires by its
//    lease. The drain stops waiting drain_timeout + kDrainGrace after the change in any case.
// The model and the cached prefixes stay; the KV pool is the same size in every role (one
// --kv-cache-memory), so the blocks the dropped side frees serve the new one. There is no state
// without a role: a worker that fails mid-change restarts in its --role, and its blocks went with
// its process.
//
// Metrics: baton:worker_role{role} (1 for the role served now), baton:role_changes_total{from,to},
// baton:role_change_draining (1 while a drain runs). Each change and its drain's end are logged
// (with how many sequences or reservations the bound ended).
//
// Thread-safety: thread-safe. role() from any thread; Change() from any thread (one change at a
// time: a second while the first drains fails); the parts' functions are called from the drain
// thread.
#ifndef BATON_WORKER_ROLE_SWITCH_H_
#define BATON_WORKER_ROLE_SWITCH_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "baton/v1/common.pb.h"

namespace baton::worker {

// What the switch reads and acts on while it drains a side.
struct RoleSwitchParts {
  std::function<int64_t()> prefill_held;  // prompts queued or in prefill
  std::function<int64_t()> decode_held;   // sequences decoding or waiting, and reservations
  // Ends every decode sequence held now with `why` (decode_worker::DecodeBatch::EndAll).
  std::function<void(const absl::Status& why)> end_decode;
  std::function<std::string()> address;  // for the log
};

struct RoleChange {
  baton::v1::WorkerRole previous = baton::v1::WORKER_ROLE_UNSPECIFIED;
  baton::v1::WorkerRole role = baton::v1::WORKER_ROLE_UNSPECIFIED;
};

class RoleSwitch {
 public:
  static constexpr std::chrono::milliseconds kDefaultDrainTimeout{10000};
  static constexpr std::chrono::milliseconds kDrainGrace{30000};

  RoleSwitch(baton::v1::WorkerRole initial, RoleSwitchParts parts);
  ~RoleSwitch();  // stops waiting for a drain in progress
  RoleSwitch(const RoleSwitch&) = delete;
  RoleSwitch& operator=(const RoleSwitch&) = delete;

  baton::v1::WorkerRole role() const { return role_.load(); }
  bool draining() const { return draining_.load(); }

  // Serves `to` from now on (see the header comment). INVALID_ARGUMENT for an unspecified role;
  // FAILED_PRECONDITION while an earlier change drains. The same role again changes nothing.
  // drain_timeout <= 0: kDefaultDrainTimeout.
  absl::StatusOr<RoleChange> Change(baton::v1::WorkerRole to,
                                    std::chrono::milliseconds drain_timeout);

 private:
  // The drain thread: waits for the sides `from` serves and `to` does not to hold nothing.
  void Drain(baton::v1::WorkerRole from, baton::v1::WorkerRole to,
             std::chrono::milliseconds drain_timeout);
  void PublishRole() const;

  const RoleSwitchParts parts_;
  std::atomic<baton::v1::WorkerRole> role_;
  std::atomic<bool> draining_{false};
  absl::Mutex mu_;  // serializes Change() and the drain thread's (re)start
  absl::Notification stop_;
  std::thread drain_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::worker

#endif  // BATON_WORKER_ROLE_SWITCH_H_
