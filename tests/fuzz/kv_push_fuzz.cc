// libFuzzer target for the KV push wire (kvtransfer/kv_chunk_codec.h): arbitrary bytes, cut into
// slices as gRPC might deliver them (the first byte picks the slice size), decoded the way the
// KvTransfer service decodes every message it reads. A decoded chunk's pieces must lie inside the
// buffer and add up to its data size (ASan/UBSan, the fuzz build, catch any read outside); a
// decoded header goes through ParseHeader; a chunk that verifies is converted into blocks.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <span>
#include <vector>

#include "kvtransfer/kv_chunk_codec.h"
#include "kvtransfer/kv_wire.h"

namespace {

void Require(bool condition) {
  if (!condition) std::abort();
}

volatile uint64_t sink;  // keeps the reads of every byte

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace baton::kvtransfer;
  if (size == 0) return 0;
  const size_t slice_bytes = 1 + data[0] % 64;
  std::vector<grpc::Slice> slices;
  for (size_t i = 1; i < size; i += slice_bytes) {
    slices.emplace_back(data + i, std::min(slice_bytes, size - i));
  }
  const grpc::ByteBuffer buffer(slices.data(), slices.size());
  absl::StatusOr<ReceivedMessage> message = DecodePushMessage(buffer);
  if (!message.ok()) return 0;
  Require(message->header.has_value() != message->chunk.has_value());
  if (message->header.has_value()) {
    (void)ParseHeader(*message->header);
    return 0;
  }
  const ReceivedChunk& chunk = *message->chunk;
  int64_t total = 0;
  uint64_t sum = 0;
  for (std::span<const uint8_t> piece : chunk.data) {
    total += static_cast<int64_t>(piece.size());
    for (uint8_t b : piece) sum += b;  // every byte readable
  }
  Require(total == chunk.data_bytes);
  // Blocks of 8 bytes: 4 f16 elements, or 2 f32 ones.
  if (VerifyChunk(chunk, 8).ok()) {
    std::vector<uint8_t> memory(static_cast<size_t>(chunk.n_blocks) * 8);
    std::vector<uint8_t*> blocks;
    for (int32_t i = 0; i < chunk.n_blocks; ++i) blocks.push_back(memory.data() + 8 * i);
    ConvertPiecesToBlocks(chunk.data, KvDtype::kF32, blocks, KvDtype::kF16, 2);
  }
  sink = sum;
  return 0;
}
