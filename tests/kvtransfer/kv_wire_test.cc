#include "kvtransfer/kv_wire.h"

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/half.h"
#include "kvtransfer/xxh3_avx2.h"
#include "tests/kvtransfer/kv_test_util.h"
#include "tests/support/status_matchers.h"
#include "xxhash.h"

namespace baton::kvtransfer {
namespace {

using ::baton::kvtransfer::testing::MakeSpec;
using ::baton::test_support::IsOkAndHolds;

std::span<const uint8_t> BytesOf(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(ChunkChecksumTest, IsXxh3WithSeedZeroAndXxh64ForOlderSenders) {
  // Reference values of XXH3-64 and XXH64 with seed 0.
  EXPECT_EQ(ChunkChecksum(std::span<const uint8_t>()), 0x2D06800538D394C2ull);
  EXPECT_EQ(ChunkChecksum(BytesOf("abc")), 0x78AF5F94892F3950ull);
  EXPECT_EQ(Xxh64Checksum(KvBytePieces{BytesOf("abc")}), 0x44BC2CF5AD770999ull);
}

TEST(ChunkChecksumTest, PiecesHashAsTheirConcatenation) {
  std::string text(5000, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 31 + 7);
  const std::span<const uint8_t> whole = BytesOf(text);
  const KvBytePieces pieces = {whole.subspan(0, 1), whole.subspan(1, 2999), whole.subspan(3000)};
  EXPECT_EQ(ChunkChecksum(pieces), ChunkChecksum(whole));
  EXPECT_EQ(Xxh64Checksum(pieces), Xxh64Checksum(KvBytePieces{whole}));
}

// The AVX2 build must be the same function as libxxhash's: every length class XXH3 treats
// apart (0-16, 17-128, 129-240, longer, past a 1 KiB stripe block), whole and cut into pieces.
TEST(ChunkChecksumTest, TheAvx2BuildHashesAsLibxxhash) {
  if (!internal::HaveXxh3Avx2() || kernels::DetectCpuIsaUncapped() < kernels::CpuIsa::kAvx2) {
    GTEST_SKIP() << "this build or CPU has no AVX2";
  }
  std::vector<uint8_t> data(70000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  for (size_t n : {0, 1, 3, 16, 17, 100, 128, 129, 200, 240, 241, 1023, 1024, 1025, 4096, 65536,
                   70000}) {
    const uint64_t expected = XXH3_64bits(data.data(), n);
    const internal::BytePiece whole{data.data(), n};
    EXPECT_EQ(internal::Xxh3Avx2(&whole, 1), expected) << n << " bytes";
    const size_t a = n / 3, b = n / 2;
    const internal::BytePiece cut[] = {
        {data.data(), a}, {data.data() + a, b - a}, {data.data() + b, n - b}};
    EXPECT_EQ(internal::Xxh3Avx2(cut, 3), expected) << n << " bytes in 3 pieces";
  }
}

TEST(CopyPiecesToBlocksTest, PiecesCutAnywhereLandInTheirBlocks) {
  std::vector<uint8_t> data(3 * 10);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  const std::span<const uint8_t> all(data);
  const KvBytePieces pieces = {all.subspan(0, 7), all.subspan(7, 13), all.subspan(20)};
  std::vector<uint8_t> a(10), b(10), c(10);
  const std::vector<uint8_t*> blocks = {c.data(), a.data(), b.data()};  // any order of memory
  CopyPiecesToBlocks(pieces, blocks, 10);
  EXPECT_EQ(c, std::vector<uint8_t>(data.begin(), data.begin() + 10));
  EXPECT_EQ(a, std::vector<uint8_t>(data.begin() + 10, data.begin() + 20));
  EXPECT_EQ(b, std::vector<uint8_t>(data.begin() + 20, data.end()));
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
  EXPECT_EQ(info->spec.dtype, KvDtype::kF16);
}

TEST(KvWireTest, TheDtypeTravelsAndSizesTheBlocks) {
  KvPushSpec spec = MakeSpec("r1", 6, 60);
  const int64_t f16_bytes = spec.layer_block_bytes();
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kF32}) {
    spec.dtype = dtype;
    absl::StatusOr<PushHeaderInfo> info = ParseHeader(HeaderFromSpec(spec, 0, 1));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->spec.dtype, dtype);
    EXPECT_EQ(info->spec.layer_block_bytes(), f16_bytes / 2 * KvDtypeBytes(dtype));
  }
}

TEST(ConvertPiecesToBlocksTest, ConvertsWhenPiecesSplitElements) {
  // Two blocks of 3 f32 elements, cut in pieces that split the 2nd and 5th elements.
  const std::vector<float> values = {1.0f, -2.5f, 1e-3f, 65520.0f, 0.1f, 7.0f};
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  const std::span<const uint8_t> all(bytes);
  const KvBytePieces pieces = {all.subspan(0, 6), all.subspan(6, 12), all.subspan(18)};
  std::vector<uint16_t> first(3), second(3);
  const std::vector<uint8_t*> blocks = {reinterpret_cast<uint8_t*>(first.data()),
                                        reinterpret_cast<uint8_t*>(second.data())};
  ConvertPiecesToBlocks(pieces, KvDtype::kF32, blocks, KvDtype::kF16, 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first[i], kernels::F32ToF16(values[i]));
    EXPECT_EQ(second[i], kernels::F32ToF16(values[3 + i]));
  }
}

// Latent attention's blocks hold K alone: half the bytes, said in the header; a sender from
// before the field sent K and V.
TEST(KvWireTest, KAloneBlocksTravelAsSuchAndHalveTheBlockBytes) {
  KvPushSpec spec = MakeSpec("r1", 6, 60);
  const int64_t two_planes = spec.layer_block_bytes();
  spec.kv_planes = 1;
  EXPECT_EQ(spec.layer_block_bytes(), two_planes / 2);
  v1::KvPushHeader header = HeaderFromSpec(spec, 0, 1);
  absl::StatusOr<PushHeaderInfo> info = ParseHeader(header);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->spec.kv_planes, 1);
  header.clear_kv_planes();
  info = ParseHeader(header);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->spec.kv_planes, 2);
  header.set_kv_planes(3);
  EXPECT_THAT(std::string(ParseHeader(header).status().message()),
              ::testing::HasSubstr("kv_planes must be 1 (K alone) or 2 (K and V), got 3"));
}

TEST(KvWireTest, HeaderWithoutStreamFieldsIsOneStream) {
  v1::KvPushHeader header = HeaderFromSpec(MakeSpec("r1"), 0, 1);
  header.clear_n_streams();
  absl::StatusOr<PushHeaderInfo> info = ParseHeader(header);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->n_streams, 1);
}

// Blocks of another element order would be read wrong: a sender from before the field (no
// block_layout) or of a layout this build does not know is refused, by name.
TEST(KvWireTest, RejectsAHeaderOfAnotherBlockLayout) {
  v1::KvPushHeader header = HeaderFromSpec(MakeSpec("r1"), 0, 1);
  EXPECT_EQ(header.block_layout(), "head_major");
  header.clear_block_layout();
  const absl::Status status = ParseHeader(header).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::StartsWith("header block_layout: '' is not 'head_major'"));
  header.set_block_layout("token_major");
  EXPECT_THAT(std::string(ParseHeader(header).status().message()),
              ::testing::HasSubstr("'token_major'"));
}

TEST(KvWireTest, RejectsBadHeaders) {
  const KvPushSpec spec = MakeSpec("r1", 4);
  v1::KvPushHeader bad_dtype = HeaderFromSpec(spec, 0, 1);
  bad_dtype.set_dtype("fp8");
  EXPECT_EQ(ParseHeader(bad_dtype).status().message(),
            "header dtype: 'fp8' is not one of f16, bf16, f32");
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

// A received chunk of `size` bytes of data carrying their XXH3 (or, `legacy`, XXH64).
struct TestChunk {
  std::vector<uint8_t> data;
  ReceivedChunk chunk;
};
TestChunk MakeChunk(int32_t layer, int32_t first_block, int32_t n_blocks, size_t size,
                    bool legacy = false) {
  TestChunk t;
  t.data.resize(size);
  for (size_t i = 0; i < size; ++i) t.data[i] = static_cast<uint8_t>(i * 7);
  t.chunk.layer = layer;
  t.chunk.first_block = first_block;
  t.chunk.n_blocks = n_blocks;
  t.chunk.data = {std::span<const uint8_t>(t.data)};
  t.chunk.data_bytes = static_cast<int64_t>(size);
  t.chunk.checksum_kind =
      legacy ? ReceivedChunk::Checksum::kXxh64 : ReceivedChunk::Checksum::kXxh3;
  t.chunk.checksum = legacy ? Xxh64Checksum(t.chunk.data) : ChunkChecksum(t.chunk.data);
  return t;
}

TEST(VerifyChunkTest, AcceptsAGoodChunkWithEitherChecksum) {
  EXPECT_TRUE(VerifyChunk(MakeChunk(1, 2, 3, 3 * 512).chunk, 512).ok());
  EXPECT_TRUE(VerifyChunk(MakeChunk(1, 2, 3, 3 * 512, /*legacy=*/true).chunk, 512).ok());
}

TEST(VerifyChunkTest, ChecksumMismatchIsDataLossNamingTheChunk) {
  for (bool legacy : {false, true}) {
    TestChunk t = MakeChunk(1, 2, 3, 3 * 512, legacy);
    t.data[100] ^= 1;
    absl::Status status = VerifyChunk(t.chunk, 512);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(status.message(), "chunk for layer 1 blocks [2,5): checksum mismatch");
  }
}

TEST(VerifyChunkTest, AChunkWithoutChecksumIsRejected) {
  TestChunk t = MakeChunk(1, 2, 3, 3 * 512);
  t.chunk.checksum_kind = ReceivedChunk::Checksum::kNone;
  EXPECT_THAT(VerifyChunk(t.chunk, 512).message(), ::testing::HasSubstr("carries no checksum"));
}

TEST(VerifyChunkTest, WrongSizeOrCountIsInvalidArgument) {
  EXPECT_EQ(VerifyChunk(MakeChunk(0, 0, 3, 2 * 512).chunk, 512).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyChunk(MakeChunk(0, 0, 0, 0).chunk, 512).code(),
            absl::StatusCode::kInvalidArgument);
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
  EXPECT_EQ(StreamOfLayer(5, 3), 2);
}

}  // namespace
}  // namespace baton::kvtransfer
