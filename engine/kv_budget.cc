#include "engine/kv_budget.h"

#include <algorithm>

#include "kernels/kv_block_layout.h"

namespace baton::engine {

int64_t KvTokensAtAdmission(int64_t n_prompt_tokens, int64_t max_tokens,
                            int32_t reserve_ahead_tokens) {
  const int64_t all_generated = std::max<int64_t>(0, max_tokens - 1);
  const int64_t ahead = reserve_ahead_tokens < 0
                            ? all_generated
                            : std::min<int64_t>(all_generated, reserve_ahead_tokens);
  return n_prompt_tokens + ahead;
}

int64_t KvBlocksFor(int64_t n_tokens, int32_t block_size) {
  return (n_tokens + block_size - 1) / block_size;
}

int64_t KvBlocksAtAdmission(int64_t n_prompt_tokens, int64_t n_tokens, int32_t block_size,
                            std::span<const int32_t> group_windows) {
  const int64_t blocks = KvBlocksFor(n_tokens, block_size);
  if (group_windows.empty()) return blocks;
  const auto position = static_cast<int32_t>(std::min<int64_t>(n_prompt_tokens, INT32_MAX));
  int64_t held = 0;
  for (int32_t window : group_windows) {
    held += std::max<int64_t>(
        0, blocks - kernels::FirstVisibleBlock(window, position, block_size));
  }
  return held;
}

}  // namespace baton::engine
