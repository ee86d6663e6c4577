// The AMX level of the CPU kernels (see isa_kernels.h): the AVX-512 VNNI table. It has no AMX
// kernels: AMX's block-wide int32 sums cannot give GGML's per-lane arithmetic (isa_kernels.h).
#include "kernels/cpu/isa_kernels.h"

namespace baton::kernels {

void FillAmxKernels(IsaKernels* k) { k->isa = CpuIsa::kAmx; }

}  // namespace baton::kernels
