// The CPU implementation of the kernel interface (kernels/backend.h). CreateCpuBackend (declared
// in backend.h) returns either the scalar reference backend (options.reference) or the fast one:
// SIMD kernels of the best instruction-set level of this CPU (cpu_isa.h: avx2, avx512-vnni, amx),
// multithreaded on a persistent thread pool of options.n_threads threads over output rows
// (MatMul), tokens (GetRows, RmsNorm, Rope) and (query, kv head) pairs, or key segments of them
// when there are few queries (Attention). MatMul quantizes the activations once per call to 8 bits
// (isa_kernels.h) for quantized weights. Types and shapes the SIMD kernels do not cover run the
// reference kernels (still multithreaded). Every operation is batch-invariant (backend.h) for a
// given backend; different ISA levels may differ in the last bits.
//
// Thread-safety: as Backend: one thread at a time; the backend owns its pool and scratch memory.
#ifndef BATON_KERNELS_CPU_CPU_BACKEND_H_
#define BATON_KERNELS_CPU_CPU_BACKEND_H_

#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa.h"

namespace baton::kernels {

// The fast backend at a given level (for tests and benchmarks that compare levels on one
// machine). isa must not exceed DetectCpuIsaUncapped() (CHECK); options.reference is ignored.
std::unique_ptr<Backend> CreateCpuBackendForIsa(const CpuBackendOptions& options, CpuIsa isa);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_CPU_BACKEND_H_
