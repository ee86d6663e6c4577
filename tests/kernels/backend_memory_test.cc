// The memory and element-wise operations of every backend variant: Allocate / Free and the copies
// (through BackendBuffer), Add, AddRowBias, RoundToF16, GatherRows and WriteKv against their
// definitions.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_buffer.h"
#include "kernels/half.h"
#include "kernels/host_copy.h"
#include "tests/kernels/backend_params.h"
#include "tests/kernels/kernel_test_util.h"

namespace baton::kernels {
namespace {

using testing::Impl;
using testing::ImplName;
using testing::ImplSupported;
using testing::MakeBackend;
using testing::RandomFloats;

class BackendMemoryTest : public ::testing::TestWithParam<Impl> {
 protected:
  void SetUp() override {
    if (!ImplSupported(GetParam())) GTEST_SKIP() << ImplName(GetParam()) << " not supported";
    backend_ = MakeBackend(GetParam());
  }

  // `values` in a fresh buffer of the backend's memory.
  BackendBuffer Upload(const std::vector<float>& values) {
    absl::StatusOr<BackendBuffer> buffer =
        BackendBuffer::Allocate(*backend_, values.size() * sizeof(float));
    EXPECT_TRUE(buffer.ok()) << buffer.status();
    backend_->CopyToDevice(buffer->as<float>(), values.data(), values.size() * sizeof(float));
    return *std::move(buffer);
  }

  std::vector<float> Download(const BackendBuffer& buffer, size_t n) {
    std::vector<float> values(n);
    backend_->CopyToHost(values.data(), buffer.as<float>(), n * sizeof(float));
    return values;
  }

  std::unique_ptr<Backend> backend_;
};

TEST_P(BackendMemoryTest, AllocatedMemoryIsAlignedAndRoundTrips) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4}, size_t{1000}, size_t{1} << 20}) {
    absl::StatusOr<BackendBuffer> buffer = BackendBuffer::Allocate(*backend_, bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(buffer->bytes(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->as<void>()) % 64, 0u) << bytes << " bytes";
    std::vector<uint8_t> in(bytes), out(bytes, 0);
    for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(i * 37 + 11);
    backend_->CopyToDevice(buffer->as<void>(), in.data(), bytes);
    backend_->CopyToHost(out.data(), buffer->as<void>(), bytes);
    EXPECT_EQ(in, out) << bytes << " bytes";
  }
}

TEST_P(BackendMemoryTest, MoreThanTheMachineHoldsIsResourceExhausted) {
  absl::StatusOr<void*> huge = backend_->Allocate(size_t{1} << 62);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
}

// Host memory for the hand-off's copies, and copies that start after the operations queued
// before them: the result of an Add queued just before lands, not the bytes it replaced. Then
// the unordered copies into the backend's memory.
TEST_P(BackendMemoryTest, AsyncCopiesToHostMemoryLandAfterTheOperationsBeforeThem) {
  const std::vector<float> x = RandomFloats(4096, 4);
  const std::vector<float> y = RandomFloats(4096, 5);
  BackendBuffer dx = Upload(x);
  BackendBuffer dy = Upload(y);
  absl::StatusOr<void*> host = backend_->AllocateHost(x.size() * sizeof(float));
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*host) % 64, 0u);
  backend_->Add(dx.as<float>(), dy.as<float>(), 4096);
  // Two pieces, the second before the first in the destination.
  auto* out = static_cast<float*>(*host);
  const HostCopy copies[] = {{out + 1000, dx.as<float>(), 3096 * sizeof(float)},
                             {out, dx.as<float>() + 3096, 1000 * sizeof(float)}};
  std::unique_ptr<CopyFence> fence = backend_->CopyToHostAsync(copies);
  ASSERT_TRUE(fence->Wait(absl::Now() + absl::Seconds(30)).ok());
  for (int i = 0; i < 4096; ++i) {
    const int at = i < 3096 ? 1000 + i : i - 3096;
    ASSERT_EQ(out[at], x[i] + y[i]) << i;
  }
  fence.reset();
  // And back in, in pieces, beside the operations (none of which touches the destination).
  BackendBuffer back = Upload(std::vector<float>(4096, 0.0f));
  const HostCopy uploads[] = {{back.as<float>() + 3096, out, 1000 * sizeof(float)},
                              {back.as<float>(), out + 1000, 3096 * sizeof(float)}};
  backend_->CopyToDeviceUnordered(uploads);
  EXPECT_EQ(Download(back, 4096), Download(dx, 4096));
  backend_->FreeHost(*host);
  EXPECT_EQ(backend_->AllocateHost(size_t{1} << 62).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_P(BackendMemoryTest, AddAndAddRowBias) {
  const std::vector<float> x = RandomFloats(3 * 70, 1);
  const std::vector<float> y = RandomFloats(3 * 70, 2);
  const std::vector<float> bias = RandomFloats(70, 3);
  BackendBuffer dx = Upload(x);
  BackendBuffer dy = Upload(y);
  BackendBuffer dbias = Upload(bias);
  backend_->Add(dx.as<float>(), dy.as<float>(), 3 * 70);
  backend_->AddRowBias(dx.as<float>(), dbias.as<float>(), 3, 70);
  const std::vector<float> got = Download(dx, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(got[i], (x[i] + y[i]) + bias[i % 70]) << i;
  }
}

TEST_P(BackendMemoryTest, RoundToF16IsTheNearestHalfWithinItsRange) {
  std::vector<float> x = RandomFloats(4096, 4);
  for (float& v : x) v *= 1000.0f;
  // Ties (half-way between two f16 values), subnormals, the range's ends, zeros and non-finite.
  const float tie = 1.0f + std::ldexp(1.0f, -11);
  x.insert(x.end(), {tie, -tie, 1.0f + 3 * std::ldexp(1.0f, -11), std::ldexp(1.0f, -20),
                     std::ldexp(3.0f, -26), 65504.0f, -65504.0f, 6.1e-5f, 0.0f, -0.0f,
                     std::numeric_limits<float>::infinity(),
                     -std::numeric_limits<float>::infinity()});
  BackendBuffer dx = Upload(x);
  backend_->RoundToF16(dx.as<float>(), static_cast<int64_t>(x.size()));
  const std::vector<float> got = Download(dx, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float expected = x[i] == 0.0f ? 0.0f : F16ToF32(F32ToF16(x[i]));  // -0 becomes +0
    EXPECT_TRUE(std::memcmp(&got[i], &expected, sizeof(float)) == 0)
        << x[i] << " -> " << got[i] << ", f16 " << expected;
  }
}

TEST_P(BackendMemoryTest, RoundToF16KeepsValuesPastItsRangeFinite) {
  BackendBuffer dx = Upload({1.0e6f, -3.0e7f, std::nanf("")});
  backend_->RoundToF16(dx.as<float>(), 3);
  const std::vector<float> got = Download(dx, 3);
  EXPECT_EQ(got[0], 999936.0f);  // 11 significant bits: a multiple of 2^9 near 1e6
  EXPECT_EQ(got[1], -29999104.0f);  // a multiple of 2^14
  EXPECT_TRUE(std::isnan(got[2]));
}

TEST_P(BackendMemoryTest, GatherRowsTakesTheRowsInTheirOrder) {
  const std::vector<float> x = RandomFloats(5 * 9, 5);
  BackendBuffer dx = Upload(x);
  absl::StatusOr<BackendBuffer> out = BackendBuffer::Allocate(*backend_, 4 * 9 * sizeof(float));
  ASSERT_TRUE(out.ok());
  const int64_t rows[] = {4, 0, 4, 2};
  backend_->GatherRows(dx.as<float>(), rows, 4, 9, out->as<float>());
  const std::vector<float> got = Download(*out, 4 * 9);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 9; ++j) EXPECT_EQ(got[i * 9 + j], x[rows[i] * 9 + j]) << i << "," << j;
  }
}

// Two blocks of 4 tokens, 2 kv heads of 3: the blocks in reverse order in the pool.
struct SmallKv {
  static constexpr int32_t kBlock = 4, kHeads = 2, kDim = 3, kRow = kHeads * kDim;
  std::vector<uint16_t> pool = std::vector<uint16_t>(2 * 2 * kBlock * kRow, 0x7e00);  // f16 NaN
  std::vector<int32_t> table = {1, 0};
  KvLayerView View(int32_t n_tokens) {
    return {.k_base = pool.data(), .v_base = pool.data() + kBlock * kRow,
            .block_stride = 2 * kBlock * kRow, .block_table = table.data(),
            .n_tokens = n_tokens, .block_size = kBlock, .n_kv_head = kHeads, .head_dim = kDim};
  }
};

TEST_P(BackendMemoryTest, WriteKvStoresEachTokenInItsSlotInF16) {
  SmallKv kv;
  const std::vector<float> k = RandomFloats(2 * SmallKv::kRow, 6);
  const std::vector<float> v = RandomFloats(2 * SmallKv::kRow, 7);
  const int32_t positions[] = {5, 2};  // block 0 slot 1, block 1 slot 2 (so pool blocks 0, 1)
  backend_->WriteKv(kv.View(6), positions, 2, k.data(), v.data());
  const KvLayerView view = kv.View(6);
  int written = 0;
  for (int i = 0; i < 2; ++i) {
    for (int e = 0; e < SmallKv::kRow; ++e) {
      const int64_t at = view.RowOffset(positions[i], e / SmallKv::kDim) + e % SmallKv::kDim;
      EXPECT_EQ(view.k_base[at], F32ToF16(k[i * SmallKv::kRow + e])) << i << "," << e;
      EXPECT_EQ(view.v_base[at], F32ToF16(v[i * SmallKv::kRow + e])) << i << "," << e;
      written += 2;
    }
  }
  const int untouched = static_cast<int>(std::count(kv.pool.begin(), kv.pool.end(), 0x7e00));
  EXPECT_EQ(untouched + written, static_cast<int>(kv.pool.size()));
}

// The values where a conversion could go wrong: ties, overflow, f16 subnormals, values below
// them, f32 subnormals, infinities and NaNs of both signs and any payload.
TEST_P(BackendMemoryTest, WriteKvRoundsEdgeValuesAsF32ToF16) {
  SmallKv kv;
  const float nan_payload = std::bit_cast<float>(0xffa00001u);
  const std::vector<float> k = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65504.0f, 65520.0f, 1e6f,
                                -0x1p-20f};
  const std::vector<float> v = {0x1p-25f, 0x3p-26f, 1e-40f,
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), nan_payload};
  const int32_t position = 3;
  backend_->WriteKv(kv.View(6), &position, 1, k.data(), v.data());
  const KvLayerView view = kv.View(6);
  for (int e = 0; e < SmallKv::kRow; ++e) {
    const int64_t at = view.RowOffset(position, e / SmallKv::kDim) + e % SmallKv::kDim;
    EXPECT_EQ(view.k_base[at], F32ToF16(k[e])) << "k " << k[e];
    EXPECT_EQ(view.v_base[at], F32ToF16(v[e])) << "v " << v[e];
  }
}

TEST_P(BackendMemoryTest, WriteKvPastTheViewsTokensDies) {
  SmallKv kv;
  const std::vector<float> k(SmallKv::kRow), v(SmallKv::kRow);
  const int32_t position = 6;
  EXPECT_DEATH(backend_->WriteKv(kv.View(6), &position, 1, k.data(), v.data()),
               "position 6 outside the view's 6 tokens");
}

INSTANTIATE_TEST_SUITE_P(All, BackendMemoryTest, ::testing::ValuesIn(testing::AllImpls()),
                         [](const auto& info) { return ImplName(info.param); });

}  // namespace
}  // namespace baton::kernels
