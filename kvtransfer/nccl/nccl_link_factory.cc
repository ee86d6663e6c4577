#include "kvtransfer/nccl/nccl_link_factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#if BATON_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "kvtransfer/nccl/nccl_endpoint.h"
#include "kvtransfer/nccl/nccl_library.h"
#endif

namespace baton::kvtransfer {

#if BATON_HAVE_NCCL
namespace {

// The first NCCL that lets two ranks share a GPU (with NCCL_MULTI_RANK_GPU_ENABLE=1).
constexpr int kMultiRankGpuVersion = 23000;

// The bootstrap: the unique id, the sender's NCCL version (4 bytes, little-endian), then the
// sender's GPU's PCI bus id. Ranks of different NCCL versions may hang as they connect, so the
// receiver refuses them at once.
class NcclLinkFactory final : public LinkFactory {
 public:
  NcclLinkFactory(const nccl::NcclLibrary& library, int device, std::string bus_id)
      : nccl_(library), device_(device), bus_id_(std::move(bus_id)) {}

  std::string_view kind() const override { return "nccl"; }

  absl::StatusOr<std::unique_ptr<LinkEndpoint>> Offer(std::string* bootstrap) override {
    ncclUniqueId id;
    if (ncclResult_t r = nccl_.GetUniqueId(&id); r != ncclSuccess) {
      return nccl_.Error("unique id", r);
    }
    bootstrap->assign(reinterpret_cast<const char*>(&id), sizeof(id));
    for (int shift = 0; shift < 32; shift += 8) {
      bootstrap->push_back(static_cast<char>((nccl_.version >> shift) & 0xff));
    }
    bootstrap->append(bus_id_);
    absl::StatusOr<std::unique_ptr<nccl::NcclEndpoint>> endpoint =
        nccl::NcclEndpoint::Start(nccl_, device_, id, /*rank=*/0);
    if (!endpoint.ok()) return endpoint.status();
    return std::unique_ptr<LinkEndpoint>(*std::move(endpoint));
  }

  absl::StatusOr<std::unique_ptr<LinkEndpoint>> Accept(std::string_view bootstrap) override {
    ncclUniqueId id;
    if (bootstrap.size() < sizeof(id) + 4) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL bootstrap of ", bootstrap.size(),
                                                     " bytes; the unique id and version alone "
                                                     "are ", sizeof(id) + 4));
    }
    std::memcpy(&id, bootstrap.data(), sizeof(id));
    int sender_version = 0;
    for (int i = 0; i < 4; ++i) {
      const auto byte = static_cast<uint8_t>(bootstrap[sizeof(id) + i]);
      sender_version |= static_cast<int>(byte) << (8 * i);
    }
    if (sender_version != nccl_.version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the sender runs NCCL ", sender_version, " and this worker ", nccl_.version, " (",
          nccl_.path, "); both ends of a link need the same (BATON_NCCL_LIBRARY)"));
    }
    const std::string_view sender_bus = bootstrap.substr(sizeof(id) + 4);
    if (sender_bus == bus_id_ && nccl_.version < kMultiRankGpuVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "both workers use the GPU at ", bus_id_, ", and NCCL ", nccl_.version, " (", nccl_.path,
          ") cannot put two ranks on one GPU; NCCL 2.30+ can (pip install nvidia-nccl-cu13, "
          "then BATON_NCCL_LIBRARY=<its lib>/libnccl.so.2 for both workers)"));
    }
    absl::StatusOr<std::unique_ptr<nccl::NcclEndpoint>> endpoint =
        nccl::NcclEndpoint::Start(nccl_, device_, id, /*rank=*/1);
    if (!endpoint.ok()) return endpoint.status();
    return std::unique_ptr<LinkEndpoint>(*std::move(endpoint));
  }

 private:
  const nccl::NcclLibrary& nccl_;
  const int device_;
  const std::string bus_id_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LinkFactory>> CreateNcclLinkFactory(const kernels::Device& device) {
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError(
        "NCCL links need the KV cache on a GPU; this worker's is in host memory");
  }
  absl::StatusOr<const nccl::NcclLibrary*> library = nccl::LoadNccl();
  if (!library.ok()) return library.status();
  char bus_id[64] = {};
  if (cudaError_t e = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device.index);
      e != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("NCCL links on ", device.ToString(), ": ",
                                               cudaGetErrorString(e)));
  }
  if ((*library)->version >= kMultiRankGpuVersion) {
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", /*overwrite=*/0);
  }
  return std::make_unique<NcclLinkFactory>(**library, device.index, bus_id);
}

#else

absl::StatusOr<std::unique_ptr<LinkFactory>> CreateNcclLinkFactory(const kernels::Device& device) {
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError(
        "NCCL links need the KV cache on a GPU; this worker's is in host memory");
  }
  return absl::UnavailableError(
      "this build of baton has no NCCL links (the CUDA toolkit or its nccl.h was not found when "
      "it was built)");
}

#endif

}  // namespace baton::kvtransfer
