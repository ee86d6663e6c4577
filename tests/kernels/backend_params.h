// The CPU backend variants that the kernel tests run over: the scalar reference and the fast
// backend at each instruction-set level up to what this CPU supports. Header-only, test-only.
#ifndef BATON_TESTS_KERNELS_BACKEND_PARAMS_H_
#define BATON_TESTS_KERNELS_BACKEND_PARAMS_H_

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"

namespace baton::kernels::testing {

enum class Impl { kReference, kFastScalar, kFastAvx2, kFastAvx512Vnni, kFastAmx };

inline const std::vector<Impl>& AllImpls() {
  static const std::vector<Impl> impls = {Impl::kReference, Impl::kFastScalar, Impl::kFastAvx2,
                                          Impl::kFastAvx512Vnni, Impl::kFastAmx};
  return impls;
}

inline const std::vector<Impl>& FastImpls() {
  static const std::vector<Impl> impls = {Impl::kFastScalar, Impl::kFastAvx2,
                                          Impl::kFastAvx512Vnni, Impl::kFastAmx};
  return impls;
}

inline std::string ImplName(Impl impl) {
  switch (impl) {
    case Impl::kReference:
      return "reference";
    case Impl::kFastScalar:
      return "fast_scalar";
    case Impl::kFastAvx2:
      return "fast_avx2";
    case Impl::kFastAvx512Vnni:
      return "fast_avx512vnni";
    case Impl::kFastAmx:
      return "fast_amx";
  }
  return "unknown";
}

// The kernel level of a fast impl (the reference has none: kScalar).
inline CpuIsa IsaOf(Impl impl) {
  switch (impl) {
    case Impl::kFastAvx2:
      return CpuIsa::kAvx2;
    case Impl::kFastAvx512Vnni:
      return CpuIsa::kAvx512Vnni;
    case Impl::kFastAmx:
      return CpuIsa::kAmx;
    default:
      return CpuIsa::kScalar;
  }
}

// Whether this CPU can run impl.
inline bool ImplSupported(Impl impl) { return DetectCpuIsaUncapped() >= IsaOf(impl); }

// A backend for impl (which must be supported).
inline std::unique_ptr<Backend> MakeBackend(Impl impl, int n_threads = 2) {
  const CpuBackendOptions options{.n_threads = n_threads, .reference = impl == Impl::kReference};
  if (impl == Impl::kReference) return CreateCpuBackend(options);
  return CreateCpuBackendForIsa(options, IsaOf(impl));
}

}  // namespace baton::kernels::testing

#endif  // BATON_TESTS_KERNELS_BACKEND_PARAMS_H_
