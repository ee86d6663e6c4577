#include "engine/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/unicode.h"
#include "engine/unicode_nfc_data.h"

namespace baton::engine::unicode {
namespace {

// Hangul syllable arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t CombiningClassOf(uint32_t cpt) {
  const CombiningClass* end = kCombiningClasses + kCombiningClassCount;
  const CombiningClass* it = std::lower_bound(
      kCombiningClasses, end, cpt, [](const CombiningClass& e, uint32_t c) { return e.cpt < c; });
  return it != end && it->cpt == cpt ? it->ccc : 0;
}

void AppendDecomposed(uint32_t cpt, std::vector<uint32_t>* out) {
  if (cpt >= kSBase && cpt < kSBase + kSCount) {
    const uint32_t s = cpt - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, cpt, [](const Decomposition& e, uint32_t c) { return e.cpt < c; });
  if (it == end || it->cpt != cpt) {
    out->push_back(cpt);
    return;
  }
  AppendDecomposed(it->first, out);
  if (it->second != 0) AppendDecomposed(it->second, out);
}

// The primary composite of `first` + `second`, 0 when there is none.
uint32_t Compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it =
      std::lower_bound(kCompositions, end, std::make_pair(first, second),
                       [](const Composition& e, const std::pair<uint32_t, uint32_t>& key) {
                         return std::make_pair(e.first, e.second) < key;
                       });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

// Stable sort of each run of non-starters by combining class (canonical ordering).
void OrderCanonically(std::vector<uint32_t>* cpts) {
  auto by_class = [](uint32_t a, uint32_t b) { return CombiningClassOf(a) < CombiningClassOf(b); };
  for (auto run = cpts->begin(); run != cpts->end();) {
    if (CombiningClassOf(*run) == 0) {
      ++run;
      continue;
    }
    auto run_end =
        std::find_if(run, cpts->end(), [](uint32_t c) { return CombiningClassOf(c) == 0; });
    std::stable_sort(run, run_end, by_class);
    run = run_end;
  }
}

// Canonical composition of decomposed, canonically ordered code points.
std::vector<uint32_t> ComposeCanonically(const std::vector<uint32_t>& cpts) {
  std::vector<uint32_t> out;
  out.reserve(cpts.size());
  size_t starter = SIZE_MAX;  // index in `out` of the last starter
  uint8_t last_class = 0;     // combining class of out.back()
  for (uint32_t cpt : cpts) {
    const uint8_t ccc = CombiningClassOf(cpt);
    const bool adjacent = starter != SIZE_MAX && starter + 1 == out.size();
    const bool unblocked = starter != SIZE_MAX && last_class != 0 && last_class < ccc;
    if (adjacent || unblocked) {
      if (const uint32_t composite = Compose(out[starter], cpt); composite != 0) {
        out[starter] = composite;
        continue;
      }
    }
    if (ccc == 0) starter = out.size();
    last_class = ccc;
    out.push_back(cpt);
  }
  return out;
}

}  // namespace

std::string ToNfc(std::string_view text) {
  std::vector<uint32_t> cpts;
  DecodeUtf8Lenient(text, &cpts);
  if (std::all_of(cpts.begin(), cpts.end(), [](uint32_t c) { return c < kNfcQuickCheckBelow; })) {
    return std::string(text);
  }
  std::vector<uint32_t> decomposed;
  decomposed.reserve(cpts.size() + 8);
  for (uint32_t cpt : cpts) AppendDecomposed(cpt, &decomposed);
  OrderCanonically(&decomposed);
  std::string out;
  out.reserve(text.size());
  for (uint32_t cpt : ComposeCanonically(decomposed)) AppendUtf8(cpt, &out);
  return out;
}

}  // namespace baton::engine::unicode
