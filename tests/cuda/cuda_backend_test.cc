// Every operation of the CUDA backend against the CPU backend's scalar reference: per weight type
// and shape (odd row counts, rows ending in a partial chunk, 1..256 activation rows), with
// per-path tolerances, NaN/Inf checks and canary values around every output. Skips, saying why,
// where no CUDA GPU is usable.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "kernels/backend_factory.h"
#include "kernels/device.h"
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/product_variants.h"
#include "kernels/half.h"
#include "kernels/host_copy.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels::cuda {
namespace {

using testing::GuardedBuffer;
using testing::MakeWeights;
using testing::MaxErrorOverRms;
using testing::RandomFloats;
using testing::TestWeights;

// The CUDA backend on device 0, or why there is none.
absl::StatusOr<std::unique_ptr<Backend>> Gpu(bool exact_products = false) {
  return CreateCudaBackend({.device = 0, .exact_products = exact_products});
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> gpu = Gpu();
    if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA GPU: " << gpu.status().message();
    gpu_ = *std::move(gpu);
    cpu_ = CreateCpuBackend({.reference = true});
  }

  // From here on, gpu_ is a backend with the exact f32 decode products.
  void UseExactProducts() { gpu_ = *Gpu(/*exact_products=*/true); }

  // A device copy of `values` with GuardedBuffer's canaries around it; data() is the usable part.
  struct Guarded {
    BackendBuffer buffer;
    int64_t size = 0;
    float* data() { return buffer.as<float>() + GuardedBuffer::kGuard; }
  };

  Guarded UploadGuarded(const std::vector<float>& values) {
    GuardedBuffer host(static_cast<int64_t>(values.size()));
    std::copy(values.begin(), values.end(), host.data());
    const size_t bytes = (values.size() + 2 * GuardedBuffer::kGuard) * sizeof(float);
    Guarded g{.buffer = *BackendBuffer::Allocate(*gpu_, bytes),
              .size = static_cast<int64_t>(values.size())};
    gpu_->CopyToDevice(g.buffer.as<float>(), host.data() - GuardedBuffer::kGuard, bytes);
    return g;
  }

  // The usable values; a failure when a canary changed or a value is not finite.
  std::vector<float> DownloadChecked(Guarded& g) {
    GuardedBuffer host(g.size);
    gpu_->CopyToHost(host.data() - GuardedBuffer::kGuard, g.buffer.as<float>(),
                     (g.size + 2 * GuardedBuffer::kGuard) * sizeof(float));
    EXPECT_TRUE(host.CanariesIntact()) << "an operation wrote outside its output";
    EXPECT_TRUE(testing::AllFinite(host.data(), g.size)) << "NaN or Inf in the output";
    return host.ToVector();
  }

  // max |error| / rms of the GPU's y = x · Wᵀ against the reference, for random W [rows, cols]
  // of `dtype` and x [n, cols]; W registered first unless `unregistered`.
  double MatMulError(DType dtype, int64_t rows, int64_t cols, int64_t n,
                     bool unregistered = false) {
    const TestWeights w = MakeWeights(dtype, rows, cols, 7);
    const std::vector<float> x = RandomFloats(n * cols, 11);
    std::vector<float> expected(static_cast<size_t>(n * rows));
    cpu_->MatMul(w.matrix(), x.data(), n, expected.data());
    if (!unregistered) {
      EXPECT_TRUE(gpu_->RegisterWeights(w.matrix()));
    }
    Guarded dx = UploadGuarded(x);
    Guarded dy = UploadGuarded(std::vector<float>(static_cast<size_t>(n * rows), 0.0f));
    gpu_->MatMul(w.matrix(), dx.data(), n, dy.data());
    const std::vector<float> got = DownloadChecked(dy);
    if (!unregistered) gpu_->ReleaseWeights(w.matrix());
    return MaxErrorOverRms(got.data(), expected.data(), n * rows);
  }

  std::unique_ptr<Backend> gpu_;
  std::unique_ptr<Backend> cpu_;
};

// ---- MatMul ----

struct MatMulCase {
  DType dtype;
  int64_t n;
};

// Columns per type: K-quants two super-blocks, legacy quants three blocks, plain types a
// partial chunk at the end of each row.
int64_t ColsFor(DType dtype) {
  const int32_t block = Traits(dtype).block_size;
  if (block == 256) return 512;
  if (block == 32) return 96;
  return 100;
}

// Max |error| / rms(reference) allowed: the exact matrix-vector path computes in f32 from the
// exact weights; the quantized one rounds x to 8 bits per 32 values (2^-8 of their largest);
// the GEMM path rounds x and W to f16 (2^-11 each) before cuBLAS's f32 accumulation, except for
// f32 weights.
double ExactTolerance(DType dtype, int64_t n) {
  if (n <= 8 || dtype == DType::kF32) return 2e-5;
  return 6e-3;
}
double ToleranceFor(DType dtype, int64_t n) {
  if (n <= kQuantizedMaxRows && HasQuantizedMatVec(dtype)) return 3e-2;
  return ExactTolerance(dtype, n);
}

class CudaMatMulTest : public CudaBackendTest,
                       public ::testing::WithParamInterface<std::tuple<DType, int64_t>> {};

TEST_P(CudaMatMulTest, MatchesTheReference) {
  const auto [dtype, n] = GetParam();
  const double error = MatMulError(dtype, 67, ColsFor(dtype), n);
  EXPECT_LT(error, ToleranceFor(dtype, n));
  RecordProperty("max_error_over_rms", std::to_string(error));
}

// The exact products (the baseline's) hold f32 accuracy on every type.
TEST_P(CudaMatMulTest, ExactProductsMatchTheReference) {
  const auto [dtype, n] = GetParam();
  UseExactProducts();
  EXPECT_LT(MatMulError(dtype, 67, ColsFor(dtype), n), ExactTolerance(dtype, n));
}

std::vector<DType> DeviceTypes() {
  return {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1,
          DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K, DType::kQ3_K,
          DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndRows, CudaMatMulTest,
    ::testing::Combine(::testing::ValuesIn(DeviceTypes()),
                       ::testing::Values(int64_t{1}, int64_t{3}, int64_t{8}, int64_t{9},
                                         int64_t{64}, int64_t{256})),
    [](const auto& info) {
      return std::string(DTypeName(std::get<0>(info.param))) + "_n" +
             std::to_string(std::get<1>(info.param));
    });

// One-hot activation rows pick single columns: the matrix-vector path then returns the weights'
// values themselves, which must be the host's dequantization exactly (bit for bit but for the
// sign of zeros), for every position of a block and random bits in every field.
class CudaDequantizeTest : public CudaBackendTest, public ::testing::WithParamInterface<DType> {};

TEST_P(CudaDequantizeTest, EveryWeightIsTheHostsValueBitForBit) {
  const DType dtype = GetParam();
  UseExactProducts();
  const int64_t rows = 5, cols = std::max<int64_t>(256, ColsFor(dtype));
  const TestWeights w = MakeWeights(dtype, rows, cols, 3, /*random_bits=*/true);
  const std::vector<float> values = w.Dequantized();
  const WeightMatrix m = w.matrix();
  ASSERT_TRUE(gpu_->RegisterWeights(m));
  constexpr int64_t kPicks = 8;
  BackendBuffer dx = *BackendBuffer::Allocate(*gpu_, kPicks * cols * sizeof(float));
  BackendBuffer dy = *BackendBuffer::Allocate(*gpu_, kPicks * rows * sizeof(float));
  int64_t mismatches = 0;
  for (int64_t first = 0; first < cols; first += kPicks) {
    std::vector<float> x(static_cast<size_t>(kPicks * cols), 0.0f);
    for (int64_t i = 0; i < kPicks; ++i) x[i * cols + std::min(first + i, cols - 1)] = 1.0f;
    gpu_->CopyToDevice(dx.as<float>(), x.data(), x.size() * sizeof(float));
    gpu_->MatMul(m, dx.as<float>(), kPicks, dy.as<float>());
    std::vector<float> y(static_cast<size_t>(kPicks * rows));
    gpu_->CopyToHost(y.data(), dy.as<float>(), y.size() * sizeof(float));
    for (int64_t i = 0; i < kPicks; ++i) {
      const int64_t col = std::min(first + i, cols - 1);
      for (int64_t r = 0; r < rows; ++r) {
        const float want = values[r * cols + col];
        const float got = y[i * rows + r];
        // -0 reads as +0 here (the product's sum starts from +0).
        if (want != got && !(std::isnan(want) && std::isnan(got))) {
          if (++mismatches <= 5) {
            ADD_FAILURE() << DTypeName(dtype) << " row " << r << " col " << col << ": " << got
                          << " != " << want;
          }
        }
      }
    }
  }
  gpu_->ReleaseWeights(m);
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaDequantizeTest,
                         ::testing::Values(DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1,
                                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,
                                           DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                                           DType::kQ6_K),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST_F(CudaBackendTest, AnUnregisteredMatrixMultipliesTheSame) {
  EXPECT_LT(MatMulError(DType::kQ4_K, 33, 256, 2, /*unregistered=*/true), 2e-5);
}

// Rows too long for x to fit shared memory at once are walked in tiles, the last one partial.
TEST_F(CudaBackendTest, AWideMatrixIsWalkedInTiles) {
  UseExactProducts();
  for (const DType dtype : {DType::kQ4_K, DType::kQ4_0, DType::kF16}) {
    for (const int64_t n : {int64_t{1}, int64_t{5}, int64_t{8}}) {
      EXPECT_LT(MatMulError(dtype, 19, 17 * 256, n), 2e-5) << DTypeName(dtype) << " n " << n;
    }
  }
}

// The quantized decode products on long rows (many units per thread) and every row bucket up
// to kQuantizedMaxRows; 13 and 32 rows take the f16 GEMM of the split matrices.
TEST_F(CudaBackendTest, QuantizedProductsOnWideMatrices) {
  for (const DType dtype : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K,
                            DType::kQ6_K}) {
    for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{8},
                            int64_t{13}, int64_t{32}}) {
      EXPECT_LT(MatMulError(dtype, 263, 56 * 256, n), 3e-2) << DTypeName(dtype) << " n " << n;
    }
  }
}

// A table that chooses a tensor-core variant (kernels/cuda/quantized_matmul.cuh) for every
// class past 8 rows sends the backend's products there: the results stay within the quantized
// products' tolerance.
TEST_F(CudaBackendTest, TensorCoreProductsChosenByTheTableMatchTheReference) {
  std::vector<ProductChoice> table;
  for (const DType dtype : kMmaTypes) {
    for (const MatrixHeight height : {MatrixHeight::kShort, MatrixHeight::kTall}) {
      for (const int bucket : kProductRowBuckets) {
        if (bucket > kQuantizedMaxRows) table.push_back({dtype, height, bucket, 2});
      }
    }
  }
  gpu_ = *CreateCudaBackend({.device = 0, .product_table = table});
  for (const DType dtype : kMmaTypes) {
    for (const int64_t n : {int64_t{9}, int64_t{32}, int64_t{300}}) {
      EXPECT_LT(MatMulError(dtype, 263, 14 * 256, n), 3e-2) << DTypeName(dtype) << " n " << n;
    }
  }
}

// A split matrix's prefill products (dequantized to f16 for cuBLAS) are those of the matrix as
// stored, bit for bit: the split layout loses nothing.
TEST_F(CudaBackendTest, SplitMatricesGiveTheStoredMatricesGemmBitForBit) {
  absl::StatusOr<std::unique_ptr<Backend>> exact = Gpu(/*exact_products=*/true);
  ASSERT_TRUE(exact.ok());
  for (const DType dtype : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K,
                            DType::kQ6_K}) {
    const TestWeights w = MakeWeights(dtype, 300, 512, 5, /*random_bits=*/false);
    const std::vector<float> x = RandomFloats(64 * 512, 6);
    std::vector<float> results[2];
    Backend* backends[2] = {gpu_.get(), exact->get()};
    for (int b = 0; b < 2; ++b) {
      ASSERT_TRUE(backends[b]->RegisterWeights(w.matrix()));
      BackendBuffer dx = *BackendBuffer::Allocate(*backends[b], x.size() * sizeof(float));
      BackendBuffer dy = *BackendBuffer::Allocate(*backends[b], 64 * 300 * sizeof(float));
      backends[b]->CopyToDevice(dx.as<float>(), x.data(), x.size() * sizeof(float));
      backends[b]->MatMul(w.matrix(), dx.as<float>(), 64, dy.as<float>());
      results[b].resize(64 * 300);
      backends[b]->CopyToHost(results[b].data(), dy.as<float>(), results[b].size() * 4);
      backends[b]->ReleaseWeights(w.matrix());
    }
    EXPECT_EQ(results[0], results[1]) << DTypeName(dtype);
  }
}

// MatMulMany quantizes x once for all its matrices when every one is split (Q, K and V), and
// runs a mixed group one by one: the same results as one MatMul at a time either way.
TEST_F(CudaBackendTest, MatMulManyGivesEachMatMulsResult) {
  const TestWeights q = MakeWeights(DType::kQ4_K, 512, 1024, 1);
  const TestWeights k = MakeWeights(DType::kQ6_K, 128, 1024, 2);
  const TestWeights v = MakeWeights(DType::kQ4_0, 128, 1024, 3);
  const TestWeights f = MakeWeights(DType::kF16, 64, 1024, 4);  // not split
  const std::vector<float> x = RandomFloats(3 * 1024, 8);
  BackendBuffer dx = *BackendBuffer::Allocate(*gpu_, x.size() * sizeof(float));
  gpu_->CopyToDevice(dx.as<float>(), x.data(), x.size() * sizeof(float));
  for (const TestWeights* w : {&q, &k, &v, &f}) ASSERT_TRUE(gpu_->RegisterWeights(w->matrix()));
  const std::vector<std::vector<const TestWeights*>> groups = {{&q, &k, &v}, {&q, &f, &v}};
  for (const std::vector<const TestWeights*>& group : groups) {
    std::vector<WeightMatrix> matrices;
    std::vector<BackendBuffer> many, one;
    for (const TestWeights* w : group) {
      matrices.push_back(w->matrix());
      many.push_back(*BackendBuffer::Allocate(*gpu_, 3 * w->n_rows * sizeof(float)));
      one.push_back(*BackendBuffer::Allocate(*gpu_, 3 * w->n_rows * sizeof(float)));
    }
    std::vector<const WeightMatrix*> pointers;
    std::vector<float*> ys;
    for (size_t i = 0; i < matrices.size(); ++i) {
      pointers.push_back(&matrices[i]);
      ys.push_back(many[i].as<float>());
      gpu_->MatMul(matrices[i], dx.as<float>(), 3, one[i].as<float>());
    }
    gpu_->MatMulMany(pointers, dx.as<float>(), 3, ys);
    for (size_t i = 0; i < matrices.size(); ++i) {
      std::vector<float> a(static_cast<size_t>(3 * matrices[i].n_rows)), b(a.size());
      gpu_->CopyToHost(a.data(), many[i].as<float>(), a.size() * sizeof(float));
      gpu_->CopyToHost(b.data(), one[i].as<float>(), b.size() * sizeof(float));
      EXPECT_EQ(a, b) << DTypeName(matrices[i].dtype);
    }
  }
  for (const TestWeights* w : {&q, &k, &v, &f}) gpu_->ReleaseWeights(w->matrix());
}

TEST_F(CudaBackendTest, GetRowsDequantizesTheRowsAsked) {
  const TestWeights w = MakeWeights(DType::kQ6_K, 40, 256, 9);
  const std::vector<int32_t> ids = {39, 0, 7, 7};
  std::vector<float> expected(4 * 256);
  cpu_->GetRows(w.matrix(), ids.data(), 4, expected.data());
  Guarded out = UploadGuarded(std::vector<float>(4 * 256, 0.0f));
  gpu_->GetRows(w.matrix(), ids.data(), 4, out.data());
  EXPECT_EQ(DownloadChecked(out), expected);
}

// ---- Copies beside the computation ----

// The copies wait for a long product queued before them (on the compute stream) and land its
// result in page-locked memory, in pieces scattered as a sequence's KV blocks are.
TEST_F(CudaBackendTest, AsyncCopiesToHostLandTheResultOfTheWorkQueuedBefore) {
  const TestWeights w = MakeWeights(DType::kQ4_0, 4096, 4096, 3);
  const std::vector<float> x = RandomFloats(64 * 4096, 4);
  ASSERT_TRUE(gpu_->RegisterWeights(w.matrix()));
  Guarded dx = UploadGuarded(x);
  Guarded dy = UploadGuarded(std::vector<float>(64 * 4096, 0.0f));
  gpu_->MatMul(w.matrix(), dx.data(), 64, dy.data());
  const size_t piece = 4096 * sizeof(float);  // one row of y per piece, in reverse order
  absl::StatusOr<void*> host = gpu_->AllocateHost(64 * piece);
  ASSERT_TRUE(host.ok()) << host.status();
  std::vector<HostCopy> copies;
  for (int r = 0; r < 64; ++r) {
    copies.push_back({static_cast<char*>(*host) + (63 - r) * piece, dy.data() + r * 4096, piece});
  }
  std::unique_ptr<CopyFence> fence = gpu_->CopyToHostAsync(copies);
  ASSERT_TRUE(fence->Wait(absl::Now() + absl::Seconds(30)).ok());
  const std::vector<float> y = DownloadChecked(dy);
  const auto* landed = static_cast<const float*>(*host);
  for (int r = 0; r < 64; ++r) {
    ASSERT_TRUE(std::equal(y.begin() + r * 4096, y.begin() + (r + 1) * 4096,
                           landed + (63 - r) * 4096))
        << "row " << r;
  }
  // A fence dropped unwaited waits for its copies itself.
  gpu_->CopyToHostAsync(copies).reset();
  fence.reset();
  // Back into another buffer while a product runs: the rows land where they were asked to.
  Guarded back = UploadGuarded(std::vector<float>(64 * 4096, 0.0f));
  gpu_->MatMul(w.matrix(), dx.data(), 64, dy.data());
  std::vector<HostCopy> uploads;
  for (int r = 0; r < 64; ++r) {
    uploads.push_back({back.data() + r * 4096, static_cast<char*>(*host) + (63 - r) * piece, piece});
  }
  gpu_->CopyToDeviceUnordered(uploads);
  EXPECT_EQ(DownloadChecked(back), y);
  gpu_->FreeHost(*host);
  gpu_->ReleaseWeights(w.matrix());
}

// ---- Element-wise and row-wise operations ----

TEST_F(CudaBackendTest, AddAndAddRowBiasAreExact) {
  const std::vector<float> x = RandomFloats(7 * 33, 1), y = RandomFloats(7 * 33, 2);
  const std::vector<float> bias = RandomFloats(33, 3);
  std::vector<float> expected = x;
  cpu_->Add(expected.data(), y.data(), 7 * 33);
  cpu_->AddRowBias(expected.data(), bias.data(), 7, 33);
  Guarded dx = UploadGuarded(x), dy = UploadGuarded(y), db = UploadGuarded(bias);
  gpu_->Add(dx.data(), dy.data(), 7 * 33);
  gpu_->AddRowBias(dx.data(), db.data(), 7, 33);
  EXPECT_EQ(DownloadChecked(dx), expected);
}

TEST_F(CudaBackendTest, RoundToF16MatchesTheCpuBitForBit) {
  std::vector<float> x = RandomFloats(1000, 4, 3000.0f);
  x.insert(x.end(), {0.0f, -0.0f, 1e-6f, -3e-8f, 65504.0f, 65519.0f, 1.0e6f, -3.0e7f, 6.1e-5f});
  std::vector<float> expected = x;
  cpu_->RoundToF16(expected.data(), static_cast<int64_t>(x.size()));
  Guarded dx = UploadGuarded(x);
  gpu_->RoundToF16(dx.data(), static_cast<int64_t>(x.size()));
  const std::vector<float> got = DownloadChecked(dx);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::memcmp(&got[i], &expected[i], sizeof(float)), 0)
        << x[i] << " -> " << got[i] << ", CPU " << expected[i];
  }
}

TEST_F(CudaBackendTest, GatherRowsTakesTheRowsInTheirOrder) {
  const std::vector<float> x = RandomFloats(6 * 20, 5);
  const std::vector<int64_t> rows = {5, 0, 3, 3};
  std::vector<float> expected(4 * 20);
  cpu_->GatherRows(x.data(), rows.data(), 4, 20, expected.data());
  Guarded dx = UploadGuarded(x), out = UploadGuarded(std::vector<float>(4 * 20, 0.0f));
  gpu_->GatherRows(dx.data(), rows.data(), 4, 20, out.data());
  EXPECT_EQ(DownloadChecked(out), expected);
}

// A column band of each row into another matrix's rows (latent attention's per-head slices),
// leaving the destination's other columns as they were.
TEST_F(CudaBackendTest, CopyColumnsCopiesTheBandOfEachRow) {
  const std::vector<float> x = RandomFloats(5 * 24, 8);
  std::vector<float> expected(5 * 40, 1.5f);
  cpu_->CopyColumns(x.data() + 16, 24, 5, 8, expected.data() + 32, 40);
  Guarded dx = UploadGuarded(x), out = UploadGuarded(std::vector<float>(5 * 40, 1.5f));
  gpu_->CopyColumns(dx.data() + 16, 24, 5, 8, out.data() + 32, 40);
  EXPECT_EQ(DownloadChecked(out), expected);
}

TEST_F(CudaBackendTest, RmsNormSiluMulMatchTheReference) {
  for (const int64_t dim : {1, 31, 576, 4096}) {
    const std::vector<float> x = RandomFloats(3 * dim, 6, 4.0f);
    const std::vector<float> weight = RandomFloats(dim, 7);
    std::vector<float> expected(3 * dim);
    cpu_->RmsNorm(x.data(), weight.data(), 3, dim, 1e-5f, expected.data());
    cpu_->SiluMul(expected.data(), x.data(), 3 * dim, expected.data());
    Guarded dx = UploadGuarded(x), dw = UploadGuarded(weight);
    Guarded out = UploadGuarded(std::vector<float>(3 * dim, 0.0f));
    gpu_->RmsNorm(dx.data(), dw.data(), 3, dim, 1e-5f, out.data());
    gpu_->SiluMul(out.data(), dx.data(), 3 * dim, out.data());
    const std::vector<float> got = DownloadChecked(out);
    // The reference normalizes in f64; the GPU, as the fast CPU backend, scales in f32.
    EXPECT_LT(MaxErrorOverRms(got.data(), expected.data(), 3 * dim), 1e-5) << "dim " << dim;
  }
}

// GGML's f16 GELU: the GPU's tanhf may round a value to the neighbouring f16 where the CPU's
// does not, so the results agree within an f16 step; the scale is exact.
TEST_F(CudaBackendTest, GeluMulAndScaleMatchTheCpu) {
  for (const int64_t count : {1, 31, 4096}) {
    std::vector<float> gate = RandomFloats(count, 9, 4.0f);
    gate[0] = -10.0f;
    if (count > 1) gate[1] = 11.0f;
    const std::vector<float> up = RandomFloats(count, 10);
    std::vector<float> expected(count);
    cpu_->GeluMul(gate.data(), up.data(), count, expected.data());
    cpu_->Scale(expected.data(), 25.3f, count);
    Guarded dg = UploadGuarded(gate), du = UploadGuarded(up);
    Guarded out = UploadGuarded(std::vector<float>(count, 0.0f));
    gpu_->GeluMul(dg.data(), du.data(), count, out.data());
    gpu_->Scale(out.data(), 25.3f, count);
    const std::vector<float> got = DownloadChecked(out);
    EXPECT_LT(MaxErrorOverRms(got.data(), expected.data(), count), 1e-3) << "count " << count;
    EXPECT_EQ(got[0], 0.0f);
  }
}

// gpt-oss's activation, with gates and ups past its clamps.
TEST_F(CudaBackendTest, SwigluOaiMulMatchesTheCpu) {
  for (const int64_t count : {1, 31, 4096}) {
    const std::vector<float> gate = RandomFloats(count, 19, 6.0f);
    const std::vector<float> up = RandomFloats(count, 20, 6.0f);
    std::vector<float> expected(count);
    cpu_->SwigluOaiMul(gate.data(), up.data(), count, expected.data());
    Guarded dg = UploadGuarded(gate), du = UploadGuarded(up);
    gpu_->SwigluOaiMul(dg.data(), du.data(), count, dg.data());
    const std::vector<float> got = DownloadChecked(dg);
    EXPECT_LT(MaxErrorOverRms(got.data(), expected.data(), count), 1e-6) << "count " << count;
  }
}

TEST_F(CudaBackendTest, WeightedSumOfRowsMatchesTheCpuBitForBit) {
  const int64_t dim = 300, k = 3, n = 5;
  const std::vector<float> x = RandomFloats(12 * dim, 11);
  std::vector<int64_t> rows(n * k);
  for (int64_t i = 0; i < n * k; ++i) rows[i] = (i * 7 + 3) % 12;
  const std::vector<float> weights = RandomFloats(n * k, 12);
  std::vector<float> expected(n * dim);
  cpu_->WeightedSumOfRows(x.data(), rows.data(), weights.data(), n, k, dim, expected.data());
  Guarded dx = UploadGuarded(x), out = UploadGuarded(std::vector<float>(n * dim, 0.0f));
  gpu_->WeightedSumOfRows(dx.data(), rows.data(), weights.data(), n, k, dim, out.data());
  EXPECT_EQ(DownloadChecked(out), expected);
}

// The residual add and the norm in one pass: x gets the exact sums, out the norm of them, for
// rows of every alignment class (dim 31 takes the scalar path) and out aliasing the residual.
TEST_F(CudaBackendTest, AddRmsNormAddsThenNormalizes) {
  for (const int64_t dim : {31, 576, 4096}) {
    const std::vector<float> x = RandomFloats(3 * dim, 16, 4.0f);
    const std::vector<float> residual = RandomFloats(3 * dim, 17, 4.0f);
    const std::vector<float> weight = RandomFloats(dim, 18);
    std::vector<float> want_x = x, want_out(3 * dim);
    cpu_->Add(want_x.data(), residual.data(), 3 * dim);
    cpu_->RmsNorm(want_x.data(), weight.data(), 3, dim, 1e-5f, want_out.data());
    Guarded dx = UploadGuarded(x), dr = UploadGuarded(residual), dw = UploadGuarded(weight);
    gpu_->AddRmsNorm(dx.data(), dr.data(), dw.data(), 3, dim, 1e-5f, dr.data());
    EXPECT_EQ(DownloadChecked(dx), want_x) << "dim " << dim;
    const std::vector<float> got = DownloadChecked(dr);
    EXPECT_LT(MaxErrorOverRms(got.data(), want_out.data(), 3 * dim), 1e-5) << "dim " << dim;
  }
}

TEST_F(CudaBackendTest, RopeMatchesTheReferenceInBothStyles) {
  const std::vector<float> factors = {1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 8.0f, 16.0f, 32.0f};
  for (const bool neox : {false, true}) {
    for (const bool with_factors : {false, true}) {
    for (const bool yarn : {false, true}) {
      const int64_t n = 5, heads = 3, head_dim = 24;
      const std::vector<int32_t> positions = {0, 1, 77, 4095, 131071};
      const std::vector<float> x = RandomFloats(n * heads * head_dim, 8);
      Guarded df = UploadGuarded(factors);
      RopeParams params{.n_dims = 16, .freq_base = 500000.0f, .freq_scale = 0.5f, .neox = neox};
      if (yarn) {
        params.ext_factor = 1.0f;
        params.n_ctx_orig = 4096;
      }
      std::vector<float> expected = x;
      params.freq_factors = with_factors ? factors.data() : nullptr;
      cpu_->Rope(expected.data(), n, heads, head_dim, positions.data(), params);
      params.freq_factors = with_factors ? df.data() : nullptr;
      Guarded dx = UploadGuarded(x);
      gpu_->Rope(dx.data(), n, heads, head_dim, positions.data(), params);
      const std::vector<float> got = DownloadChecked(dx);
      EXPECT_LT(MaxErrorOverRms(got.data(), expected.data(), n * heads * head_dim), 2e-6)
          << "neox " << neox << " factors " << with_factors << " yarn " << yarn;
    }
    }
  }
}

// ---- The paged KV cache ----

struct KvCase {
  int32_t n_head;
  int32_t n_kv_head;
  int32_t head_dim;
};

class CudaKvTest : public CudaBackendTest, public ::testing::WithParamInterface<KvCase> {
 protected:
  // Two sequences over shuffled blocks of one pool: WriteKv stores the same f16 bits as the CPU
  // backend; AttentionMany (a decode query, a prefill of 17 queries: a tile of 16 and one of 1)
  // agrees with the reference within `attention_tolerance` of its RMS.
  void CheckWriteKvAndAttention(double attention_tolerance);
};

TEST_P(CudaKvTest, WriteKvAndAttentionMatchTheReference) { CheckWriteKvAndAttention(1e-5); }

// The tensor-core prefill attention (flash_attention.cuh) where the head size has it (Q and P
// rounded to f16: 2^-11 of their size), the other kernels elsewhere.
TEST_P(CudaKvTest, FlashAttentionMatchesTheReference) {
  gpu_ = *CreateCudaBackend({.device = 0, .flash_attention = true});
  const bool flash = FlashAttentionSupports({.head_dim = GetParam().head_dim});
  CheckWriteKvAndAttention(flash ? 5e-3 : 1e-5);
}

void CudaKvTest::CheckWriteKvAndAttention(double attention_tolerance) {
  const KvCase c = GetParam();
  constexpr int32_t kBlockSize = 16, kBlocks = 12;
  const int64_t kv_dim = int64_t{c.n_kv_head} * c.head_dim;
  const int64_t stride = kBlockSize * kv_dim;  // elements per block, K and V in pools of their own
  const size_t pool_bytes = kBlocks * stride * sizeof(uint16_t);
  BackendBuffer cpu_k = *BackendBuffer::Allocate(*cpu_, pool_bytes);
  BackendBuffer cpu_v = *BackendBuffer::Allocate(*cpu_, pool_bytes);
  BackendBuffer gpu_k = *BackendBuffer::Allocate(*gpu_, pool_bytes);
  BackendBuffer gpu_v = *BackendBuffer::Allocate(*gpu_, pool_bytes);
  const std::vector<int32_t> tables[2] = {{7, 2, 9, 0, 11}, {4, 1}};
  const int32_t lengths[2] = {70, 20};
  std::vector<AttentionQueries> cpu_seqs, gpu_seqs;
  std::vector<std::vector<int32_t>> positions(2);
  std::vector<Guarded> gpu_q, gpu_out;
  std::vector<std::vector<float>> q(2), cpu_out(2);
  for (int s = 0; s < 2; ++s) {
    const int32_t n = lengths[s];
    std::vector<int32_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    const std::vector<float> k = RandomFloats(n * kv_dim, 20 + s);
    const std::vector<float> v = RandomFloats(n * kv_dim, 30 + s);
    auto view = [&](BackendBuffer& kb, BackendBuffer& vb) {
      return KvLayerView{.k_base = kb.as<uint16_t>(), .v_base = vb.as<uint16_t>(),
                         .block_stride = stride, .block_table = tables[s].data(), .n_tokens = n,
                         .block_size = kBlockSize, .n_kv_head = c.n_kv_head,
                         .head_dim = c.head_dim};
    };
    cpu_->WriteKv(view(cpu_k, cpu_v), all.data(), n, k.data(), v.data());
    Guarded dk = UploadGuarded(k), dv = UploadGuarded(v);
    gpu_->WriteKv(view(gpu_k, gpu_v), all.data(), n, dk.data(), dv.data());
    // Sequence 0 decodes its last token; sequence 1 prefills its last 17 tokens.
    const int32_t n_q = s == 0 ? 1 : 17;
    positions[s].resize(n_q);
    std::iota(positions[s].begin(), positions[s].end(), n - n_q);
    q[s] = RandomFloats(int64_t{n_q} * c.n_head * c.head_dim, 40 + s);
    cpu_out[s].assign(q[s].size(), 0.0f);
    gpu_q.push_back(UploadGuarded(q[s]));
    gpu_out.push_back(UploadGuarded(std::vector<float>(q[s].size(), 0.0f)));
    cpu_seqs.push_back({.q = q[s].data(), .q_positions = positions[s].data(), .n_q = n_q,
                        .kv = view(cpu_k, cpu_v), .out = cpu_out[s].data()});
    gpu_seqs.push_back({.q = gpu_q[s].data(), .q_positions = positions[s].data(), .n_q = n_q,
                        .kv = view(gpu_k, gpu_v), .out = gpu_out[s].data()});
  }
  std::vector<uint16_t> want(kBlocks * stride), got(kBlocks * stride);
  for (auto [cpu_pool, gpu_pool] : {std::pair{&cpu_k, &gpu_k}, {&cpu_v, &gpu_v}}) {
    // Only the blocks the tables name were written.
    std::memcpy(want.data(), cpu_pool->as<uint16_t>(), pool_bytes);
    gpu_->CopyToHost(got.data(), gpu_pool->as<uint16_t>(), pool_bytes);
    for (int s = 0; s < 2; ++s) {
      for (int32_t t = 0; t < lengths[s]; ++t) {
        for (int32_t kv_h = 0; kv_h < c.n_kv_head; ++kv_h) {
          const int64_t row = tables[s][t / kBlockSize] * stride +
                              KvRowInBlock(t % kBlockSize, kv_h, kBlockSize, c.head_dim);
          ASSERT_EQ(std::memcmp(&want[row], &got[row], c.head_dim * sizeof(uint16_t)), 0)
              << "sequence " << s << " token " << t << " kv head " << kv_h;
        }
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // Whole contexts, then sliding windows narrower than a tile of keys and than the contexts.
  // Each with and without attention sinks (one far above the scores).
  std::vector<float> sinks = RandomFloats(c.n_head, 21, 3.0f);
  sinks[0] = 30.0f;
  Guarded device_sinks = UploadGuarded(sinks);
  for (const int32_t window : {0, 13, 40}) {
  for (const bool with_sinks : {false, true}) {
    for (AttentionQueries& seq : cpu_seqs) seq.kv.window = window;
    for (AttentionQueries& seq : gpu_seqs) seq.kv.window = window;
    cpu_->AttentionMany(cpu_seqs, c.n_head, scale, with_sinks ? sinks.data() : nullptr);
    gpu_->AttentionMany(gpu_seqs, c.n_head, scale, with_sinks ? device_sinks.data() : nullptr);
    for (int s = 0; s < 2; ++s) {
      const std::vector<float> out = DownloadChecked(gpu_out[s]);
      EXPECT_LT(MaxErrorOverRms(out.data(), cpu_out[s].data(), static_cast<int64_t>(out.size())),
                attention_tolerance)
          << "sequence " << s << ", window " << window << ", sinks " << with_sinks;
    }
  }
  }
}

// A long prefill after a cached prefix (positions 100 to 299 of 300: 13 tiles, each walking up
// to ten steps of keys), with and without a window and sinks: the tensor-core attention's
// rescaling across steps, against the CPU reference.
TEST_P(CudaKvTest, FlashAttentionOverALongPrefillAfterAPrefix) {
  const KvCase c = GetParam();
  if (!FlashAttentionSupports({.head_dim = c.head_dim})) {
    GTEST_SKIP() << "no tensor-core attention for head size " << c.head_dim;
  }
  gpu_ = *CreateCudaBackend({.device = 0, .flash_attention = true});
  constexpr int32_t kBlockSize = 16, kTokens = 300, kFirstQuery = 100;
  const int32_t n_blocks = (kTokens + kBlockSize - 1) / kBlockSize;
  const int64_t kv_dim = int64_t{c.n_kv_head} * c.head_dim;
  const int64_t stride = kBlockSize * kv_dim;
  std::vector<int32_t> table(n_blocks);
  for (int32_t b = 0; b < n_blocks; ++b) table[b] = (7 * b + 3) % n_blocks;  // shuffled
  const size_t pool_bytes = n_blocks * stride * sizeof(uint16_t);
  BackendBuffer cpu_k = *BackendBuffer::Allocate(*cpu_, pool_bytes);
  BackendBuffer cpu_v = *BackendBuffer::Allocate(*cpu_, pool_bytes);
  BackendBuffer gpu_k = *BackendBuffer::Allocate(*gpu_, pool_bytes);
  BackendBuffer gpu_v = *BackendBuffer::Allocate(*gpu_, pool_bytes);
  auto view = [&](BackendBuffer& kb, BackendBuffer& vb, int32_t window) {
    return KvLayerView{.k_base = kb.as<uint16_t>(), .v_base = vb.as<uint16_t>(),
                       .block_stride = stride, .block_table = table.data(),
                       .n_tokens = kTokens, .block_size = kBlockSize,
                       .n_kv_head = c.n_kv_head, .head_dim = c.head_dim, .window = window};
  };
  std::vector<int32_t> all(kTokens);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<float> k = RandomFloats(kTokens * kv_dim, 50);
  const std::vector<float> v = RandomFloats(kTokens * kv_dim, 51);
  cpu_->WriteKv(view(cpu_k, cpu_v, 0), all.data(), kTokens, k.data(), v.data());
  Guarded dk = UploadGuarded(k), dv = UploadGuarded(v);
  gpu_->WriteKv(view(gpu_k, gpu_v, 0), all.data(), kTokens, dk.data(), dv.data());

  constexpr int32_t kQueries = kTokens - kFirstQuery;
  const std::vector<int32_t> positions(all.begin() + kFirstQuery, all.end());
  const std::vector<float> q = RandomFloats(int64_t{kQueries} * c.n_head * c.head_dim, 52);
  Guarded dq = UploadGuarded(q);
  const std::vector<float> sinks = RandomFloats(c.n_head, 53, 3.0f);
  Guarded device_sinks = UploadGuarded(sinks);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  for (const int32_t window : {0, 37}) {
    for (const bool with_sinks : {false, true}) {
      std::vector<float> want(q.size(), 0.0f);
      cpu_->Attention(q.data(), positions.data(), kQueries, c.n_head, view(cpu_k, cpu_v, window),
                      scale, with_sinks ? sinks.data() : nullptr, want.data());
      Guarded out = UploadGuarded(std::vector<float>(q.size(), 0.0f));
      gpu_->Attention(dq.data(), positions.data(), kQueries, c.n_head,
                      view(gpu_k, gpu_v, window), scale,
                      with_sinks ? device_sinks.data() : nullptr, out.data());
      const std::vector<float> got = DownloadChecked(out);
      EXPECT_LT(MaxErrorOverRms(got.data(), want.data(), static_cast<int64_t>(got.size())), 5e-3)
          << "window " << window << ", sinks " << with_sinks;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaKvTest,
                         ::testing::Values(KvCase{4, 2, 16}, KvCase{9, 3, 64}, KvCase{32, 8, 128},
                                           KvCase{4, 4, 80}, KvCase{8, 1, 256}),
                         [](const auto& info) {
                           return "h" + std::to_string(info.param.n_head) + "_kv" +
                                  std::to_string(info.param.n_kv_head) + "_d" +
                                  std::to_string(info.param.head_dim);
                         });

// ---- Memory and devices ----

TEST_F(CudaBackendTest, MoreThanTheDeviceHoldsIsResourceExhausted) {
  absl::StatusOr<void*> p = gpu_->Allocate(size_t{1} << 50);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
  // The device is still usable afterwards.
  Guarded x = UploadGuarded({1.0f, 2.0f});
  gpu_->Add(x.data(), x.data(), 2);
  EXPECT_EQ(DownloadChecked(x), (std::vector<float>{2.0f, 4.0f}));
}

TEST_F(CudaBackendTest, ADeviceOutOfRangeIsInvalidArgument) {
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCudaBackend({.device = 4096});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << b.status();
  EXPECT_NE(b.status().message().find("4096"), std::string::npos) << b.status();
}

// BATON_CUDA_PRODUCT_TABLE is read before any device is touched: a bad file is refused, naming
// it and the line, with or without a GPU.
TEST(CudaBackendWithoutGpuTest, ABadProductTableIsRefusedNamingTheLine) {
  const std::string path = ::testing::TempDir() + "/product_table.txt";
  {
    std::ofstream file(path);
    file << "    {DType::kQ4_0, MatrixHeight::kTall, 32, 1},  // mma-w4-m1n4\n"
         << "    {DType::kQ4_0, MatrixHeight::kTall, 32, 99},\n";
  }
  setenv("BATON_CUDA_PRODUCT_TABLE", path.c_str(), 1);
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(*ParseDevice("cuda:0"), {});
  setenv("BATON_CUDA_PRODUCT_TABLE", (::testing::TempDir() + "/no-such-table").c_str(), 1);
  absl::StatusOr<std::unique_ptr<Backend>> missing = CreateBackend(*ParseDevice("cuda:0"), {});
  unsetenv("BATON_CUDA_PRODUCT_TABLE");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find(path + ": line 2: variant 99 does not exist"),
            std::string::npos)
      << b.status().message();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

TEST(CudaBackendWithoutGpuTest, SaysWhyThereIsNone) {
  absl::StatusOr<std::unique_ptr<Backend>> b = Gpu();
  if (b.ok()) GTEST_SKIP() << "a GPU is present: " << (*b)->name();
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
  EXPECT_FALSE(b.status().message().empty());
}

}  // namespace
}  // namespace baton::kernels::cuda
