// The KV transfer wire format's rules, shared by the gRPC sender and the service: the header <->
// KvPushSpec mapping, chunk checksums and sizes, and how a layer is cut into chunks.
//
// Thread-safety: pure functions.
#ifndef BATON_KVTRANSFER_KV_WIRE_H_
#define BATON_KVTRANSFER_KV_WIRE_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/v1/kv_transfer.pb.h"
#include "kvtransfer/kv_chunk_codec.h"
#include "kvtransfer/kv_push_spec.h"
#include "kvtransfer/kv_receiver.h"

namespace baton::kvtransfer {

// XXH3-64(data, seed 0), the checksum senders put in KvChunk.xxh3; of one buffer, or of pieces
// in order (vectorized for AVX2 where the CPU has it, xxh3_avx2.h). Xxh64Checksum: the one older
// senders put in KvChunk.xxh64.
uint64_t ChunkChecksum(std::span<const uint8_t> data);
uint64_t ChunkChecksum(const KvBytePieces& data);
uint64_t Xxh64Checksum(const KvBytePieces& data);

// Spec sanity shared by both ends: positive sizes, a total that fits the wire's int32 fields.
// INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateSpec(const KvPushSpec& spec);

// The header a push's stream `stream_index` (of `n_streams`) opens with.
v1::KvPushHeader HeaderFromSpec(const KvPushSpec& spec, int32_t stream_index, int32_t n_streams);

// What a header announces. INVALID_ARGUMENT for a dtype kv_dtype.h does not know, a spec that fails
// ValidateSpec, or a stream index/count out of range (n_streams 0 reads as 1).
// A header that names a link (link_id) must be valid (kv_link.h) and have one stream.
struct PushHeaderInfo {
  KvPushSpec spec;
  int32_t stream_index = 0;
  int32_t n_streams = 1;
  std::string link_id;  // non-empty: the chunks' bytes come over this link
};
absl::StatusOr<PushHeaderInfo> ParseHeader(const v1::KvPushHeader& header);

// "chunk for layer L blocks [a,b)": how errors name a chunk.
std::string ChunkName(const ReceivedChunk& chunk);

// Checks a received chunk before anything is written: DATA_LOSS "chunk for layer L blocks [a,b):
// checksum mismatch" when the data does not match its checksum (xxh3 or xxh64, whichever it
// carries); INVALID_ARGUMENT when it carries no checksum, when n_blocks is not
// positive or the data size is not n_blocks * layer_block_bytes.
absl::Status VerifyChunk(const ReceivedChunk& chunk, int64_t layer_block_bytes);

// The same for a chunk of a push over a link: no data (its bytes come over the link), a
// link_sequence, positive n_blocks. INVALID_ARGUMENT saying which is wrong.
absl::Status VerifyLinkChunk(const ReceivedChunk& chunk);

// Copies a chunk's data into its blocks: `data` holds blocks.size() blocks of `block_bytes` in
// order, cut into pieces anywhere; block i goes to blocks[i]. The sizes must agree (the caller
// has validated them).
void CopyPiecesToBlocks(const KvBytePieces& data, std::span<uint8_t* const> blocks,
                        size_t block_bytes);

// The same, converting: `data` holds blocks.size() blocks of `block_elements` elements of type
// `from`; block i is written to blocks[i] as type `to` (kv_dtype.h). Without conversion (from ==
// to) it is CopyPiecesToBlocks.
void ConvertPiecesToBlocks(const KvBytePieces& data, KvDtype from,
                           std::span<uint8_t* const> blocks, KvDtype to, int64_t block_elements);

// How many whole blocks one chunk of at most `chunk_bytes` payload carries (never more than a
// range's blocks). INVALID_ARGUMENT when not even one block fits.
absl::StatusOr<int32_t> BlocksPerChunk(const KvPushSpec& spec, int64_t chunk_bytes);

// Which stream carries `layer` when a push uses `n_streams` streams.
inline int32_t StreamOfLayer(int32_t layer, int32_t n_streams) { return layer % n_streams; }

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_WIRE_H_
