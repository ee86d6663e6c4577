// The backend for a device (kernels/device.h): the CPU backend, or the CUDA backend where this
// build has one. Errors say what is missing at start-up, before any work is accepted.
//
// Thread-safety: free functions.
#ifndef BATON_KERNELS_BACKEND_FACTORY_H_
#define BATON_KERNELS_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/device.h"

namespace baton::kernels {

// cpu: CreateCpuBackend(cpu_options). cuda:N: the CUDA backend on GPU N; UNAVAILABLE when this
// build has no CUDA backend or the machine no usable GPU, INVALID_ARGUMENT when N is out of range.
// BATON_CUDA_EXACT_PRODUCTS set (to anything) in the environment gives the CUDA backend the
// first version's exact f32 decode products (CudaBackendOptions::exact_products): the
// benchmarks' baseline; BATON_CUDA_NO_GRAPHS set runs every step eagerly
// (CudaBackendOptions::step_graphs); BATON_CUDA_FLASH_ATTENTION set runs prefill attention on
// the tensor cores (CudaBackendOptions::flash_attention); BATON_CUDA_PRODUCT_TABLE names a
// file of the quantized products' table as `baton bench products` prints it, used instead of
// the one compiled in (CudaBackendOptions::product_table: a GPU run can bench the table its
// sweep just chose); NOT_FOUND / INVALID_ARGUMENT naming the file and line when it cannot be
// read or parsed.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const Device& device,
                                                       const CpuBackendOptions& cpu_options);

// One line per visible GPU that --device cuda:N can name ("cuda:0 NVIDIA H200, 139 GiB,
// compute 9.0"), or why there is none (no CUDA backend in this build, no driver, no device).
absl::StatusOr<std::vector<std::string>> DescribeGpus();

}  // namespace baton::kernels

#endif  // BATON_KERNELS_BACKEND_FACTORY_H_
