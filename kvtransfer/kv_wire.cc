#include "kvtransfer/kv_wire.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kv_block_layout.h"
#include "kvtransfer/kv_link.h"
#include "kvtransfer/xxh3_avx2.h"
#include "xxhash.h"

namespace baton::kvtransfer {

namespace {

bool UseXxh3Avx2() {
  static const bool use =
      internal::HaveXxh3Avx2() && kernels::DetectCpuIsa() >= kernels::CpuIsa::kAvx2;
  return use;
}

}  // namespace

uint64_t ChunkChecksum(std::span<const uint8_t> data) {
  if (UseXxh3Avx2()) {
    const internal::BytePiece piece{data.data(), data.size()};
    return internal::Xxh3Avx2(&piece, 1);
  }
  return XXH3_64bits(data.data(), data.size());
}

uint64_t ChunkChecksum(const KvBytePieces& data) {
  if (data.size() == 1) return ChunkChecksum(data[0]);
  if (UseXxh3Avx2()) {
    std::vector<internal::BytePiece> pieces;
    pieces.reserve(data.size());
    for (std::span<const uint8_t> piece : data) pieces.push_back({piece.data(), piece.size()});
    return internal::Xxh3Avx2(pieces.data(), pieces.size());
  }
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                        &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  for (std::span<const uint8_t> piece : data) {
    XXH3_64bits_update(state.get(), piece.data(), piece.size());
  }
  return XXH3_64bits_digest(state.get());
}

uint64_t Xxh64Checksum(const KvBytePieces& data) {
  std::unique_ptr<XXH64_state_t, XXH_errorcode (*)(XXH64_state_t*)> state(XXH64_createState(),
                                                                          &XXH64_freeState);
  XXH64_reset(state.get(), /*seed=*/0);
  for (std::span<const uint8_t> piece : data) XXH64_update(state.get(), piece.data(), piece.size());
  return XXH64_digest(state.get());
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
  if (spec.kv_planes != 1 && spec.kv_planes != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_planes must be 1 (K alone) or 2 (K and V), got ", spec.kv_planes));
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
  if (!spec.layer_windows.empty()) {
    if (static_cast<int32_t>(spec.layer_windows.size()) != spec.n_layer) {
      return absl::InvalidArgumentError(absl::StrCat(spec.layer_windows.size(),
                                                     " layer_windows for n_layer ", spec.n_layer));
    }
    for (size_t layer = 0; layer < spec.layer_windows.size(); ++layer) {
      if (spec.layer_windows[layer] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer_windows[", layer, "] must not be negative, got ", spec.layer_windows[layer]));
      }
    }
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
  header.set_kv_planes(spec.kv_planes);
  header.set_block_size(spec.block_size);
  header.set_n_tokens(spec.n_tokens);
  header.set_dtype(std::string(KvDtypeName(spec.dtype)));
  header.set_stream_index(stream_index);
  header.set_n_streams(n_streams);
  header.set_chunk_blocks(spec.chunk_blocks);
  header.set_first_block(spec.first_block);
  header.set_block_layout(kernels::kKvBlockLayoutName);
  for (int32_t window : spec.layer_windows) header.add_layer_windows(window);
  return header;
}

absl::StatusOr<PushHeaderInfo> ParseHeader(const v1::KvPushHeader& header) {
  PushHeaderInfo info;
  info.spec.reservation_id = header.reservation_id();
  info.spec.model_fingerprint = header.model_fingerprint();
  info.spec.n_layer = header.n_layer();
  info.spec.kv_dim = header.kv_dim();
  info.spec.kv_planes = header.kv_planes() == 0 ? 2 : header.kv_planes();
  info.spec.block_size = header.block_size();
  info.spec.n_tokens = header.n_tokens();
  info.spec.chunk_blocks = header.chunk_blocks();
  info.spec.first_block = header.first_block();
  info.spec.layer_windows.assign(header.layer_windows().begin(), header.layer_windows().end());
  const std::optional<KvDtype> dtype = ParseKvDtype(header.dtype());
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header dtype: '", header.dtype(), "' is not one of f16, bf16, f32"));
  }
  info.spec.dtype = *dtype;
  if (header.block_layout() != kernels::kKvBlockLayoutName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header block_layout: '", header.block_layout(), "' is not '", kernels::kKvBlockLayoutName,
        "' ([K|V][n_kv_head][block_size][head_dim]; a sender from before the field sends "
        "[K|V][block_size][n_kv_head][head_dim] blocks and must be upgraded)"));
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
  info.link_id = header.link_id();
  if (!info.link_id.empty()) {
    if (absl::Status bad = ValidateLinkId(info.link_id); !bad.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("header ", bad.message()));
    }
    if (info.n_streams != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("header: a push over a link has one stream, not ", info.n_streams));
    }
  }
  return info;
}

std::string ChunkName(const ReceivedChunk& chunk) {
  return absl::StrCat("chunk for layer ", chunk.layer, " blocks [", chunk.first_block, ",",
                      int64_t{chunk.first_block} + chunk.n_blocks, ")");
}

absl::Status VerifyChunk(const ReceivedChunk& chunk, int64_t layer_block_bytes) {
  using Checksum = ReceivedChunk::Checksum;
  if (chunk.checksum_kind == Checksum::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(ChunkName(chunk), " carries no checksum"));
  }
  const uint64_t actual = chunk.checksum_kind == Checksum::kXxh3 ? ChunkChecksum(chunk.data)
                                                                 : Xxh64Checksum(chunk.data);
  if (actual != chunk.checksum) {
    return absl::DataLossError(absl::StrCat(ChunkName(chunk), ": checksum mismatch"));
  }
  if (chunk.n_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ChunkName(chunk), ": n_blocks must be positive, got ", chunk.n_blocks));
  }
  const int64_t expected = int64_t{chunk.n_blocks} * layer_block_bytes;
  if (chunk.data_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(ChunkName(chunk), ": data size: expected ",
                                                   expected, " bytes, got ", chunk.data_bytes));
  }
  return absl::OkStatus();
}

absl::Status VerifyLinkChunk(const ReceivedChunk& chunk) {
  if (chunk.link_sequence == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ChunkName(chunk), " carries no link_sequence, and its push is over a link"));
  }
  if (chunk.data_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ChunkName(chunk), " carries ", chunk.data_bytes, " bytes, and its push is over a link"));
  }
  if (chunk.n_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(ChunkName(chunk), ": n_blocks must be positive, got ", chunk.n_blocks));
  }
  return absl::OkStatus();
}

void CopyPiecesToBlocks(const KvBytePieces& data, std::span<uint8_t* const> blocks,
                        size_t block_bytes) {
  size_t block = 0;
  size_t offset = 0;  // within the block
  for (std::span<const uint8_t> piece : data) {
    while (!piece.empty()) {
      const size_t n = std::min(piece.size(), block_bytes - offset);
      std::memcpy(blocks[block] + offset, piece.data(), n);
      piece = piece.subspan(n);
      offset += n;
      if (offset == block_bytes) {
        ++block;
        offset = 0;
      }
    }
  }
}

void ConvertPiecesToBlocks(const KvBytePieces& data, KvDtype from,
                           std::span<uint8_t* const> blocks, KvDtype to, int64_t block_elements) {
  const size_t in_block_bytes = static_cast<size_t>(block_elements) * KvDtypeBytes(from);
  if (from == to) {
    CopyPiecesToBlocks(data, blocks, in_block_bytes);
    return;
  }
  // Gather the chunk whole (pieces may split an element), then convert block by block.
  std::vector<uint8_t> gathered;
  gathered.reserve(in_block_bytes * blocks.size());
  for (std::span<const uint8_t> piece : data) {
    gathered.insert(gathered.end(), piece.begin(), piece.end());
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    ConvertKv(from, gathered.data() + i * in_block_bytes, to, blocks[i], block_elements);
  }
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


}  // namespace baton::kvtransfer
