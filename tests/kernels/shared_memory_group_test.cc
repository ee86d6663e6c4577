// SharedMemoryGroup: the collectives of a group of ranks that are threads, against their
// definitions (the all-reduce's rank-order sum, bit for bit on every rank; the all-gather's
// column blocks), point-to-point order, and failure: a rank that never arrives fails the others
// within the timeout, an abort wakes a waiting rank, a mismatch fails every rank; a reset group
// works again.
#include "kernels/cpu/shared_memory_group.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton::kernels {
namespace {

std::unique_ptr<SharedMemoryGroup> MakeGroup(int size,
                                             absl::Duration timeout = absl::Seconds(30)) {
  absl::StatusOr<std::unique_ptr<SharedMemoryGroup>> group =
      SharedMemoryGroup::Create({.size = size, .timeout = timeout});
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? *std::move(group) : nullptr;
}

// Runs body(rank) on one thread per rank and returns each rank's status.
std::vector<absl::Status> OnEveryRank(int size,
                                      const std::function<absl::Status(int rank)>& body) {
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&results, &body, r] { results[r] = body(r); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<float> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (float& x : v) x = value(rng);
  return v;
}

class SharedMemoryGroupTest : public testing::TestWithParam<int> {};

TEST_P(SharedMemoryGroupTest, AllReduceSumsInRankOrderOnEveryRank) {
  const int size = GetParam();
  std::unique_ptr<SharedMemoryGroup> group = MakeGroup(size);
  ASSERT_NE(group, nullptr);
  // Several calls in a row, of different lengths, reuse the slots.
  for (int64_t count : {1, 7, 4096, 100003}) {
    std::vector<std::vector<float>> data(size);
    for (int r = 0; r < size; ++r) data[r] = RandomValues(count, 17 * r + count);
    std::vector<float> expected = data[0];
    for (int r = 1; r < size; ++r) {
      for (int64_t i = 0; i < count; ++i) expected[i] += data[r][i];
    }
    for (const absl::Status& s : OnEveryRank(size, [&](int r) {
           return group->communicator(r).AllReduceSum(data[r].data(), count);
         })) {
      ASSERT_TRUE(s.ok()) << s;
    }
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(std::memcmp(data[r].data(), expected.data(), count * sizeof(float)), 0)
          << "rank " << r << ", " << count << " values";
    }
  }
}

TEST_P(SharedMemoryGroupTest, AllGatherPutsEachRanksColumnsSideBySide) {
  const int size = GetParam();
  std::unique_ptr<SharedMemoryGroup> group = MakeGroup(size);
  ASSERT_NE(group, nullptr);
  const int64_t rows = 3;
  // Rank r brings r + 2 columns (uneven, as a vocabulary that does not divide).
  std::vector<std::vector<float>> in(size);
  int64_t out_cols = 0;
  for (int r = 0; r < size; ++r) {
    in[r] = RandomValues(rows * (r + 2), 5 + r);
    out_cols += r + 2;
  }
  std::vector<std::vector<float>> out(size, std::vector<float>(rows * out_cols, -1.0f));
  for (const absl::Status& s : OnEveryRank(size, [&](int r) {
         return group->communicator(r).AllGatherColumns(in[r].data(), rows, r + 2,
                                                          out[r].data(), out_cols);
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (int r = 0; r < size; ++r) {
    int64_t first = 0;
    for (int from = 0; from < size; ++from) {
      for (int64_t row = 0; row < rows; ++row) {
        for (int64_t c = 0; c < from + 2; ++c) {
          ASSERT_EQ(out[r][row * out_cols + first + c], in[from][row * (from + 2) + c])
              << "rank " << r << " row " << row << " column " << first + c;
        }
      }
      first += from + 2;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SharedMemoryGroupTest, testing::Values(1, 2, 3, 4));

TEST(SharedMemoryGroupPointToPointTest, MessagesArriveInOrderAndWholeBetweenEachPair) {
  std::unique_ptr<SharedMemoryGroup> group = MakeGroup(3);
  ASSERT_NE(group, nullptr);
  // Every rank sends two messages to each other rank, then receives the others' two.
  std::vector<absl::Status> results = OnEveryRank(3, [&](int r) -> absl::Status {
    Communicator& c = group->communicator(r);
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      for (int i = 0; i < 2; ++i) {
        const int32_t message[2] = {r * 10 + peer, i};
        if (absl::Status s = c.Send(peer, message, sizeof(message)); !s.ok()) return s;
      }
    }
    for (int peer = 0; peer < 3; ++peer) {
      if (peer == r) continue;
      for (int i = 0; i < 2; ++i) {
        int32_t message[2] = {-1, -1};
        if (absl::Status s = c.Receive(peer, message, sizeof(message)); !s.ok()) return s;
        if (message[0] != peer * 10 + r || message[1] != i) {
          return absl::InternalError("a message arrived out of order or from the wrong rank");
        }
      }
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(group->communicator(0).Send(0, "x", 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(group->communicator(0).Receive(3, nullptr, 0).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryGroupFailureTest, ARankThatNeverArrivesFailsTheOthersWithinTheTimeout) {
  std::unique_ptr<SharedMemoryGroup> group = MakeGroup(3, absl::Milliseconds(200));
  ASSERT_NE(group, nullptr);
  // Ranks 0 and 1 all-reduce; rank 2 never comes.
  const absl::Time start = absl::Now();
  std::vector<absl::Status> results = OnEveryRank(2, [&](int r) {
    float x = 1.0f;
    return group->communicator(r).AllReduceSum(&x, 1);
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  }
  // The group stays failed: rank 2 arriving late fails at once, as does a message.
  float x = 1.0f;
  EXPECT_EQ(group->communicator(2).AllReduceSum(&x, 1).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(group->communicator(2).Send(0, &x, sizeof(x)).code(),
            absl::StatusCode::kDeadlineExceeded);

  // Reset: the group works again, with all three ranks.
  group->Reset();
  std::vector<float> values = {1.0f, 2.0f, 4.0f};
  for (const absl::Status& s : OnEveryRank(3, [&](int r) {
         return group->communicator(r).AllReduceSum(&values[r], 1);
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(values, (std::vector<float>{7.0f, 7.0f, 7.0f}));
}

TEST(SharedMemoryGroupFailureTest, AbortWakesAWaitingRank) {
  std::unique_ptr<SharedMemoryGroup> group = MakeGroup(2, absl::Seconds(600));
  ASSERT_NE(group, nullptr);
  absl::Status gather;
  absl::Status receive;
  std::thread waiting([&] {
    float in = 1.0f;
    float out[2];
    gather = group->communicator(0).AllGatherColumns(&in, 1, 1, out, 2);
  });
  std::thread receiving([&] {
    char byte;
    receive = group->communicator(1).Receive(0, &byte, 1);
  });
  absl::SleepFor(absl::Milliseconds(50));
  group->Abort("the test stops it");
  waiting.join();
  receiving.join();
  EXPECT_EQ(gather.code(), absl::StatusCode::kAborted) << gather;
  EXPECT_EQ(receive.code(), absl::StatusCode::kAborted) << receive;
  EXPECT_NE(gather.message().find("the test stops it"), std::string::npos) << gather;
}

TEST(SharedMemoryGroupFailureTest, MismatchedShapesFailEveryRank) {
  std::unique_ptr<SharedMemoryGroup> group = MakeGroup(2);
  ASSERT_NE(group, nullptr);
  std::vector<float> data(4, 1.0f);
  std::vector<absl::Status> results = OnEveryRank(2, [&](int r) {
    std::vector<float> mine = data;
    return group->communicator(r).AllReduceSum(mine.data(), r == 0 ? 4 : 3);
  });
  for (const absl::Status& s : results) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  }
  // A message of another size than expected.
  std::unique_ptr<SharedMemoryGroup> second = MakeGroup(2);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(second->communicator(0).Send(1, data.data(), 8).ok());
  EXPECT_EQ(second->communicator(1).Receive(0, data.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryGroupFailureTest, RefusesAnEmptyGroup) {
  EXPECT_EQ(SharedMemoryGroup::Create({.size = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedMemoryGroup::Create({.size = 2, .timeout = absl::ZeroDuration()})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::kernels
