// What a Prefill call tells its caller beyond its answer (worker.proto, Prefill):
//  - initial metadata "baton-stage: kv-sending" once the forward pass is done and only the KV
//    hand-off's tail is in flight (the router's request moves from prefilling to kv-sending);
//  - trailing metadata "baton-fault: kv-destination" on a call that failed because the push to
//    its decode worker failed (that worker is down or refused the KV), not the prefill worker, so
//    that the router blames the right one.
// Inside the prefill worker, a push failure carries the fault as an absl::Status payload from
// where it happens to where the call ends.
//
// Thread-safety: constants and pure functions.
#ifndef BATON_RPC_PREFILL_STAGE_H_
#define BATON_RPC_PREFILL_STAGE_H_

#include <string_view>

#include "absl/status/status.h"

namespace baton::rpc {

inline constexpr std::string_view kPrefillStageKey = "baton-stage";
inline constexpr std::string_view kPrefillStageKvSending = "kv-sending";

inline constexpr std::string_view kPrefillFaultKey = "baton-fault";
inline constexpr std::string_view kPrefillFaultKvDestination = "kv-destination";

// `status` (not OK) marked as the KV destination's fault.
absl::Status KvDestinationFault(absl::Status status);
// Whether `status` was marked by KvDestinationFault.
bool IsKvDestinationFault(const absl::Status& status);

}  // namespace baton::rpc

#endif  // BATON_RPC_PREFILL_STAGE_H_
