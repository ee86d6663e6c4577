// cuBLAS, loaded when the first CUDA backend is made rather than when baton starts. Linked
// directly, libcublasLt's start-up alone kept about 90 MB resident in every baton process, the
// CPU-only ones (router, CPU workers, `baton --help`) included. libcublas.so.<major> is found on
// the loader's path, else in the CUDA toolkit the build found.
//
// Thread-safety: LoadCublas is thread-safe; the table is immutable once loaded.
#ifndef BATON_KERNELS_CUDA_CUBLAS_LIBRARY_CUH_
#define BATON_KERNELS_CUDA_CUBLAS_LIBRARY_CUH_

#include <cublas_v2.h>

#include <string>

#include "absl/status/statusor.h"

namespace baton::kernels::cuda {

// cublasGemmEx as the library exports it (C++ also sees an inline overload that takes the compute
// type as a cudaDataType).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                        int m, int n, int k, const void* alpha, const void* a,
                                        cudaDataType a_type, int lda, const void* b,
                                        cudaDataType b_type, int ldb, const void* beta, void* c,
                                        cudaDataType c_type, int ldc, cublasComputeType_t compute,
                                        cublasGemmAlgo_t algo);

struct CublasLibrary {
  std::string path;
  decltype(&cublasCreate_v2) Create = nullptr;
  decltype(&cublasSetStream_v2) SetStream = nullptr;
  decltype(&cublasDestroy_v2) Destroy = nullptr;
  CublasGemmEx GemmEx = nullptr;
  decltype(&cublasGetProperty) GetProperty = nullptr;
  decltype(&cublasGetStatusString) GetStatusString = nullptr;
};

// Loads the library on the first call; later calls return the same table or the same error
// (UNAVAILABLE saying where it looked).
absl::StatusOr<const CublasLibrary*> LoadCublas();

// The table, once LoadCublas has succeeded (every CUDA backend is made after it has).
const CublasLibrary& Cublas();

}  // namespace baton::kernels::cuda

#endif  // BATON_KERNELS_CUDA_CUBLAS_LIBRARY_CUH_
