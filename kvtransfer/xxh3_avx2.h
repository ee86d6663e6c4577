// XXH3-64 built for AVX2: about 2.5x the speed of libxxhash's build for baseline x86-64 (SSE2),
// on data in cache; the same function, so the same hashes. kv_wire.h's ChunkChecksum chooses it
// where the CPU has AVX2 (kernels/cpu/cpu_isa.h, BATON_CPU_ISA included).
//
// Thread-safety: pure functions.
#ifndef BATON_KVTRANSFER_XXH3_AVX2_H_
#define BATON_KVTRANSFER_XXH3_AVX2_H_

#include <cstddef>
#include <cstdint>

namespace baton::kvtransfer::internal {

struct BytePiece {
  const uint8_t* data;
  size_t size;
};

// True when this build has the AVX2 version (an x86-64 compiler that accepts -mavx2).
bool HaveXxh3Avx2();

// XXH3-64, seed 0, of `n` pieces in order. Call only where the CPU supports AVX2.
uint64_t Xxh3Avx2(const BytePiece* pieces, size_t n);

}  // namespace baton::kvtransfer::internal

#endif  // BATON_KVTRANSFER_XXH3_AVX2_H_
