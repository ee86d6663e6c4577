// Prefix caching over a KvCache's block pool (engine/block_pool.h): a sequence publishes its full
// blocks under their hash chain (engine/block_hash.h) once their tokens are final, and a new
// sequence starts from the longest chain of its tokens that is cached, sharing those blocks
// copy-free (each holder counted; the pool evicts only blocks nobody holds). A published block is
// never written again: a sequence only writes positions past its table's n_tokens, and a matched
// prefix ends on a block boundary.
//
// Disabled, it matches and publishes nothing (every sequence computes all of its KV).
//
// Thread-safety: as KvCache: the pool is thread-safe, a BlockTable belongs to its caller.
#ifndef BATON_ENGINE_PREFIX_CACHE_H_
#define BATON_ENGINE_PREFIX_CACHE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/kv_cache.h"
#include "engine/vocab.h"

namespace baton::engine {

class PrefixCache {
 public:
  // `cache` must outlive this. Hashes are seeded by `model_fingerprint`.
  PrefixCache(KvCache* cache, absl::string_view model_fingerprint, bool enabled);

  bool enabled() const { return enabled_; }
  int32_t block_size() const { return cache_.block_size(); }

  // Fills the empty `table` with the cached blocks of the longest cached prefix of `tokens`, at
  // most `max_tokens` tokens (whole blocks only), each block held for the table; sets
  // table.n_tokens. Returns the tokens matched (0 when disabled or nothing is cached). Only
  // blocks published with the same `cache_salt` match (engine/block_hash.h).
  //
  // Groups without a window must hold the prefix's every block; a windowed group only the
  // blocks that queries from max(first_query, the match's end) on see (a windowed layer's cache
  // keeps only its window: kv_cache.h), so a prefix matches only as far as those are cached.
  int32_t Match(std::span<const TokenId> tokens, int32_t max_tokens, BlockTable& table,
                absl::string_view cache_salt = "", int32_t first_query = 0);

  // The tokens Match() would take now, without holding anything afterwards: an estimate for
  // another thread (the cache may change before the real Match).
  int32_t CachedTokens(std::span<const TokenId> tokens, int32_t max_tokens,
                       absl::string_view cache_salt = "");

  // Publishes the full blocks of `table` among its first table.n_tokens tokens: each group's
  // blocks that it holds, under the group's own hash (GroupBlockHash); `tokens` are the
  // sequence's tokens from position 0 (at least table.n_tokens of them).
  void Publish(std::span<const TokenId> tokens, const BlockTable& table,
               absl::string_view cache_salt = "");

  // Up to `max_count` hashes of cached blocks (BlockPool::PublishedHashes); empty when disabled.
  std::vector<uint64_t> Advertised(int32_t max_count) const;

 private:
  KvCache& cache_;
  const uint64_t seed_;
  const bool enabled_;
};

// Tokens a sequence of `n_tokens` may take from the cache: whole blocks, leaving at least one
// token to compute (the last token's logits are needed).
int32_t MaxCachedTokens(int32_t n_tokens, int32_t block_size);

}  // namespace baton::engine

#endif  // BATON_ENGINE_PREFIX_CACHE_H_
