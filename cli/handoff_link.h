// `baton bench handoff --link`: the disaggregated cluster of the hand-off benchmark placed across
// an emulated link (cli/network_namespaces.h), the router in the root namespace, the prefill
// worker in P, the decode worker in D; the colocated baseline stays on loopback.
//
// Thread-compatible.
#ifndef BATON_CLI_HANDOFF_LINK_H_
#define BATON_CLI_HANDOFF_LINK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/handoff_bench.h"
#include "cli/network_namespaces.h"

namespace baton::cli {

// Points `options`' router, prefill and decode placements into `namespaces`; `link` names it in
// the result.
void PlaceAcrossLink(const PdNamespaces& namespaces, const std::string& link,
                     bench::HandoffBenchOptions& options);

// "R1,R2,..." (--link-sweep): each a link without a delay, e.g. "1gbit,10gbit". INVALID_ARGUMENT
// naming the flag and the bad entry.
absl::StatusOr<std::vector<std::string>> ParseLinkSweep(const std::string& text);

}  // namespace baton::cli

#endif  // BATON_CLI_HANDOFF_LINK_H_
