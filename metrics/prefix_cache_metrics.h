// The prefix cache's metrics (engine/prefix_cache.h), one set per process, fed by whichever part
// of a worker looks prefixes up (the prefill scheduler, the decode worker's reservations):
//
//   baton:prefix_cache_queries_total         counter  prompt tokens looked up (vLLM's name)
//   baton:prefix_cache_hits_total            counter  of them, found cached (vLLM's name)
//   baton:prefix_cache_block_queries_total   counter  full prompt blocks looked up
//   baton:prefix_cache_block_hits_total      counter  of them, found cached
//   baton:prefix_cache_evicted_blocks_total  counter  cached blocks evicted to make room
//   baton:prefix_cache_blocks                gauge    blocks cached now (held or not)
//
// Thread-safety: thread-safe.
#ifndef BATON_METRICS_PREFIX_CACHE_METRICS_H_
#define BATON_METRICS_PREFIX_CACHE_METRICS_H_

#include <cstdint>

namespace baton::metrics {

// One lookup: `queried_tokens` tokens that could have come from the cache, `hit_tokens` that did,
// in blocks of `block_size` tokens.
void RecordPrefixLookup(int64_t queried_tokens, int64_t hit_tokens, int32_t block_size);
void RecordPrefixEvictions(int64_t blocks);
void SetPrefixCachedBlocks(int64_t blocks);

// The counters so far (this process).
struct PrefixCacheTotals {
  int64_t queried_tokens = 0;
  int64_t hit_tokens = 0;
  int64_t queried_blocks = 0;
  int64_t hit_blocks = 0;
  int64_t evicted_blocks = 0;
};
PrefixCacheTotals ReadPrefixCacheTotals();

}  // namespace baton::metrics

#endif  // BATON_METRICS_PREFIX_CACHE_METRICS_H_
