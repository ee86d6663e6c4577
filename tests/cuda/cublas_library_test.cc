// cuBLAS is loaded when a CUDA backend is first made, not when the process starts: a process that
// computes on the CPU never maps it (libcublasLt's start-up alone kept ~90 MB resident).
#include "kernels/cuda/cublas_library.cuh"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "kernels/device.h"

namespace baton::kernels::cuda {
namespace {

bool CublasMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libcublas") != std::string::npos;
}

TEST(CublasLibraryTest, LoadedOnlyWhenACudaBackendIsAskedFor) {
  absl::StatusOr<std::unique_ptr<Backend>> cpu =
      CreateBackend(*ParseDevice("cpu"), {.reference = true});
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(CublasMapped()) << "a CPU-only process mapped cuBLAS";

  (void)CreateBackend(*ParseDevice("cuda:0"), {});  // fails on a machine without a GPU
  absl::StatusOr<const CublasLibrary*> cublas = LoadCublas();
  if (!cublas.ok()) GTEST_SKIP() << "no cuBLAS on this machine: " << cublas.status().message();
  EXPECT_TRUE(CublasMapped());
  EXPECT_NE((*cublas)->path.find("libcublas.so."), std::string::npos) << (*cublas)->path;
  EXPECT_STRNE(Cublas().GetStatusString(CUBLAS_STATUS_SUCCESS), "");
}

}  // namespace
}  // namespace baton::kernels::cuda
