// MatMul and GetRows of every CPU backend variant (reference, fast at each ISA level) over every
// supported weight dtype and a range of shapes, against a dense double-precision computation on
// the dequantized weights; plus batch invariance of the fast backends.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "tests/kernels/backend_params.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels {
namespace {

using testing::AllImpls;
using testing::FastImpls;
using testing::GuardedBuffer;
using testing::Impl;
using testing::ImplName;
using testing::ImplSupported;
using testing::MakeBackend;
using testing::MakeWeights;
using testing::RandomFloats;
using testing::TestWeights;

const std::vector<DType>& WeightTypes() {
  static const std::vector<DType> types = {
      DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
      DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
      DType::kQ6_K};
  return types;
}

bool IsQuantized(DType dtype) { return Traits(dtype).block_size > 1; }

// Bound on the error of one output, in units of ||x_i|| * ||w_r|| / sqrt(n_cols) (the typical
// magnitude of a dot product of unrelated vectors), and on the relative L2 error of a whole
// output. The reference accumulates in double; the fast kernels accumulate in f32 and quantize
// the activations to 8 bits for quantized weights (blocks of 32, or 256 for the K-quants), and to
// BF16 for BF16 weights where the level multiplies with vdpbf16ps (relative error up to 2^-9 per
// activation: measured up to 1.9e-3 relative L2 error, 5.7e-3 units in one output).
double Tolerance(Impl impl, DType dtype) {
  if (impl == Impl::kReference) return 1e-6;
  if (impl == Impl::kFastScalar) return 1e-6;  // the fast backend falls back to the reference
  if (dtype == DType::kBF16 && Bf16DotProducts(IsaOf(impl))) return 4e-3;
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return 1e-5;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 1.5e-2;
    default:
      return 1e-2;
  }
}

struct Shape {
  int64_t n;
  int64_t n_rows;
  int64_t n_cols;
};

const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {1, 1, 256},  {1, 67, 512},   {7, 13, 2048}, {33, 9, 768},   {5, 29, 32},
      {13, 17, 96}, {64, 12, 1024}, {3, 4, 37},    {2, 131, 1536}, {29, 45, 512},
  };
  return shapes;
}

// y [n, n_rows] in double precision from the dequantized weights.
std::vector<double> DenseMatMul(const std::vector<float>& w, const std::vector<float>& x,
                                const Shape& s) {
  std::vector<double> y(static_cast<size_t>(s.n * s.n_rows));
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t r = 0; r < s.n_rows; ++r) {
      double sum = 0.0;
      for (int64_t k = 0; k < s.n_cols; ++k) {
        sum += static_cast<double>(x[i * s.n_cols + k]) * w[r * s.n_cols + k];
      }
      y[i * s.n_rows + r] = sum;
    }
  }
  return y;
}

double Norm(const float* v, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(v[i]) * v[i];
  return std::sqrt(sum);
}

using MatMulParam = std::tuple<Impl, DType, Shape, bool>;

class MatMulTest : public ::testing::TestWithParam<MatMulParam> {};

TEST_P(MatMulTest, MatchesDenseComputation) {
  const auto [impl, dtype, shape, random_bits] = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";

  const TestWeights w = MakeWeights(dtype, shape.n_rows, shape.n_cols, 17 + shape.n_cols,
                                    random_bits);
  const std::vector<float> x = RandomFloats(shape.n * shape.n_cols, 99 + shape.n);
  const std::vector<float> w_dense = w.Dequantized();
  const std::vector<double> expected = DenseMatMul(w_dense, x, shape);

  GuardedBuffer y(shape.n * shape.n_rows, NAN);
  auto backend = MakeBackend(impl);
  backend->MatMul(w.matrix(), x.data(), shape.n, y.data());

  EXPECT_TRUE(y.CanariesIntact()) << "MatMul wrote outside its output";
  ASSERT_TRUE(testing::AllFinite(y.data(), y.size())) << "NaN/Inf (or unwritten) outputs";

  const double tol = Tolerance(impl, dtype);
  double max_scaled_err = 0.0, err_sq = 0.0, ref_sq = 0.0;
  for (int64_t i = 0; i < shape.n; ++i) {
    const double x_norm = Norm(x.data() + i * shape.n_cols, shape.n_cols);
    for (int64_t r = 0; r < shape.n_rows; ++r) {
      const double w_norm = Norm(w_dense.data() + r * shape.n_cols, shape.n_cols);
      const double unit = x_norm * w_norm / std::sqrt(static_cast<double>(shape.n_cols));
      const double got = y[i * shape.n_rows + r];
      const double want = expected[i * shape.n_rows + r];
      const double err = std::fabs(got - want);
      if (unit > 0.0) max_scaled_err = std::max(max_scaled_err, err / unit);
      err_sq += err * err;
      ref_sq += want * want;
    }
  }
  EXPECT_LE(max_scaled_err, 5 * tol);
  if (shape.n * shape.n_rows >= 16) {
    EXPECT_LE(std::sqrt(err_sq / ref_sq), tol);
  }
}

std::string MatMulName(const ::testing::TestParamInfo<MatMulParam>& info) {
  const auto& [impl, dtype, shape, random_bits] = info.param;
  return ImplName(impl) + "_" + std::string(DTypeName(dtype)) + "_n" + std::to_string(shape.n) +
         "_r" + std::to_string(shape.n_rows) + "_c" + std::to_string(shape.n_cols) +
         (random_bits ? "_bits" : "");
}

// Every backend x dtype x shape where the columns fit the dtype's blocks; quantized types also
// with random-bit weights.
std::vector<MatMulParam> MatMulParams() {
  std::vector<MatMulParam> params;
  for (Impl impl : AllImpls()) {
    for (DType dtype : WeightTypes()) {
      for (const Shape& shape : Shapes()) {
        if (shape.n_cols % Traits(dtype).block_size != 0) continue;
        params.emplace_back(impl, dtype, shape, false);
        if (IsQuantized(dtype)) params.emplace_back(impl, dtype, shape, true);
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(All, MatMulTest, ::testing::ValuesIn(MatMulParams()), MatMulName);

// The tests' quantizers (kernel_test_util.h) write the layouts the engine reads: a row
// dequantizes back to values near the ones it was made from.
TEST(TestWeightsTest, QuantizedRowsDequantizeNearTheirValues) {
  constexpr int64_t kCols = 512;
  for (DType dtype : WeightTypes()) {
    const std::vector<float> x = RandomFloats(kCols, 3);
    std::vector<uint8_t> row(RowBytes(dtype, kCols));
    QuantizeRow(dtype, x.data(), kCols, row.data());
    std::vector<float> back(kCols);
    DequantizeRow(dtype, row.data(), back.data(), kCols);
    double err_sq = 0.0, x_sq = 0.0;
    for (int64_t k = 0; k < kCols; ++k) {
      err_sq += (x[k] - back[k]) * static_cast<double>(x[k] - back[k]);
      x_sq += x[k] * static_cast<double>(x[k]);
    }
    // Relative RMS error under 2 / 2^b for b-bit values (measured: Q2_K 0.32, Q3_K 0.17, the
    // 4-bit types 0.08-0.10, every wider type less); a value in the wrong place costs about 1.4.
    const int bits = dtype == DType::kQ2_K ? 2 : dtype == DType::kQ3_K ? 3 : 4;
    EXPECT_LT(std::sqrt(err_sq / x_sq), 2.0 / (1 << bits)) << DTypeName(dtype);
  }
}

// ---- batch invariance --------------------------------------------------------------------------

using InvarianceParam = std::tuple<Impl, DType>;

class BatchInvarianceTest : public ::testing::TestWithParam<InvarianceParam> {};

TEST_P(BatchInvarianceTest, RowResultDoesNotDependOnBatch) {
  const auto [impl, dtype] = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  constexpr int64_t kN = 37, kRows = 37, kCols = 512;
  const TestWeights w = MakeWeights(dtype, kRows, kCols, 5);
  const std::vector<float> x = RandomFloats(kN * kCols, 6);
  auto backend = MakeBackend(impl, 2);
  auto single_thread = MakeBackend(impl, 1);

  std::vector<float> y_all(kN * kRows);
  backend->MatMul(w.matrix(), x.data(), kN, y_all.data());

  for (int64_t r : {0, 3, 4, 5, 12, 36}) {
    // Alone.
    std::vector<float> y_one(kRows);
    backend->MatMul(w.matrix(), x.data() + r * kCols, 1, y_one.data());
    EXPECT_EQ(0, std::memcmp(y_one.data(), y_all.data() + r * kRows, kRows * sizeof(float)))
        << "row " << r << ": n=1 differs from n=37";
    // Alone, on one thread (a different split of the weight rows).
    std::vector<float> y_one_thread(kRows);
    single_thread->MatMul(w.matrix(), x.data() + r * kCols, 1, y_one_thread.data());
    EXPECT_EQ(0, std::memcmp(y_one_thread.data(), y_one.data(), kRows * sizeof(float)))
        << "row " << r << ": 1 thread differs from 2";
    // At index 2 of batches of other random rows (a small batch and a prefill-sized one, which
    // the super-block types run on their panel kernel).
    for (int64_t batch_rows : {6, 20}) {
      std::vector<float> batch = RandomFloats(batch_rows * kCols, 100 + r);
      std::memcpy(batch.data() + 2 * kCols, x.data() + r * kCols, kCols * sizeof(float));
      std::vector<float> y_batch(batch_rows * kRows);
      backend->MatMul(w.matrix(), batch.data(), batch_rows, y_batch.data());
      EXPECT_EQ(0, std::memcmp(y_batch.data() + 2 * kRows, y_one.data(), kRows * sizeof(float)))
          << "row " << r << ": differs inside a batch of " << batch_rows;
    }
  }
}

std::string InvarianceName(const ::testing::TestParamInfo<InvarianceParam>& info) {
  return ImplName(std::get<0>(info.param)) + "_" + std::string(DTypeName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Fast, BatchInvarianceTest,
                         ::testing::Combine(::testing::ValuesIn(FastImpls()),
                                            ::testing::ValuesIn(WeightTypes())),
                         InvarianceName);

// ---- the largest sums ----------------------------------------------------------------------------

using LargestSumsParam = std::tuple<Impl, DType>;

class LargestSumsTest : public ::testing::TestWithParam<LargestSumsParam> {};

// Weights at their largest values (LargestValuesRow) against activations that quantize to -128 or
// 127 everywhere: the largest integer sums the kernels form (AVX2's int16 runs among them) stay
// exact, on every path a batch size or registration takes. The bound leaves room for the
// activations' f16 scale (Q8_0, Q8_1: relative 2^-11); an int16 sum that wrapped would miss it by
// thousands of times.
TEST_P(LargestSumsTest, AgreeWithDenseComputation) {
  const auto [impl, dtype] = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  constexpr int64_t kRows = 32, kCols = 512;
  const int64_t row_bytes = RowBytes(dtype, kCols);
  TestWeights w{.dtype = dtype, .n_rows = kRows, .n_cols = kCols, .bytes = {}};
  w.bytes.resize(static_cast<size_t>(kRows * row_bytes));
  std::mt19937_64 rng(7);
  for (int64_t r = 0; r < kRows; ++r) {
    testing::LargestValuesRow(dtype, kCols, rng, w.bytes.data() + r * row_bytes);
  }
  const std::vector<float> w_dense = w.Dequantized();
  std::vector<double> magnitude(kRows, 0.0);  // sum_k |w_rk|: the size of one output's terms
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t k = 0; k < kCols; ++k) magnitude[r] += std::fabs(w_dense[r * kCols + k]);
  }
  for (bool registered : {false, true}) {
    auto backend = MakeBackend(impl);
    if (registered) backend->RegisterWeights(w.matrix());
    for (int64_t n : {1, 4, 8, 16, 33}) {
      for (float value : {-1.0f, 1.0f}) {
        const std::vector<float> x(static_cast<size_t>(n * kCols), value);
        const std::vector<double> expected = DenseMatMul(w_dense, x, {n, kRows, kCols});
        std::vector<float> y(static_cast<size_t>(n * kRows));
        backend->MatMul(w.matrix(), x.data(), n, y.data());
        for (int64_t k = 0; k < n * kRows; ++k) {
          ASSERT_NEAR(y[k], expected[k], 1e-3 * magnitude[k % kRows])
              << "output " << k << ", n=" << n << ", x=" << value
              << (registered ? ", registered" : "");
        }
      }
    }
    if (registered) backend->ReleaseWeights(w.matrix());
  }
}

std::vector<DType> QuantizedWeightTypes() {
  std::vector<DType> types;
  for (DType dtype : WeightTypes()) {
    if (IsQuantized(dtype)) types.push_back(dtype);
  }
  return types;
}

INSTANTIATE_TEST_SUITE_P(Fast, LargestSumsTest,
                         ::testing::Combine(::testing::ValuesIn(FastImpls()),
                                            ::testing::ValuesIn(QuantizedWeightTypes())),
                         InvarianceName);

// ---- GetRows -----------------------------------------------------------------------------------

using GetRowsParam = std::tuple<Impl, DType>;

class GetRowsTest : public ::testing::TestWithParam<GetRowsParam> {};

TEST_P(GetRowsTest, EqualsDequantizedRows) {
  const auto [impl, dtype] = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  constexpr int64_t kRows = 50, kCols = 512;
  const TestWeights w = MakeWeights(dtype, kRows, kCols, 8);
  const std::vector<float> dense = w.Dequantized();
  // Many ids, so that the fast backend splits the work over its threads.
  std::vector<int32_t> ids;
  for (int i = 0; i < 70; ++i) ids.push_back((i * 37 + 11) % kRows);
  GuardedBuffer out(static_cast<int64_t>(ids.size()) * kCols, NAN);
  MakeBackend(impl)->GetRows(w.matrix(), ids.data(), ids.size(), out.data());
  EXPECT_TRUE(out.CanariesIntact());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(out.data() + i * kCols, dense.data() + ids[i] * kCols,
                             kCols * sizeof(float)))
        << "row " << i << " (id " << ids[i] << ")";
  }
}

// A matrix the backend keeps a copy of (RegisterWeights) gives its rows from the copy: the same
// bits with its original bytes overwritten.
TEST_P(GetRowsTest, OfARegisteredMatrixComeFromTheCopy) {
  const auto [impl, dtype] = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  constexpr int64_t kRows = 50, kCols = 512;  // partial groups of 16, 8 and 4 rows
  const TestWeights w = MakeWeights(dtype, kRows, kCols, 9);
  const std::vector<float> dense = w.Dequantized();
  WeightMatrix m = w.matrix();
  std::vector<uint8_t> bytes(static_cast<const uint8_t*>(m.data),
                             static_cast<const uint8_t*>(m.data) + kRows * RowBytes(dtype, kCols));
  m.data = bytes.data();
  std::unique_ptr<Backend> backend = MakeBackend(impl);
  const bool copied = backend->RegisterWeights(m);
  if (copied) std::fill(bytes.begin(), bytes.end(), uint8_t{0xA5});
  std::vector<int32_t> ids;
  for (int i = 0; i < 70; ++i) ids.push_back((i * 37 + 11) % kRows);
  GuardedBuffer out(static_cast<int64_t>(ids.size()) * kCols, NAN);
  backend->GetRows(m, ids.data(), ids.size(), out.data());
  EXPECT_TRUE(out.CanariesIntact());
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(out.data() + i * kCols, dense.data() + ids[i] * kCols,
                             kCols * sizeof(float)))
        << "row " << i << " (id " << ids[i] << "), " << (copied ? "from the copy" : "as stored");
  }
  if (copied) backend->ReleaseWeights(m);
}

INSTANTIATE_TEST_SUITE_P(All, GetRowsTest,
                         ::testing::Combine(::testing::ValuesIn(AllImpls()),
                                            ::testing::ValuesIn(WeightTypes())),
                         InvarianceName);

// ---- edge cases ----------------------------------------------------------------------------------

// The edge cases, one test per implementation.
class MatMulEdgeTest : public ::testing::TestWithParam<Impl> {};

TEST_P(MatMulEdgeTest, ZeroRowsOfXWriteNothing) {
  const Impl impl = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  const TestWeights w = MakeWeights(DType::kQ4_1, 8, 64, 1);
  GuardedBuffer y(0);
  MakeBackend(impl)->MatMul(w.matrix(), nullptr, 0, y.data());
  EXPECT_TRUE(y.CanariesIntact());
}

TEST_P(MatMulEdgeTest, ZeroWeightsAndZeroActivationsGiveZero) {
  const Impl impl = GetParam();
  if (!ImplSupported(impl)) GTEST_SKIP() << ImplName(impl) << " not supported by this CPU";
  for (DType dtype : WeightTypes()) {
    const int64_t cols = 256;
    TestWeights w = MakeWeights(dtype, 9, cols, 1);
    std::vector<float> zeros(cols, 0.0f);
    for (int64_t r = 0; r < 9; ++r) {
      QuantizeRow(dtype, zeros.data(), cols, w.bytes.data() + r * RowBytes(dtype, cols));
    }
    const std::vector<float> x = RandomFloats(3 * cols, 2);
    std::vector<float> y(3 * 9, NAN);
    MakeBackend(impl)->MatMul(w.matrix(), x.data(), 3, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f) << DTypeName(dtype);
    // Zero activations: the quantized activation scale is 0.
    std::vector<float> x0(3 * cols, 0.0f);
    const TestWeights w2 = MakeWeights(dtype, 9, cols, 3);
    MakeBackend(impl)->MatMul(w2.matrix(), x0.data(), 3, y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f) << DTypeName(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(All, MatMulEdgeTest, ::testing::ValuesIn(AllImpls()),
                         [](const ::testing::TestParamInfo<Impl>& info) {
                           return ImplName(info.param);
                         });

TEST(MatMulEdgeTest, ManyThreadsFewRows) {
  // More threads than row tasks, and odd thread counts.
  const TestWeights w = MakeWeights(DType::kQ4_1, 3, 128, 4);
  const std::vector<float> x = RandomFloats(5 * 128, 5);
  std::vector<float> want(15), got(15);
  MakeBackend(Impl::kReference)->MatMul(w.matrix(), x.data(), 5, want.data());
  for (int threads : {1, 3, 5}) {
    auto backend = CreateCpuBackend({.n_threads = threads});
    backend->MatMul(w.matrix(), x.data(), 5, got.data());
    EXPECT_LE(testing::RelativeL2Error(got.data(), want.data(), 15), 1e-2) << threads;
  }
}

TEST(CpuBackendTest, NamesTheIsa) {
  EXPECT_EQ(CreateCpuBackend({.reference = true})->name(), "cpu-reference");
  EXPECT_EQ(CreateCpuBackend({})->name(), "cpu-" + CpuIsaName());
}

}  // namespace
}  // namespace baton::kernels
