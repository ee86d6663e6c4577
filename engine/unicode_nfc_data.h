// The Unicode tables behind NFC normalization (unicode_nfc.h), generated into
// unicode_nfc_data.cc by scripts/reference/make_unicode_nfc.py. Each table is sorted by its first
// field(s). Hangul syllables are composed and decomposed by arithmetic, not by these tables.
//
// Thread-safety: constant data.
#ifndef BATON_ENGINE_UNICODE_NFC_DATA_H_
#define BATON_ENGINE_UNICODE_NFC_DATA_H_

#include <cstddef>
#include <cstdint>

namespace baton::engine::unicode {

struct CombiningClass {
  uint32_t cpt;
  uint8_t ccc;  // canonical combining class, never 0 here
};

// One level of a canonical decomposition: cpt -> first (+ second, 0 for a singleton).
struct Decomposition {
  uint32_t cpt;
  uint32_t first;
  uint32_t second;
};

// A primary composite: first + second -> composite.
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

// Text made only of code points below this is already in NFC.
extern const uint32_t kNfcQuickCheckBelow;
extern const CombiningClass kCombiningClasses[];
extern const size_t kCombiningClassCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace baton::engine::unicode

#endif  // BATON_ENGINE_UNICODE_NFC_DATA_H_
