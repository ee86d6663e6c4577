// The receiving end of KV pushes: where pushed KV lands. The decode worker implements it over its
// reservations and KV cache; transports (gRPC service, in-process) call it.
//
// Protocol for one push: BeginPush once, then WriteBlocks for every layer's blocks (in the
// push's order, kv_push_spec.h; possibly split over several calls), then EndPush; or
// AbortPush at any point after BeginPush. Every call validates its arguments against the
// reservation before it writes a byte, and a failed call leaves the reservation consistent.
//
// Thread-safety: implementations must be thread-safe; the calls of one push come from one thread
// at a time, different pushes concurrently.
#ifndef BATON_KVTRANSFER_KV_RECEIVER_H_
#define BATON_KVTRANSFER_KV_RECEIVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kvtransfer/kv_push_spec.h"

namespace baton::kvtransfer {

// A chunk's bytes in order, in one or more pieces: as they came off the network (views into the
// received buffers), or one per block (in-process).
using KvBytePieces = std::vector<std::span<const uint8_t>>;

class KvReceiver {
 public:
  virtual ~KvReceiver() = default;

  // NOT_FOUND: unknown or expired reservation. INVALID_ARGUMENT: fingerprint, layout or length
  // mismatch (the message says which field, expected and actual). FAILED_PRECONDITION: the
  // reservation already received (or is receiving) its KV.
  virtual absl::Status BeginPush(const KvPushSpec& spec) = 0;

  // `data` holds n_blocks consecutive blocks of `layer`, starting at block index `first_block` of
  // the reservation's table, each spec.layer_block_bytes() long (the pieces' boundaries need not
  // fall on blocks). INVALID_ARGUMENT for a layer or block range outside the reservation, a wrong
  // data size, or blocks written twice.
  virtual absl::Status WriteBlocks(const std::string& reservation_id, int32_t layer,
                                   int32_t first_block, int32_t n_blocks,
                                   const KvBytePieces& data) = 0;

  // Fills the blocks of a chunk whose bytes come some other way than in `data` (over a link,
  // kv_link.h): validated as WriteBlocks would (the data size being n_blocks whole blocks), then
  // `fill` is called with the blocks' addresses in the receiver's memory (device memory where
  // the KV cache is on a device) and the bytes of each, outside the receiver's locks. Its error
  // fails the write. A link carries the bytes as they are, so the push's dtype must be the
  // receiver's: INVALID_ARGUMENT otherwise. Receivers that take no links: UNIMPLEMENTED.
  using BlockFill =
      std::function<absl::Status(std::span<uint8_t* const> blocks, size_t block_bytes)>;
  virtual absl::Status FillBlocks(const std::string& reservation_id, int32_t layer,
                                  int32_t first_block, int32_t n_blocks, const BlockFill& fill) {
    (void)reservation_id, (void)layer, (void)first_block, (void)n_blocks, (void)fill;
    return absl::UnimplementedError("this receiver takes no KV over links");
  }

  // Every layer's every block has arrived: the sequence can be admitted. FAILED_PRECONDITION when
  // something is missing.
  virtual absl::Status EndPush(const std::string& reservation_id) = 0;

  // The push broke off (sender gone, bad chunk, deadline): the reservation is freed.
  virtual void AbortPush(const std::string& reservation_id, const absl::Status& why) = 0;
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_RECEIVER_H_
