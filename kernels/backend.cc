#include "kernels/backend.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <new>

#include "absl/strings/str_cat.h"

namespace baton::kernels {

void RopeYarnCorrDims(const RopeParams& params, float dims[2]) {
  // The pair index at which a dimension turns n_rot times over the original context.
  auto corr_dim = [&params](float n_rot) {
    return static_cast<float>(params.n_dims) *
           std::log(static_cast<float>(params.n_ctx_orig) /
                    (n_rot * 2.0f * std::numbers::pi_v<float>)) /
           (2.0f * std::log(params.freq_base));
  };
  const float low = corr_dim(params.beta_fast), high = corr_dim(params.beta_slow);
  dims[0] = std::max(0.0f, params.truncate ? std::floor(low) : low);
  dims[1] = std::min(static_cast<float>(params.n_dims - 1), params.truncate ? std::ceil(high) : high);
}

float RopeMagnitudeScale(const RopeParams& params) {
  if (params.ext_factor == 0.0f) return params.attn_factor;
  return params.attn_factor * (1.0f + 0.1f * std::log(1.0f / params.freq_scale));
}

absl::StatusOr<void*> Backend::AllocateHost(size_t bytes) {
  void* p = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  }
  return p;
}

void Backend::FreeHost(void* pointer) { ::operator delete(pointer, std::align_val_t{64}); }

std::unique_ptr<CopyFence> Backend::CopyToHostAsync(std::span<const HostCopy> copies) {
  for (const HostCopy& copy : copies) CopyToHost(copy.destination, copy.source, copy.bytes);
  return std::make_unique<PassedFence>();
}

void Backend::CopyToDeviceUnordered(std::span<const HostCopy> copies) {
  for (const HostCopy& copy : copies) CopyToDevice(copy.destination, copy.source, copy.bytes);
}

}  // namespace baton::kernels
