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

#include <cstdint>
#include <span>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/vocab.h"

namespace baton::engine {

// The chain's seed for a model (engine/model.h fingerprint): no hash of one model matches another's.
uint64_t BlockHashSeed(absl::string_view model_fingerprint);

// One hash per full block of `tokens` (tokens.size() / block_size of them), in order.
std::vector<uint64_t> PrefixBlockHashes(uint64_t seed, std::span<const TokenId> tokens,
                                        int32_t block_size);

}  // namespace baton::engine

#endif  // BATON_ENGINE_BLOCK_HASH_H_
