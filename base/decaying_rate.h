// A rate (units per second) over recent observations: the sums of units and of seconds, each
// observation older by one weighing `forgetting` less. Used for measured speeds a worker reports
// (prompt tokens per second of prefill).
//
// Thread-compatible value type.
#ifndef BATON_BASE_DECAYING_RATE_H_
#define BATON_BASE_DECAYING_RATE_H_

namespace baton {

class DecayingRate {
 public:
  // `forgetting` in (0, 1]: 1 keeps every observation at full weight.
  explicit DecayingRate(double forgetting) : forgetting_(forgetting) {}

  // `units` done in `seconds` (> 0; others are ignored).
  void Observe(double units, double seconds) {
    if (!(seconds > 0) || units < 0) return;
    units_ = forgetting_ * units_ + units;
    seconds_ = forgetting_ * seconds_ + seconds;
  }

  // Units per second; 0 before the first observation.
  double PerSecond() const { return seconds_ > 0 ? units_ / seconds_ : 0; }

 private:
  double forgetting_;
  double units_ = 0;
  double seconds_ = 0;
};

}  // namespace baton

#endif  // BATON_BASE_DECAYING_RATE_H_
