// A link shape for emulated prefill <-> decode links (`baton up --link`, the cluster file's
// `link:`): "RATE[,DELAY]", e.g. "10gbit", "10gbit,200us", "none,2ms". RATE is a positive number
// with a unit of bit, kbit, mbit, gbit or tbit (or "none": unlimited); DELAY the one-way delay,
// a number with us, ms or s (at most 10 s). The same grammar as tests/netns/netns_harness.py.
//
// Thread-safety: plain value type and a pure function.
#ifndef BATON_CLI_LINK_SPEC_H_
#define BATON_CLI_LINK_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace baton::cli {

struct LinkSpec {
  std::optional<int64_t> rate_bits_per_second;  // nullopt: unlimited
  absl::Duration one_way_delay = absl::ZeroDuration();
};

// INVALID_ARGUMENT naming `where` (e.g. "--link" or "cluster.yaml:7: link") and the bad part.
absl::StatusOr<LinkSpec> ParseLinkSpec(const std::string& text, const std::string& where);

}  // namespace baton::cli

#endif  // BATON_CLI_LINK_SPEC_H_
