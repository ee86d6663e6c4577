// The KV transfer wire format's rules, shared by the gRPC sender and the service: the header <->
// KvPushSpec mapping, chunk checksums and sizes, and how a layer is cut into chunks.
//
// Thread-safety: pure functions.
#ifndef BATON_KVTRANSFER_KV_WIRE_H_
#define BATON_KVTRANSFER_KV_WIRE_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "baton/v1/kv_transfer.pb.h"
#include "kvtransfer/kv_push_spec.h"

namespace baton::kvtransfer {

inline constexpr char kKvDtype[] = "f16";

// XXH64(data, seed 0), the checksum every KvChunk carries.
uint64_t ChunkChecksum(std::span<const uint8_t> data);

// Spec sanity shared by both ends: positive sizes, a total that fits the wire's int32 fields.
// INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateSpec(const KvPushSpec& spec);

// The header a push's stream `stream_index` (of `n_streams`) opens with.
v1::KvPushHeader HeaderFromSpec(const KvPushSpec& spec, int32_t stream_index, int32_t n_streams);

// What a header announces. INVALID_ARGUMENT for a dtype other than f16, a spec that fails
// ValidateSpec, or a stream index/count out of range (n_streams 0 reads as 1).
struct PushHeaderInfo {
  KvPushSpec spec;
  int32_t stream_index = 0;
  int32_t n_streams = 1;
};
absl::StatusOr<PushHeaderInfo> ParseHeader(const v1::KvPushHeader& header);

// Checks a received chunk before anything is written: DATA_LOSS "chunk for layer L blocks [a,b):
// checksum mismatch" when the data does not match its xxh64; INVALID_ARGUMENT when n_blocks is not
// positive or the data size is not n_blocks * layer_block_bytes.
absl::Status VerifyChunk(const v1::KvChunk& chunk, int64_t layer_block_bytes);

// How many whole blocks one chunk of at most `chunk_bytes` payload carries (never more than a
// range's blocks). INVALID_ARGUMENT when not even one block fits.
absl::StatusOr<int32_t> BlocksPerChunk(const KvPushSpec& spec, int64_t chunk_bytes);

// Which stream carries `layer` when a push uses `n_streams` streams; the last layer stream `s`
// carries, or -1 when it carries none.
inline int32_t StreamOfLayer(int32_t layer, int32_t n_streams) { return layer % n_streams; }
int32_t LastLayerOfStream(int32_t stream_index, int32_t n_streams, int32_t n_layer);

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_WIRE_H_
