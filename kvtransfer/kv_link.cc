#include "kvtransfer/kv_link.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace baton::kvtransfer {

absl::Status AwaitIdle(LinkEndpoint& endpoint, absl::Time deadline,
                       const std::function<bool()>& abandon) {
  // Transfers of a layer take tens of microseconds to milliseconds: poll often at first.
  absl::Duration pause = absl::Microseconds(20);
  while (true) {
    absl::StatusOr<bool> idle = endpoint.Idle();
    if (!idle.ok()) return idle.status();
    if (*idle) return absl::OkStatus();
    if (abandon && abandon()) return absl::AbortedError("the transfer was abandoned");
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          "the link's transfer did not complete in time (the peer never posted its side)");
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
}

absl::Status ValidateLinkId(std::string_view link_id) {
  if (link_id.empty() || link_id.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("link_id must be 1..64 characters, got ", link_id.size()));
  }
  for (char c : link_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
      return absl::InvalidArgumentError("link_id may hold only [A-Za-z0-9_-]");
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::kvtransfer
