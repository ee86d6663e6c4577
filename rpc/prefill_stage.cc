#include "rpc/prefill_stage.h"

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace baton::rpc {
namespace {

constexpr absl::string_view kFaultPayloadUrl = "type.baton/fault";
const absl::string_view kKvDestination(kPrefillFaultKvDestination.data(),
                                       kPrefillFaultKvDestination.size());

}  // namespace

absl::Status KvDestinationFault(absl::Status status) {
  status.SetPayload(kFaultPayloadUrl, absl::Cord(kKvDestination));
  return status;
}

bool IsKvDestinationFault(const absl::Status& status) {
  const auto payload = status.GetPayload(kFaultPayloadUrl);
  return payload.has_value() && *payload == kKvDestination;
}

}  // namespace baton::rpc
