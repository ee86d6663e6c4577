// A Clock that moves only when a test says so.
//
// Thread-safety: thread-safe.
#ifndef BATON_TESTS_SUPPORT_FAKE_CLOCK_H_
#define BATON_TESTS_SUPPORT_FAKE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace baton::test_support {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000)) : now_(start) {}

  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::test_support

#endif  // BATON_TESTS_SUPPORT_FAKE_CLOCK_H_
