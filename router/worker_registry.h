// The router's view of its workers: who they are, whether they are alive, how loaded they are,
// and which one gets the next request.
//
// Workers become known in two ways:
//  - registration: a worker calls RegisterWorker, then Heartbeat every interval;
//  - static lists (router flags --prefill / --decode / --colocated): AddStatic(), after which the
//    router polls the worker's Status RPC and reports each answer with ReportStatic().
// Either way a report (registration, heartbeat, status answer) refreshes the worker's load and
// its last-seen time. A worker unseen for `heartbeat_timeout` is unhealthy and gets no new
// requests; it is healthy again at its next report. MarkUnavailable() takes a worker out until its
// next report (a call to it failed); MarkFull() zeroes its free KV blocks until its next report (a
// reservation was refused).
//
// Placement: PickDecode() among healthy decode-capable workers (role decode or both) whose free KV
// blocks cover the request and whose context is long enough; PickPrefill() among healthy
// prefill-capable workers (prefill or both). kLeastLoaded picks the decode worker with the most
// free blocks and the prefill worker with the fewest queued prompt tokens; kRoundRobin rotates over
// the eligible workers; kKvAware compares the workers' predicted times (service_time_model.h:
// the prefill worker's queue and the prompt's tokens it has not cached, at its measured rate;
// the decode worker's time per token with the request added), counting the prompt's blocks a
// worker has cached from the hashes it advertises in its reports, and aims for
// options.targets. Each pick updates the load view optimistically (the decode worker loses the request's
// blocks, the prefill worker gains the prompt tokens it has not cached, and a worker that
// advertises cached blocks gains the prompt's) until the next report overwrites it. A worker's report replaces its whole
// advertised set: a restarted worker's is empty.
//
// Draining: Drain() takes a worker out of placement (a discovered worker that left discovery:
// router/worker_discovery.h) without cutting what it runs; it is forgotten once a report shows it
// idle (no queued prompt tokens, running sequences or reservations) or once it is unhealthy.
// AddStatic() of its address ends the draining.
//
// Changes that may let a waiting request be placed (a report, a registration) advance epoch();
// WaitForChange() blocks until that happens.
//
// Thread-safety: thread-safe; every method may be called from any thread.
#ifndef BATON_ROUTER_WORKER_REGISTRY_H_
#define BATON_ROUTER_WORKER_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "baton/v1/common.pb.h"
#include "router/placement_policy.h"
#include "router/prefix_affinity.h"
#include "router/service_time_model.h"
#include "rpc/worker_status.h"

namespace baton::router {

struct WorkerRegistryOptions {
  // The fingerprint of the router's model (engine/model.h); a worker serving other weights is
  // refused.
  std::string model_fingerprint;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // Unseen this long: unhealthy. Zero: 3 x heartbeat_interval.
  absl::Duration heartbeat_timeout = absl::ZeroDuration();
  // A registered (not static) worker unseen this long is forgotten.
  absl::Duration forget_after = absl::Minutes(5);
  PlacementPolicy placement = PlacementPolicy::kKvAware;
  // What kKvAware placement aims for (service_time_model.h); zero: the fastest predicted.
  ServiceTargets targets;
  // Where heartbeat ages are read; tests inject a fake one. Must outlive the registry.
  const Clock* clock = &Clock::Real();
};

// One worker as the registry sees it (a copy).
struct WorkerSnapshot {
  std::string id;
  v1::WorkerRole role = v1::WORKER_ROLE_UNSPECIFIED;
  std::string address;
  bool is_static = false;
  bool draining = false;  // Drain(): no new requests; forgotten once idle
  v1::ModelIdentity model;
  v1::WorkerLoad load;
  bool healthy = false;
  absl::Time last_seen = absl::InfinitePast();  // InfinitePast: never reported
  std::string last_error;                       // why a static worker is not usable, if it is not
  int32_t n_cached_blocks = 0;                  // block hashes it advertised (load has none)
};

// Worker ids, e.g. the workers a request must not be placed on.
using WorkerIdSet = absl::flat_hash_set<std::string>;

// The worker chosen for a request.
struct Placement {
  std::string worker_id;
  std::string address;
  int32_t n_blocks = 0;  // decode: the KV blocks the request needs there; prefill: 0
  int64_t n_queued_tokens = 0;  // prefill: the prompt tokens it queues there (not cached)
};

// Why no decode worker was picked.
enum class NoPlacement {
  kNoWorker,    // no healthy decode-capable worker at all (or none with a long enough context)
  kNoCapacity,  // some could hold the request, but not with their blocks free now
  kTooLarge,    // no healthy worker has that many blocks in total
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(WorkerRegistryOptions options);
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // A worker announcing itself. Returns its id. INVALID_ARGUMENT: no role, no address, or a
  // decode-capable worker without a block size. FAILED_PRECONDITION naming both fingerprints when
  // the worker's model is not the router's. A worker registering again at an address already
  // known (it restarted) replaces the old entry.
  absl::StatusOr<std::string> Register(v1::WorkerRole role, const std::string& address,
                                       const v1::ModelIdentity& model, const v1::WorkerLoad& load);

  // A registered worker's heartbeat. False when the id is unknown (the worker must register
  // again), also an id another registry (a router before its restart) gave out. `role`: the role
  // it serves now (it changes in place, worker/role_switch.h); unspecified: unchanged.
  bool Heartbeat(const std::string& worker_id, const v1::WorkerLoad& load,
                 v1::WorkerRole role = v1::WORKER_ROLE_UNSPECIFIED);
  // A registered worker changed its role in place (router/role_changer.h): placed by it from now
  // on. NOT_FOUND for an unknown id; FAILED_PRECONDITION for a static worker (its role is its
  // flag's).
  absl::Status SetRole(const std::string& worker_id, v1::WorkerRole role);

  // A worker from a static list: known at once, unhealthy until its first ReportStatic(). Returns
  // its id. Adding the same address and role twice returns the existing id (and ends its
  // draining).
  std::string AddStatic(v1::WorkerRole role, const std::string& address);
  // No new requests for the worker; see the header comment. Unknown ids are ignored.
  void Drain(const std::string& worker_id);

  // The answer of a static worker's Status RPC, treated as a heartbeat. FAILED_PRECONDITION (the
  // worker stays unhealthy) when its fingerprint is not the router's, INVALID_ARGUMENT when it
  // does not serve the role it was listed for or a decode-capable worker reports no block size;
  // NOT_FOUND for an unknown id.
  absl::Status ReportStatic(const std::string& worker_id, v1::WorkerRole reported_role,
                            const v1::ModelIdentity& model, const v1::WorkerLoad& load);
  // A failed poll of a static worker: unhealthy until its next answer, with `why` kept.
  void ReportStaticFailure(const std::string& worker_id, const absl::Status& why);

  // Placement; see the header comment. A worker is eligible when prompt + max_tokens fits its
  // context and its free blocks cover what it reserves at admission by its own reserve-ahead
  // policy (engine/kv_budget.h, ModelIdentity.kv_reserve_ahead_tokens). Updates the load view on
  // success.
  // Workers in `avoid` are never chosen (they failed this request before).
  // `prompt` (the request's tokens, hashed on demand) is needed by kKvAware only; null: no
  // worker holds any of it.
  absl::StatusOr<Placement> PickDecode(int64_t n_prompt_tokens, int64_t max_tokens,
                                       NoPlacement* why = nullptr, const WorkerIdSet& avoid = {},
                                       PromptHashes* prompt = nullptr);
  // The prompt tokens the chosen worker has not cached are added to its queued prompt tokens. When
  // `decode_worker_id` names a healthy colocated worker (role both), that worker prefills its own
  // request (its KV then stays where it is computed) under kRoundRobin, and wherever the policy
  // finds it as good as any other (kLeastLoaded: no fewer queued tokens elsewhere; kKvAware: the
  // same cost and predicted time, its pass stalling its own sequences counted in the cost, and a
  // pass on another colocated worker counted as stalling at least as many);
  // otherwise the policy's pick computes the prompt and hands its KV to the decode worker, so
  // that no prefill worker idles beside a colocated one that is busy. UNAVAILABLE when no
  // healthy prefill-capable worker exists.
  absl::StatusOr<Placement> PickPrefill(int64_t n_prompt_tokens,
                                        const std::string& decode_worker_id = "",
                                        const WorkerIdSet& avoid = {},
                                        PromptHashes* prompt = nullptr);

  // The prompt placed by PickPrefill has been computed (or has failed): its tokens leave this
  // router's outstanding count for the worker. Until then a worker's queue reads at least that
  // count, whatever its reports say: a report may predate the prompts just sent to it.
  void PrefillEnded(const Placement& placement);
  // A call to the worker failed as if it were down: unhealthy until its next report.
  void MarkUnavailable(const std::string& worker_id);
  // The worker refused a reservation for lack of blocks: 0 free blocks until its next report.
  void MarkFull(const std::string& worker_id);

  std::vector<WorkerSnapshot> Snapshot();
  std::vector<WorkerSnapshot> StaticWorkers();

  // Counts changes that may make room for a waiting request.
  uint64_t epoch();
  // Blocks until epoch() != `seen_epoch`, `deadline`, or `*stop` is true (the setter must call
  // Wake() afterwards so that the waiter sees it).
  void WaitForChange(uint64_t seen_epoch, absl::Time deadline, const std::atomic<bool>* stop);
  // Advances the epoch: every waiter wakes up and looks again.
  void Wake();

  absl::Duration heartbeat_interval() const { return options_.heartbeat_interval; }
  absl::Duration heartbeat_timeout() const { return heartbeat_timeout_; }
  const std::string& model_fingerprint() const { return options_.model_fingerprint; }

 private:
  struct Worker {
    WorkerSnapshot info;
    bool reported = false;     // a report with a matching model has arrived
    bool unavailable = false;  // MarkUnavailable since the last report
    uint64_t seq = 0;          // registration order, for round robin
    int64_t outstanding_prefill = 0;  // prompt tokens placed here and not computed yet
    absl::flat_hash_set<uint64_t> cached;  // advertised cached block hashes
  };

  // Takes a report's load: its block hashes into `cached`, the rest into the snapshot.
  static void SetLoad(Worker& w, const v1::WorkerLoad& load);
  // The prompt's leading blocks that `w` has cached (0 without a prompt).
  static int32_t CachedBlocks(const Worker& w, PromptHashes* prompt);
  // After a pick: a worker that caches will hold the prompt's blocks.
  static void ExpectCached(Worker& w, PromptHashes* prompt);

  bool HealthyLocked(const Worker& w, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Healthy and not draining: may take a new request.
  bool PlaceableLocked(const Worker& w, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetStaleLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Worker* FindLocked(absl::string_view id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The speeds assumed for those of `eligible` (indices into workers_) that measured none.
  FallbackSpeeds FallbackSpeedsLocked(const std::vector<size_t>& eligible) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The decode sequences a prompt pass on `w` stalls: none on a prefill-only worker, else its
  // running ones and at least `own_stall` (what the pass would stall on the request's own
  // colocated decode worker; 0 when there is none).
  static int64_t StalledByPass(const Worker& w, int64_t own_stall);
  // Among `eligible` (indices into workers_), the next after `*cursor` in registration order.
  size_t RoundRobinLocked(const std::vector<size_t>& eligible, uint64_t* cursor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string NewIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WorkerSnapshot SnapshotLocked(const Worker& w, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerRegistryOptions options_;
  const absl::Duration heartbeat_timeout_;
  // Part of every id, drawn per registry: a worker's heartbeat with an id from a router that has
  // since restarted is unknown here (it must register again) instead of matching another worker.
  const uint32_t instance_;

  absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);  // registration order
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t decode_cursor_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefill_cursor_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

// Which sides a role serves, and its name: the rule every worker and the router share.
using rpc::ServesDecode;
using rpc::ServesPrefill;
using rpc::WorkerRoleName;

}  // namespace baton::router

#endif  // BATON_ROUTER_WORKER_REGISTRY_H_
