#include "kernels/cuda/attention_batch.h"

#include <algorithm>

namespace baton::kernels::cuda {

void AttentionBatch::Build(std::span<const AttentionQueries> batch, bool tiled) {
  seqs.clear();
  tables.clear();
  decode_queries.clear();
  prefill_queries.clear();
  prefill_tiles.clear();
  bases_16_byte_aligned = true;
  for (size_t s = 0; s < batch.size(); ++s) {
    const AttentionQueries& in = batch[s];
    seqs.push_back({.q = in.q,
                    .out = in.out,
                    .k_base = in.kv.k_base,
                    .v_base = in.kv.v_base,
                    .table_begin = static_cast<int32_t>(tables.size())});
    bases_16_byte_aligned = bases_16_byte_aligned &&
                            reinterpret_cast<uintptr_t>(in.kv.k_base) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(in.kv.v_base) % 16 == 0;
    tables.insert(tables.end(), in.kv.block_table, in.kv.block_table + BlocksOf(in.kv));
    const bool prefill = tiled && in.n_q > 1;
    std::vector<AttentionQuery>& queries = prefill ? prefill_queries : decode_queries;
    for (int64_t i = 0; i < in.n_q; ++i) {
      if (prefill && i % kAttentionTileQueries == 0) {
        const int64_t count = std::min<int64_t>(kAttentionTileQueries, in.n_q - i);
        prefill_tiles.push_back({.seq = static_cast<int32_t>(s),
                                 .first_query = static_cast<int32_t>(queries.size()),
                                 .count = static_cast<int32_t>(count)});
      }
      queries.push_back({.seq = static_cast<int32_t>(s),
                         .row = static_cast<int32_t>(i),
                         .position = in.q_positions[i]});
    }
  }
}

}  // namespace baton::kernels::cuda
