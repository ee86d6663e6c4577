// The initial-metadata entry by which a prefill worker tells its caller that a Prefill call's
// forward pass is done and only the KV hand-off's tail is in flight (worker.proto, Prefill):
// the router's request moves from prefilling to kv-sending then.
//
// Thread-safety: constants.
#ifndef BATON_RPC_PREFILL_STAGE_H_
#define BATON_RPC_PREFILL_STAGE_H_

#include <string_view>

namespace baton::rpc {

inline constexpr std::string_view kPrefillStageKey = "baton-stage";
inline constexpr std::string_view kPrefillStageKvSending = "kv-sending";

}  // namespace baton::rpc

#endif  // BATON_RPC_PREFILL_STAGE_H_
