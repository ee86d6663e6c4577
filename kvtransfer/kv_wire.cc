#include "kvtransfer/kv_wire.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace baton::kvtransfer {

uint64_t ChunkChecksum(std::span<const uint8_t> data) {
  return XXH64(data.data(), data.size(), /*seed=*/0);
}

absl::Status ValidateSpec(const KvPushSpec& spec) {
  if (spec.reservation_id.empty()) return absl::InvalidArgumentError("empty reservation_id");
  const struct {
    const char* name;
    int32_t value;
  } fields[] = {{"n_layer", spec.n_layer},
                {"kv_dim", spec.kv_dim},
                {"block_size", spec.block_size},
                {"n_tokens", spec.n_tokens}};
  for (const auto& field : fields) {
    if (field.value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field.name, " must be positive, got ", field.value));
    }
  }
  if (spec.chunk_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk_blocks must not be negative, got ", spec.chunk_blocks));
  }
  if (spec.first_block < 0 || spec.first_block >= spec.n_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("first_block ", spec.first_block,
                                                   " outside [0, ", spec.n_blocks(),
                                                   ") (the prompt's blocks)"));
  }
  // One block of one layer must fit a message and an int32 byte count.
  if (spec.layer_block_bytes() > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("a block of ", spec.layer_block_bytes(),
                                                   " bytes (block_size ", spec.block_size,
                                                   ", kv_dim ", spec.kv_dim, ") is too large"));
  }
  return absl::OkStatus();
}

v1::KvPushHeader HeaderFromSpec(const KvPushSpec& spec, int32_t stream_index, int32_t n_streams) {
  v1::KvPushHeader header;
  header.set_reservation_id(spec.reservation_id);
  header.set_model_fingerprint(spec.model_fingerprint);
  header.set_n_layer(spec.n_layer);
  header.set_kv_dim(spec.kv_dim);
  header.set_block_size(spec.block_size);
  header.set_n_tokens(spec.n_tokens);
  header.set_dtype(kKvDtype);
  header.set_stream_index(stream_index);
  header.set_n_streams(n_streams);
  header.set_chunk_blocks(spec.chunk_blocks);
  header.set_first_block(spec.first_block);
  return header;
}

absl::StatusOr<PushHeaderInfo> ParseHeader(const v1::KvPushHeader& header) {
  PushHeaderInfo info;
  info.spec.reservation_id = header.reservation_id();
  info.spec.model_fingerprint = header.model_fingerprint();
  info.spec.n_layer = header.n_layer();
  info.spec.kv_dim = header.kv_dim();
  info.spec.block_size = header.block_size();
  info.spec.n_tokens = header.n_tokens();
  info.spec.chunk_blocks = header.chunk_blocks();
  info.spec.first_block = header.first_block();
  if (header.dtype() != kKvDtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("header dtype: expected '", kKvDtype, "', got '", header.dtype(), "'"));
  }
  if (absl::Status status = ValidateSpec(info.spec); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("header: ", status.message()));
  }
  info.n_streams = header.n_streams() == 0 ? 1 : header.n_streams();
  info.stream_index = header.stream_index();
  if (info.n_streams < 1 || info.n_streams > info.spec.n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header n_streams ", info.n_streams, " outside [1, n_layer ", info.spec.n_layer, "]"));
  }
  if (info.stream_index < 0 || info.stream_index >= info.n_streams) {
    return absl::InvalidArgumentError(absl::StrCat("header stream_index ", info.stream_index,
                                                   " outside [0, ", info.n_streams, ")"));
  }
  return info;
}

absl::Status VerifyChunk(const v1::KvChunk& chunk, int64_t layer_block_bytes) {
  const std::string where =
      absl::StrCat("chunk for layer ", chunk.layer(), " blocks [", chunk.first_block(), ",",
                   int64_t{chunk.first_block()} + chunk.n_blocks(), ")");
  const std::string& data = chunk.data();
  if (ChunkChecksum({reinterpret_cast<const uint8_t*>(data.data()), data.size()}) !=
      chunk.xxh64()) {
    return absl::DataLossError(absl::StrCat(where, ": checksum mismatch"));
  }
  if (chunk.n_blocks() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": n_blocks must be positive, got ", chunk.n_blocks()));
  }
  const int64_t expected = int64_t{chunk.n_blocks()} * layer_block_bytes;
  if (static_cast<int64_t>(data.size()) != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": data size: expected ", expected, " bytes, got ", data.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> BlocksPerChunk(const KvPushSpec& spec, int64_t chunk_bytes) {
  const int64_t per_block = spec.layer_block_bytes();
  if (per_block <= 0 || chunk_bytes < per_block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes ", chunk_bytes, " cannot hold one block of ", per_block, " bytes"));
  }
  const int64_t blocks = chunk_bytes / per_block;
  return static_cast<int32_t>(std::min<int64_t>(blocks, std::max(1, spec.range_blocks())));
}

int32_t LastLayerOfStream(int32_t stream_index, int32_t n_streams, int32_t n_layer) {
  if (stream_index >= n_layer) return -1;
  return stream_index + (n_layer - 1 - stream_index) / n_streams * n_streams;
}

}  // namespace baton::kvtransfer
