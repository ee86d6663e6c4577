// Software prefetch of a paged KV cache's rows, for the attention kernels of every SIMD level.
// The paged rows defeat the hardware prefetcher, and the weights streamed between two layers'
// attention have evicted them.
//
// Include it before any `#pragma GCC target`: it needs only SSE, and an inline function compiled
// for a wider target must not leak into other translation units.
//
// Thread-safety: no state.
#ifndef BATON_KERNELS_CPU_KV_PREFETCH_H_
#define BATON_KERNELS_CPU_KV_PREFETCH_H_

#include <xmmintrin.h>

#include <cstdint>

#include "kernels/backend.h"

namespace baton::kernels {

// Asks for the K and V rows at `offset` (KvLayerView::RowOffset). Always inlined: GCC finds a
// function that only prefetches free of effects and drops the calls.
[[gnu::always_inline]] inline void PrefetchKvRow(const KvLayerView& kv, int64_t offset) {
  const int row_bytes = kv.head_dim * static_cast<int>(sizeof(uint16_t));
  const char* k_row = reinterpret_cast<const char*>(kv.k_base + offset);
  const char* v_row = reinterpret_cast<const char*>(kv.v_base + offset);
  for (int b = 0; b < row_bytes; b += 64) {
    _mm_prefetch(k_row + b, _MM_HINT_T0);
    _mm_prefetch(v_row + b, _MM_HINT_T0);
  }
}

// The rows of tokens [t_begin, t_end) of kv head kv_h, which must be in the view.
[[gnu::always_inline]] inline void PrefetchKvRows(const KvLayerView& kv, int32_t kv_h,
                                                  int32_t t_begin, int32_t t_end) {
  for (int32_t t = t_begin; t < t_end; ++t) PrefetchKvRow(kv, kv.RowOffset(t, kv_h));
}

// The rows at offsets[0..count) (KvLayerView::RowOffsets).
[[gnu::always_inline]] inline void PrefetchKvRows(const KvLayerView& kv, const int64_t* offsets,
                                                  int count) {
  for (int c = 0; c < count; ++c) PrefetchKvRow(kv, offsets[c]);
}

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_KV_PREFETCH_H_
