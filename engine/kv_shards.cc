#include "engine/kv_shards.h"

#include <cstring>
#include <utility>

#include "absl/log/check.h"

namespace baton::engine {

KvShards::KvShards(std::vector<Rank> ranks, int32_t n_kv_head, int32_t head_dim)
    : ranks_(std::move(ranks)),
      n_kv_head_(n_kv_head),
      kv_dim_(n_kv_head * head_dim),
      sources_(n_kv_head, -1),
      scattered_(new std::atomic<int64_t>[ranks_.size()]) {
  CHECK(!ranks_.empty());
  planes_ = ranks_[0].cache->kv_planes();
  head_bytes_ = int64_t{ranks_[0].cache->block_size()} * head_dim * sizeof(uint16_t);
  layer_block_bytes_ = int64_t{planes_} * n_kv_head * head_bytes_;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    scattered_[r] = 0;
    const int32_t heads = ranks_[r].cache->kv_dim() / head_dim;
    heads_.push_back(heads);
    for (int32_t h = ranks_[r].first_kv_head; h < ranks_[r].first_kv_head + heads; ++h) {
      CHECK(h >= 0 && h < n_kv_head) << "rank " << r << " holds KV head " << h;
      if (sources_[h] < 0) sources_[h] = static_cast<int32_t>(r);
    }
  }
  for (int32_t h = 0; h < n_kv_head; ++h) CHECK_GE(sources_[h], 0) << "no rank holds KV head " << h;
}

void KvShards::Assemble(int32_t layer, BlockId id, uint8_t* out) const {
  for (int32_t h = 0; h < n_kv_head_; ++h) {
    const int32_t r = sources_[h];
    const auto* block = reinterpret_cast<const uint8_t*>(ranks_[r].cache->LayerBlock(layer, id));
    const int32_t j = h - ranks_[r].first_kv_head;
    for (int32_t p = 0; p < planes_; ++p) {
      std::memcpy(out + (int64_t{p} * n_kv_head_ + h) * head_bytes_,
                  block + (int64_t{p} * heads_[r] + j) * head_bytes_, head_bytes_);
    }
  }
}

void KvShards::Scatter(int32_t layer, BlockId id, const uint8_t* in) {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    auto* block = reinterpret_cast<uint8_t*>(ranks_[r].cache->LayerBlock(layer, id));
    const int64_t bytes = heads_[r] * head_bytes_;
    for (int32_t p = 0; p < planes_; ++p) {
      std::memcpy(block + p * bytes,
                  in + (int64_t{p} * n_kv_head_ + ranks_[r].first_kv_head) * head_bytes_, bytes);
    }
    scattered_[r] += planes_ * bytes;
  }
}

}  // namespace baton::engine
