#include "kvtransfer/kv_chunk_codec.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "kvtransfer/block_loans.h"
#include "kvtransfer/kv_wire.h"

namespace baton::kvtransfer {
namespace {

using ::testing::HasSubstr;

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// `bytes` cut into slices of `piece` bytes, as gRPC may hand a received message over.
grpc::ByteBuffer Sliced(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    slices.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Joined(const KvBytePieces& pieces) {
  std::string out;
  for (std::span<const uint8_t> p : pieces) {
    out.append(reinterpret_cast<const char*>(p.data()), p.size());
  }
  return out;
}

class ChunkCodecTest : public ::testing::Test {
 protected:
  ChunkCodecTest() {
    for (int b = 0; b < 3; ++b) {
      blocks_.emplace_back(kBlockBytes);
      for (size_t i = 0; i < kBlockBytes; ++i) blocks_[b][i] = static_cast<uint8_t>(i * 13 + b);
      pointers_.push_back(blocks_[b].data());
    }
  }
  std::string Concatenated() const {
    std::string out;
    for (const auto& b : blocks_) out.append(reinterpret_cast<const char*>(b.data()), b.size());
    return out;
  }

  static constexpr size_t kBlockBytes = 1000;
  std::vector<std::vector<uint8_t>> blocks_;
  std::vector<const uint8_t*> pointers_;
  std::shared_ptr<BlockLoans> loans_ = BlockLoans::Create();
};

// The message points at the blocks (one slice per run of neighbouring blocks), each slice
// counted out until the last copy of the message goes.
TEST_F(ChunkCodecTest, TheDataIsLentFromTheBlocksUntilTheMessageGoes) {
  std::vector<uint8_t> memory(4 * kBlockBytes);
  for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<uint8_t>(i * 7);
  // Blocks 0, 1, 3 of `memory`: two runs.
  const std::vector<const uint8_t*> blocks = {memory.data(), memory.data() + kBlockBytes,
                                              memory.data() + 3 * kBlockBytes};
  bool returned = false;
  {
    const grpc::ByteBuffer encoded = EncodeChunkMessage(1, 0, blocks, kBlockBytes, *loans_);
    EXPECT_EQ(loans_->out(), 2);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(encoded.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 4u);  // the fields, two runs, the checksum
    EXPECT_EQ(slices[1].begin(), memory.data());
    EXPECT_EQ(slices[1].size(), 2 * kBlockBytes);
    EXPECT_EQ(slices[2].begin(), memory.data() + 3 * kBlockBytes);
    {
      const grpc::ByteBuffer copy = encoded;  // a reference, as gRPC takes one
      loans_->WhenReturned([&] { returned = true; });
    }
    EXPECT_EQ(loans_->out(), 2);
    EXPECT_FALSE(returned);
  }
  EXPECT_EQ(loans_->out(), 0);
  EXPECT_TRUE(returned);
}

TEST_F(ChunkCodecTest, WithNothingLentTheReleaseRunsAtOnce) {
  bool returned = false;
  loans_->WhenReturned([&] { returned = true; });
  EXPECT_TRUE(returned);
}

TEST_F(ChunkCodecTest, EncodesExactlyWhatProtobufWould) {
  const grpc::ByteBuffer encoded = EncodeChunkMessage(5, 300, pointers_, kBlockBytes, *loans_);
  v1::KvPushMessage expected;
  v1::KvChunk& chunk = *expected.mutable_chunk();
  chunk.set_layer(5);
  chunk.set_first_block(300);
  chunk.set_n_blocks(3);
  chunk.set_data(Concatenated());
  chunk.set_xxh3(ChunkChecksum(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(chunk.data().data()),
                               chunk.data().size())));
  EXPECT_EQ(Flatten(encoded), expected.SerializeAsString());
}

TEST_F(ChunkCodecTest, ZeroFieldsAreLeftOutAsProtobufDoes) {
  const grpc::ByteBuffer encoded = EncodeChunkMessage(0, 0, pointers_, kBlockBytes, *loans_);
  v1::KvPushMessage parsed;
  ASSERT_TRUE(parsed.ParseFromString(Flatten(encoded)));
  EXPECT_EQ(parsed.chunk().layer(), 0);
  EXPECT_EQ(parsed.chunk().n_blocks(), 3);
  EXPECT_EQ(parsed.chunk().checksum_case(), v1::KvChunk::kXxh3);
}

TEST_F(ChunkCodecTest, DecodesAChunkInPlaceWhateverTheSlicing) {
  const std::string bytes = Flatten(EncodeChunkMessage(2, 7, pointers_, kBlockBytes, *loans_));
  for (size_t piece : {size_t{1}, size_t{3}, size_t{999}, bytes.size()}) {
    absl::StatusOr<ReceivedMessage> message = DecodePushMessage(Sliced(bytes, piece));
    ASSERT_TRUE(message.ok()) << message.status();
    ASSERT_TRUE(message->chunk.has_value());
    EXPECT_FALSE(message->header.has_value());
    const ReceivedChunk& chunk = *message->chunk;
    EXPECT_EQ(chunk.layer, 2);
    EXPECT_EQ(chunk.first_block, 7);
    EXPECT_EQ(chunk.n_blocks, 3);
    EXPECT_EQ(chunk.data_bytes, static_cast<int64_t>(3 * kBlockBytes));
    EXPECT_EQ(Joined(chunk.data), Concatenated()) << "slices of " << piece;
    EXPECT_TRUE(VerifyChunk(chunk, kBlockBytes).ok());
  }
}

TEST_F(ChunkCodecTest, DecodesWhatAProtobufSenderWrote) {
  v1::KvPushMessage message;
  v1::KvChunk& chunk = *message.mutable_chunk();
  chunk.set_layer(-1);  // int32 sign extension
  chunk.set_first_block(4);
  chunk.set_n_blocks(1);
  chunk.set_data("xyz");
  chunk.set_xxh64(42);
  absl::StatusOr<ReceivedMessage> decoded =
      DecodePushMessage(Sliced(message.SerializeAsString(), 2));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->chunk->layer, -1);
  EXPECT_EQ(decoded->chunk->checksum_kind, ReceivedChunk::Checksum::kXxh64);
  EXPECT_EQ(decoded->chunk->checksum, 42u);
  EXPECT_EQ(Joined(decoded->chunk->data), "xyz");

  v1::KvPushMessage header;
  header.mutable_header()->set_reservation_id("r9");
  header.mutable_header()->set_n_layer(3);
  decoded = DecodePushMessage(EncodeProtoMessage(header));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decoded->header.has_value());
  EXPECT_EQ(decoded->header->reservation_id(), "r9");
  EXPECT_EQ(decoded->header->n_layer(), 3);
}

TEST_F(ChunkCodecTest, UnknownFieldsAreSkipped) {
  std::string bytes = Flatten(EncodeChunkMessage(1, 2, pointers_, kBlockBytes, *loans_));
  // Field 15 of every wire type before the chunk: varint, fixed64, bytes, fixed32.
  const std::string unknown = std::string("\x78\x05", 2) + std::string("\x79", 1) +
                              std::string(8, '\x01') + std::string("\x7a\x02hi", 4) +
                              std::string("\x7d", 1) + std::string(4, '\x02');
  absl::StatusOr<ReceivedMessage> decoded = DecodePushMessage(Sliced(unknown + bytes, 5));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(Joined(decoded->chunk->data), Concatenated());
}

TEST_F(ChunkCodecTest, MalformedMessagesAreRejectedSayingWhy) {
  const std::string good = Flatten(EncodeChunkMessage(1, 2, pointers_, kBlockBytes, *loans_));
  const struct {
    std::string bytes;
    const char* why;
  } cases[] = {
      {"", "neither a header nor a chunk"},
      {good.substr(0, good.size() - 1), "runs past the end"},
      {good.substr(0, 2), "truncated length"},
      {std::string("\x12", 1), "truncated length"},
      {std::string("\x12\x02\x08", 3), "runs past the end"},
      {std::string("\x0b", 1), "wire type 3"},  // a group
      {std::string("\x00", 1), "field number out of range"},
      {std::string("\x12\x01\x08", 3), "truncated chunk field 1"},
      {std::string("\x12\x02\x22\x05", 4), "runs past the end"},
      {std::string("\x12\x01\x0a", 3) + std::string("\x12\x00", 2),
       "wire type 2, expected a varint"},
      {std::string("\x0a\x02\xff\xff", 4), "header does not parse"},
      {std::string("\x12\x00\x12\x00", 4), "more than one"},
      {std::string("\x10\x01", 2), "not length-delimited"},
      {std::string(11, '\xff'), "truncated field tag"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<ReceivedMessage> decoded = DecodePushMessage(Sliced(c.bytes, 3));
    ASSERT_FALSE(decoded.ok()) << "accepted: " << c.why;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(decoded.status().message(), HasSubstr(c.why));
  }
}

TEST_F(ChunkCodecTest, TheDecodedPiecesOutliveTheBuffer) {
  ReceivedChunk kept;
  {
    grpc::ByteBuffer buffer = Sliced(Flatten(EncodeChunkMessage(1, 2, pointers_, kBlockBytes, *loans_)), 7);
    kept = *DecodePushMessage(buffer)->chunk;
  }
  EXPECT_EQ(Joined(kept.data), Concatenated());
}

}  // namespace
}  // namespace baton::kvtransfer
