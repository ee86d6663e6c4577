#include "engine/kv_cache.h"

#include <utility>

#include "absl/log/check.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::engine {

KvCache::KvCache(const ModelConfig& config, const KvCacheOptions& options,
                 kernels::Backend& backend)
    : n_layer_(config.n_layer),
      n_kv_head_(config.n_head_kv),
      head_dim_(config.head_dim),
      kv_dim_(config.kv_dim()),
      block_size_(options.block_size),
      n_blocks_(options.n_blocks),
      block_elements_(int64_t{options.block_size} * config.kv_dim()),
      pool_(options.n_blocks),
      backend_(backend) {}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const ModelConfig& config,
                                                         const KvCacheOptions& options,
                                                         kernels::Backend& backend) {
  if (options.block_size <= 0 || options.n_blocks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: block_size (", options.block_size,
                                                   ") and n_blocks (", options.n_blocks,
                                                   ") must be positive"));
  }
  std::unique_ptr<KvCache> cache(new KvCache(config, options, backend));
  const int64_t elements = int64_t{config.n_layer} * options.n_blocks * 2 * cache->block_elements_;
  absl::StatusOr<kernels::BackendBuffer> memory = kernels::BackendBuffer::Allocate(
      backend, static_cast<size_t>(elements) * sizeof(uint16_t));
  if (!memory.ok()) {
    return absl::Status(memory.status().code(),
                        absl::StrCat("KV cache: ", memory.status().message()));
  }
  cache->memory_ = *std::move(memory);
  return cache;
}

int32_t KvCache::BlocksForBytes(const ModelConfig& config, int32_t block_size, int64_t bytes) {
  const int64_t per_block = config.kv_bytes_per_token() * block_size;
  return static_cast<int32_t>(std::min<int64_t>(bytes / per_block, INT32_MAX));
}

int32_t KvCache::BlocksNeeded(const BlockTable& table, int32_t n_tokens) const {
  const int64_t needed = (int64_t{n_tokens} + block_size_ - 1) / block_size_;
  return static_cast<int32_t>(std::max<int64_t>(0, needed - static_cast<int64_t>(table.blocks.size())));
}

absl::Status KvCache::Reserve(BlockTable& table, int32_t n_tokens) {
  const int32_t needed = BlocksNeeded(table, n_tokens);
  if (needed == 0) return absl::OkStatus();
  absl::StatusOr<std::vector<BlockId>> blocks = pool_.Allocate(needed);
  if (!blocks.ok()) return blocks.status();
  table.blocks.insert(table.blocks.end(), blocks->begin(), blocks->end());
  return absl::OkStatus();
}

void KvCache::Truncate(BlockTable& table, int32_t n_tokens, int32_t keep_blocks) {
  table.n_tokens = std::min(table.n_tokens, n_tokens);
  const size_t keep = static_cast<size_t>(
      std::max<int64_t>(keep_blocks, (int64_t{table.n_tokens} + block_size_ - 1) / block_size_));
  if (keep >= table.blocks.size()) return;
  pool_.Release(std::span<const BlockId>(table.blocks).subspan(keep));
  table.blocks.resize(keep);
}

void KvCache::Free(BlockTable& table) {
  pool_.Release(table.blocks);
  table.blocks.clear();
  table.n_tokens = 0;
}

uint16_t* KvCache::LayerBlock(int32_t layer, BlockId id) {
  DCHECK(layer >= 0 && layer < n_layer_ && id >= 0 && id < n_blocks_);
  return memory_.as<uint16_t>() + (int64_t{layer} * n_blocks_ + id) * 2 * block_elements_;
}

const uint16_t* KvCache::LayerBlock(int32_t layer, BlockId id) const {
  return const_cast<KvCache*>(this)->LayerBlock(layer, id);
}

kernels::KvLayerView KvCache::LayerView(int32_t layer, const BlockTable& table,
                                        int32_t n_tokens) const {
  uint16_t* layer_base =
      memory_.as<uint16_t>() + int64_t{layer} * n_blocks_ * 2 * block_elements_;
  return kernels::KvLayerView{
      .k_base = layer_base,
      .v_base = layer_base + block_elements_,
      .block_stride = 2 * block_elements_,
      .block_table = table.blocks.data(),
      .n_tokens = n_tokens,
      .block_size = block_size_,
      .n_kv_head = n_kv_head_,
      .head_dim = head_dim_,
  };
}

}  // namespace baton::engine
