// Test-only check shared by the tests of the CPU backend's re-laid-out weight copies
// (interleaved_rows.h, super_block_lanes.h): the same bits from a copy as from the rows as stored.
// Header-only.
#ifndef BATON_TESTS_KERNELS_LAYOUT_CHECK_H_
#define BATON_TESTS_KERNELS_LAYOUT_CHECK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/isa_kernels.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels::testing {

// For every level this CPU has: y = x w^T (x [n, w.cols]) gives the same bits
//   - through the backend, w registered (so it runs on the backend's own copy) and not, and
//   - from the level's kernel called directly on `layout` (MatMulArgs with the copy's w and
//     layout fields set) over ranges of 5 rows, which start and end inside the layout's groups.
inline void ExpectSameBitsOnLayout(const TestWeights& w, const std::vector<float>& x, int64_t n,
                                   const MatMulArgs& layout) {
  const int64_t rows = w.n_rows, cols = w.n_cols;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512Vnni}) {
    if (isa > DetectCpuIsaUncapped()) continue;
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
}

}  // namespace baton::kernels::testing

#endif  // BATON_TESTS_KERNELS_LAYOUT_CHECK_H_
