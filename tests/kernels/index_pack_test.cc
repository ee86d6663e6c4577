// IndexPack (kernels/cuda/index_pack.h): the arrays an operation uploads at once keep their
// values and land on aligned offsets that At finds again. Host only: runs without a GPU.
#include "kernels/cuda/index_pack.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace baton::kernels::cuda {
namespace {

struct Pair {
  const float* pointer;
  int32_t value;
};

TEST(IndexPackTest, ArraysKeepTheirValuesAtAlignedOffsets) {
  const std::vector<int32_t> table = {7, 2, 9};
  const std::vector<int64_t> rows = {5, 0};
  const Pair pairs[2] = {{nullptr, 1}, {reinterpret_cast<const float*>(16), 2}};
  IndexPack pack;
  const size_t at_table = pack.Add(table.data(), table.size());
  const size_t at_none = pack.Add(table.data(), 0);
  const size_t at_rows = pack.Add(rows.data(), rows.size());
  const size_t at_pairs = pack.Add(pairs, 2);
  for (const size_t offset : {at_table, at_none, at_rows, at_pairs}) {
    EXPECT_EQ(offset % IndexPack::kAlignment, 0u) << offset;
  }
  EXPECT_EQ(at_table, 0u);
  EXPECT_GE(at_rows, at_table + table.size() * sizeof(int32_t));
  // A copy of the pack, as the device gets it.
  std::vector<uint8_t> copy(pack.data(), pack.data() + pack.size());
  EXPECT_EQ(IndexPack::At<int32_t>(copy.data(), at_table)[2], 9);
  EXPECT_EQ(IndexPack::At<int64_t>(copy.data(), at_rows)[0], 5);
  EXPECT_EQ(IndexPack::At<Pair>(copy.data(), at_pairs)[1].value, 2);
  EXPECT_EQ(IndexPack::At<Pair>(copy.data(), at_pairs)[1].pointer, pairs[1].pointer);
  pack.Clear();
  EXPECT_EQ(pack.size(), 0u);
  EXPECT_EQ(pack.Add(rows.data(), 1), 0u);
}

}  // namespace
}  // namespace baton::kernels::cuda
