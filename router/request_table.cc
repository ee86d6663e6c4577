#include "router/request_table.h"

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"

namespace baton::router {

absl::Status RequestTable::Add(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (!states_.emplace(id, v1::REQUEST_STATE_UNSPECIFIED).second) {
    return absl::AlreadyExistsError(absl::StrCat("request_id '", id, "' is already in flight"));
  }
  return absl::OkStatus();
}

absl::Status RequestTable::SetState(const std::string& id, v1::RequestState state) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(id);
  if (it == states_.end()) return absl::OkStatus();
  const v1::RequestState old = it->second;
  if (old == state && state == v1::REQUEST_STATE_QUEUED) return absl::OkStatus();
  CHECK(state > old) << "request " << id << " cannot go from " << RequestStateName(old) << " to "
                     << RequestStateName(state);
  if (state == v1::REQUEST_STATE_QUEUED) {
    if (queued_ >= max_queued_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("router queue full (", queued_, " requests waiting, --max-queued ",
                       max_queued_, ")"));
    }
    ++queued_;
  } else if (old == v1::REQUEST_STATE_QUEUED) {
    --queued_;
  }
  if (state == v1::REQUEST_STATE_FINISHED || state == v1::REQUEST_STATE_FAILED) {
    (state == v1::REQUEST_STATE_FINISHED ? finished_total_ : failed_total_) += 1;
    states_.erase(it);
  } else {
    it->second = state;
  }
  return absl::OkStatus();
}

void RequestTable::Restart(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(id);
  if (it == states_.end()) return;
  if (it->second == v1::REQUEST_STATE_QUEUED) --queued_;
  it->second = v1::REQUEST_STATE_UNSPECIFIED;
}

std::optional<v1::RequestState> RequestTable::State(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = states_.find(id);
  if (it == states_.end()) return std::nullopt;
  return it->second;
}

int RequestTable::queued() {
  absl::MutexLock lock(&mu_);
  return queued_;
}

int RequestTable::active() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(states_.size()) - queued_;
}

int64_t RequestTable::finished_total() {
  absl::MutexLock lock(&mu_);
  return finished_total_;
}

int64_t RequestTable::failed_total() {
  absl::MutexLock lock(&mu_);
  return failed_total_;
}

const char* RequestStateName(v1::RequestState state) {
  switch (state) {
    case v1::REQUEST_STATE_UNSPECIFIED:
      return "received";
    case v1::REQUEST_STATE_QUEUED:
      return "queued";
    case v1::REQUEST_STATE_PREFILLING:
      return "prefilling";
    case v1::REQUEST_STATE_KV_SENDING:
      return "kv-sending";
    case v1::REQUEST_STATE_KV_RECEIVED:
      return "kv-received";
    case v1::REQUEST_STATE_DECODING:
      return "decoding";
    case v1::REQUEST_STATE_FINISHED:
      return "finished";
    case v1::REQUEST_STATE_FAILED:
      return "failed";
    default:
      return "unknown";
  }
}

}  // namespace baton::router
