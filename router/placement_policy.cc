#include "router/placement_policy.h"

#include "absl/strings/str_cat.h"

namespace baton::router {

absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(absl::string_view name) {
  if (name == "least-loaded") return PlacementPolicy::kLeastLoaded;
  if (name == "round-robin") return PlacementPolicy::kRoundRobin;
  return absl::InvalidArgumentError(absl::StrCat("unknown placement policy '", name,
                                                 "': use least-loaded or round-robin"));
}

absl::string_view PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kLeastLoaded:
      return "least-loaded";
    case PlacementPolicy::kRoundRobin:
      return "round-robin";
  }
  return "";
}

}  // namespace baton::router
