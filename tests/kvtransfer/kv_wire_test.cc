#include "kvtransfer/kv_wire.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kvtransfer/kv_test_util.h"
#include "tests/support/status_matchers.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::MakeSpec;
using ::baton::test_support::IsOkAndHolds;

TEST(ChunkChecksumTest, IsXxh64WithSeedZero) {
  // Reference values of XXH64 with seed 0.
  EXPECT_EQ(ChunkChecksum({}), 0xEF46DB3751D8E999ull);
  const std::string abc = "abc";
  EXPECT_EQ(ChunkChecksum({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            0x44BC2CF5AD770999ull);
}

TEST(KvWireTest, HeaderRoundTrips) {
  KvPushSpec spec = MakeSpec("r1", 6, 60);
  spec.chunk_blocks = 2;
  spec.first_block = 3;
  absl::StatusOr<PushHeaderInfo> info = ParseHeader(HeaderFromSpec(spec, 2, 3));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->spec.reservation_id, "r1");
  EXPECT_EQ(info->spec.model_fingerprint, spec.model_fingerprint);
  EXPECT_EQ(info->spec.n_layer, 6);
  EXPECT_EQ(info->spec.kv_dim, spec.kv_dim);
  EXPECT_EQ(info->spec.block_size, spec.block_size);
  EXPECT_EQ(info->spec.n_tokens, 60);
  EXPECT_EQ(info->spec.chunk_blocks, 2);
  EXPECT_EQ(info->spec.first_block, 3);
  EXPECT_EQ(info->stream_index, 2);
  EXPECT_EQ(info->n_streams, 3);
}

TEST(KvWireTest, HeaderWithoutStreamFieldsIsOneStream) {
  v1::KvPushHeader header = HeaderFromSpec(MakeSpec("r1"), 0, 1);
  header.clear_n_streams();
  absl::StatusOr<PushHeaderInfo> info = ParseHeader(header);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->n_streams, 1);
}

TEST(KvWireTest, RejectsBadHeaders) {
  const KvPushSpec spec = MakeSpec("r1", 4);
  v1::KvPushHeader bad_dtype = HeaderFromSpec(spec, 0, 1);
  bad_dtype.set_dtype("bf16");
  EXPECT_EQ(ParseHeader(bad_dtype).status().code(), absl::StatusCode::kInvalidArgument);
  v1::KvPushHeader no_layers = HeaderFromSpec(spec, 0, 1);
  no_layers.set_n_layer(0);
  EXPECT_EQ(ParseHeader(no_layers).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHeader(HeaderFromSpec(spec, 1, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseHeader(HeaderFromSpec(spec, 0, 5)).status().code(),
            absl::StatusCode::kInvalidArgument);  // more streams than layers
  EXPECT_EQ(ParseHeader(HeaderFromSpec(spec, -1, 2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::KvPushHeader no_reservation = HeaderFromSpec(spec, 0, 1);
  no_reservation.clear_reservation_id();
  EXPECT_EQ(ParseHeader(no_reservation).status().code(), absl::StatusCode::kInvalidArgument);
  v1::KvPushHeader negative_ranges = HeaderFromSpec(spec, 0, 1);
  negative_ranges.set_chunk_blocks(-2);
  EXPECT_EQ(ParseHeader(negative_ranges).status().code(), absl::StatusCode::kInvalidArgument);
  // The receiver may hold some of the prompt's blocks already, never all of them.
  const int32_t n_blocks = spec.n_blocks();
  for (int32_t first_block : {-1, n_blocks, n_blocks + 5}) {
    v1::KvPushHeader skipping = HeaderFromSpec(spec, 0, 1);
    skipping.set_first_block(first_block);
    absl::Status status = ParseHeader(skipping).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << first_block;
    EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("first_block"));
  }
  v1::KvPushHeader last_block_only = HeaderFromSpec(spec, 0, 1);
  last_block_only.set_first_block(n_blocks - 1);
  EXPECT_TRUE(ParseHeader(last_block_only).ok());
}

v1::KvChunk MakeChunk(int32_t layer, int32_t first_block, int32_t n_blocks, size_t size) {
  v1::KvChunk chunk;
  chunk.set_layer(layer);
  chunk.set_first_block(first_block);
  chunk.set_n_blocks(n_blocks);
  std::string data(size, '\0');
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7);
  chunk.set_xxh64(ChunkChecksum({reinterpret_cast<const uint8_t*>(data.data()), data.size()}));
  chunk.set_data(std::move(data));
  return chunk;
}

TEST(VerifyChunkTest, AcceptsAGoodChunk) {
  EXPECT_TRUE(VerifyChunk(MakeChunk(1, 2, 3, 3 * 512), 512).ok());
}

TEST(VerifyChunkTest, ChecksumMismatchIsDataLossNamingTheChunk) {
  v1::KvChunk chunk = MakeChunk(1, 2, 3, 3 * 512);
  (*chunk.mutable_data())[100] ^= 1;
  absl::Status status = VerifyChunk(chunk, 512);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), "chunk for layer 1 blocks [2,5): checksum mismatch");
}

TEST(VerifyChunkTest, WrongSizeOrCountIsInvalidArgument) {
  EXPECT_EQ(VerifyChunk(MakeChunk(0, 0, 3, 2 * 512), 512).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyChunk(MakeChunk(0, 0, 0, 0), 512).code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlocksPerChunkTest, WholeBlocksUpToTheLimit) {
  const KvPushSpec spec = MakeSpec("r", 4, 40);  // 3 blocks of 512 bytes per layer
  ASSERT_EQ(spec.layer_block_bytes(), 512);
  EXPECT_THAT(BlocksPerChunk(spec, 512), IsOkAndHolds(1));
  EXPECT_THAT(BlocksPerChunk(spec, 1100), IsOkAndHolds(2));
  EXPECT_THAT(BlocksPerChunk(spec, 1 << 20), IsOkAndHolds(3));
  EXPECT_EQ(BlocksPerChunk(spec, 511).status().code(), absl::StatusCode::kInvalidArgument);
  KvPushSpec ranges = spec;
  ranges.chunk_blocks = 2;  // a chunk never spans two ranges
  EXPECT_THAT(BlocksPerChunk(ranges, 1 << 20), IsOkAndHolds(2));
}

TEST(StreamAssignmentTest, RoundRobin) {
  EXPECT_EQ(StreamOfLayer(0, 3), 0);
  EXPECT_EQ(StreamOfLayer(4, 3), 1);
  EXPECT_EQ(LastLayerOfStream(0, 3, 7), 6);
  EXPECT_EQ(LastLayerOfStream(1, 3, 7), 4);
  EXPECT_EQ(LastLayerOfStream(2, 3, 7), 5);
  EXPECT_EQ(LastLayerOfStream(0, 1, 7), 6);
  EXPECT_EQ(LastLayerOfStream(2, 3, 2), -1);
}

}  // namespace
}  // namespace baton::kvtransfer
