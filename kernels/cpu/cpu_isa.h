// Which SIMD instruction set the fast CPU kernels use, chosen once at run time from what the
// processor (and the OS, for the AVX register state) supports.
//
// Levels, each a superset of the one before:
//   kScalar      portable C++; runs on any x86-64 (and elsewhere)
//   kAvx2        AVX2 + FMA + F16C (Haswell and later)
//   kAvx512Vnni  the above + AVX-512 F/BW/VL/DQ + AVX512-VNNI (Ice Lake / Cascade Lake and later)
//   kAmx         the above + AMX-TILE/AMX-INT8, with the OS granting the tile state (Sapphire
//                Rapids and later; Linux 5.16+)
// Within the AVX-512 levels, CPUs with AVX512_BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and
// later) multiply BF16 weights with vdpbf16ps (Bf16DotProducts).
// The environment variable BATON_CPU_ISA (scalar, avx2, avx512-vnni) caps the detected level, for
// comparing kernels on one machine (scalar, avx2, avx512-vnni, amx); a value above what the CPU
// supports is ignored.
//
// Thread-safety: pure functions; detection runs once (thread-safe static initialization).
#ifndef BATON_KERNELS_CPU_CPU_ISA_H_
#define BATON_KERNELS_CPU_CPU_ISA_H_

#include <optional>
#include <string>
#include <string_view>

namespace baton::kernels {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512Vnni = 2, kAmx = 3 };

// The best level this CPU supports, without the BATON_CPU_ISA cap.
CpuIsa DetectCpuIsaUncapped();

// The level the fast backend uses: DetectCpuIsaUncapped() capped by BATON_CPU_ISA.
CpuIsa DetectCpuIsa();

// Whether level `isa`'s MatMul on BF16 weights rounds the activations to BF16 and multiplies with
// vdpbf16ps (GGML's arithmetic there), rather than in f32: the AVX-512 levels on a CPU with
// AVX512_BF16.
bool Bf16DotProducts(CpuIsa isa);

// "scalar", "avx2", "avx512-vnni", "amx".
std::string_view CpuIsaName(CpuIsa isa);
std::optional<CpuIsa> ParseCpuIsa(std::string_view name);

// The name of DetectCpuIsa(), for `baton info`.
std::string CpuIsaName();

}  // namespace baton::kernels

#endif  // BATON_KERNELS_CPU_CPU_ISA_H_
