// engine::FinishReason -> baton.v1.FinishReason: the one conversion, for every service that ends a
// generation on the wire (the decode worker's stream, the router's last message).
//
// Thread-safety: pure function.
#ifndef BATON_RPC_FINISH_REASON_PROTO_H_
#define BATON_RPC_FINISH_REASON_PROTO_H_

#include "baton/v1/common.pb.h"
#include "engine/generation_state.h"

namespace baton::rpc {

// kStop -> FINISH_REASON_STOP, kLength -> FINISH_REASON_LENGTH, kNone -> UNSPECIFIED.
baton::v1::FinishReason FinishReasonToProto(engine::FinishReason reason);

}  // namespace baton::rpc

#endif  // BATON_RPC_FINISH_REASON_PROTO_H_
