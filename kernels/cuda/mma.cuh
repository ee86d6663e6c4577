// The tensor-core instructions the kernels use, with the operand layouts the PTX ISA gives
// ("matrix fragments for mma.m16n8k32 / mma.m16n8k16"; mma_warp_tile.h and
// flash_attention_warp.h say which lane holds what). Compute capability 8.0 or newer (the
// build's architectures are 80 and 90); elsewhere they trap.
#ifndef BATON_KERNELS_CUDA_MMA_CUH_
#define BATON_KERNELS_CUDA_MMA_CUH_

#include <cstdint>

namespace baton::kernels::cuda {

// c = A (16 x 32 int8, row) · B (32 x 8 int8, col), in int32.
__device__ __forceinline__ void MmaI8(const uint32_t a[4], const uint32_t b[2], int32_t c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
#else
  __trap();
#endif
}

// c += A (16 x 16 f16, row) · B (16 x 8 f16, col), in f32.
__device__ __forceinline__ void MmaF16(const uint32_t a[4], const uint32_t b[2], float c[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_MMA_CUH_
