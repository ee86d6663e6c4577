// The interleaved layout of super-block and float weights (interleaved_rows.h): every row's units
// where LocateRow says, and the same kernel giving the same bits on it as on the original rows,
// through the backend (registered weights) and called directly on row ranges that cut groups.
#include "kernels/cpu/interleaved_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/dtype.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels {
namespace {

using testing::GuardedBuffer;
using testing::MakeWeights;
using testing::RandomFloats;
using testing::TestWeights;

// x [n, cols] as the activations the kernels of dtype read (isa_kernels.h): f32 as given for the
// float types (or rounded to BF16 where the level multiplies BF16 so), else quantized to kQ8_K,
// with the rows up to a multiple of 16 readable and their scales zero.
class KernelActivations {
 public:
  KernelActivations(const IsaKernels& kernels, DType dtype, const std::vector<float>& x,
                    int64_t n, int64_t cols)
      : x_(x),
        format_(ActivationFormatFor(kernels, dtype)),
        stride_(ActivationScaleStride(ActivationFormat::kQ8_K, cols)),
        qs_((n + 15) / 16 * 16 * cols),
        d_((n + 15) / 16 * 16 * stride_, 0.0f),
        bsums_(n * cols / 16) {
    if (format_ == ActivationFormat::kBF16) {
      bf16_.resize(n * Bf16RowValues(cols));
      for (int64_t i = 0; i < n; ++i) {
        kernels.to_bf16_row(x.data() + i * cols, cols, bf16_.data() + i * Bf16RowValues(cols));
      }
    }
    if (format_ != ActivationFormat::kQ8_K) return;
    for (int64_t i = 0; i < n; ++i) {
      QuantizeRowQ8_KScalar(x.data() + i * cols, cols, qs_.data() + i * cols,
                            d_.data() + i * stride_, bsums_.data() + i * cols / 16);
    }
  }
  MatMulActivations view() const {
    if (format_ == ActivationFormat::kF32) return {.f32 = x_.data()};
    if (format_ == ActivationFormat::kBF16) return {.bf16 = bf16_.data()};
    return {.qs = qs_.data(), .d = d_.data(), .bsums = bsums_.data(), .scale_stride = stride_};
  }

 private:
  const std::vector<float>& x_;
  ActivationFormat format_;
  int64_t stride_;
  std::vector<int8_t> qs_;
  std::vector<float> d_;
  std::vector<int16_t> bsums_;
  std::vector<uint16_t> bf16_;
};

// dtype, rows, cols, n (activation rows)
using Param = std::tuple<DType, int64_t, int64_t, int64_t>;

class InterleavedRowsTest : public ::testing::TestWithParam<Param> {};

TEST_P(InterleavedRowsTest, LocateRowFindsEveryBlockOfEveryRow) {
  const auto [dtype, rows, cols, n] = GetParam();
  const TestWeights w = MakeWeights(dtype, rows, cols, 3 + rows, /*random_bits=*/true);
  std::vector<uint8_t> interleaved(w.bytes.size());
  InterleaveGroups(w.matrix(), 0, InterleavedGroups(w.matrix()), interleaved.data());
  MatMulArgs args;
  args.w = interleaved.data();
  args.row_bytes = RowBytes(dtype, cols);
  args.n_rows = rows;
  args.interleave = kInterleaveRows;
  const int64_t unit_bytes = InterleaveUnitBytes(dtype, cols);
  ASSERT_GT(unit_bytes, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const RowBlocks located = LocateRow(args, r, unit_bytes);
    for (int64_t b = 0; b < args.row_bytes / unit_bytes; ++b) {
      ASSERT_EQ(0, std::memcmp(located.first + b * located.stride,
                               w.bytes.data() + r * args.row_bytes + b * unit_bytes,
                               static_cast<size_t>(unit_bytes)))
          << "row " << r << " unit " << b;
    }
  }
}

TEST_P(InterleavedRowsTest, KernelsGiveTheSameBitsOnBothLayouts) {
  const auto [dtype, rows, cols, n] = GetParam();
  const TestWeights w = MakeWeights(dtype, rows, cols, 5 + rows);
  const std::vector<float> x = RandomFloats(n * cols, 7 + n);
  std::vector<uint8_t> interleaved(w.bytes.size());
  InterleaveGroups(w.matrix(), 0, InterleavedGroups(w.matrix()), interleaved.data());
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (isa > DetectCpuIsaUncapped()) continue;
    // Through the backend: the plain matrix, then registered (it runs on the interleaved copy).
    auto backend = CreateCpuBackendForIsa({.n_threads = 2}, isa);
    std::vector<float> plain(n * rows);
    backend->MatMul(w.matrix(), x.data(), n, plain.data());
    backend->RegisterWeights(w.matrix());
    GuardedBuffer registered(n * rows, NAN);
    backend->MatMul(w.matrix(), x.data(), n, registered.data());
    backend->ReleaseWeights(w.matrix());
    EXPECT_TRUE(registered.CanariesIntact()) << CpuIsaName(isa);
    ASSERT_EQ(0, std::memcmp(registered.data(), plain.data(), n * rows * sizeof(float)))
        << CpuIsaName(isa);

    // The level's kernel called directly on ranges that start and end inside a group.
    MatMulArgs args;
    args.w = interleaved.data();
    args.row_bytes = RowBytes(dtype, cols);
    args.interleave = kInterleaveRows;
    args.n_rows = rows;
    args.n_cols = cols;
    args.n = n;
    const KernelActivations activations(KernelsFor(isa), dtype, x, n, cols);
    args.x = activations.view();
    GuardedBuffer direct(n * rows, NAN);
    args.y = direct.data();
    const MatMulRowsFn kernel = MatMulKernelFor(KernelsFor(isa), dtype);
    for (int64_t begin = 0; begin < rows; begin += 5) {
      kernel(args, begin, std::min(begin + 5, rows));
    }
    EXPECT_TRUE(direct.CanariesIntact()) << CpuIsaName(isa);
    ASSERT_EQ(0, std::memcmp(direct.data(), plain.data(), n * rows * sizeof(float)))
        << CpuIsaName(isa);
  }
}

TEST(InterleaveUnitBytesTest, SuperBlocksAndWholeCacheLinesOfFloats) {
  EXPECT_EQ(InterleaveUnitBytes(DType::kQ4_K, 256), 144);
  EXPECT_EQ(InterleaveUnitBytes(DType::kQ6_K, 512), 210);
  EXPECT_EQ(InterleaveUnitBytes(DType::kF16, 576), 64);
  EXPECT_EQ(InterleaveUnitBytes(DType::kF32, 16), 64);
  // Float rows that are not a whole number of 64-byte units, and the packed types: none.
  EXPECT_EQ(InterleaveUnitBytes(DType::kF16, 37), 0);
  EXPECT_EQ(InterleaveUnitBytes(DType::kBF16, 48), 0);
  EXPECT_EQ(InterleaveUnitBytes(DType::kQ4_0, 256), 0);
}

// A float matrix without an interleaved layout is not registered and keeps its results.
TEST(InterleaveUnitBytesTest, FloatRowsOfPartialUnitsRunAsStored) {
  const TestWeights w = MakeWeights(DType::kF16, 9, 37, 11);
  const std::vector<float> x = RandomFloats(3 * 37, 12);
  auto backend = CreateCpuBackendForIsa({.n_threads = 2}, DetectCpuIsaUncapped());
  std::vector<float> plain(3 * 9), after(3 * 9);
  backend->MatMul(w.matrix(), x.data(), 3, plain.data());
  EXPECT_FALSE(backend->RegisterWeights(w.matrix()));
  backend->MatMul(w.matrix(), x.data(), 3, after.data());
  EXPECT_EQ(0, std::memcmp(after.data(), plain.data(), after.size() * sizeof(float)));
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [dtype, rows, cols, n] = info.param;
  return testing::MatMulCaseName(dtype, rows, cols, n);
}

// Rows: one, a partial group alone, whole groups, whole groups and a partial one.
INSTANTIATE_TEST_SUITE_P(
    Shapes, InterleavedRowsTest,
    ::testing::Combine(::testing::Values(DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                                         DType::kQ6_K, DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(int64_t{1}, int64_t{3}, int64_t{8}, int64_t{37},
                                         int64_t{70}),
                       ::testing::Values(int64_t{256}, int64_t{768}),
                       ::testing::Values(int64_t{1}, int64_t{3}, int64_t{5})),
    Name);

}  // namespace
}  // namespace baton::kernels
