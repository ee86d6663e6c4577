// The one clock type of baton: where time-based rules (leases, heartbeats) read the time, so that
// tests can drive them with a FakeClock (tests/support/fake_clock.h) instead of sleeping.
//
// Thread-safety: implementations must be thread-safe; Clock::Real() lives for the whole process.
#ifndef BATON_BASE_CLOCK_H_
#define BATON_BASE_CLOCK_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace baton {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The system's clock (absl::Now()).
  static const Clock& Real();
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

inline const Clock& Clock::Real() {
  static const RealClock* const clock = new RealClock();
  return *clock;
}

}  // namespace baton

#endif  // BATON_BASE_CLOCK_H_
