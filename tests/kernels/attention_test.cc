// Attention of every CPU backend variant over a paged f16 KV cache with a random, non-contiguous
// block table, against a dense double-precision softmax(q·kᵀ·scale)·v computed from the same
// K/V before paging; grouped-query heads; prefill-shaped (all positions, causal) and
// decode-shaped (one query at the last position); per-query batch invariance (which also checks
// that a long context split over threads by key segments gives the same bits as one thread
// doing every segment); sliding windows (each query sees only its last `window` keys).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/half.h"
#include "tests/kernels/backend_params.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels {
namespace {

using testing::GuardedBuffer;
using testing::Impl;
using testing::ImplName;
using testing::ImplSupported;
using testing::MakeBackend;
using testing::RandomFloats;

struct CacheShape {
  int32_t n_tokens;
  int32_t n_head;
  int32_t n_kv_head;
  int32_t head_dim;
  int32_t block_size;
};

// A sequence's K/V, dense [n_tokens, n_kv_head, head_dim] (as f16 values), and the same data in a
// paged cache (kv_block_layout.h) whose blocks are a random subset of a larger pool, in random
// order.
class PagedKv {
 public:
  PagedKv(const CacheShape& s, uint64_t seed) : s_(s) {
    const int64_t per_token = static_cast<int64_t>(s.n_kv_head) * s.head_dim;
    const std::vector<float> k = RandomFloats(s.n_tokens * per_token, seed, 1.0f);
    const std::vector<float> v = RandomFloats(s.n_tokens * per_token, seed + 1, 1.0f);
    for (size_t i = 0; i < k.size(); ++i) {
      k_dense_.push_back(F16ToF32(F32ToF16(k[i])));
      v_dense_.push_back(F16ToF32(F32ToF16(v[i])));
    }
    const int32_t n_blocks = (s.n_tokens + s.block_size - 1) / s.block_size;
    const int32_t pool_blocks = 2 * n_blocks + 3;
    std::vector<int32_t> ids(pool_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::shuffle(ids.begin(), ids.end(), rng);
    table_.assign(ids.begin(), ids.begin() + n_blocks);
    block_stride_ = s.block_size * per_token;
    // Unused slots hold NaN: reading them would poison the result.
    k_pool_.assign(pool_blocks * block_stride_, F32ToF16(NAN));
    v_pool_.assign(pool_blocks * block_stride_, F32ToF16(NAN));
    for (int32_t t = 0; t < s.n_tokens; ++t) {
      for (int32_t kv_h = 0; kv_h < s.n_kv_head; ++kv_h) {
        const int64_t dst = table_[t / s.block_size] * block_stride_ +
                            KvRowInBlock(t % s.block_size, kv_h, s.block_size, s.head_dim);
        const int64_t src = t * per_token + int64_t{kv_h} * s.head_dim;
        for (int64_t e = 0; e < s.head_dim; ++e) {
          k_pool_[dst + e] = F32ToF16(k_dense_[src + e]);
          v_pool_[dst + e] = F32ToF16(v_dense_[src + e]);
        }
      }
    }
  }

  KvLayerView view(int32_t window = 0) const {
    return KvLayerView{.k_base = k_pool_.data(),
                       .v_base = v_pool_.data(),
                       .block_stride = block_stride_,
                       .block_table = table_.data(),
                       .n_tokens = s_.n_tokens,
                       .block_size = s_.block_size,
                       .n_kv_head = s_.n_kv_head,
                       .head_dim = s_.head_dim,
                       .window = window};
  }

  // out [n_q, n_head, head_dim] in double from the dense K/V.
  // window > 0: query i sees keys (positions[i] - window, positions[i]] only. sinks: null or
  // [n_head], each head's logit in its denominator.
  std::vector<double> DenseAttention(const float* q, const std::vector<int32_t>& positions,
                                     float scale, int32_t window = 0,
                                     const float* sinks = nullptr) const {
    const int32_t d = s_.head_dim, group = s_.n_head / s_.n_kv_head;
    std::vector<double> out(positions.size() * s_.n_head * d);
    for (size_t i = 0; i < positions.size(); ++i) {
      for (int32_t h = 0; h < s_.n_head; ++h) {
        const float* qh = q + (i * s_.n_head + h) * d;
        const int32_t kv_h = h / group;
        const int32_t first = window > 0 ? std::max(0, positions[i] - window + 1) : 0;
        std::vector<double> scores(positions[i] + 1, -INFINITY);
        for (int32_t t = first; t <= positions[i]; ++t) {
          const float* k = &k_dense_[(static_cast<int64_t>(t) * s_.n_kv_head + kv_h) * d];
          double dot = 0.0;
          for (int32_t j = 0; j < d; ++j) dot += static_cast<double>(qh[j]) * k[j];
          scores[t] = dot * scale;
        }
        double max_score = *std::max_element(scores.begin(), scores.end());
        if (sinks != nullptr) max_score = std::max<double>(max_score, sinks[h]);
        double sum = sinks != nullptr ? std::exp(sinks[h] - max_score) : 0.0;
        for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
        for (int32_t t = first; t <= positions[i]; ++t) {
          const float* v = &v_dense_[(static_cast<int64_t>(t) * s_.n_kv_head + kv_h) * d];
          const double p = scores[t] / sum;
          for (int32_t j = 0; j < d; ++j) out[(i * s_.n_head + h) * d + j] += p * v[j];
        }
      }
    }
    return out;
  }

 private:
  CacheShape s_;
  std::vector<float> k_dense_, v_dense_;
  mutable std::vector<uint16_t> k_pool_, v_pool_;  // what view() exposes, writable
  std::vector<int32_t> table_;
  int64_t block_stride_ = 0;
};

double Tolerance(Impl impl) { return impl == Impl::kReference ? 1e-6 : 2e-5; }

using AttentionParam = std::tuple<Impl, CacheShape>;

class AttentionTest : public ::testing::TestWithParam<AttentionParam> {
 protected:
  void Check(const std::vector<int32_t>& positions, uint64_t seed, int32_t window = 0,
             const float* sinks = nullptr) {
    const auto [impl, s] = GetParam();
    if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
    const PagedKv kv(s, seed);
    const int64_t n_q = static_cast<int64_t>(positions.size());
    const int64_t q_size = n_q * s.n_head * s.head_dim;
    // Sharp enough softmax to matter: |q·k| ~ sqrt(head_dim) * 2.
    const std::vector<float> q = RandomFloats(q_size, seed + 7, 2.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
    const std::vector<double> want =
        kv.DenseAttention(q.data(), positions, scale, window, sinks);

    GuardedBuffer out(q_size, NAN);
    MakeBackend(impl)->Attention(q.data(), positions.data(), n_q, s.n_head, kv.view(window),
                                 scale, sinks, out.data());
    EXPECT_TRUE(out.CanariesIntact()) << "Attention wrote outside its output";
    ASSERT_TRUE(testing::AllFinite(out.data(), q_size)) << "NaN/Inf or unwritten outputs";
    double max_err = 0.0;
    for (int64_t e = 0; e < q_size; ++e) max_err = std::max(max_err, std::fabs(out[e] - want[e]));
    // Outputs are convex combinations of values ~N(0, 1).
    EXPECT_LE(max_err, Tolerance(impl))
        << "window " << window << (sinks != nullptr ? ", with sinks" : "");
  }
};

// Each head's sink, from far below its scores to far above them (which rescales what the keys
// gave), in prefill, decode over long contexts, and windows.
TEST_P(AttentionTest, SinksJoinEachHeadsDenominator) {
  const CacheShape s = std::get<1>(GetParam());
  std::vector<float> sinks = RandomFloats(s.n_head, 31, 3.0f);
  sinks[0] = 40.0f;
  if (s.n_head > 1) sinks[s.n_head - 1] = -40.0f;
  std::vector<int32_t> positions(s.n_tokens);
  std::iota(positions.begin(), positions.end(), 0);
  Check(positions, 21, 0, sinks.data());
  Check({s.n_tokens - 1}, 22, 0, sinks.data());
  Check(positions, 23, 5, sinks.data());
  Check({s.n_tokens - 1}, 24, 17, sinks.data());
}

TEST_P(AttentionTest, PrefillCausal) {
  const int32_t n = std::get<1>(GetParam()).n_tokens;
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  Check(positions, 1);
}

TEST_P(AttentionTest, DecodeLastPosition) {
  Check({std::get<1>(GetParam()).n_tokens - 1}, 2);
}

TEST_P(AttentionTest, ChunkOfLaterPositions) {
  // A second prefill chunk: queries at the last few positions, out of order.
  const int32_t n = std::get<1>(GetParam()).n_tokens;
  Check({n - 1, std::max(0, n - 5), std::max(0, n - 3), n / 2}, 3);
}

// Sliding windows narrower than, across and wider than the 256-key segments, prefill and decode.
TEST_P(AttentionTest, SlidingWindowSeesOnlyTheLastWindowKeys) {
  const int32_t n = std::get<1>(GetParam()).n_tokens;
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), 0);
  for (int32_t window : {1, 5, 17, 300, n + 1}) {
    Check(positions, 11, window);
    Check({n - 1}, 12, window);
  }
}

// A query's result, without a window and with one, is the same bits alone, in a prefill and in a
// decode batch with other sequences (AttentionMany).
TEST_P(AttentionTest, QueryResultDoesNotDependOnBatch) {
  const auto [impl, s] = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  const PagedKv kv(s, 5);
  const PagedKv other(s, 6);
  std::vector<int32_t> positions(s.n_tokens);
  std::iota(positions.begin(), positions.end(), 0);
  const int64_t per_q = static_cast<int64_t>(s.n_head) * s.head_dim;
  const std::vector<float> q = RandomFloats(s.n_tokens * per_q, 13);
  const float scale = 0.125f;
  auto backend = MakeBackend(impl);
  for (int32_t window : {0, 3, 260}) {  // 0: none
    std::vector<float> all(s.n_tokens * per_q), one(per_q), batched(per_q), beside(per_q);
    backend->Attention(q.data(), positions.data(), s.n_tokens, s.n_head, kv.view(window), scale,
                       nullptr, all.data());
    for (int32_t i : {0, s.n_tokens / 2, s.n_tokens - 1}) {
      backend->Attention(q.data() + i * per_q, &positions[i], 1, s.n_head, kv.view(window), scale,
                         nullptr, one.data());
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + i * per_q, per_q * sizeof(float)))
          << "query " << i << ", window " << window;
      const AttentionQueries seqs[] = {
          {.q = q.data() + i * per_q, .q_positions = &positions[i], .n_q = 1,
           .kv = kv.view(window), .out = batched.data()},
          {.q = q.data(), .q_positions = &positions[0], .n_q = 1, .kv = other.view(window),
           .out = beside.data()},
      };
      backend->AttentionMany(seqs, s.n_head, scale, nullptr);
      EXPECT_EQ(0, std::memcmp(one.data(), batched.data(), per_q * sizeof(float)))
          << "query " << i << " in a decode batch, window " << window;
    }
  }
}

// A decode batch: AttentionMany gives every sequence the bits of its own Attention call, for
// single queries, a few queries (speculative verification), and with a long run of queries in
// the batch (which the CPU backend sends through Attention on its own).
TEST_P(AttentionTest, AttentionManyEqualsOneCallPerSequence) {
  const auto [impl, s] = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  const int64_t per_q = static_cast<int64_t>(s.n_head) * s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  auto backend = MakeBackend(impl);
  const std::vector<float> head_sinks = RandomFloats(s.n_head, 33, 3.0f);
  for (const float* sinks : {static_cast<const float*>(nullptr), head_sinks.data()}) {
  for (int32_t long_run : {0, 20}) {
    // Caches of different lengths; queries at the last 1 or 3 positions, or long_run of them.
    std::vector<PagedKv> caches;
    std::vector<std::vector<int32_t>> positions;
    for (int32_t k = 0; k < 6; ++k) {
      CacheShape shape = s;
      shape.n_tokens = std::max(1, s.n_tokens - 7 * k);
      caches.emplace_back(shape, 20 + k);
      const int32_t wanted = k == 5 && long_run > 0 ? long_run : 1 + k % 2 * 2;
      const int32_t n_q = std::min(shape.n_tokens, wanted);
      std::vector<int32_t> p(n_q);
      std::iota(p.begin(), p.end(), shape.n_tokens - n_q);
      positions.push_back(p);
    }
    std::vector<std::vector<float>> q;
    std::vector<GuardedBuffer> many;
    std::vector<AttentionQueries> seqs;
    for (size_t k = 0; k < caches.size(); ++k) {
      const int64_t n_q = static_cast<int64_t>(positions[k].size());
      q.push_back(RandomFloats(n_q * per_q, 40 + k, 2.0f));
      many.emplace_back(n_q * per_q, NAN);
    }
    for (size_t k = 0; k < caches.size(); ++k) {
      seqs.push_back({.q = q[k].data(),
                      .q_positions = positions[k].data(),
                      .n_q = static_cast<int64_t>(positions[k].size()),
                      .kv = caches[k].view(),
                      .out = many[k].data()});
    }
    backend->AttentionMany(seqs, s.n_head, scale, sinks);
    for (size_t k = 0; k < caches.size(); ++k) {
      const int64_t n_q = static_cast<int64_t>(positions[k].size());
      std::vector<float> one(n_q * per_q);
      backend->Attention(q[k].data(), positions[k].data(), n_q, s.n_head, caches[k].view(), scale,
                         sinks, one.data());
      EXPECT_TRUE(many[k].CanariesIntact()) << "sequence " << k;
      EXPECT_EQ(0, std::memcmp(one.data(), many[k].data(), one.size() * sizeof(float)))
          << "sequence " << k << " of " << caches.size() << ", long run " << long_run
          << (sinks != nullptr ? ", with sinks" : "");
    }
  }
  }
}

std::string AttentionName(const ::testing::TestParamInfo<AttentionParam>& info) {
  const auto& [impl, s] = info.param;
  return ImplName(impl) + "_t" + std::to_string(s.n_tokens) + "_h" + std::to_string(s.n_head) +
         "_kv" + std::to_string(s.n_kv_head) + "_d" + std::to_string(s.head_dim) + "_b" +
         std::to_string(s.block_size);
}

INSTANTIATE_TEST_SUITE_P(
    All, AttentionTest,
    ::testing::Combine(::testing::ValuesIn(testing::AllImpls()),
                       ::testing::Values(CacheShape{45, 9, 3, 64, 16},   // SmolLM2-135M heads
                                         CacheShape{1, 9, 3, 64, 16},    // a single token
                                         CacheShape{100, 4, 4, 32, 16},  // multi-head, d=32
                                         CacheShape{70, 8, 1, 128, 32},  // multi-query
                                         CacheShape{33, 20, 2, 64, 8},   // group of 10 > 8
                                         CacheShape{37, 14, 2, 64, 12},  // group of 7, odd blocks
                                         CacheShape{29, 10, 2, 32, 16},  // group of 5
                                         CacheShape{21, 6, 1, 32, 16},   // group of 6
                                         CacheShape{19, 6, 3, 12, 16},   // head_dim % 8 != 0
                                         CacheShape{50, 4, 2, 72, 16},   // head_dim % 16 == 8
                                         CacheShape{600, 9, 3, 64, 16},  // 3 segments of keys
                                         CacheShape{300, 8, 2, 256, 32},  // largest SIMD head
                                         CacheShape{40, 4, 2, 320, 16},   // above: reference
                                         CacheShape{100, 16, 1, 576, 16})),  // latent attention
    AttentionName);

// Within a block, each kv head's rows are contiguous: [n_kv_head, block_size, head_dim].
TEST(KvLayerViewTest, EachKvHeadsRowsAreContiguousWithinABlock) {
  const std::vector<int32_t> table = {3, 0};
  const KvLayerView kv{.block_stride = 2 * 4 * 3 * 8, .block_table = table.data(),
                       .n_tokens = 8, .block_size = 4, .n_kv_head = 3, .head_dim = 8};
  EXPECT_EQ(kv.RowOffset(0, 0), 3 * kv.block_stride);
  EXPECT_EQ(kv.RowOffset(1, 0), 3 * kv.block_stride + 8);
  EXPECT_EQ(kv.RowOffset(0, 1), 3 * kv.block_stride + 4 * 8);
  EXPECT_EQ(kv.RowOffset(3, 2), 3 * kv.block_stride + (2 * 4 + 3) * 8);
  EXPECT_EQ(kv.RowOffset(5, 2), (2 * 4 + 1) * 8);
}

// RowOffsets walks the block table: from any token, across block boundaries, the offsets
// RowOffset gives token by token.
TEST(KvLayerViewTest, RowOffsetsAreRowOffsetTokenByToken) {
  const std::vector<int32_t> table = {7, 2, 9, 0, 4, 11, 5, 1};
  for (int32_t block_size : {1, 5, 16}) {
    const KvLayerView kv{.block_stride = 1000,
                         .block_table = table.data(),
                         .n_tokens = block_size * static_cast<int32_t>(table.size()),
                         .block_size = block_size,
                         .n_kv_head = 3,
                         .head_dim = 8};
    for (int32_t t0 = 0; t0 < kv.n_tokens; t0 += 3) {
      for (int32_t kv_h = 0; kv_h < kv.n_kv_head; ++kv_h) {
        const int32_t count = std::min(kv.n_tokens - t0, 2 * block_size + 1);
        std::vector<int64_t> offsets(count, -1);
        kv.RowOffsets(t0, count, kv_h, offsets.data());
        for (int32_t c = 0; c < count; ++c) {
          EXPECT_EQ(offsets[c], kv.RowOffset(t0 + c, kv_h))
              << "block size " << block_size << ", tokens from " << t0 << ", row " << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace baton::kernels
