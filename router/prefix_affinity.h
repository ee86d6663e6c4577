// KV-aware placement (router flag --policy kv-aware): how much of a request's prompt a worker
// holds in its prefix cache.
//
// Workers advertise the hashes of their cached KV blocks (WorkerLoad.cached_block_hashes,
// engine/block_hash.h); the router hashes the prompt the same way and counts the leading blocks a
// worker holds. What placing a request there would take is predicted in seconds
// (service_time_model.h).
//
// Thread-safety: PromptHashes is not thread-safe (it memoizes); the functions are pure.
#ifndef BATON_ROUTER_PREFIX_AFFINITY_H_
#define BATON_ROUTER_PREFIX_AFFINITY_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "engine/vocab.h"

namespace baton::router {

// A prompt's full-block hashes as a worker of a given block size would compute them, up to the
// tokens a worker may take from its cache (engine::MaxCachedTokens).
class PromptHashes {
 public:
  // `prompt` must outlive this; `cache_salt` as the request's (engine/block_hash.h).
  PromptHashes(absl::string_view model_fingerprint, absl::string_view cache_salt,
               std::span<const engine::TokenId> prompt);
  // A temporary prompt would be gone before its blocks are hashed (on demand).
  PromptHashes(absl::string_view model_fingerprint, absl::string_view cache_salt,
               std::vector<engine::TokenId>&& prompt) = delete;

  // Valid as long as this object.
  const std::vector<uint64_t>& ForBlockSize(int32_t block_size);

 private:
  uint64_t seed_;
  std::span<const engine::TokenId> prompt_;
  absl::node_hash_map<int32_t, std::vector<uint64_t>> by_block_size_;  // stable references
};

// The number of leading `prompt_hashes` found in `cached`.
int32_t CachedPrefixBlocks(const std::vector<uint64_t>& prompt_hashes,
                           const absl::flat_hash_set<uint64_t>& cached);

}  // namespace baton::router

#endif  // BATON_ROUTER_PREFIX_AFFINITY_H_
