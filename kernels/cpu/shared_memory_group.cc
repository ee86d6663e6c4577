#include "kernels/cpu/shared_memory_group.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/log/check.h"
#include "absl/strings/str_cat.h"

namespace baton::kernels {

class SharedMemoryGroup::Rank final : public Communicator {
 public:
  Rank(SharedMemoryGroup& group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_.size_; }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return group_.AllReduceSum(rank_, data, count, sum_);
  }
  absl::Status AllGatherColumns(const float* in, int64_t rows, int64_t cols, float* out,
                                int64_t out_cols) override {
    return group_.AllGatherColumns(rank_, in, rows, cols, out, out_cols);
  }
  absl::Status Send(int peer, const void* data, size_t bytes) override {
    return group_.Send(rank_, peer, data, bytes);
  }
  absl::Status Receive(int peer, void* data, size_t bytes) override {
    return group_.Receive(rank_, peer, data, bytes);
  }

 private:
  SharedMemoryGroup& group_;
  const int rank_;
  std::vector<float> sum_;  // the all-reduce's result before it is copied into the caller's data
};

absl::StatusOr<std::unique_ptr<SharedMemoryGroup>> SharedMemoryGroup::Create(
    const SharedMemoryGroupOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel group: size ", options.size, ", needs at least 1 rank"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("tensor-parallel group: the timeout must be positive");
  }
  return std::unique_ptr<SharedMemoryGroup>(new SharedMemoryGroup(options));
}

SharedMemoryGroup::SharedMemoryGroup(const SharedMemoryGroupOptions& options)
    : size_(options.size),
      timeout_(options.timeout),
      slots_(options.size),
      mailboxes_(static_cast<size_t>(options.size) * options.size) {
  for (int r = 0; r < size_; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
}

SharedMemoryGroup::~SharedMemoryGroup() = default;

Communicator& SharedMemoryGroup::communicator(int r) {
  CHECK(r >= 0 && r < size_) << "rank " << r << " of a group of " << size_;
  return *ranks_[r];
}

void SharedMemoryGroup::Abort(absl::string_view why) {
  absl::MutexLock lock(&mu_);
  Fail(absl::AbortedError(absl::StrCat("tensor-parallel group aborted: ", why))).IgnoreError();
}

void SharedMemoryGroup::Reset() {
  absl::MutexLock lock(&mu_);
  status_ = absl::OkStatus();
  arrived_ = 0;
  ++generation_;
  for (std::deque<std::vector<uint8_t>>& mailbox : mailboxes_) mailbox.clear();
}

absl::Status SharedMemoryGroup::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
  return status_;
}

absl::Status SharedMemoryGroup::Barrier(int rank) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    return absl::OkStatus();
  }
  auto passed = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return generation_ != generation || !status_.ok();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&passed), timeout_)) {
    return Fail(absl::DeadlineExceededError(absl::StrCat(
        "tensor-parallel rank ", rank, " waited ", absl::FormatDuration(timeout_), " for ",
        size_ - arrived_, " of the group's ", size_, " ranks at a collective")));
  }
  if (generation_ != generation) return absl::OkStatus();
  return status_;
}

absl::Status SharedMemoryGroup::AllReduceSum(int rank, float* data, int64_t count,
                                             std::vector<float>& sum) {
  slots_[rank] = {.in = data, .count = count};
  if (absl::Status s = Barrier(rank); !s.ok()) return s;
  for (const Slot& slot : slots_) {
    if (slot.count != count) {
      absl::MutexLock lock(&mu_);
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "tensor-parallel all-reduce: rank ", rank, " brought ", count,
          " values and another rank ", slot.count)));
    }
  }
  sum.assign(slots_[0].in, slots_[0].in + count);
  for (int r = 1; r < size_; ++r) {
    const float* in = slots_[r].in;
    for (int64_t i = 0; i < count; ++i) sum[i] += in[i];
  }
  if (absl::Status s = Barrier(rank); !s.ok()) return s;  // every rank has read every buffer
  std::copy(sum.begin(), sum.end(), data);
  return absl::OkStatus();
}

absl::Status SharedMemoryGroup::AllGatherColumns(int rank, const float* in, int64_t rows,
                                                 int64_t cols, float* out, int64_t out_cols) {
  slots_[rank] = {.in = in, .count = cols, .rows = rows};
  if (absl::Status s = Barrier(rank); !s.ok()) return s;
  int64_t total = 0;
  for (const Slot& slot : slots_) {
    total += slot.count;
    if (slot.rows != rows) total = -1;
  }
  if (total != out_cols) {
    absl::MutexLock lock(&mu_);
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "tensor-parallel all-gather: rank ", rank, " expects ", rows, " rows of ", out_cols,
        " columns; the ranks bring other rows or columns")));
  }
  int64_t first = 0;
  for (const Slot& slot : slots_) {
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(out + row * out_cols + first, slot.in + row * slot.count,
                  static_cast<size_t>(slot.count) * sizeof(float));
    }
    first += slot.count;
  }
  return Barrier(rank);  // every rank has read every input
}

absl::Status SharedMemoryGroup::CheckPeer(int rank, int peer) const {
  if (peer >= 0 && peer < size_ && peer != rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor-parallel rank ", rank,
                                                 ": no peer rank ", peer, " in a group of ",
                                                 size_));
}

absl::Status SharedMemoryGroup::Send(int from, int to, const void* data, size_t bytes) {
  if (absl::Status s = CheckPeer(from, to); !s.ok()) return s;
  const auto* begin = static_cast<const uint8_t*>(data);
  std::vector<uint8_t> message(begin, begin + bytes);
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  mailboxes_[static_cast<size_t>(from) * size_ + to].push_back(std::move(message));
  return absl::OkStatus();
}

absl::Status SharedMemoryGroup::Receive(int to, int from, void* data, size_t bytes) {
  if (absl::Status s = CheckPeer(to, from); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  std::deque<std::vector<uint8_t>>& mailbox = mailboxes_[static_cast<size_t>(from) * size_ + to];
  auto ready = [this, &mailbox]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !mailbox.empty() || !status_.ok();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout_)) {
    return Fail(absl::DeadlineExceededError(
        absl::StrCat("tensor-parallel rank ", to, " waited ", absl::FormatDuration(timeout_),
                     " for a message from rank ", from)));
  }
  if (!status_.ok()) return status_;
  if (mailbox.front().size() != bytes) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel rank ", to, " expected ", bytes, " bytes from rank ", from,
                     ", which sent ", mailbox.front().size())));
  }
  std::memcpy(data, mailbox.front().data(), bytes);
  mailbox.pop_front();
  return absl::OkStatus();
}

}  // namespace baton::kernels
