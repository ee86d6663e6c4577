#include "router/prefix_affinity.h"

#include <algorithm>

#include "engine/block_hash.h"
#include "engine/prefix_cache.h"

namespace baton::router {

PromptHashes::PromptHashes(absl::string_view model_fingerprint, absl::string_view cache_salt,
                           std::span<const engine::TokenId> prompt)
    : seed_(engine::BlockHashSeed(model_fingerprint, cache_salt)), prompt_(prompt) {}

const std::vector<uint64_t>& PromptHashes::ForBlockSize(int32_t block_size) {
  auto [it, inserted] = by_block_size_.try_emplace(block_size);
  if (inserted && block_size > 0) {
    const int32_t usable =
        engine::MaxCachedTokens(static_cast<int32_t>(prompt_.size()), block_size);
    it->second = engine::PrefixBlockHashes(seed_, prompt_.first(usable), block_size);
  }
  return it->second;
}

int32_t CachedPrefixBlocks(const std::vector<uint64_t>& prompt_hashes,
                           const absl::flat_hash_set<uint64_t>& cached) {
  int32_t n = 0;
  while (n < static_cast<int32_t>(prompt_hashes.size()) && cached.contains(prompt_hashes[n])) ++n;
  return n;
}

}  // namespace baton::router
