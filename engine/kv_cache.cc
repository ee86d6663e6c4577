#include "engine/kv_cache.h"

#include <algorithm>
#include <utility>

#include "absl/log/check.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/kv_budget.h"
#include "kernels/kv_block_layout.h"

namespace baton::engine {

KvCache::KvCache(const ModelConfig& config, const KvCacheOptions& options,
                 kernels::Backend& backend)
    : n_layer_(config.n_layer),
      n_kv_head_(config.n_head_kv),
      head_dim_(config.head_dim),
      kv_dim_(config.kv_dim()),
      planes_(config.kv_planes()),
      block_size_(options.block_size),
      n_blocks_(options.n_blocks),
      block_elements_(int64_t{options.block_size} * config.kv_dim()),
      groups_(LayerGroups(config)),
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
  const int64_t elements = int64_t{cache->groups_.layers_per_group} * options.n_blocks *
                           cache->planes_ * cache->block_elements_;
  absl::StatusOr<kernels::BackendBuffer> memory = kernels::BackendBuffer::Allocate(
      backend, static_cast<size_t>(elements) * sizeof(uint16_t));
  if (!memory.ok()) {
    return absl::Status(memory.status().code(),
                        absl::StrCat("KV cache: ", memory.status().message()));
  }
  cache->memory_ = *std::move(memory);
  return cache;
}

void ReleaseHeld(BlockPool& pool, std::span<const BlockId> blocks) {
  std::vector<BlockId> held(blocks.begin(), blocks.end());
  std::erase(held, kNoBlock);
  pool.Release(held);
}

KvLayerGroups KvCache::LayerGroups(const ModelConfig& config) {
  std::vector<int32_t> windows(config.n_layer, 0);
  for (size_t l = 0; l < config.layers.size() && l < windows.size(); ++l) {
    windows[l] = config.layers[l].attention.window;
  }
  return GroupLayersByWindow(windows);
}

int64_t KvCache::BlockBytes(const ModelConfig& config, int32_t block_size) {
  const int64_t per_layer_token = config.kv_bytes_per_token() / std::max(1, config.n_layer);
  return per_layer_token * LayerGroups(config).layers_per_group * block_size;
}

int32_t KvCache::BlocksForBytes(const ModelConfig& config, int32_t block_size, int64_t bytes) {
  return static_cast<int32_t>(
      std::min<int64_t>(bytes / BlockBytes(config, block_size), INT32_MAX));
}

int32_t KvCache::BlocksForTokens(const ModelConfig& config, int32_t block_size,
                                 int64_t n_tokens) {
  const int64_t per_group = KvBlocksFor(n_tokens, block_size);
  return static_cast<int32_t>(
      std::min<int64_t>(per_group * LayerGroups(config).n_groups(), INT32_MAX));
}

int32_t KvCache::FirstHeldBlock(int32_t layer, int32_t position) const {
  return GroupFirstBlock(groups_.group_of[layer], position);
}

int32_t KvCache::GroupFirstBlock(int32_t group, int32_t position) const {
  return kernels::FirstVisibleBlock(groups_.windows[group], position, block_size_);
}

namespace {

// The end of the run of kNoBlock entries of `blocks` from `begin`, at most `limit`.
int32_t HolesEnd(const std::vector<BlockId>& blocks, int32_t begin, int32_t limit) {
  limit = std::min(limit, static_cast<int32_t>(blocks.size()));
  while (begin < limit && blocks[begin] == kNoBlock) ++begin;
  return begin;
}

}  // namespace

int32_t KvCache::BlocksNeeded(const BlockTable& table, int32_t n_tokens,
                              int32_t first_query) const {
  const int32_t position = first_query < 0 ? table.n_tokens : first_query;
  const int32_t target = static_cast<int32_t>(KvBlocksFor(n_tokens, block_size_));
  const int32_t size = table.n_blocks();
  int64_t needed = 0;
  for (int32_t g = 0; g < groups_.n_groups(); ++g) {
    const int32_t first = GroupFirstBlock(g, position);
    // Blocks a window let go that the queries see again, then blocks past the table's end.
    if (g < static_cast<int32_t>(table.groups.size())) {
      needed += HolesEnd(table.groups[g], first, target) - std::min(first, target);
    }
    needed += std::max(0, target - std::max(first, size));
  }
  return static_cast<int32_t>(needed);
}

void KvCache::LetGoHidden(BlockTable& table, int32_t position) {
  std::vector<BlockId> hidden;
  for (int32_t g = 0; g < static_cast<int32_t>(table.groups.size()); ++g) {
    std::vector<BlockId>& blocks = table.groups[g];
    // The held entries are one run: the hidden ones are its part before `end`.
    const int32_t end = std::min(GroupFirstBlock(g, position), table.n_blocks());
    int32_t begin = end;
    while (begin > 0 && blocks[begin - 1] != kNoBlock) --begin;
    for (int32_t i = begin; i < end; ++i) hidden.push_back(std::exchange(blocks[i], kNoBlock));
  }
  pool_.Release(hidden);
}

absl::Status KvCache::Reserve(BlockTable& table, int32_t n_tokens, int32_t first_query) {
  const int32_t position = first_query < 0 ? table.n_tokens : first_query;
  DCHECK_GE(position, table.n_tokens);
  if (table.groups.empty()) table.groups.resize(groups_.n_groups());
  LetGoHidden(table, position);
  const int32_t needed = BlocksNeeded(table, n_tokens, position);
  if (needed == 0) return absl::OkStatus();
  absl::StatusOr<std::vector<BlockId>> blocks = pool_.Allocate(needed);
  if (!blocks.ok()) return blocks.status();
  const int32_t target = static_cast<int32_t>(KvBlocksFor(n_tokens, block_size_));
  const int32_t size = table.n_blocks();
  auto next = blocks->begin();
  for (int32_t g = 0; g < groups_.n_groups(); ++g) {
    std::vector<BlockId>& group = table.groups[g];
    const int32_t first = GroupFirstBlock(g, position);
    const int32_t holes_end = HolesEnd(group, first, target);
    group.resize(std::max(target, size), kNoBlock);
    for (int32_t i = first; i < holes_end; ++i) group[i] = *next++;
    for (int32_t i = std::max(first, size); i < target; ++i) group[i] = *next++;
  }
  DCHECK(next == blocks->end());
  return absl::OkStatus();
}

int32_t KvCache::Truncate(BlockTable& table, int32_t n_tokens, int32_t keep_blocks) {
  table.n_tokens = std::min(table.n_tokens, n_tokens);
  if (!HoldsVisibleBlocks(table)) {
    Free(table);
    return 0;
  }
  const int32_t keep = static_cast<int32_t>(
      std::max<int64_t>(keep_blocks, KvBlocksFor(table.n_tokens, block_size_)));
  if (keep >= table.n_blocks()) return table.n_tokens;
  for (std::vector<BlockId>& group : table.groups) {
    ReleaseHeld(pool_, std::span<const BlockId>(group).subspan(keep));
    group.resize(keep);
  }
  return table.n_tokens;
}

bool KvCache::HoldsVisibleBlocks(const BlockTable& table) const {
  const int32_t written = static_cast<int32_t>(KvBlocksFor(table.n_tokens, block_size_));
  for (int32_t g = 0; g < static_cast<int32_t>(table.groups.size()); ++g) {
    // The held entries are one run to the table's end: the first visible one decides.
    const int32_t first = GroupFirstBlock(g, table.n_tokens);
    if (first < written && HolesEnd(table.groups[g], first, first + 1) > first) return false;
  }
  return true;
}

void KvCache::Free(BlockTable& table) {
  for (const std::vector<BlockId>& group : table.groups) ReleaseHeld(pool_, group);
  table.groups.clear();
  table.n_tokens = 0;
}

int32_t KvCache::HeldBlocks(const BlockTable& table) const {
  int32_t held = 0;
  for (const std::vector<BlockId>& group : table.groups) {
    held += static_cast<int32_t>(std::count_if(group.begin(), group.end(),
                                               [](BlockId id) { return id != kNoBlock; }));
  }
  return held;
}

uint16_t* KvCache::LayerBlock(int32_t layer, BlockId id) {
  DCHECK(layer >= 0 && layer < n_layer_ && id >= 0 && id < n_blocks_);
  const int64_t slot = groups_.slot_of[layer];
  return memory_.as<uint16_t>() + (slot * n_blocks_ + id) * planes_ * block_elements_;
}

const uint16_t* KvCache::LayerBlock(int32_t layer, BlockId id) const {
  return const_cast<KvCache*>(this)->LayerBlock(layer, id);
}

uint16_t* KvCache::LayerBlock(int32_t layer, const BlockTable& table, int32_t block) {
  return LayerBlock(layer, table.groups[groups_.group_of[layer]][block]);
}

kernels::KvLayerView KvCache::LayerView(int32_t layer, const BlockTable& table,
                                        int32_t n_tokens) const {
  uint16_t* layer_base = memory_.as<uint16_t>() +
                         int64_t{groups_.slot_of[layer]} * n_blocks_ * planes_ * block_elements_;
  const int32_t group = groups_.group_of[layer];
  return kernels::KvLayerView{
      .k_base = layer_base,
      .v_base = layer_base + (planes_ - 1) * block_elements_,
      .block_stride = planes_ * block_elements_,
      .block_table = table.groups.empty() ? nullptr : table.groups[group].data(),
      .n_tokens = n_tokens,
      .block_size = block_size_,
      .n_kv_head = n_kv_head_,
      .head_dim = head_dim_,
      .window = groups_.windows[group],
  };
}

}  // namespace baton::engine
