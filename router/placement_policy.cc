#include "router/placement_policy.h"

#include "absl/strings/str_cat.h"

namespace baton::router {

absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(absl::string_view name) {
  if (name == "least-loaded") return PlacementPolicy::kLeastLoaded;
  if (name == "round-robin") return PlacementPolicy::kRoundRobin;
  if (name == "kv-aware") return PlacementPolicy::kKvAware;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown placement policy '", name, "': use kv-aware, least-loaded or round-robin"));
}

absl::string_view PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kLeastLoaded:
      return "least-loaded";
    case PlacementPolicy::kRoundRobin:
      return "round-robin";
    case PlacementPolicy::kKvAware:
      return "kv-aware";
  }
  return "";
}

}  // namespace baton::router
