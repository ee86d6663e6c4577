#include "engine/block_hash.h"

#include <xxhash.h>

namespace baton::engine {

uint64_t BlockHashSeed(absl::string_view model_fingerprint, absl::string_view cache_salt) {
  return SaltedSeed(XXH64(model_fingerprint.data(), model_fingerprint.size(), 0), cache_salt);
}

uint64_t SaltedSeed(uint64_t model_seed, absl::string_view cache_salt) {
  if (cache_salt.empty()) return model_seed;
  return XXH64(cache_salt.data(), cache_salt.size(), model_seed);
}

std::vector<uint64_t> PrefixBlockHashes(uint64_t seed, std::span<const TokenId> tokens,
                                        int32_t block_size) {
  std::vector<uint64_t> hashes;
  if (block_size <= 0) return hashes;
  const size_t n_full = tokens.size() / static_cast<size_t>(block_size);
  hashes.reserve(n_full);
  uint64_t previous = seed;
  for (size_t b = 0; b < n_full; ++b) {
    const TokenId* block = tokens.data() + b * block_size;
    previous = XXH64(block, sizeof(TokenId) * static_cast<size_t>(block_size), previous);
    hashes.push_back(previous);
  }
  return hashes;
}

uint64_t GroupBlockHash(uint64_t hash, int32_t group) {
  if (group == 0) return hash;
  return XXH64(&group, sizeof(group), hash);
}

}  // namespace baton::engine
