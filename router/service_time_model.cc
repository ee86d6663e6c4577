#include "router/service_time_model.h"

#include <algorithm>
#include <tuple>

namespace baton::router {
namespace {

// The mean of the positive `values`, `otherwise` when none is.
template <typename Get>
double MeanOfMeasured(std::span<const v1::WorkerLoad* const> loads, Get get, double otherwise) {
  double sum = 0;
  int n = 0;
  for (const v1::WorkerLoad* load : loads) {
    const double value = get(*load);
    if (value > 0) {
      sum += value;
      ++n;
    }
  }
  return n > 0 ? sum / n : otherwise;
}

double OrFallback(double measured, double fallback) { return measured > 0 ? measured : fallback; }

}  // namespace

FallbackSpeeds FallbackSpeeds::MeanOf(std::span<const v1::WorkerLoad* const> loads) {
  const FallbackSpeeds priors;
  FallbackSpeeds speeds;
  speeds.prefill_tokens_per_second = MeanOfMeasured(
      loads, [](const v1::WorkerLoad& l) { return l.prefill_tokens_per_second(); },
      priors.prefill_tokens_per_second);
  speeds.decode_step_seconds = MeanOfMeasured(
      loads, [](const v1::WorkerLoad& l) { return l.decode_step_seconds(); },
      priors.decode_step_seconds);
  speeds.decode_row_cost = MeanOfMeasured(
      loads, [](const v1::WorkerLoad& l) { return l.decode_row_cost(); }, priors.decode_row_cost);
  return speeds;
}

double PrefillRate(const v1::WorkerLoad& load, const FallbackSpeeds& fallback) {
  return OrFallback(load.prefill_tokens_per_second(), fallback.prefill_tokens_per_second);
}

double Tpot(double one_row_step_seconds, double row_cost, double other_sequences) {
  return one_row_step_seconds * (1 + row_cost * other_sequences);
}

PrefillPrediction PredictPrefill(const v1::WorkerLoad& load, int64_t uncached_tokens,
                                 const FallbackSpeeds& fallback) {
  const double rate = PrefillRate(load, fallback);
  return {
      .wait_seconds = static_cast<double>(std::max<int64_t>(0, load.queued_prompt_tokens())) / rate,
      .compute_seconds = static_cast<double>(std::max<int64_t>(0, uncached_tokens)) / rate};
}

Candidate PrefillCandidate(const v1::WorkerLoad& load, int64_t uncached_tokens,
                           int64_t stalled_sequences, const FallbackSpeeds& fallback) {
  const PrefillPrediction p = PredictPrefill(load, uncached_tokens, fallback);
  const int64_t stalled = std::max<int64_t>(0, stalled_sequences);
  return {.predicted_seconds = p.ttft_seconds(),
          .cost = p.compute_seconds * static_cast<double>(1 + stalled),
          .wait_seconds = p.wait_seconds};
}

DecodeFit DecodeFitOf(const v1::WorkerLoad& load, const FallbackSpeeds& fallback) {
  return {
      .one_row_step_seconds = OrFallback(load.decode_step_seconds(), fallback.decode_step_seconds),
      .row_cost = OrFallback(load.decode_row_cost(), fallback.decode_row_cost)};
}

double PredictTpot(const v1::WorkerLoad& load, const FallbackSpeeds& fallback) {
  const int64_t others = std::max(0, load.running_sequences()) + std::max(0, load.reservations());
  return DecodeFitOf(load, fallback).Tpot(static_cast<double>(others));
}

size_t ChooseWorker(std::span<const Candidate> candidates, absl::Duration target,
                    double same_speed) {
  const double bound = absl::ToDoubleSeconds(target);
  const bool has_target = bound > 0;
  const bool any_within =
      has_target && std::any_of(candidates.begin(), candidates.end(),
                                [&](const Candidate& c) { return c.predicted_seconds <= bound; });
  double fastest = candidates.front().predicted_seconds;
  for (const Candidate& c : candidates) fastest = std::min(fastest, c.predicted_seconds);
  // Without a target, or with some candidate within it, the cheapest inside the band; else the
  // shortest wait.
  const double band = has_target ? bound : fastest * (1 + same_speed);
  auto key = [&](const Candidate& c) {
    if (!has_target || any_within) {
      return std::tuple(c.predicted_seconds <= band ? 0.0 : 1.0, c.cost, c.predicted_seconds);
    }
    return std::tuple(0.0, c.wait_seconds, c.predicted_seconds);
  };
  size_t chosen = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (key(candidates[i]) < key(candidates[chosen])) chosen = i;
  }
  return chosen;
}

}  // namespace baton::router
