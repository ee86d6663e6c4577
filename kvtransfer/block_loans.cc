#include "kvtransfer/block_loans.h"

#include <utility>

#include "absl/log/check.h"

namespace baton::kvtransfer {
namespace {

// What a lent slice carries to its destroy callback: the loans it counts against.
struct Loan {
  std::shared_ptr<BlockLoans> loans;
};

}  // namespace

std::shared_ptr<BlockLoans> BlockLoans::Create() {
  return std::shared_ptr<BlockLoans>(new BlockLoans());
}

grpc::Slice BlockLoans::Lend(std::span<const uint8_t> bytes) {
  {
    absl::MutexLock lock(&mu_);
    ++out_;
  }
  // gRPC's slice type is mutable, but it only reads the bytes of a message it sends.
  return grpc::Slice(const_cast<uint8_t*>(bytes.data()), bytes.size(), &BlockLoans::Return,
                     new Loan{shared_from_this()});
}

void BlockLoans::Return(void* loan) {
  const std::unique_ptr<Loan> returned(static_cast<Loan*>(loan));
  BlockLoans& loans = *returned->loans;
  std::function<void()> then;
  {
    absl::MutexLock lock(&loans.mu_);
    if (--loans.out_ == 0) then = std::move(loans.when_returned_);
  }
  if (then) then();
}

void BlockLoans::WhenReturned(std::function<void()> then) {
  {
    absl::MutexLock lock(&mu_);
    CHECK(!when_returned_) << "BlockLoans::WhenReturned called twice";
    if (out_ > 0) {
      when_returned_ = std::move(then);
      return;
    }
  }
  then();
}

int64_t BlockLoans::out() const {
  absl::MutexLock lock(&mu_);
  return out_;
}

}  // namespace baton::kvtransfer
