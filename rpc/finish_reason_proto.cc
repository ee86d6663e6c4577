#include "rpc/finish_reason_proto.h"

namespace baton::rpc {

baton::v1::FinishReason FinishReasonToProto(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return baton::v1::FINISH_REASON_STOP;
    case engine::FinishReason::kLength:
      return baton::v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kNone:
      break;
  }
  return baton::v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace baton::rpc
