// The AMX level of the CPU kernels (see isa_kernels.h): the AVX-512 VNNI table; its AMX MatMul
// kernels (for packed Q4_0/Q4_1/Q8_0 weights) live in packed_matmul_avx512.cc.
#include "kernels/cpu/isa_kernels.h"

namespace baton::kernels {

void FillAmxKernels(IsaKernels* k) { k->isa = CpuIsa::kAmx; }

}  // namespace baton::kernels
