// How the router chooses among the workers that can take a request (router flag --policy).
//
// Thread-safety: plain values and pure functions.
#ifndef BATON_ROUTER_PLACEMENT_POLICY_H_
#define BATON_ROUTER_PLACEMENT_POLICY_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::router {

enum class PlacementPolicy {
  // Decode: the worker with the most free KV blocks; prefill: the fewest queued prompt tokens.
  kLeastLoaded,
  // Each eligible worker in turn.
  kRoundRobin,
  // The lowest cost of router/prefix_affinity.h: cached prefix against load.
  kKvAware,
};

// "least-loaded", "round-robin" or "kv-aware"; INVALID_ARGUMENT listing them otherwise.
absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(absl::string_view name);
absl::string_view PlacementPolicyName(PlacementPolicy policy);

}  // namespace baton::router

#endif  // BATON_ROUTER_PLACEMENT_POLICY_H_
