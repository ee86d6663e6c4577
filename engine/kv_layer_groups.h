// How the paged KV cache groups a model's layers (vLLM's hybrid KV cache manager): the layers of
// one sliding window (0: none) form groups that share a block table per sequence, so that a
// windowed group can let go of the blocks its window has passed while the others keep theirs.
// Every group holds the same number of layers, so that one block (one group's K and V for
// block_size tokens) has one size and every group draws on one pool.
//
// Gemma 3 270M (15 local layers of window 512, 3 global): groups of 3 layers, one global and five
// local. A model without windows: one group of every layer (the cache as it always was).
//
// Thread-safety: a plain value type.
#ifndef BATON_ENGINE_KV_LAYER_GROUPS_H_
#define BATON_ENGINE_KV_LAYER_GROUPS_H_

#include <cstdint>
#include <span>
#include <vector>

namespace baton::engine {

struct KvLayerGroups {
  int32_t layers_per_group = 0;
  std::vector<int32_t> windows;   // [n_groups]: each group's window, ascending (0 first)
  std::vector<int32_t> group_of;  // [n_layer]
  std::vector<int32_t> slot_of;   // [n_layer]: the layer's place in its group

  int32_t n_groups() const { return static_cast<int32_t>(windows.size()); }
  int32_t n_layer() const { return static_cast<int32_t>(group_of.size()); }
};

// Groups layers by their window (layer_windows[l]: layer l's, >= 0): the group size is the
// greatest common divisor of the numbers of layers with each window, and a window's layers fill
// its groups in layer order.
KvLayerGroups GroupLayersByWindow(std::span<const int32_t> layer_windows);

}  // namespace baton::engine

#endif  // BATON_ENGINE_KV_LAYER_GROUPS_H_
