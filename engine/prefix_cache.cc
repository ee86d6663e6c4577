#include "engine/prefix_cache.h"

#include <algorithm>

#include "absl/log/check.h"
#include "engine/block_hash.h"
#include "kernels/kv_block_layout.h"

namespace baton::engine {

PrefixCache::PrefixCache(KvCache* cache, absl::string_view model_fingerprint, bool enabled)
    : cache_(*cache), seed_(BlockHashSeed(model_fingerprint)), enabled_(enabled) {}

namespace {

// Group `group`'s hashes of blocks [begin, end) of a chain.
std::vector<uint64_t> GroupHashes(std::span<const uint64_t> chain, int32_t group, int32_t begin,
                                  int32_t end) {
  std::vector<uint64_t> hashes;
  for (int32_t b = begin; b < end; ++b) hashes.push_back(GroupBlockHash(chain[b], group));
  return hashes;
}

// Fills the groups without a window with the longest runs of `chain` cached from block 0;
// returns the shortest run's length.
int32_t MatchFromStart(BlockPool& pool, std::span<const uint64_t> chain,
                       const KvLayerGroups& groups, BlockTable& table) {
  int32_t n_blocks = static_cast<int32_t>(chain.size());
  for (int32_t g = 0; g < groups.n_groups(); ++g) {
    if (groups.windows[g] != 0) continue;
    table.groups[g] = pool.MatchPrefix(GroupHashes(chain, g, 0, n_blocks));
    n_blocks = std::min(n_blocks, static_cast<int32_t>(table.groups[g].size()));
  }
  return n_blocks;
}

// Fills each windowed group with its cached blocks of the first n_blocks that queries from
// max(first_query, the match's end) see, shortening the match until every such block is found;
// returns the match's blocks.
int32_t MatchWindows(BlockPool& pool, std::span<const uint64_t> chain, const KvLayerGroups& groups,
                     int32_t block_size, int32_t first_query, int32_t n_blocks,
                     BlockTable& table) {
  for (;;) {
    const int32_t position = std::max(first_query, n_blocks * block_size);
    int32_t reachable = n_blocks;
    for (int32_t g = 0; g < groups.n_groups(); ++g) {
      if (groups.windows[g] == 0) continue;
      const int32_t first =
          std::min(n_blocks, kernels::FirstVisibleBlock(groups.windows[g], position, block_size));
      ReleaseHeld(pool, table.groups[g]);
      table.groups[g].assign(first, kNoBlock);
      const std::vector<BlockId> run = pool.MatchPrefix(GroupHashes(chain, g, first, n_blocks));
      table.groups[g].insert(table.groups[g].end(), run.begin(), run.end());
      reachable = std::min(reachable, first + static_cast<int32_t>(run.size()));
    }
    if (reachable == n_blocks) return n_blocks;
    n_blocks = reachable;  // a shorter match's queries start earlier: its windows again
  }
}

}  // namespace

int32_t PrefixCache::Match(std::span<const TokenId> tokens, int32_t max_tokens,
                           BlockTable& table, absl::string_view cache_salt,
                           int32_t first_query) {
  CHECK_EQ(table.n_blocks(), 0) << "prefix match into a table that holds blocks";
  if (!enabled_ || max_tokens <= 0) return 0;
  const size_t usable = std::min(tokens.size(), static_cast<size_t>(max_tokens));
  const std::vector<uint64_t> chain =
      PrefixBlockHashes(SaltedSeed(seed_, cache_salt), tokens.first(usable), cache_.block_size());
  const KvLayerGroups& groups = cache_.groups();
  BlockPool& pool = cache_.pool();
  table.groups.assign(groups.n_groups(), {});
  const int32_t n_blocks =
      MatchWindows(pool, chain, groups, cache_.block_size(), first_query,
                   MatchFromStart(pool, chain, groups, table), table);
  for (std::vector<BlockId>& group : table.groups) {  // every group spans the match
    if (static_cast<int32_t>(group.size()) <= n_blocks) continue;
    ReleaseHeld(pool, std::span<const BlockId>(group).subspan(n_blocks));
    group.resize(n_blocks);
  }
  table.n_tokens = n_blocks * cache_.block_size();
  return table.n_tokens;
}

int32_t PrefixCache::CachedTokens(std::span<const TokenId> tokens, int32_t max_tokens,
                                  absl::string_view cache_salt) {
  BlockTable table;
  const int32_t n_tokens = Match(tokens, max_tokens, table, cache_salt);
  cache_.Free(table);
  return n_tokens;
}

void PrefixCache::Publish(std::span<const TokenId> tokens, const BlockTable& table,
                          absl::string_view cache_salt) {
  if (!enabled_) return;
  CHECK_GE(tokens.size(), static_cast<size_t>(table.n_tokens));
  const std::vector<uint64_t> chain = PrefixBlockHashes(
      SaltedSeed(seed_, cache_salt), tokens.first(table.n_tokens), cache_.block_size());
  for (int32_t g = 0; g < static_cast<int32_t>(table.groups.size()); ++g) {
    const std::vector<BlockId>& group = table.groups[g];
    for (size_t b = 0; b < chain.size() && b < group.size(); ++b) {
      if (group[b] != kNoBlock) cache_.pool().Publish(group[b], GroupBlockHash(chain[b], g));
    }
  }
}

std::vector<uint64_t> PrefixCache::Advertised(int32_t max_count) const {
  if (!enabled_) return {};
  return cache_.pool().PublishedHashes(max_count);
}

int32_t MaxCachedTokens(int32_t n_tokens, int32_t block_size) {
  if (n_tokens <= 1 || block_size <= 0) return 0;
  return (n_tokens - 1) / block_size * block_size;
}

}  // namespace baton::engine
