// Sampler micro-benchmark: one draw over the default model's 49,152 logits (normally
// distributed, standard deviation 3) per iteration, for the sampling settings a server sees most:
// greedy; the OpenAI API's default (temperature 1, no top-k, top_p 1: the softmax over the whole
// vocabulary); top-k 40; top_p 0.9, over those flat logits (a nucleus of thousands) and over
// peaked ones (a handful). A decode step samples once per sequence on the engine thread, so at 32
// sequences these times add up per step.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace baton::engine {
namespace {

constexpr int kVocab = 49152;

std::vector<float> Logits() {
  std::vector<float> logits(kVocab);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& x : logits) x = normal(rng);
  return logits;
}

// As a language model's logits often are: a handful of tokens far above the rest.
std::vector<float> PeakedLogits() {
  std::vector<float> logits = Logits();
  for (int i = 0; i < 5; ++i) logits[1000 + 7919 * i] = 20.0f - i;
  return logits;
}

void Run(benchmark::State& state, const SamplingParams& params,
         const std::vector<float>& logits = Logits()) {
  Sampler sampler;
  int64_t position = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(params, logits, {}, position++));
  }
}

void BM_SampleGreedy(benchmark::State& state) { Run(state, {.temperature = 0.0f}); }
void BM_SampleTemperatureOne(benchmark::State& state) {
  Run(state, {.temperature = 1.0f, .seed = 7});
}
void BM_SampleTopK40(benchmark::State& state) {
  Run(state, {.temperature = 0.8f, .top_k = 40, .seed = 7});
}
void BM_SampleTopP(benchmark::State& state) {
  Run(state, {.temperature = 0.8f, .top_p = 0.9f, .seed = 7});
}

void BM_SampleTopPPeaked(benchmark::State& state) {
  Run(state, {.temperature = 0.8f, .top_p = 0.9f, .seed = 7}, PeakedLogits());
}

BENCHMARK(BM_SampleGreedy);
BENCHMARK(BM_SampleTemperatureOne);
BENCHMARK(BM_SampleTopK40);
BENCHMARK(BM_SampleTopP);
BENCHMARK(BM_SampleTopPPeaked);

}  // namespace
}  // namespace baton::engine
