// Where a token's K (or V) row lies within a paged KV cache block: the one rule that every
// reader and writer of the cache follows (KvLayerView on the host, the CUDA kernels on the
// device), so that blocks mean the same on every backend and on the wire (kvtransfer).
//
// A block's K (and, apart, its V) is f16 [n_kv_head, block_size, head_dim]: each kv head's rows
// are contiguous within the block. A decode's attention reads one kv head's rows token after
// token, so they stream from memory as one run per block (with every head's row of a token side
// by side, [block_size, n_kv_head, head_dim], a head read one row in n_kv_head: about 2x slower
// over 65,536 tokens on a 2-core AMD EPYC).
//
// Thread-safety: pure functions.
#ifndef BATON_KERNELS_KV_BLOCK_LAYOUT_H_
#define BATON_KERNELS_KV_BLOCK_LAYOUT_H_

#include <cstdint>

#include "kernels/host_device.h"

namespace baton::kernels {

// The layout's name: what a KV push header carries (kvtransfer) and the model fingerprint
// includes, so that processes of another layout refuse each other's blocks.
inline constexpr char kKvBlockLayoutName[] = "head_major";

// Elements from a block's first K (or V) element to the row of its slot `slot` (token
// t % block_size), kv head kv_h.
BATON_HOST_DEVICE inline int64_t KvRowInBlock(int32_t slot, int32_t kv_h, int32_t block_size,
                                              int32_t head_dim) {
  return (static_cast<int64_t>(kv_h) * block_size + slot) * head_dim;
}

// Sliding-window attention: the first token a query at `position` sees in a layer with a window
// of `window` tokens (llama.cpp's standard window: position - t < window); 0 for no window.
BATON_HOST_DEVICE inline int32_t FirstVisibleToken(int32_t window, int32_t position) {
  return window > 0 && position >= window ? position - window + 1 : 0;
}

// The first block a layer with a window of `window` tokens must hold for queries at `position`
// and after: the blocks before it hold only tokens that no such query sees.
BATON_HOST_DEVICE inline int32_t FirstVisibleBlock(int32_t window, int32_t position,
                                                   int32_t block_size) {
  return FirstVisibleToken(window, position) / block_size;
}

}  // namespace baton::kernels

#endif  // BATON_KERNELS_KV_BLOCK_LAYOUT_H_
