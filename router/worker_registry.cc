#include "router/worker_registry.h"

#include <algorithm>
#include <span>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/kv_budget.h"

namespace baton::router {
namespace {

absl::Status CheckModel(const std::string& router_fingerprint, const std::string& address,
                        v1::WorkerRole role, const v1::ModelIdentity& model) {
  if (model.fingerprint() != router_fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", address, " serves model fingerprint '", model.fingerprint(),
        "' but the router's model has fingerprint '", router_fingerprint, "'"));
  }
  if (ServesDecode(role) && model.block_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("decode-capable worker ", address,
                                                   " reports no KV block size (model.block_size ",
                                                   model.block_size(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

WorkerRegistry::WorkerRegistry(WorkerRegistryOptions options)
    : options_(std::move(options)),
      heartbeat_timeout_(options_.heartbeat_timeout > absl::ZeroDuration()
                             ? options_.heartbeat_timeout
                             : 3 * options_.heartbeat_interval),
      instance_(absl::Uniform<uint32_t>(absl::BitGen())) {}

absl::StatusOr<std::string> WorkerRegistry::Register(v1::WorkerRole role,
                                                     const std::string& address,
                                                     const v1::ModelIdentity& model,
                                                     const v1::WorkerLoad& load) {
  if (role != v1::WORKER_ROLE_PREFILL && role != v1::WORKER_ROLE_DECODE &&
      role != v1::WORKER_ROLE_BOTH) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", address, " registered without a role (prefill, decode or both)"));
  }
  if (address.empty()) return absl::InvalidArgumentError("worker registered without an address");
  if (absl::Status s = CheckModel(options_.model_fingerprint, address, role, model); !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  ++epoch_;
  // A static worker that also registers: its registration and heartbeats count as its reports.
  for (Worker& w : workers_) {
    if (w.info.is_static && w.info.address == address && w.info.role == role) {
      w.info.model = model;
      SetLoad(w, load);
      w.info.last_seen = now;
      w.info.last_error.clear();
      w.reported = true;
      w.unavailable = false;
      return w.info.id;
    }
  }
  // A worker registering again at a known address restarted: the old entry goes.
  workers_.erase(std::remove_if(workers_.begin(), workers_.end(),
                                [&](const Worker& w) {
                                  return !w.info.is_static && w.info.address == address;
                                }),
                 workers_.end());
  Worker w;
  w.seq = next_seq_;
  w.info.id = NewIdLocked();
  w.info.role = role;
  w.info.address = address;
  w.info.model = model;
  SetLoad(w, load);
  w.info.last_seen = now;
  w.reported = true;
  workers_.push_back(std::move(w));
  return workers_.back().info.id;
}

bool WorkerRegistry::Heartbeat(const std::string& worker_id, const v1::WorkerLoad& load,
                               v1::WorkerRole role) {
  absl::MutexLock lock(&mu_);
  Worker* w = FindLocked(worker_id);
  if (w == nullptr || !w->reported) return false;
  if (role != v1::WORKER_ROLE_UNSPECIFIED && !w->info.is_static) w->info.role = role;
  SetLoad(*w, load);
  w->info.last_seen = options_.clock->Now();
  w->unavailable = false;
  ++epoch_;
  return true;
}

absl::Status WorkerRegistry::SetRole(const std::string& worker_id, v1::WorkerRole role) {
  absl::MutexLock lock(&mu_);
  Worker* w = FindLocked(worker_id);
  if (w == nullptr) return absl::NotFoundError(absl::StrCat("no worker ", worker_id));
  if (w->info.is_static) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " at ", w->info.address,
                     " is listed statically: its role is the router's flag"));
  }
  w->info.role = role;
  ++epoch_;
  return absl::OkStatus();
}

std::string WorkerRegistry::AddStatic(v1::WorkerRole role, const std::string& address) {
  absl::MutexLock lock(&mu_);
  for (Worker& w : workers_) {
    if (w.info.is_static && w.info.address == address && w.info.role == role) {
      if (w.info.draining) ++epoch_;
      w.info.draining = false;
      return w.info.id;
    }
  }
  Worker w;
  w.seq = next_seq_;
  w.info.id = NewIdLocked();
  w.info.role = role;
  w.info.address = address;
  w.info.is_static = true;
  w.info.last_error = "no status answer yet";
  workers_.push_back(std::move(w));
  return workers_.back().info.id;
}

absl::Status WorkerRegistry::ReportStatic(const std::string& worker_id,
                                          v1::WorkerRole reported_role,
                                          const v1::ModelIdentity& model,
                                          const v1::WorkerLoad& load) {
  absl::MutexLock lock(&mu_);
  Worker* w = FindLocked(worker_id);
  if (w == nullptr) return absl::NotFoundError(absl::StrCat("no worker '", worker_id, "'"));
  absl::Status status = CheckModel(options_.model_fingerprint, w->info.address, w->info.role,
                                   model);
  if (status.ok() && reported_role != w->info.role && reported_role != v1::WORKER_ROLE_BOTH) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "worker ", w->info.address, " was listed as a ", WorkerRoleName(w->info.role),
        " worker but serves the role ", WorkerRoleName(reported_role)));
  }
  w->info.last_seen = options_.clock->Now();
  SetLoad(*w, load);
  w->info.model = model;
  w->unavailable = false;
  w->reported = status.ok();
  w->info.last_error = status.ok() ? "" : std::string(status.message());
  ++epoch_;
  return status;
}

void WorkerRegistry::Drain(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  if (Worker* w = FindLocked(worker_id); w != nullptr) w->info.draining = true;
}

void WorkerRegistry::ReportStaticFailure(const std::string& worker_id, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  Worker* w = FindLocked(worker_id);
  if (w == nullptr) return;
  w->unavailable = true;
  w->info.last_error = std::string(why.message());
}

void WorkerRegistry::SetLoad(Worker& w, const v1::WorkerLoad& load) {
  w.cached.clear();
  w.cached.insert(load.cached_block_hashes().begin(), load.cached_block_hashes().end());
  w.info.load = load;
  w.info.load.clear_cached_block_hashes();
  w.info.load.set_queued_prompt_tokens(
      std::max(w.info.load.queued_prompt_tokens(), w.outstanding_prefill));
  w.info.n_cached_blocks = static_cast<int32_t>(w.cached.size());
}

int32_t WorkerRegistry::CachedBlocks(const Worker& w, PromptHashes* prompt) {
  if (prompt == nullptr || w.cached.empty()) return 0;
  return CachedPrefixBlocks(prompt->ForBlockSize(w.info.model.block_size()), w.cached);
}

void WorkerRegistry::ExpectCached(Worker& w, PromptHashes* prompt) {
  if (prompt == nullptr || w.cached.empty()) return;
  const std::vector<uint64_t>& hashes = prompt->ForBlockSize(w.info.model.block_size());
  w.cached.insert(hashes.begin(), hashes.end());
  w.info.n_cached_blocks = static_cast<int32_t>(w.cached.size());
}

absl::StatusOr<Placement> WorkerRegistry::PickDecode(int64_t n_prompt_tokens, int64_t max_tokens,
                                                     NoPlacement* why, const WorkerIdSet& avoid,
                                                     PromptHashes* prompt) {
  const int64_t n_tokens = n_prompt_tokens + max_tokens;
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  ForgetStaleLocked(now);
  std::vector<size_t> eligible;
  std::vector<int64_t> needs(workers_.size(), 0);
  bool any_worker = false;
  bool any_large_enough = false;
  int64_t largest_total = 0;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    if (!ServesDecode(w.info.role) || !PlaceableLocked(w, now) || avoid.contains(w.info.id)) {
      continue;
    }
    if (w.info.model.n_ctx() > 0 && n_tokens > w.info.model.n_ctx()) continue;
    any_worker = true;
    // The blocks the worker itself will reserve: by its own reserve-ahead policy.
    needs[i] = engine::KvBlocksAtAdmission(
        n_prompt_tokens,
        engine::KvTokensAtAdmission(n_prompt_tokens, max_tokens,
                                    w.info.model.kv_reserve_ahead_tokens()),
        w.info.model.block_size(),
        std::span<const int32_t>(w.info.model.kv_group_windows().data(),
                                 w.info.model.kv_group_windows().size()));
    const int32_t total = w.info.load.kv_blocks_total();
    largest_total = std::max<int64_t>(largest_total, total);
    if (total <= 0 || needs[i] <= total) any_large_enough = true;
    if (w.info.load.kv_blocks_free() >= needs[i]) eligible.push_back(i);
  }
  if (eligible.empty()) {
    if (!any_worker) {
      if (why != nullptr) *why = NoPlacement::kNoWorker;
      return absl::UnavailableError(
          absl::StrCat("no healthy decode worker can hold ", n_tokens, " tokens"));
    }
    if (!any_large_enough) {
      if (why != nullptr) *why = NoPlacement::kTooLarge;
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request needs KV for ", n_tokens,
          " tokens, more than any decode worker holds (the largest has ", largest_total,
          " blocks)"));
    }
    if (why != nullptr) *why = NoPlacement::kNoCapacity;
    return absl::ResourceExhaustedError(
        absl::StrCat("no decode worker has free KV blocks for ", n_tokens, " tokens"));
  }
  size_t chosen = eligible.front();
  if (options_.placement == PlacementPolicy::kRoundRobin) {
    chosen = RoundRobinLocked(eligible, &decode_cursor_);
  } else if (options_.placement == PlacementPolicy::kKvAware) {
    const FallbackSpeeds fallback = FallbackSpeedsLocked(eligible);
    std::vector<Candidate> candidates;
    for (size_t i : eligible) {
      const double tpot = PredictTpot(workers_[i].info.load, fallback);
      const int64_t uncached = std::max<int64_t>(0, needs[i] - CachedBlocks(workers_[i], prompt));
      candidates.push_back(
          {.predicted_seconds = tpot, .cost = static_cast<double>(uncached), .wait_seconds = tpot});
    }
    chosen = eligible[ChooseWorker(candidates, options_.targets.tpot, kSameDecodeSpeed)];
  } else {
    for (size_t i : eligible) {
      if (workers_[i].info.load.kv_blocks_free() > workers_[chosen].info.load.kv_blocks_free()) {
        chosen = i;
      }
    }
  }
  Worker& w = workers_[chosen];
  // A colocated worker's expectation waits for PickPrefill: until its prompt is computed somewhere
  // the prompt is not in its cache, and its own prefill is a candidate.
  if (w.info.role != v1::WORKER_ROLE_BOTH) ExpectCached(w, prompt);
  w.info.load.set_kv_blocks_free(
      static_cast<int32_t>(w.info.load.kv_blocks_free() - needs[chosen]));
  w.info.load.set_reservations(w.info.load.reservations() + 1);
  return Placement{.worker_id = w.info.id,
                   .address = w.info.address,
                   .n_blocks = static_cast<int32_t>(needs[chosen])};
}

absl::StatusOr<Placement> WorkerRegistry::PickPrefill(int64_t n_prompt_tokens,
                                                      const std::string& decode_worker_id,
                                                      const WorkerIdSet& avoid,
                                                      PromptHashes* prompt) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  ForgetStaleLocked(now);
  std::vector<size_t> eligible;
  bool colocated = false;  // eligible.front() is the decode worker itself
  for (size_t i = 0; i < workers_.size(); ++i) {
    const Worker& w = workers_[i];
    if (!ServesPrefill(w.info.role) || !PlaceableLocked(w, now) || avoid.contains(w.info.id)) {
      continue;
    }
    if (w.info.model.n_ctx() > 0 && n_prompt_tokens > w.info.model.n_ctx()) continue;
    eligible.push_back(i);
    // The decode worker's own prefill first: it keeps the KV where it is computed.
    if (!decode_worker_id.empty() && w.info.id == decode_worker_id &&
        w.info.role == v1::WORKER_ROLE_BOTH) {
      std::swap(eligible.front(), eligible.back());
      colocated = true;
    }
  }
  if (eligible.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no healthy prefill worker can take a prompt of ", n_prompt_tokens,
                     " tokens"));
  }
  size_t chosen = eligible.front();
  if (eligible.size() > 1) {
    if (options_.placement == PlacementPolicy::kRoundRobin) {
      if (!colocated) chosen = RoundRobinLocked(eligible, &prefill_cursor_);
    } else if (options_.placement == PlacementPolicy::kKvAware) {
      const FallbackSpeeds fallback = FallbackSpeedsLocked(eligible);
      const int64_t own_stall = colocated ? StalledByPass(workers_[eligible.front()], 0) : 0;
      std::vector<Candidate> candidates;
      for (size_t i : eligible) {
        const Worker& w = workers_[i];
        const int64_t cached = int64_t{CachedBlocks(w, prompt)} * w.info.model.block_size();
        candidates.push_back(PrefillCandidate(w.info.load, n_prompt_tokens - cached,
                                              StalledByPass(w, own_stall), fallback));
      }
      chosen = eligible[ChooseWorker(candidates, options_.targets.ttft)];
    } else {
      for (size_t i : eligible) {
        if (workers_[i].info.load.queued_prompt_tokens() <
            workers_[chosen].info.load.queued_prompt_tokens()) {
          chosen = i;
        }
      }
    }
  }
  Worker& w = workers_[chosen];
  // The tokens it will compute: a prefill worker reports its queue without the cached ones too.
  const int64_t cached_tokens = int64_t{CachedBlocks(w, prompt)} * w.info.model.block_size();
  const int64_t queued = std::max<int64_t>(0, n_prompt_tokens - cached_tokens);
  w.info.load.set_queued_prompt_tokens(w.info.load.queued_prompt_tokens() + queued);
  w.outstanding_prefill += queued;
  ExpectCached(w, prompt);
  // The colocated decode worker will hold the prompt's KV too, wherever it was computed.
  Worker* decode = FindLocked(decode_worker_id);
  if (decode != nullptr && decode->info.role == v1::WORKER_ROLE_BOTH) ExpectCached(*decode, prompt);
  return Placement{
      .worker_id = w.info.id, .address = w.info.address, .n_blocks = 0, .n_queued_tokens = queued};
}

int64_t WorkerRegistry::StalledByPass(const Worker& w, int64_t own_stall) {
  if (!ServesDecode(w.info.role)) return 0;
  // Moving the pass off the request's own colocated worker onto another one moves the stall from
  // one set of sequences to another and adds a hand-off; decode placement keeps the two sets about
  // equal, so a smaller count there is a transient, not worth a hand-off.
  return std::max<int64_t>({0, w.info.load.running_sequences(), own_stall});
}

void WorkerRegistry::PrefillEnded(const Placement& placement) {
  absl::MutexLock lock(&mu_);
  if (Worker* w = FindLocked(placement.worker_id)) {
    w->outstanding_prefill =
        std::max<int64_t>(0, w->outstanding_prefill - placement.n_queued_tokens);
  }
}

FallbackSpeeds WorkerRegistry::FallbackSpeedsLocked(const std::vector<size_t>& eligible) const {
  std::vector<const v1::WorkerLoad*> loads;
  for (size_t i : eligible) loads.push_back(&workers_[i].info.load);
  return FallbackSpeeds::MeanOf(loads);
}

void WorkerRegistry::MarkUnavailable(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  if (Worker* w = FindLocked(worker_id)) w->unavailable = true;
}

void WorkerRegistry::MarkFull(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  if (Worker* w = FindLocked(worker_id)) w->info.load.set_kv_blocks_free(0);
}

std::vector<WorkerSnapshot> WorkerRegistry::Snapshot() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  ForgetStaleLocked(now);
  std::vector<WorkerSnapshot> out;
  out.reserve(workers_.size());
  for (const Worker& w : workers_) out.push_back(SnapshotLocked(w, now));
  return out;
}

std::vector<WorkerSnapshot> WorkerRegistry::StaticWorkers() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  std::vector<WorkerSnapshot> out;
  for (const Worker& w : workers_) {
    if (w.info.is_static) out.push_back(SnapshotLocked(w, now));
  }
  return out;
}

uint64_t WorkerRegistry::epoch() {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void WorkerRegistry::WaitForChange(uint64_t seen_epoch, absl::Time deadline,
                                   const std::atomic<bool>* stop) {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() {
    return epoch_ != seen_epoch || (stop != nullptr && stop->load());
  };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
}

void WorkerRegistry::Wake() {
  absl::MutexLock lock(&mu_);
  ++epoch_;
}

bool WorkerRegistry::HealthyLocked(const Worker& w, absl::Time now) const {
  return w.reported && !w.unavailable && now - w.info.last_seen <= heartbeat_timeout_;
}

bool WorkerRegistry::PlaceableLocked(const Worker& w, absl::Time now) const {
  return !w.info.draining && HealthyLocked(w, now);
}

void WorkerRegistry::ForgetStaleLocked(absl::Time now) {
  const auto idle = [](const v1::WorkerLoad& load) {
    return load.queued_prompt_tokens() == 0 && load.running_sequences() == 0 &&
           load.reservations() == 0;
  };
  workers_.erase(std::remove_if(workers_.begin(), workers_.end(),
                                [&](const Worker& w) {
                                  if (w.info.draining) {
                                    return !HealthyLocked(w, now) || idle(w.info.load);
                                  }
                                  return !w.info.is_static &&
                                         now - w.info.last_seen > options_.forget_after;
                                }),
                 workers_.end());
}

WorkerRegistry::Worker* WorkerRegistry::FindLocked(absl::string_view id) {
  for (Worker& w : workers_) {
    if (w.info.id == id) return &w;
  }
  return nullptr;
}

size_t WorkerRegistry::RoundRobinLocked(const std::vector<size_t>& eligible, uint64_t* cursor) {
  // `eligible` is in registration order: take the first after the last pick, else wrap around.
  size_t chosen = eligible.front();
  for (size_t i : eligible) {
    if (workers_[i].seq > *cursor) {
      chosen = i;
      break;
    }
  }
  *cursor = workers_[chosen].seq;
  return chosen;
}

std::string WorkerRegistry::NewIdLocked() {
  return absl::StrFormat("worker-%d-%08x", next_seq_++, instance_);
}

WorkerSnapshot WorkerRegistry::SnapshotLocked(const Worker& w, absl::Time now) const {
  WorkerSnapshot s = w.info;
  s.healthy = HealthyLocked(w, now);
  return s;
}

}  // namespace baton::router
