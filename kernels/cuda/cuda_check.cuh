// Failing CUDA and cuBLAS calls inside the CUDA backend. An operation of kernels::Backend has no
// status to return: a failure there (a kernel fault, a lost device) is fatal and names the call
// and where it was made. Calls with an error to report (Allocate) check their results themselves.
#ifndef BATON_KERNELS_CUDA_CUDA_CHECK_CUH_
#define BATON_KERNELS_CUDA_CUDA_CHECK_CUH_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cublas_library.cuh"

namespace baton::kernels::cuda {

[[noreturn]] inline void CudaFailed(const char* call, const char* reason, const char* file,
                                    int line) {
  std::fprintf(stderr, "fatal: CUDA call %s failed at %s:%d: %s\n", call, file, line, reason);
  std::abort();
}

}  // namespace baton::kernels::cuda

#define BATON_CUDA_CHECK(call)                                                             \
  do {                                                                                     \
    const cudaError_t baton_cuda_err = (call);                                             \
    if (baton_cuda_err != cudaSuccess) {                                                   \
      ::baton::kernels::cuda::CudaFailed(#call, cudaGetErrorString(baton_cuda_err), __FILE__, \
                                         __LINE__);                                        \
    }                                                                                      \
  } while (0)

#define BATON_CUBLAS_CHECK(call)                                                           \
  do {                                                                                     \
    const cublasStatus_t baton_cublas_err = (call);                                        \
    if (baton_cublas_err != CUBLAS_STATUS_SUCCESS) {                                       \
      ::baton::kernels::cuda::CudaFailed(                                                  \
          #call, ::baton::kernels::cuda::Cublas().GetStatusString(baton_cublas_err), __FILE__, \
          __LINE__);                                                                       \
    }                                                                                      \
  } while (0)

// After a kernel launch: a bad launch configuration shows here, not at a later call.
#define BATON_CUDA_CHECK_LAUNCH() BATON_CUDA_CHECK(cudaGetLastError())

#endif  // BATON_KERNELS_CUDA_CUDA_CHECK_CUH_
