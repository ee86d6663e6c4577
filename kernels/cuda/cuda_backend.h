// The CUDA implementation of the kernel interface (kernels/backend.h) on one GPU. Plain C++:
// callers need no CUDA headers.
//
// Memory: Allocate hands out device memory (host_memory() is false); the KV cache, the
// activations and the model's vectors live there. RegisterWeights uploads a weight matrix once,
// as it is stored or split into its blocks' bits and scales (split_blocks.cuh: the same bytes
// within 256), the i-quants and MXFP4 in their Q8_0 form (kernels/cpu/iquant_blocks.h, made on
// the host); MatMul reads that copy (see device_matmul.cuh for how). A model whose weights do
// not fit the GPU ends the process at load, saying how many bytes were asked and how many are
// free (RegisterWeights has no error to return). GetRows
// dequantizes the embedding rows it needs on the host and uploads them.
// Operations are queued on the backend's stream in order; CopyToHost waits for everything queued
// before it, so results read back are complete. CopyToHostAsync copies on a second stream, after
// what was queued before it, while later operations run, and CopyToDeviceUnordered on a third,
// which waits for nothing queued (host_copy_engine.cuh); AllocateHost hands out page-locked
// memory, which the copies to the host need to run beside the computation.
//
// Steps (Backend::BeginStep / EndStep) of up to 8 rows are recorded as CUDA graphs and replayed
// (step_graphs.cuh); inside a step every matrix must be registered (an unregistered one is
// copied in with a wait, which a step cannot hold), and CopyToHost / CopyToDevice /
// CopyToHostAsync from another thread wait for the step's end.
//
// Numerics: within rounding of the CPU backend (8-bit activations for the decode products of
// split matrices, as the CPU backend's integer products; f16 GEMM operands for n > 8 rows; f32
// accumulation everywhere); not batch-invariant, unlike the CPU backend.
//
// Thread-safety: as kernels/backend.h says (operations from one thread at a time; memory calls
// from any thread).
#ifndef BATON_KERNELS_CUDA_CUDA_BACKEND_H_
#define BATON_KERNELS_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/cuda/product_variants.h"

namespace baton::kernels::cuda {

struct CudaBackendOptions {
  int device = 0;  // index among the visible CUDA devices
  // Decode products (up to 8 activation rows) in f32 from the weights as the file stores them,
  // x not quantized: the first version's kernel, for checks bit for bit and as the benchmarks'
  // baseline. Otherwise Q4_0, Q4_1, Q8_0, Q4_K and Q6_K matrices are kept split and multiplied
  // with x quantized to 8 bits (device_matmul.cuh).
  bool exact_products = false;
  // Steps (Backend::BeginStep) recorded as CUDA graphs and replayed (step_graphs.cuh).
  bool step_graphs = true;
  // Prefill attention on the tensor cores (flash_attention.cuh) for the head sizes it has;
  // off until a run on a GPU has measured it.
  bool flash_attention = false;
  // Which quantized product runs per shape (product_variants.h); unset: ProductTable(), the
  // table compiled in.
  std::optional<std::vector<ProductChoice>> product_table;
};

// UNAVAILABLE when there is no usable CUDA device; INVALID_ARGUMENT for an index out of range.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_CUDA_BACKEND_H_
