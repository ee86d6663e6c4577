// Units arriving per second over recent wall time (prompt tokens placed, requests): each unit
// weighs e^(-age / time_constant), so that a steady arrival rate r reads r once the meter has run
// a few time constants, and a change of rate shows within about one. Before that, the sum is
// scaled by the part of the window that has elapsed since `start`, so that a steady rate reads
// right from the first observations too.
//
// Thread-compatible value type.
#ifndef BATON_BASE_ARRIVAL_RATE_H_
#define BATON_BASE_ARRIVAL_RATE_H_

#include <cmath>

#include "absl/time/time.h"

namespace baton {

class ArrivalRate {
 public:
  ArrivalRate(absl::Duration time_constant, absl::Time start)
      : tau_(absl::ToDoubleSeconds(time_constant)), start_(start), last_(start) {}

  // `units` arrived at `now` (times must not go back; an earlier one counts as `last`).
  void Add(double units, absl::Time now) {
    if (!(units > 0)) return;
    sum_ = Decayed(now) + units;
    if (now > last_) last_ = now;
  }

  // Units per second at `now`; 0 before anything arrived.
  double PerSecond(absl::Time now) const {
    const double elapsed = absl::ToDoubleSeconds(now - start_);
    if (!(elapsed > 0) || !(tau_ > 0)) return 0;
    return Decayed(now) / (tau_ * (1 - std::exp(-elapsed / tau_)));
  }

 private:
  double Decayed(absl::Time now) const {
    const double age = now > last_ ? absl::ToDoubleSeconds(now - last_) : 0;
    return sum_ * std::exp(-age / tau_);
  }

  double tau_;  // seconds
  absl::Time start_;
  absl::Time last_;
  double sum_ = 0;  // the units' weights at last_
};

}  // namespace baton

#endif  // BATON_BASE_ARRIVAL_RATE_H_
