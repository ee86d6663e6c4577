#include "engine/kv_layer_groups.h"

#include <map>
#include <numeric>

namespace baton::engine {

KvLayerGroups GroupLayersByWindow(std::span<const int32_t> layer_windows) {
  std::map<int32_t, std::vector<int32_t>> layers_of_window;  // ascending windows
  for (size_t l = 0; l < layer_windows.size(); ++l) {
    layers_of_window[layer_windows[l]].push_back(static_cast<int32_t>(l));
  }
  KvLayerGroups groups;
  for (const auto& [window, layers] : layers_of_window) {
    groups.layers_per_group =
        std::gcd(groups.layers_per_group, static_cast<int32_t>(layers.size()));
  }
  groups.group_of.resize(layer_windows.size());
  groups.slot_of.resize(layer_windows.size());
  for (const auto& [window, layers] : layers_of_window) {
    for (size_t i = 0; i < layers.size(); ++i) {
      const int32_t slot = static_cast<int32_t>(i) % groups.layers_per_group;
      if (slot == 0) groups.windows.push_back(window);
      groups.group_of[layers[i]] = groups.n_groups() - 1;
      groups.slot_of[layers[i]] = slot;
    }
  }
  return groups;
}

}  // namespace baton::engine
