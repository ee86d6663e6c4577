// The PushKv messages on the wire without protobuf's copies of the KV bytes.
//
// The bytes are exactly protobuf's encoding of KvPushMessage (kv_transfer.proto), so a generated
// protobuf client or server on the other end works unchanged. What differs is where the bytes
// go: the sender's message points at the blocks themselves (slices lent from block memory,
// block_loans.h; hashed there), and the receiver reads a chunk's fields in place and leaves its
// data in the slices gRPC received it into, as an ordered list of pieces. protobuf's own path
// copies the data three times more (into a std::string and on into gRPC's buffer, and back out).
//
// Thread-safety: pure functions; a ReceivedChunk is a value (its pieces stay valid as long as
// any copy of it lives).
#ifndef BATON_KVTRANSFER_KV_CHUNK_CODEC_H_
#define BATON_KVTRANSFER_KV_CHUNK_CODEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "baton/v1/kv_transfer.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "kvtransfer/block_loans.h"
#include "kvtransfer/kv_receiver.h"

namespace baton::kvtransfer {

// KvPushMessage{chunk {layer, first_block, n_blocks = blocks.size(), data = the blocks in
// order (`block_bytes` each), xxh3 = ChunkChecksum(data)}}, byte for byte as protobuf
// serializes it.
// Reads each block once (the hash); the data are slices lent from `loans` over the blocks
// (blocks that follow one another in memory share one), so the blocks must stay as they are
// until the loans have come back.
grpc::ByteBuffer EncodeChunkMessage(int32_t layer, int32_t first_block,
                                    std::span<const uint8_t* const> blocks, size_t block_bytes,
                                    BlockLoans& loans);

// Any other message (a header, a response), through protobuf.
grpc::ByteBuffer EncodeProtoMessage(const google::protobuf::MessageLite& message);
// INVALID_ARGUMENT naming `what` when the bytes do not parse.
absl::Status DecodeProtoMessage(const grpc::ByteBuffer& buffer, const char* what,
                                google::protobuf::MessageLite* message);

// A chunk as received: its fields, and its data as pieces that point into the received slices.
struct ReceivedChunk {
  int32_t layer = 0;
  int32_t first_block = 0;
  int32_t n_blocks = 0;
  // The checksum the chunk carries (kv_transfer.proto's oneof; kNone when it carries none).
  enum class Checksum { kNone, kXxh64, kXxh3 };
  Checksum checksum_kind = Checksum::kNone;
  uint64_t checksum = 0;
  uint64_t link_sequence = 0;  // over a link: the chunk's transfer there (kv_link.h); 0: none
  KvBytePieces data;       // in order; views into `slices`
  int64_t data_bytes = 0;  // the pieces' total size
  std::shared_ptr<const std::vector<grpc::Slice>> slices;  // keeps the pieces alive
};

// A received KvPushMessage: exactly one of the two is set.
struct ReceivedMessage {
  std::optional<v1::KvPushHeader> header;
  std::optional<ReceivedChunk> chunk;
};

// Reads a KvPushMessage without copying a chunk's data. Unknown fields are skipped, as protobuf
// does. INVALID_ARGUMENT "malformed KV push message: ..." saying what is wrong (a truncated
// field, a length past the end, a group, neither or both of header and chunk, a header that
// protobuf cannot parse).
absl::StatusOr<ReceivedMessage> DecodePushMessage(const grpc::ByteBuffer& buffer);

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_CHUNK_CODEC_H_
