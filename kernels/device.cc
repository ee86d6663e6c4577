#include "kernels/device.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace baton::kernels {

std::string Device::ToString() const {
  return kind == Kind::kCpu ? "cpu" : absl::StrCat("cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device{};
  if (text == "cuda") return Device{.kind = Device::Kind::kCuda, .index = 0};
  constexpr absl::string_view kCudaPrefix = "cuda:";
  int index = -1;
  if (text.substr(0, kCudaPrefix.size()) == kCudaPrefix &&
      absl::SimpleAtoi(text.substr(kCudaPrefix.size()), &index) && index >= 0 && index < 1024) {
    return Device{.kind = Device::Kind::kCuda, .index = index};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device \"", text, "\": expected cpu, cuda or cuda:N (N from 0)"));
}

}  // namespace baton::kernels
