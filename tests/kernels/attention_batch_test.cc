// The CUDA backend's attention batch, built on the host: every query row lands in exactly one
// kernel's list with its sequence, row and position; a prefill's rows are cut into tiles of at
// most kAttentionTileQueries consecutive rows of one sequence; each sequence's block table is
// where table_begin says. Checked against the batch's definition on random batches, no GPU.
#include "kernels/cuda/attention_batch.h"

#include <cstdint>
#include <iterator>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace baton::kernels::cuda {
namespace {

// One sequence's inputs, kept alive for the batch's pointers.
struct Sequence {
  int64_t n_q = 0;
  int32_t n_tokens = 0;
  std::vector<int32_t> positions;
  std::vector<int32_t> table;
  uint16_t* k_base = nullptr;
  uint16_t* v_base = nullptr;
};

constexpr int32_t kBlockSize = 16;

std::vector<Sequence> RandomSequences(std::mt19937& rng, size_t n) {
  std::vector<Sequence> seqs(n);
  for (Sequence& s : seqs) {
    // Decode rows (1), prefills around tile multiples (15, 16, 17, 32, 33) and long ones.
    const int64_t lengths[] = {1, 1, 2, 15, 16, 17, 32, 33, 100};
    s.n_q = lengths[rng() % std::size(lengths)];
    const int32_t cached = static_cast<int32_t>(rng() % 70);
    s.n_tokens = cached + static_cast<int32_t>(s.n_q);
    for (int64_t i = 0; i < s.n_q; ++i) s.positions.push_back(cached + static_cast<int32_t>(i));
    for (int32_t b = 0; b < (s.n_tokens + kBlockSize - 1) / kBlockSize; ++b) {
      s.table.push_back(static_cast<int32_t>(rng() % 1000));
    }
    s.table.push_back(-1);  // past the last block: never copied
    s.k_base = reinterpret_cast<uint16_t*>(uintptr_t{0x1000} + 16 * (rng() % 64));
    s.v_base = reinterpret_cast<uint16_t*>(uintptr_t{0x9000} + 16 * (rng() % 64));
  }
  return seqs;
}

std::vector<AttentionQueries> Inputs(const std::vector<Sequence>& seqs) {
  std::vector<AttentionQueries> in;
  for (const Sequence& s : seqs) {
    in.push_back({.q = reinterpret_cast<const float*>(&s),
                  .q_positions = s.positions.data(),
                  .n_q = s.n_q,
                  .kv = {.k_base = s.k_base,
                         .v_base = s.v_base,
                         .block_stride = 4096,
                         .block_table = s.table.data(),
                         .n_tokens = s.n_tokens,
                         .block_size = kBlockSize,
                         .n_kv_head = 2,
                         .head_dim = 64},
                  .out = reinterpret_cast<float*>(uintptr_t{0x42} + 4 * in.size())});
  }
  return in;
}

void ExpectBatchOf(const AttentionBatch& batch, const std::vector<Sequence>& seqs,
                   const std::vector<AttentionQueries>& in, bool tiled) {
  ASSERT_EQ(batch.seqs.size(), seqs.size());
  size_t table_entries = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    EXPECT_EQ(batch.seqs[s].q, in[s].q);
    EXPECT_EQ(batch.seqs[s].out, in[s].out);
    EXPECT_EQ(batch.seqs[s].k_base, seqs[s].k_base);
    EXPECT_EQ(batch.seqs[s].v_base, seqs[s].v_base);
    ASSERT_EQ(batch.seqs[s].table_begin, static_cast<int32_t>(table_entries)) << "sequence " << s;
    const size_t blocks = seqs[s].table.size() - 1;
    for (size_t b = 0; b < blocks; ++b) {
      ASSERT_EQ(batch.tables[table_entries + b], seqs[s].table[b]) << "sequence " << s;
    }
    table_entries += blocks;
  }
  EXPECT_EQ(batch.tables.size(), table_entries);

  // Every row of every sequence exactly once, in the list its kind goes to, as it is.
  std::vector<std::vector<int>> seen(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) seen[s].assign(seqs[s].n_q, 0);
  auto check_row = [&](const AttentionQuery& q, bool prefill_list) {
    ASSERT_GE(q.seq, 0);
    ASSERT_LT(q.seq, static_cast<int32_t>(seqs.size()));
    ASSERT_GE(q.row, 0);
    ASSERT_LT(q.row, seqs[q.seq].n_q);
    EXPECT_EQ(q.position, seqs[q.seq].positions[q.row]);
    EXPECT_EQ(prefill_list, tiled && seqs[q.seq].n_q > 1) << "sequence " << q.seq;
    ++seen[q.seq][q.row];
  };
  for (const AttentionQuery& q : batch.decode_queries) check_row(q, false);
  for (const AttentionQuery& q : batch.prefill_queries) check_row(q, true);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t i = 0; i < seqs[s].n_q; ++i) {
      EXPECT_EQ(seen[s][i], 1) << "sequence " << s << " row " << i;
    }
  }

  // The tiles cover prefill_queries in order, each full but a sequence's last, one sequence each.
  int32_t next = 0;
  for (size_t t = 0; t < batch.prefill_tiles.size(); ++t) {
    const AttentionTile& tile = batch.prefill_tiles[t];
    ASSERT_EQ(tile.first_query, next) << "tile " << t;
    ASSERT_GE(tile.count, 1);
    ASSERT_LE(tile.count, kAttentionTileQueries);
    for (int32_t k = 0; k < tile.count; ++k) {
      const AttentionQuery& q = batch.prefill_queries[tile.first_query + k];
      EXPECT_EQ(q.seq, tile.seq) << "tile " << t;
      EXPECT_EQ(q.row, batch.prefill_queries[tile.first_query].row + k) << "tile " << t;
    }
    const AttentionQuery& last = batch.prefill_queries[tile.first_query + tile.count - 1];
    if (tile.count < kAttentionTileQueries) {
      EXPECT_EQ(last.row, seqs[tile.seq].n_q - 1) << "a short tile that is not its sequence's last";
    }
    next += tile.count;
  }
  EXPECT_EQ(next, static_cast<int32_t>(batch.prefill_queries.size()));
}

TEST(AttentionBatchTest, RandomBatchesFollowTheDefinition) {
  std::mt19937 rng(3);
  AttentionBatch batch;  // reused, as the backend reuses it
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<Sequence> seqs = RandomSequences(rng, 1 + rng() % 12);
    const std::vector<AttentionQueries> in = Inputs(seqs);
    const bool tiled = trial % 3 != 0;
    batch.Build(in, tiled);
    SCOPED_TRACE(trial);
    ExpectBatchOf(batch, seqs, in, tiled);
    EXPECT_TRUE(batch.bases_16_byte_aligned);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(AttentionBatchTest, APrefillOfThirtyThreeRowsIsTwoFullTilesAndOneRow) {
  std::mt19937 rng(1);
  std::vector<Sequence> seqs = RandomSequences(rng, 2);
  seqs[0].n_q = 1;
  seqs[0].positions.resize(1);
  seqs[1].n_q = 33;
  seqs[1].positions.resize(33);
  for (int32_t i = 0; i < 33; ++i) seqs[1].positions[i] = 10 + i;
  seqs[1].n_tokens = 43;
  seqs[1].table = {5, 6, 7, -1};
  AttentionBatch batch;
  batch.Build(Inputs(seqs), /*tiled=*/true);
  ASSERT_EQ(batch.prefill_tiles.size(), 3u);
  EXPECT_EQ(batch.prefill_tiles[0].count, 16);
  EXPECT_EQ(batch.prefill_tiles[1].count, 16);
  EXPECT_EQ(batch.prefill_tiles[2].count, 1);
  EXPECT_EQ(batch.prefill_queries.back().position, 42);
  ASSERT_EQ(batch.decode_queries.size(), 1u);
  EXPECT_EQ(batch.decode_queries[0].seq, 0);
}

TEST(AttentionBatchTest, ABaseOffSixteenBytesIsReported) {
  std::mt19937 rng(2);
  std::vector<Sequence> seqs = RandomSequences(rng, 3);
  seqs[2].v_base = reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(seqs[2].v_base) + 8);
  AttentionBatch batch;
  batch.Build(Inputs(seqs), true);
  EXPECT_FALSE(batch.bases_16_byte_aligned);
  seqs[2].v_base = reinterpret_cast<uint16_t*>(reinterpret_cast<uintptr_t>(seqs[2].v_base) + 8);
  batch.Build(Inputs(seqs), true);
  EXPECT_TRUE(batch.bases_16_byte_aligned);
}

}  // namespace
}  // namespace baton::kernels::cuda
