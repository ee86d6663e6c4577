// How much KV a decode worker holds for a sequence when it admits it. One rule, used by the decode
// worker's reservations and by the router's placement (which learns each worker's
// reserve_ahead_tokens from its ModelIdentity), so that placement counts blocks as the worker does.
//
// Thread-safety: pure functions.
#ifndef BATON_ENGINE_KV_BUDGET_H_
#define BATON_ENGINE_KV_BUDGET_H_

#include <cstdint>
#include <span>

namespace baton::engine {

// The default of a decode worker's --kv-reserve-ahead.
inline constexpr int32_t kDefaultReserveAheadTokens = 64;

// Tokens of KV held at admission: the prompt and the first min(max_tokens - 1,
// reserve_ahead_tokens) generated tokens (the last generated token is never fed back, so
// prompt + max_tokens - 1 is all a sequence ever needs). A negative reserve_ahead_tokens holds all
// of it up front; otherwise the sequence grows block by block while it decodes.
int64_t KvTokensAtAdmission(int64_t n_prompt_tokens, int64_t max_tokens,
                            int32_t reserve_ahead_tokens);

// Blocks of `block_size` tokens that hold `n_tokens`.
int64_t KvBlocksFor(int64_t n_tokens, int32_t block_size);

// Blocks a paged cache (engine/kv_cache.h) holds for a sequence of n_prompt_tokens whose KV
// holds n_tokens (KvTokensAtAdmission) when it is admitted: each group's blocks for n_tokens,
// but a windowed group's none that the first generated token's query does not see.
// `group_windows`: the window of each of the cache's layer groups (kv_layer_groups.h); empty:
// one group without a window.
int64_t KvBlocksAtAdmission(int64_t n_prompt_tokens, int64_t n_tokens, int32_t block_size,
                            std::span<const int32_t> group_windows);

}  // namespace baton::engine

#endif  // BATON_ENGINE_KV_BUDGET_H_
