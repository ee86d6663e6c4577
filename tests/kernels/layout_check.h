// Test-only checks shared by the tests of the CPU backend's re-laid-out weight copies
// (packed_block32.h, interleaved_rows.h, super_block_lanes.h): the same bits from a copy as from
// the rows as stored, and every row copied back out of a copy as stored. Header-only.
#ifndef BATON_TESTS_KERNELS_LAYOUT_CHECK_H_
#define BATON_TESTS_KERNELS_LAYOUT_CHECK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/isa_kernels.h"
#include "kernels/dtype.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels::testing {

// At level `isa` (which this CPU has): y = x w^T (x [n, w.cols]) gives the same bits
//   - through the backend, w registered (so it runs on the backend's own copy) and not, and
//   - from the level's kernel called directly on `layout` (MatMulArgs with the copy's w and
//     layout fields set) over ranges of 5 rows, which start and end inside the layout's groups.
inline void ExpectSameBitsOnLayout(CpuIsa isa, const TestWeights& w, const std::vector<float>& x,
                                   int64_t n, const MatMulArgs& layout) {
  const int64_t rows = w.n_rows, cols = w.n_cols;
  auto backend = CreateCpuBackendForIsa({.n_threads = 2}, isa);
  std::vector<float> plain(n * rows);
  backend->MatMul(w.matrix(), x.data(), n, plain.data());
  ASSERT_TRUE(backend->RegisterWeights(w.matrix())) << CpuIsaName(isa);
  GuardedBuffer registered(n * rows, NAN);
  backend->MatMul(w.matrix(), x.data(), n, registered.data());
  backend->ReleaseWeights(w.matrix());
  EXPECT_TRUE(registered.CanariesIntact()) << CpuIsaName(isa);
  ASSERT_EQ(0, std::memcmp(registered.data(), plain.data(), n * rows * sizeof(float)))
      << CpuIsaName(isa);

  MatMulArgs args = layout;
  args.row_bytes = RowBytes(w.dtype, cols);
  args.n_rows = rows;
  args.n_cols = cols;
  args.n = n;
  const KernelActivations activations(KernelsFor(isa), w.dtype, x, n, cols);
  args.x = activations.view();
  GuardedBuffer direct(n * rows, NAN);
  args.y = direct.data();
  const MatMulRowsFn kernel = MatMulKernelFor(KernelsFor(isa), w.dtype);
  for (int64_t begin = 0; begin < rows; begin += 5) {
    kernel(args, begin, std::min(begin + 5, rows));
  }
  EXPECT_TRUE(direct.CanariesIntact()) << CpuIsaName(isa);
  ASSERT_EQ(0, std::memcmp(direct.data(), plain.data(), n * rows * sizeof(float)))
      << CpuIsaName(isa);
}

// For each dtype x rows x cols, weights of random bits re-laid out by lay_out(w) (which returns
// the copy's bytes): copy_row(w, copy, r, row) writes each row r back as w.bytes stores it.
template <typename LayOut, typename CopyRow>
void ExpectEveryRowCopiesBack(std::initializer_list<DType> dtypes,
                              std::initializer_list<int64_t> row_counts,
                              std::initializer_list<int64_t> col_counts, const LayOut& lay_out,
                              const CopyRow& copy_row) {
  for (DType dtype : dtypes) {
    for (int64_t rows : row_counts) {
      for (int64_t cols : col_counts) {
        SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + std::to_string(rows) + "x" +
                     std::to_string(cols));
        const TestWeights w = MakeWeights(dtype, rows, cols, 4 + rows, /*random_bits=*/true);
        const std::vector<uint8_t> copy = lay_out(w);
        const int64_t row_bytes = RowBytes(dtype, cols);
        std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
        for (int64_t r = 0; r < rows; ++r) {
          copy_row(w.matrix(), copy.data(), r, row.data());
          ASSERT_EQ(0, std::memcmp(row.data(), w.bytes.data() + r * row_bytes, row.size()))
              << "row " << r;
        }
      }
    }
  }
}

}  // namespace baton::kernels::testing

#endif  // BATON_TESTS_KERNELS_LAYOUT_CHECK_H_
