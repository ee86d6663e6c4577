// Compiled with -mavx2 (kvtransfer/CMakeLists.txt). The file uses nothing but xxhash's static
// inline functions and C types, so no AVX2 instruction can reach a shared inline function that
// the rest of the program would link to.
#include "kvtransfer/xxh3_avx2.h"

#ifdef __AVX2__
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include "xxhash.h"
#endif

namespace baton::kvtransfer::internal {

#ifdef __AVX2__

bool HaveXxh3Avx2() { return true; }

uint64_t Xxh3Avx2(const BytePiece* pieces, size_t n) {
  if (n == 1) return XXH3_64bits(pieces[0].data, pieces[0].size);
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset(&state);
  for (size_t i = 0; i < n; ++i) XXH3_64bits_update(&state, pieces[i].data, pieces[i].size);
  return XXH3_64bits_digest(&state);
}

#else

bool HaveXxh3Avx2() { return false; }
uint64_t Xxh3Avx2(const BytePiece*, size_t) { return 0; }

#endif

}  // namespace baton::kvtransfer::internal
