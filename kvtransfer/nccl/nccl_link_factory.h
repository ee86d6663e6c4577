// Links over NCCL (kv_link.h) between two GPU workers: the blocks go device to device with
// ncclSend/ncclRecv on a stream of the link's own, so a layer's KV travels while the next layer
// computes. Each link is a communicator of two ranks (sender 0, receiver 1) made from the unique
// id that OpenKvLink carries (with the sender's NCCL version and GPU's PCI bus id: a receiver
// running another NCCL version refuses the link), non-blocking, so every wait has a deadline and
// a hung transfer is ended with ncclCommAbort.
//
// libnccl.so.2 is loaded when the factory is made: from $BATON_NCCL_LIBRARY when set (say the
// `nvidia-nccl-cu13` wheel's), else the loader's search path, else the CUDA toolkit's that the
// build found.
//
// Two ranks on one GPU (both workers on the same device): NCCL up to 2.29 refuses them
// ("Duplicate GPU detected"), so the receiver answers FAILED_PRECONDITION and the sender falls
// back to gRPC; NCCL 2.30+ allows them with NCCL_MULTI_RANK_GPU_ENABLE=1, which the factory sets
// for the process (unless set already) when the library loaded is 2.30 or newer.
//
// Thread-safety: the factory is thread-safe.
#ifndef BATON_KVTRANSFER_NCCL_NCCL_LINK_FACTORY_H_
#define BATON_KVTRANSFER_NCCL_NCCL_LINK_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/device.h"
#include "kvtransfer/kv_link.h"

namespace baton::kvtransfer {

// NCCL links for the blocks of a KV cache on `device`. FAILED_PRECONDITION for the CPU (its KV
// is in host memory: gRPC carries it); UNAVAILABLE when this build has no NCCL or the library
// does not load, saying which.
absl::StatusOr<std::unique_ptr<LinkFactory>> CreateNcclLinkFactory(const kernels::Device& device);

}  // namespace baton::kvtransfer

#endif  // BATON_KVTRANSFER_NCCL_NCCL_LINK_FACTORY_H_
