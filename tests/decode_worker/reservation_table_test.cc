#include "decode_worker/reservation_table.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "engine/prefix_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/half.h"
#include "tests/support/fake_clock.h"

namespace baton::decode_worker {
namespace {

using testing::HasSubstr;

// `data` as the network may deliver it: in pieces of 24 bytes, whose ends do not fall on the
// 64-byte blocks of Config().
kvtransfer::KvBytePieces Pieces(const std::vector<uint8_t>& data) {
  kvtransfer::KvBytePieces pieces;
  for (size_t i = 0; i < data.size(); i += 24) {
    pieces.emplace_back(data.data() + i, std::min<size_t>(24, data.size() - i));
  }
  return pieces;
}

engine::ModelConfig Config() {
  engine::ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_head_kv = 1;
  c.head_dim = 4;
  c.n_embd = 8;
  return c;
}

class ReservationTableTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
        engine::KvCache::Create(Config(), {.block_size = 4, .n_blocks = 10}, *backend_);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    table_ = std::make_unique<ReservationTable>(
        cache_.get(),
        ReservationTableOptions{.model_fingerprint = "fp", .max_context = 64, .clock = &clock_});
  }

  kvtransfer::KvPushSpec Spec(const std::string& id, int32_t n_tokens) {
    return {.reservation_id = id, .model_fingerprint = "fp", .n_layer = 2, .kv_dim = 4,
            .block_size = 4, .n_tokens = n_tokens};
  }
  std::vector<uint8_t> Bytes(int32_t n_blocks, uint8_t fill) {
    return std::vector<uint8_t>(n_blocks * Spec("", 1).layer_block_bytes(), fill);
  }

  test_support::FakeClock clock_;
  std::unique_ptr<kernels::Backend> backend_ = kernels::CreateCpuBackend({.reference = true});
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<ReservationTable> table_;
};

TEST_F(ReservationTableTest, FullPushThenClaimHandsOverTheBlocks) {
  auto r = table_->Reserve("req", "fp", /*n_prompt_tokens=*/6, /*max_tokens=*/3,
                           std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n_blocks, 2);  // 6 + 3 - 1 = 8 tokens
  EXPECT_EQ(cache_->pool().n_free(), 8);
  ASSERT_TRUE(table_->BeginPush(Spec(r->reservation_id, 6)).ok());
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<uint8_t> data = Bytes(2, static_cast<uint8_t>(10 + layer));
    ASSERT_TRUE(table_->WriteBlocks(r->reservation_id, layer, 0, 2, Pieces(data)).ok());
  }
  EXPECT_EQ(table_->Claim(r->reservation_id, 6).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not ended yet
  ASSERT_TRUE(table_->EndPush(r->reservation_id).ok());
  absl::StatusOr<ClaimedSequence> claimed = table_->Claim(r->reservation_id, 6);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->table.n_tokens, 6);
  const uint8_t* layer1 =
      reinterpret_cast<const uint8_t*>(cache_->LayerBlock(1, claimed->table, 1));
  EXPECT_EQ(layer1[0], 11);
  EXPECT_EQ(table_->size(), 0);
  cache_->Free(claimed->table);
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationTableTest, PiecesLandInTheirBlocksByteForByte) {
  auto r = table_->Reserve("req", "fp", 8, 1, std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(table_->BeginPush(Spec(r->reservation_id, 8)).ok());
  std::vector<uint8_t> data = Bytes(2, 0);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i % 251);
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(table_->WriteBlocks(r->reservation_id, layer, 0, 2, Pieces(data)).ok());
  }
  ASSERT_TRUE(table_->EndPush(r->reservation_id).ok());
  absl::StatusOr<ClaimedSequence> claimed = table_->Claim(r->reservation_id, 8);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  const size_t block_bytes = Spec("", 1).layer_block_bytes();
  for (int layer = 0; layer < 2; ++layer) {
    for (size_t b = 0; b < 2; ++b) {
      const auto* block =
          reinterpret_cast<const uint8_t*>(cache_->LayerBlock(layer, claimed->table, b));
      EXPECT_TRUE(std::equal(block, block + block_bytes, data.begin() + b * block_bytes))
          << "layer " << layer << " block " << b;
    }
  }
  cache_->Free(claimed->table);
}

// KV over a link (kvtransfer/kv_link.h): the receiver hands out its own blocks to be filled.
TEST_F(ReservationTableTest, FillBlocksHandsOutTheReservationsBlocksAndRecordsThem) {
  auto r = table_->Reserve("req", "fp", 8, 1, std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(table_->BeginPush(Spec(r->reservation_id, 8)).ok());
  const size_t block_bytes = Spec("", 1).layer_block_bytes();
  std::vector<std::vector<uint8_t*>> handed(2);
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(table_
                    ->FillBlocks(r->reservation_id, layer, 0, 2,
                                 [&](std::span<uint8_t* const> blocks, size_t bytes) {
                                   EXPECT_EQ(bytes, block_bytes);
                                   for (uint8_t* b : blocks) std::memset(b, 40 + layer, bytes);
                                   handed[layer].assign(blocks.begin(), blocks.end());
                                   return absl::OkStatus();
                                 })
                    .ok());
  }
  ASSERT_TRUE(table_->EndPush(r->reservation_id).ok());
  absl::StatusOr<ClaimedSequence> claimed = table_->Claim(r->reservation_id, 8);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  for (int layer = 0; layer < 2; ++layer) {
    for (int b = 0; b < 2; ++b) {
      auto* block = reinterpret_cast<uint8_t*>(cache_->LayerBlock(layer, claimed->table, b));
      EXPECT_EQ(handed[layer][b], block);
      EXPECT_EQ(block[block_bytes - 1], 40 + layer);
    }
  }
  cache_->Free(claimed->table);
}

TEST_F(ReservationTableTest, FillBlocksRefusesAnotherDtypeAndRecordsNothingWhenTheFillFails) {
  auto r = table_->Reserve("req", "fp", 8, 1, std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  kvtransfer::KvPushSpec bf16 = Spec(r->reservation_id, 8);
  bf16.dtype = kvtransfer::KvDtype::kBF16;
  ASSERT_TRUE(table_->BeginPush(bf16).ok());
  bool called = false;
  auto fill = [&](std::span<uint8_t* const>, size_t) {
    called = true;
    return absl::OkStatus();
  };
  absl::Status wrong_type = table_->FillBlocks(r->reservation_id, 0, 0, 2, fill);
  EXPECT_EQ(wrong_type.code(), absl::StatusCode::kInvalidArgument) << wrong_type;
  EXPECT_NE(wrong_type.message().find("bf16"), std::string::npos) << wrong_type;
  EXPECT_FALSE(called);
  ASSERT_TRUE(table_->Release(r->reservation_id));

  auto f16 = table_->Reserve("req2", "fp", 8, 1, std::chrono::seconds(5));
  ASSERT_TRUE(f16.ok());
  ASSERT_TRUE(table_->BeginPush(Spec(f16->reservation_id, 8)).ok());
  auto broken = [](std::span<uint8_t* const>, size_t) {
    return absl::UnavailableError("link broke");
  };
  EXPECT_EQ(table_->FillBlocks(f16->reservation_id, 0, 0, 2, broken).code(),
            absl::StatusCode::kUnavailable);
  // Nothing was recorded: the same blocks may be filled again, and the push is not complete.
  EXPECT_TRUE(table_->FillBlocks(f16->reservation_id, 0, 0, 2, fill).ok());
  EXPECT_EQ(table_->EndPush(f16->reservation_id).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(table_->Release(f16->reservation_id));
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

// KV that arrives in another type (a GPU engine's bf16 or f32) lands as the cache's f16.
TEST_F(ReservationTableTest, KvOfAnotherTypeIsConvertedAsItLands) {
  for (kvtransfer::KvDtype dtype : {kvtransfer::KvDtype::kF32, kvtransfer::KvDtype::kBF16}) {
    auto r = table_->Reserve("req", "fp", 4, 1, std::chrono::seconds(5));
    ASSERT_TRUE(r.ok()) << r.status();
    kvtransfer::KvPushSpec spec = Spec(r->reservation_id, 4);
    spec.dtype = dtype;
    ASSERT_TRUE(table_->BeginPush(spec).ok());
    const int64_t elements = spec.layer_block_elements();
    std::vector<float> values(elements);
    for (int64_t i = 0; i < elements; ++i) values[i] = 0.37f * static_cast<float>(i) - 5.0f;
    std::vector<uint8_t> wire(spec.layer_block_bytes());
    std::vector<float> converted(values);  // the values as the wire type holds them
    for (int64_t i = 0; i < elements; ++i) {
      if (dtype == kvtransfer::KvDtype::kF32) {
        std::memcpy(wire.data() + 4 * i, &values[i], 4);
      } else {
        const uint16_t h = kernels::F32ToBF16(values[i]);
        std::memcpy(wire.data() + 2 * i, &h, 2);
        converted[i] = kernels::BF16ToF32(h);
      }
    }
    if (dtype == kvtransfer::KvDtype::kF32) {  // a chunk sized for f16 is refused, naming f32
      EXPECT_THAT(std::string(table_->WriteBlocks(r->reservation_id, 0, 0, 1,
                                                  Pieces(Bytes(1, 0))).message()),
                  HasSubstr("(f32)"));
    }
    for (int layer = 0; layer < 2; ++layer) {
      ASSERT_TRUE(table_->WriteBlocks(r->reservation_id, layer, 0, 1, Pieces(wire)).ok());
    }
    ASSERT_TRUE(table_->EndPush(r->reservation_id).ok());
    absl::StatusOr<ClaimedSequence> claimed = table_->Claim(r->reservation_id, 4);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    const uint16_t* block = cache_->LayerBlock(1, claimed->table, 0);
    for (int64_t i = 0; i < elements; ++i) {
      ASSERT_EQ(block[i], kernels::F32ToF16(converted[i])) << "element " << i;
    }
    cache_->Free(claimed->table);
  }
}

// The copy runs outside the table's mutex: a reservation released while its KV is being written
// keeps its blocks until that copy is done, and then returns every one of them.
TEST_F(ReservationTableTest, ReleaseDuringWritesNeverLosesOrReusesABlock) {
  for (int round = 0; round < 200; ++round) {
    auto r = table_->Reserve("req", "fp", 36, 1, std::chrono::seconds(5));  // 9 blocks
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(table_->BeginPush(Spec(r->reservation_id, 36)).ok());
    std::atomic<bool> go{false};
    std::thread writer([&] {
      while (!go.load()) std::this_thread::yield();
      const std::vector<uint8_t> one = Bytes(1, 7);
      for (int layer = 0; layer < 2; ++layer) {
        for (int block = 0; block < 9; ++block) {
          const absl::Status s = table_->WriteBlocks(r->reservation_id, layer, block, 1,
                                                     Pieces(one));
          if (!s.ok()) {
            // Freed under it (ABORTED) or before it (NOT_FOUND); nothing else.
            EXPECT_TRUE(s.code() == absl::StatusCode::kAborted ||
                        s.code() == absl::StatusCode::kNotFound)
                << s;
            return;
          }
        }
      }
    });
    go = true;
    for (int spin = 0; spin < round % 50; ++spin) std::this_thread::yield();
    table_->Release(r->reservation_id);
    writer.join();
    EXPECT_EQ(table_->size(), 0);
    ASSERT_EQ(cache_->pool().n_free(), 10) << "round " << round;
  }
}

TEST_F(ReservationTableTest, RejectsBadPushesWithoutWriting) {
  auto r = table_->Reserve("req", "fp", 4, 4, std::chrono::seconds(5));
  ASSERT_TRUE(r.ok());
  kvtransfer::KvPushSpec wrong_fp = Spec(r->reservation_id, 4);
  wrong_fp.model_fingerprint = "other";
  EXPECT_THAT(std::string(table_->BeginPush(wrong_fp).message()), HasSubstr("fingerprint"));
  kvtransfer::KvPushSpec wrong_len = Spec(r->reservation_id, 5);
  EXPECT_THAT(std::string(table_->BeginPush(wrong_len).message()), HasSubstr("n_tokens"));
  EXPECT_EQ(table_->BeginPush(Spec("nope", 4)).code(), absl::StatusCode::kNotFound);
  kvtransfer::KvPushSpec windowed = Spec(r->reservation_id, 4);  // this cache has no window
  windowed.layer_windows.assign(windowed.n_layer, 0);
  windowed.layer_windows[1] = 8;
  EXPECT_THAT(std::string(table_->BeginPush(windowed).message()),
              HasSubstr("layer 1's sliding window is 8, expected 0"));

  ASSERT_TRUE(table_->BeginPush(Spec(r->reservation_id, 4)).ok());
  EXPECT_EQ(table_->BeginPush(Spec(r->reservation_id, 4)).code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<uint8_t> one = Bytes(1, 1);
  // The prompt has 1 block.
  absl::Status s = table_->WriteBlocks(r->reservation_id, 0, 1, 1, Pieces(one));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("outside"));
  EXPECT_EQ(table_->WriteBlocks(r->reservation_id, 2, 0, 1, Pieces(one)).code(),
            absl::StatusCode::kInvalidArgument);  // layer out of range
  std::vector<uint8_t> short_data(7, 0);
  EXPECT_EQ(table_->WriteBlocks(r->reservation_id, 0, 0, 1, Pieces(short_data)).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table_->WriteBlocks(r->reservation_id, 0, 0, 1, Pieces(one)).ok());
  EXPECT_THAT(std::string(table_->WriteBlocks(r->reservation_id, 0, 0, 1, Pieces(one)).message()),
              HasSubstr("twice"));
  EXPECT_EQ(table_->EndPush(r->reservation_id).code(), absl::StatusCode::kFailedPrecondition);
  table_->AbortPush(r->reservation_id, absl::DataLossError("test"));
  EXPECT_EQ(table_->size(), 0);
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationTableTest, ExpiredLeasesAreFreed) {
  auto a = table_->Reserve("a", "fp", 4, 4, std::chrono::seconds(1));
  auto b = table_->Reserve("b", "fp", 4, 4, std::chrono::seconds(10));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(table_->ExpireLeases(), 0);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(table_->ExpireLeases(), 1);
  EXPECT_EQ(table_->Claim(a->reservation_id, 4).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table_->Release(b->reservation_id));
  EXPECT_FALSE(table_->Release(b->reservation_id));
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationTableTest, LeaseIsPausedWhileKvArrivesAndRestartsAtEndPush) {
  // A prompt whose prefill takes far longer than the lease: the lease covers the wait for the
  // push to begin and for the claim, not the hand-off, which only a stall of push_stall_timeout
  // (30 s) ends.
  auto r = table_->Reserve("req", "fp", 8, 2, std::chrono::seconds(1));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(table_->BeginPush(Spec(r->reservation_id, 8)).ok());
  for (int layer = 0; layer < 2; ++layer) {
    for (int block = 0; block < 2; ++block) {
      clock_.Advance(absl::Seconds(25));  // each block computes for 25 s, 100 s in all
      EXPECT_EQ(table_->ExpireLeases(), 0);
      std::vector<uint8_t> data = Bytes(1, 1);
      ASSERT_TRUE(table_->WriteBlocks(r->reservation_id, layer, block, 1, Pieces(data)).ok());
    }
  }
  ASSERT_TRUE(table_->EndPush(r->reservation_id).ok());
  clock_.Advance(absl::Milliseconds(900));
  EXPECT_EQ(table_->ExpireLeases(), 0);
  clock_.Advance(absl::Milliseconds(200));  // the claim did not come within the lease
  EXPECT_EQ(table_->ExpireLeases(), 1);
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationTableTest, StalledPushIsFreedAfterItsStallTimeout) {
  auto r = table_->Reserve("req", "fp", 8, 2, std::chrono::seconds(1));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(table_->BeginPush(Spec(r->reservation_id, 8)).ok());
  std::vector<uint8_t> data = Bytes(1, 1);
  ASSERT_TRUE(table_->WriteBlocks(r->reservation_id, 0, 0, 1, Pieces(data)).ok());
  clock_.Advance(absl::Seconds(29));  // push_stall_timeout is 30 s
  EXPECT_EQ(table_->ExpireLeases(), 0);
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(table_->ExpireLeases(), 1);
  EXPECT_EQ(table_->WriteBlocks(r->reservation_id, 0, 1, 1, Pieces(data)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationTableTest, ReserveValidatesAndFailsWhenFull) {
  EXPECT_EQ(table_->Reserve("r", "other", 4, 4, std::chrono::seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->Reserve("r", "fp", 0, 4, std::chrono::seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table_->Reserve("r", "fp", 60, 10, std::chrono::seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);                           // past max_context
  auto big = table_->Reserve("r", "fp", 30, 10, std::chrono::seconds(1));  // 39 tokens: 10 blocks
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(table_->Reserve("r2", "fp", 1, 1, std::chrono::seconds(1)).status().code(),
            absl::StatusCode::kResourceExhausted);
}

class ReservationPrefixTest : public ReservationTableTest {
 protected:
  void SetUp() override {
    ReservationTableTest::SetUp();
    prefix_ = std::make_unique<engine::PrefixCache>(cache_.get(), "fp", true);
    table_ = std::make_unique<ReservationTable>(
        cache_.get(), ReservationTableOptions{.model_fingerprint = "fp",
                                              .max_context = 64,
                                              .clock = &clock_,
                                              .prefix_cache = prefix_.get()});
  }

  // Pushes blocks [first_block, ceil(n_tokens / 4)) of every layer, filled with `fill`, and ends
  // the push.
  void PushAll(const std::string& id, int32_t n_tokens, int32_t first_block, uint8_t fill) {
    kvtransfer::KvPushSpec spec = Spec(id, n_tokens);
    spec.first_block = first_block;
    ASSERT_TRUE(table_->BeginPush(spec).ok());
    const int32_t n = spec.n_blocks() - first_block;
    for (int layer = 0; layer < 2; ++layer) {
      ASSERT_TRUE(table_->WriteBlocks(id, layer, first_block, n, Pieces(Bytes(n, fill))).ok());
    }
    ASSERT_TRUE(table_->EndPush(id).ok());
  }

  std::unique_ptr<engine::PrefixCache> prefix_;
};

TEST_F(ReservationPrefixTest, AReservationStartsFromTheCachedPrefixAndOnlyTheRestTravels) {
  const std::vector<engine::TokenId> first = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto a = table_->Reserve("a", "fp", 9, 2, std::chrono::seconds(5), first);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->n_cached_tokens, 0);
  ASSERT_NO_FATAL_FAILURE(PushAll(a->reservation_id, 9, 0, 0xA1));
  absl::StatusOr<ClaimedSequence> claimed_a = table_->Claim(a->reservation_id, 9, first);
  ASSERT_TRUE(claimed_a.ok()) << claimed_a.status();
  const std::vector<engine::BlockId> a_blocks = claimed_a->table.groups[0];
  cache_->Free(claimed_a->table);  // its two full blocks stay cached

  const std::vector<engine::TokenId> second = {1, 2, 3, 4, 5, 6, 7, 8, 40, 41, 42};
  auto b = table_->Reserve("b", "fp", 11, 2, std::chrono::seconds(5), second);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->n_cached_tokens, 8);
  kvtransfer::KvPushSpec from_zero = Spec(b->reservation_id, 11);
  absl::Status refused = table_->BeginPush(from_zero);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("first_block"));
  kvtransfer::KvPushSpec spec = Spec(b->reservation_id, 11);
  spec.first_block = 2;
  ASSERT_TRUE(table_->BeginPush(spec).ok());
  EXPECT_EQ(table_->WriteBlocks(b->reservation_id, 0, 1, 1, Pieces(Bytes(1, 0xB2))).code(),
            absl::StatusCode::kInvalidArgument);  // a cached block: not the push's to write
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(table_->WriteBlocks(b->reservation_id, layer, 2, 1, Pieces(Bytes(1, 0xB2))).ok());
  }
  ASSERT_TRUE(table_->EndPush(b->reservation_id).ok());
  std::vector<engine::TokenId> other = second;
  other[9] = 99;
  EXPECT_EQ(table_->Claim(b->reservation_id, 11, other).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ClaimedSequence> claimed_b = table_->Claim(b->reservation_id, 11, second);
  ASSERT_TRUE(claimed_b.ok()) << claimed_b.status();
  EXPECT_EQ(claimed_b->table.groups[0][0], a_blocks[0]);  // shared, not copied
  EXPECT_EQ(claimed_b->table.groups[0][1], a_blocks[1]);
  const uint8_t* kept = reinterpret_cast<const uint8_t*>(cache_->LayerBlock(1, a_blocks[1]));
  EXPECT_EQ(kept[0], 0xA1);
  const uint8_t* pushed =
      reinterpret_cast<const uint8_t*>(cache_->LayerBlock(1, claimed_b->table, 2));
  EXPECT_EQ(pushed[0], 0xB2);
  cache_->Free(claimed_b->table);
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationPrefixTest, AReleasedReservationKeepsItsArrivedKvCachedButNotAPartialPush) {
  const std::vector<engine::TokenId> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto partial = table_->Reserve("p", "fp", 9, 2, std::chrono::seconds(5), prompt);
  ASSERT_TRUE(partial.ok());
  kvtransfer::KvPushSpec spec = Spec(partial->reservation_id, 9);
  ASSERT_TRUE(table_->BeginPush(spec).ok());
  ASSERT_TRUE(table_->WriteBlocks(partial->reservation_id, 0, 0, 3, Pieces(Bytes(3, 1))).ok());
  EXPECT_TRUE(table_->Release(partial->reservation_id));  // layer 1 never came
  EXPECT_EQ(cache_->pool().n_cached(), 0);
  // A request that ended at its first token: its KV arrived, Decode never claimed it.
  auto whole = table_->Reserve("w", "fp", 9, 2, std::chrono::seconds(5), prompt);
  ASSERT_TRUE(whole.ok());
  ASSERT_NO_FATAL_FAILURE(PushAll(whole->reservation_id, 9, 0, 2));
  EXPECT_TRUE(table_->Release(whole->reservation_id));
  EXPECT_EQ(cache_->pool().n_cached(), 2);
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationPrefixTest, ReservationsShareCachedKvOnlyUnderTheSameSalt) {
  const std::vector<engine::TokenId> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto a = table_->Reserve("a", "fp", 9, 2, std::chrono::seconds(5), prompt, "tenant-a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NO_FATAL_FAILURE(PushAll(a->reservation_id, 9, 0, 1));
  absl::StatusOr<ClaimedSequence> claimed = table_->Claim(a->reservation_id, 9, prompt);
  ASSERT_TRUE(claimed.ok());
  EXPECT_EQ(claimed->cache_salt, "tenant-a");  // the decode batch publishes under it too
  cache_->Free(claimed->table);
  for (const char* salt : {"", "tenant-b"}) {
    auto other = table_->Reserve(salt, "fp", 9, 2, std::chrono::seconds(5), prompt, salt);
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(other->n_cached_tokens, 0) << "salt '" << salt << "'";
    EXPECT_TRUE(table_->Release(other->reservation_id));
  }
  auto same = table_->Reserve("same", "fp", 9, 2, std::chrono::seconds(5), prompt, "tenant-a");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->n_cached_tokens, 8);
  EXPECT_TRUE(table_->Release(same->reservation_id));
  EXPECT_EQ(table_->Reserve("long", "fp", 9, 2, std::chrono::seconds(5), prompt,
                            std::string(257, 's'))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache_->pool().n_free(), 10);
}

TEST_F(ReservationPrefixTest, AFailedReservationReturnsTheCachedBlocksItTook) {
  const std::vector<engine::TokenId> first = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto a = table_->Reserve("a", "fp", 9, 2, std::chrono::seconds(5), first);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_NO_FATAL_FAILURE(PushAll(a->reservation_id, 9, 0, 1));
  absl::StatusOr<ClaimedSequence> claimed = table_->Claim(a->reservation_id, 9, first);
  ASSERT_TRUE(claimed.ok());
  cache_->Free(claimed->table);
  // 2 cached blocks match, but 40 more tokens do not fit the other 8 blocks.
  std::vector<engine::TokenId> longer = first;
  longer.resize(48, 5);
  auto b = table_->Reserve("b", "fp", 48, 2, std::chrono::seconds(5), longer);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache_->pool().n_free(), 10);
  EXPECT_EQ(cache_->pool().n_cached(), 2);  // still cached, held by nobody
  EXPECT_EQ(table_->Reserve("c", "fp", 9, 2, std::chrono::seconds(5), longer).status().code(),
            absl::StatusCode::kInvalidArgument);  // 48 tokens for a 9-token prompt
}

}  // namespace
}  // namespace baton::decode_worker
