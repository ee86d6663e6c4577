#include "metrics/prefix_cache_metrics.h"

#include "metrics/metrics.h"

namespace baton::metrics {
namespace {

struct PrefixCacheMetrics {
  Counter& queries;
  Counter& hits;
  Counter& block_queries;
  Counter& block_hits;
  Counter& evicted;
  Gauge& blocks;
};

PrefixCacheMetrics& Get() {
  Registry& r = Registry::Global();
  static PrefixCacheMetrics m{
      .queries = r.GetCounter("baton:prefix_cache_queries_total",
                              "Prompt tokens looked up in the prefix cache."),
      .hits = r.GetCounter("baton:prefix_cache_hits_total",
                           "Prompt tokens found in the prefix cache (not computed or received)."),
      .block_queries = r.GetCounter("baton:prefix_cache_block_queries_total",
                                    "Full prompt KV blocks looked up in the prefix cache."),
      .block_hits = r.GetCounter("baton:prefix_cache_block_hits_total",
                                 "Full prompt KV blocks found in the prefix cache."),
      .evicted = r.GetCounter("baton:prefix_cache_evicted_blocks_total",
                              "Cached KV blocks evicted to make room."),
      .blocks = r.GetGauge("baton:prefix_cache_blocks", "KV blocks in the prefix cache now."),
  };
  return m;
}

}  // namespace

void RecordPrefixLookup(int64_t queried_tokens, int64_t hit_tokens, int32_t block_size) {
  PrefixCacheMetrics& m = Get();
  m.queries.Increment(static_cast<double>(queried_tokens));
  m.hits.Increment(static_cast<double>(hit_tokens));
  if (block_size <= 0) return;
  m.block_queries.Increment(static_cast<double>(queried_tokens / block_size));
  m.block_hits.Increment(static_cast<double>(hit_tokens / block_size));
}

void RecordPrefixEvictions(int64_t blocks) { Get().evicted.Increment(static_cast<double>(blocks)); }

void SetPrefixCachedBlocks(int64_t blocks) { Get().blocks.Set(static_cast<double>(blocks)); }

PrefixCacheTotals ReadPrefixCacheTotals() {
  const PrefixCacheMetrics& m = Get();
  return {.queried_tokens = static_cast<int64_t>(m.queries.value()),
          .hit_tokens = static_cast<int64_t>(m.hits.value()),
          .queried_blocks = static_cast<int64_t>(m.block_queries.value()),
          .hit_blocks = static_cast<int64_t>(m.block_hits.value()),
          .evicted_blocks = static_cast<int64_t>(m.evicted.value())};
}

}  // namespace baton::metrics
