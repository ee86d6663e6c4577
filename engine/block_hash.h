// The identity of a full KV block for prefix caching: a hash of its tokens chained with the hash
// of the block before it, the chain seeded by the model fingerprint (vLLM's block hashes). Equal
// hashes mean the same model and the same tokens from position 0 up to the block's end, so the
// block's K/V are equal too (the kernels are batch-invariant: the KV of a token does not depend on
// how it was computed). A partial last block has no hash: it is never shared.
//
// 64-bit XXH64 hashes: two different prefixes collide with probability ~n^2 / 2^65 over n cached
// blocks (below 1e-9 for a million blocks).
//
// Thread-safety: pure functions.
#ifndef BATON_ENGINE_BLOCK_HASH_H_
#define BATON_ENGINE_BLOCK_HASH_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/vocab.h"

namespace baton::engine {

// The longest cache salt accepted anywhere, in bytes.
inline constexpr size_t kMaxCacheSaltBytes = 256;

// The chain's seed for a model (engine/model.h fingerprint) and a request's cache salt (empty:
// none): no hash of one model, or of one salt, matches another's. Requests with different salts
// never share cached KV, so one tenant cannot learn from a cache hit's speed what another sent
// (vLLM's cache_salt).
uint64_t BlockHashSeed(absl::string_view model_fingerprint, absl::string_view cache_salt = "");
// The model's seed salted: BlockHashSeed(fingerprint, salt) == SaltedSeed(BlockHashSeed(fingerprint), salt).
uint64_t SaltedSeed(uint64_t model_seed, absl::string_view cache_salt);

// One hash per full block of `tokens` (tokens.size() / block_size of them), in order.
std::vector<uint64_t> PrefixBlockHashes(uint64_t seed, std::span<const TokenId> tokens,
                                        int32_t block_size);

// The hash under which group `group` of a paged cache (engine/kv_layer_groups.h) publishes its
// block of hash `hash`: group 0's is the hash itself (what the router matches), every other
// group's a distinct one, so that one pool can hold every group's copy of a block.
uint64_t GroupBlockHash(uint64_t hash, int32_t group);

}  // namespace baton::engine

#endif  // BATON_ENGINE_BLOCK_HASH_H_
