#include "rpc/token_logprobs_proto.h"

namespace baton::rpc {

void TokenLogprobsToProto(const engine::TokenLogprobs& logprobs, baton::v1::TokenLogprobs* proto) {
  proto->set_logprob(logprobs.logprob);
  proto->mutable_top_tokens()->Reserve(static_cast<int>(logprobs.top.size()));
  proto->mutable_top_logprobs()->Reserve(static_cast<int>(logprobs.top.size()));
  for (const engine::TokenLogprob& t : logprobs.top) {
    proto->add_top_tokens(t.id);
    proto->add_top_logprobs(t.logprob);
  }
}

}  // namespace baton::rpc
