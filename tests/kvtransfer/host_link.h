// Test-only links (kvtransfer/kv_link.h) between two ends in one process, over host memory:
// the n-th send posted at one end is copied into the n-th receive posted at the other, the
// moment both are posted. With buffered sends (as NCCL does with small ones), a send completes
// at once, its bytes copied aside until the receive comes. Everything around the link (announcements, ordering across pushes,
// breaking and reopening, the transfers' bounds) is the real code; only the bytes' path is
// this. NCCL's own endpoints run on the GPU machine (tests/cuda/nccl_link_test.cc).
//
// Thread-safety: thread-safe.
#ifndef BATON_TESTS_KVTRANSFER_HOST_LINK_H_
#define BATON_TESTS_KVTRANSFER_HOST_LINK_H_

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/kv_link.h"

namespace baton::kvtransfer::testing {

class HostLinkFactory final : public LinkFactory {
 public:
  std::string_view kind() const override { return "host"; }

  absl::StatusOr<std::unique_ptr<LinkEndpoint>> Offer(std::string* bootstrap) override {
    auto pair = std::make_shared<Pair>();
    absl::MutexLock lock(&mu_);
    pair->buffered = buffered_sends_;
    const int id = ++offers_;
    *bootstrap = absl::StrCat(id);
    pending_[id] = pair;
    return std::unique_ptr<LinkEndpoint>(new Endpoint(pair, 0));
  }

  absl::StatusOr<std::unique_ptr<LinkEndpoint>> Accept(std::string_view bootstrap) override {
    int id = 0;
    const absl::string_view text(bootstrap.data(), bootstrap.size());
    absl::MutexLock lock(&mu_);
    if (!absl::SimpleAtoi(text, &id) || !pending_.contains(id)) {
      return absl::InvalidArgumentError("no such host link offered");
    }
    std::shared_ptr<Pair> pair = pending_[id];
    pending_.erase(id);
    {
      absl::MutexLock pair_lock(&pair->mu);
      pair->accepted = true;
    }
    return std::unique_ptr<LinkEndpoint>(new Endpoint(pair, 1));
  }

  // Sends of links offered from now on complete as soon as they are posted.
  void set_buffered_sends(bool buffered) {
    absl::MutexLock lock(&mu_);
    buffered_sends_ = buffered;
  }

  // Links offered so far (each a new link).
  int offers() const {
    absl::MutexLock lock(&mu_);
    return offers_;
  }

 private:
  struct Transfer {
    std::vector<uint8_t*> blocks;
    size_t block_bytes = 0;
    std::vector<uint8_t> buffered;  // a buffered send's bytes (then `blocks` is empty)
  };
  struct Pair {
    bool buffered = false;  // set before the pair is shared
    absl::Mutex mu;
    bool accepted ABSL_GUARDED_BY(mu) = false;
    // By end: as with NCCL, one end's abort tells the other nothing (its transfers just never
    // complete, unless buffered).
    bool aborted[2] ABSL_GUARDED_BY(mu) = {false, false};
    absl::Status error ABSL_GUARDED_BY(mu);
    std::deque<Transfer> sends ABSL_GUARDED_BY(mu);     // posted, not yet matched
    std::deque<Transfer> receives ABSL_GUARDED_BY(mu);
    int64_t posted[2] ABSL_GUARDED_BY(mu) = {0, 0};    // by end
    int64_t completed[2] ABSL_GUARDED_BY(mu) = {0, 0};
  };

  class Endpoint final : public LinkEndpoint {
   public:
    Endpoint(std::shared_ptr<Pair> pair, int end) : pair_(std::move(pair)), end_(end) {}
    ~Endpoint() override { Abort(); }

    absl::Status AwaitConnected(absl::Time deadline) override {
      absl::MutexLock lock(&pair_->mu);
      if (!pair_->mu.AwaitWithDeadline(absl::Condition(&pair_->accepted), deadline)) {
        return absl::DeadlineExceededError("the host link's other end never came");
      }
      return absl::OkStatus();
    }

    absl::Status PostSend(std::span<const uint8_t* const> blocks, size_t block_bytes) override {
      Transfer t{.blocks = {}, .block_bytes = block_bytes, .buffered = {}};
      for (const uint8_t* b : blocks) t.blocks.push_back(const_cast<uint8_t*>(b));
      if (pair_->buffered) {
        for (uint8_t* b : t.blocks) t.buffered.insert(t.buffered.end(), b, b + block_bytes);
        t.blocks.clear();
      }
      return Post(std::move(t), /*send=*/true);
    }
    absl::Status PostReceive(std::span<uint8_t* const> blocks, size_t block_bytes) override {
      return Post({.blocks = {blocks.begin(), blocks.end()}, .block_bytes = block_bytes,
                   .buffered = {}},
                  /*send=*/false);
    }

    absl::StatusOr<bool> Idle() override {
      absl::MutexLock lock(&pair_->mu);
      if (pair_->aborted[end_]) return absl::UnavailableError("host link aborted");
      if (!pair_->error.ok()) return pair_->error;
      return pair_->completed[end_] == pair_->posted[end_];
    }

    void Abort() override {
      absl::MutexLock lock(&pair_->mu);
      pair_->aborted[end_] = true;
    }

   private:
    absl::Status Post(Transfer transfer, bool send) {
      absl::MutexLock lock(&pair_->mu);
      if (pair_->aborted[end_]) return absl::UnavailableError("host link aborted");
      const bool buffered = send && pair_->buffered;
      (send ? pair_->sends : pair_->receives).push_back(std::move(transfer));
      ++pair_->posted[end_];
      if (buffered) ++pair_->completed[end_];
      while (!pair_->sends.empty() && !pair_->receives.empty()) {
        Transfer from = std::move(pair_->sends.front());
        Transfer to = std::move(pair_->receives.front());
        pair_->sends.pop_front();
        pair_->receives.pop_front();
        const size_t from_bytes =
            pair_->buffered ? from.buffered.size() : from.blocks.size() * from.block_bytes;
        if (from_bytes != to.blocks.size() * to.block_bytes) {
          pair_->error = absl::DataLossError("a send and a receive of different sizes met");
          return pair_->error;
        }
        for (size_t i = 0; i < to.blocks.size(); ++i) {
          const uint8_t* source = pair_->buffered ? from.buffered.data() + i * to.block_bytes
                                                  : from.blocks[i];
          std::memcpy(to.blocks[i], source, to.block_bytes);
        }
        if (!pair_->buffered) ++pair_->completed[0];
        ++pair_->completed[1];
      }
      return absl::OkStatus();
    }

    const std::shared_ptr<Pair> pair_;
    const int end_;
  };

  mutable absl::Mutex mu_;
  bool buffered_sends_ ABSL_GUARDED_BY(mu_) = false;
  int offers_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, std::shared_ptr<Pair>> pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::kvtransfer::testing

#endif  // BATON_TESTS_KVTRANSFER_HOST_LINK_H_
