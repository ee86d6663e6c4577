// The tensor-core quantized products (kernels/cuda/quantized_matmul.cuh) on a GPU, every variant
// and type against the CPU backend's scalar reference, before any table chooses them: row counts
// that end inside a CTA's tile, token counts from 1 to past a few tiles, long rows; nothing
// written past y. Their lane logic is tested without a GPU (tests/kernels/mma_warp_tile_test.cc);
// this checks the instruction, the grid and the launches. Skips, saying why, without a GPU.
#include "kernels/cuda/quantized_matmul.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cuda/product_variants.h"
#include "kernels/cuda/quantized_matvec.cuh"
#include "kernels/cuda/split_geometry.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels::cuda {
namespace {

constexpr int64_t kCanaryFloats = 256;  // after y, must stay as written

// Device memory freed on scope exit.
struct DeviceBytes {
  void* data = nullptr;
  explicit DeviceBytes(size_t bytes) { EXPECT_EQ(cudaMalloc(&data, bytes), cudaSuccess); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() { cudaFree(data); }
};

class QuantizedMatMulTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "needs a CUDA GPU: none is usable here";
    }
    cpu_ = CreateCpuBackend({.reference = true});
  }

  // max |y - reference| / rms(reference) for W [rows, cols] of `dtype`, x [n, cols], with
  // kMmaVariants[variant]; a failure when a canary past y changed.
  double Error(DType dtype, int variant, int64_t rows, int64_t cols, int64_t n) {
    const testing::TestWeights w = testing::MakeWeights(dtype, rows, cols, 3);
    const std::vector<float> x = testing::RandomFloats(n * cols, 4);
    std::vector<float> expected(static_cast<size_t>(n * rows));
    cpu_->MatMul(w.matrix(), x.data(), n, expected.data());

    const SplitGeometry g = *SplitGeometryOf(dtype);
    const int64_t n_blocks = rows * (cols / g.block_values);
    const std::vector<uint8_t> split = SplitOnHost(g, w.bytes, n_blocks);
    DeviceBytes dw(split.size()), dx(x.size() * sizeof(float)), dq(Q8RowsBytes(n, cols));
    DeviceBytes dy((n * rows + kCanaryFloats) * sizeof(float));
    cudaMemcpy(dw.data, split.data(), split.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(dx.data, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice);
    std::vector<float> y(static_cast<size_t>(n * rows + kCanaryFloats), -7.0f);
    cudaMemcpy(dy.data, y.data(), y.size() * sizeof(float), cudaMemcpyHostToDevice);

    const Q8Rows xq =
        LaunchQuantizeActivations(static_cast<const float*>(dx.data), n, cols, dq.data, nullptr);
    LaunchQuantizedMatMul(dtype, variant, dw.data, rows, cols, xq, n,
                          static_cast<float*>(dy.data), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaMemcpy(y.data(), dy.data, y.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (int64_t i = n * rows; i < static_cast<int64_t>(y.size()); ++i) {
      if (y[i] != -7.0f) {
        ADD_FAILURE() << "written past y at " << i - n * rows;
        break;
      }
    }
    EXPECT_TRUE(testing::AllFinite(y.data(), n * rows));
    return testing::MaxErrorOverRms(y.data(), expected.data(), n * rows);
  }

  std::unique_ptr<Backend> cpu_;
};

// 200 rows end inside every variant's CTA (64, 128 and 32 rows); 1 to 300 tokens end inside
// its token tiles (16, 32 and 64).
TEST_F(QuantizedMatMulTest, EveryVariantAndTypeMatchesTheReference) {
  for (const DType dtype : kMmaTypes) {
    const int64_t cols = Traits(dtype).block_size == 256 ? 512 : 96;
    for (int variant = 0; variant < static_cast<int>(kMmaVariants.size()); ++variant) {
      for (const int64_t n : {int64_t{1}, int64_t{9}, int64_t{13}, int64_t{64}, int64_t{300}}) {
        EXPECT_LT(Error(dtype, variant, 200, cols, n), 3e-2)
            << DTypeName(dtype) << " " << kMmaVariants[variant].name << " n " << n;
      }
    }
  }
}

// Long rows (many groups per warp): the 8B model's ffn_down width.
TEST_F(QuantizedMatMulTest, LongRowsMatchTheReference) {
  for (const DType dtype : kMmaTypes) {
    EXPECT_LT(Error(dtype, /*variant=*/2, 96, 14336, 40), 3e-2) << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace baton::kernels::cuda
