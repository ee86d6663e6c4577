#include "kernels/cpu/cpu_isa.h"

#include <cstdint>
#include <cstdlib>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <optional>
#include <string>
#include <string_view>

namespace baton::kernels {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// AMX-TILE and AMX-INT8 in CPUID, the tile state enabled in XCR0, and Linux's permission for this
// process to use it (arch_prctl ARCH_REQ_XCOMP_PERM; granted once for all threads).
bool AmxUsable() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = (edx >> 24) & 1, int8 = (edx >> 25) & 1;
  if (!tile || !int8) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1)) return false;  // OSXSAVE
  uint32_t xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if (((xcr0_lo >> 17) & 3) != 3) return false;  // XTILECFG, XTILEDATA
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
}
#endif

CpuIsa Detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // F16C is read from CPUID directly: clang's __builtin_cpu_supports does not know it.
  unsigned eax, ebx, ecx, edx;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ecx >> 29) & 1);
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  if (!avx2) return CpuIsa::kScalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("bmi2");
  if (!avx512) return CpuIsa::kAvx2;
  return AmxUsable() ? CpuIsa::kAmx : CpuIsa::kAvx512Vnni;
#else
  return CpuIsa::kScalar;
#endif
}

// Whether the CPU has AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16).
bool CpuHasAvx512Bf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace

bool Bf16DotProducts(CpuIsa isa) { return isa >= CpuIsa::kAvx512Vnni && CpuHasAvx512Bf16(); }

CpuIsa DetectCpuIsaUncapped() {
  static const CpuIsa isa = Detect();
  return isa;
}

CpuIsa DetectCpuIsa() {
  static const CpuIsa isa = [] {
    const CpuIsa best = DetectCpuIsaUncapped();
    const char* cap = std::getenv("BATON_CPU_ISA");
    if (cap == nullptr) return best;
    const std::optional<CpuIsa> parsed = ParseCpuIsa(cap);
    if (!parsed.has_value() || *parsed > best) return best;
    return *parsed;
  }();
  return isa;
}

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512Vnni:
      return "avx512-vnni";
    case CpuIsa::kAmx:
      return "amx";
  }
  return "unknown";
}

std::optional<CpuIsa> ParseCpuIsa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512Vnni, CpuIsa::kAmx}) {
    if (CpuIsaName(isa) == name) return isa;
  }
  return std::nullopt;
}

std::string CpuIsaName() { return std::string(CpuIsaName(DetectCpuIsa())); }

}  // namespace baton::kernels
