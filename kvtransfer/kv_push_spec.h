// What one KV push carries and where it lands: a request's prompt KV, all layers, sent to its
// reservation on a decode worker.
//
// Layout of the data: each block of one layer is `layer_block_bytes()` bytes: `dtype`
// [K|V][n_kv_head][block_size][head_dim], or K alone where kv_planes is 1 (engine/kv_cache.h's
// layout, kernels/kv_block_layout.h; the sender's cache type, kv_dtype.h), blocks indexed in
// block-table order.
//
// What is sent: blocks [LayerFirstBlock(layer), n_blocks()) of each layer of the prompt. The
// receiver already holds blocks [0, first_block) (a prefix it had cached, engine/prefix_cache.h);
// they do not travel. Nor do a windowed layer's blocks that the first generated token's query
// cannot see (sliding-window attention: the receiver's cache does not keep them).
//
// Order of the data (the push's canonical order): the prompt's blocks are cut into ranges of
// `chunk_blocks` blocks counted from block 0 (the last range may be shorter; 0 means one range of
// every block), each range clipped to the blocks sent; ranges left empty are skipped. The
// ranges go one after the other; within a range, its blocks of layer 0, then of layer 1, ...
// (each clipped to the layer's blocks sent; a layer with none in the range is passed over);
// within a layer, blocks in order. A prefill worker that computes a long prompt in chunks
// (chunked prefill) sends each chunk's range as soon as that chunk is done; one that computes
// the prompt at once sends one range, layer by layer.
//
// Thread-safety: plain value type.
#ifndef BATON_KVTRANSFER_KV_PUSH_SPEC_H_
#define BATON_KVTRANSFER_KV_PUSH_SPEC_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kv_block_layout.h"
#include "kvtransfer/kv_dtype.h"

namespace baton::kvtransfer {

struct KvPushSpec {
  std::string reservation_id;
  std::string model_fingerprint;
  int32_t n_layer = 0;
  int32_t kv_dim = 0;        // n_kv_head * head_dim
  int32_t kv_planes = 2;     // 2: a block's K then V; 1: K alone (ModelConfig::kv_planes)
  int32_t block_size = 0;    // tokens per block
  int32_t n_tokens = 0;      // prompt tokens whose KV is pushed
  int32_t chunk_blocks = 0;  // blocks per range; 0: one range
  int32_t first_block = 0;   // blocks before it are the receiver's already; < n_blocks()
  KvDtype dtype = KvDtype::kF16;  // the elements' type as sent
  // Each layer's sliding window in tokens, 0 for none; empty: no layer has one.
  std::vector<int32_t> layer_windows;

  int32_t n_blocks() const { return (n_tokens + block_size - 1) / block_size; }
  // The first block of `layer` sent: first_block, or a windowed layer's first block that the
  // query at position n_tokens sees, whichever is later (n_blocks(): none, for a window too
  // short to see a prompt token from there).
  int32_t LayerFirstBlock(int32_t layer) const {
    const int32_t window = layer_windows.empty() ? 0 : layer_windows[layer];
    return std::max(first_block, kernels::FirstVisibleBlock(window, n_tokens, block_size));
  }
  // Elements of one layer's block (K and V, or K alone), and their bytes as sent.
  int64_t layer_block_elements() const { return int64_t{kv_planes} * block_size * kv_dim; }
  int64_t layer_block_bytes() const { return layer_block_elements() * KvDtypeBytes(dtype); }
  // Blocks sent, over every layer.
  int64_t sent_blocks() const {
    int64_t sent = 0;
    for (int32_t layer = 0; layer < n_layer; ++layer) sent += n_blocks() - LayerFirstBlock(layer);
    return sent;
  }
  int64_t total_bytes() const { return layer_block_bytes() * sent_blocks(); }
  // Blocks per range (every range but possibly the last).
  int32_t range_blocks() const {
    return chunk_blocks > 0 ? std::min(chunk_blocks, n_blocks()) : n_blocks();
  }
  // The end of the range that holds block `block` (0 <= block < n_blocks()).
  int32_t RangeEnd(int32_t block) const {
    const int32_t per_range = std::max(1, range_blocks());
    return static_cast<int32_t>(
        std::min<int64_t>(n_blocks(), (int64_t{block} / per_range + 1) * per_range));
  }
};

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_KV_PUSH_SPEC_H_
