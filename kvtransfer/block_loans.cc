#include "kvtransfer/block_loans.h"

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
  absl::MutexLock lock(&returned->loans->mu_);
  --returned->loans->out_;
}

bool BlockLoans::AwaitReturned(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto all_back = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return out_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&all_back), deadline);
}

int64_t BlockLoans::out() const {
  absl::MutexLock lock(&mu_);
  return out_;
}

}  // namespace baton::kvtransfer
