// Where a model runs: `cpu`, or `cuda[:N]` (the N-th visible CUDA GPU, 0 when omitted), as the
// `--device` flags and the cluster files' `device:` say it. Parsing only: creating the backend
// for a device is kernels/backend_factory.h.
//
// Thread-safety: values and pure functions.
#ifndef BATON_KERNELS_DEVICE_H_
#define BATON_KERNELS_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::kernels {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // among the visible GPUs (kCuda)

  bool is_cuda() const { return kind == Kind::kCuda; }
  std::string ToString() const;  // "cpu", "cuda:1"
};

// INVALID_ARGUMENT naming the text and the accepted forms otherwise.
absl::StatusOr<Device> ParseDevice(absl::string_view text);

}  // namespace baton::kernels

#endif  // BATON_KERNELS_DEVICE_H_
