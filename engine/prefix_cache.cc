#include "engine/prefix_cache.h"

#include <algorithm>

#include "absl/log/check.h"
#include "engine/block_hash.h"

namespace baton::engine {

PrefixCache::PrefixCache(KvCache* cache, absl::string_view model_fingerprint, bool enabled)
    : cache_(*cache), seed_(BlockHashSeed(model_fingerprint)), enabled_(enabled) {}

int32_t PrefixCache::Match(std::span<const TokenId> tokens, int32_t max_tokens,
                           BlockTable& table, absl::string_view cache_salt) {
  CHECK(table.blocks.empty()) << "prefix match into a table that holds blocks";
  if (!enabled_ || max_tokens <= 0) return 0;
  const size_t usable = std::min(tokens.size(), static_cast<size_t>(max_tokens));
  const std::vector<uint64_t> hashes =
      PrefixBlockHashes(SaltedSeed(seed_, cache_salt), tokens.first(usable), cache_.block_size());
  table.blocks = cache_.pool().MatchPrefix(hashes);
  table.n_tokens = static_cast<int32_t>(table.blocks.size()) * cache_.block_size();
  return table.n_tokens;
}

void PrefixCache::Publish(std::span<const TokenId> tokens, const BlockTable& table,
                          absl::string_view cache_salt) {
  if (!enabled_) return;
  CHECK_GE(tokens.size(), static_cast<size_t>(table.n_tokens));
  const std::vector<uint64_t> hashes = PrefixBlockHashes(
      SaltedSeed(seed_, cache_salt), tokens.first(table.n_tokens), cache_.block_size());
  for (size_t b = 0; b < hashes.size() && b < table.blocks.size(); ++b) {
    cache_.pool().Publish(table.blocks[b], hashes[b]);
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
