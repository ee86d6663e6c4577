#include "bench/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "bench/latency_stats.h"
#include "bench/memory_bandwidth.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/tensor_parallel_group.h"
#include "engine/transformer.h"
#include "kernels/backend_factory.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dequantize.h"
#if BATON_HAVE_CUDA
#include "kernels/cuda/device_probes.h"
#endif

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Bytes of weights one decode step streams: every layer matrix and the output projection (the
// embedding lookup reads one row).
int64_t WeightBytesPerStep(const engine::ModelWeights& w) {
  auto bytes = [](const kernels::WeightMatrix& m) {
    return m.n_rows * kernels::RowBytes(m.dtype, m.n_cols);
  };
  int64_t total = bytes(w.output);
  for (const engine::LayerWeights& l : w.layers) {
    total += bytes(l.wq) + bytes(l.wk) + bytes(l.wv) + bytes(l.wo) + bytes(l.w_gate) +
             bytes(l.w_up) + bytes(l.w_down);
  }
  return total;
}

// Deterministic ordinary-text-like token ids (skips the low ids where special tokens live).
std::vector<engine::TokenId> SyntheticTokens(int32_t n, int32_t n_vocab, uint32_t salt) {
  std::vector<engine::TokenId> ids(n);
  uint32_t x = 2463534242u ^ salt;
  for (int32_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    ids[i] = 256 + static_cast<engine::TokenId>(x % static_cast<uint32_t>(n_vocab - 256));
  }
  return ids;
}

engine::TokenId Argmax(const float* row, int32_t n) {
  return static_cast<engine::TokenId>(std::max_element(row, row + n) - row);
}

// The memory bandwidth a decode step is bounded by, in bytes/s: the CPU's read bandwidth over
// n_threads, or a GPU's device-to-device copy rate.
absl::StatusOr<double> RooflineBandwidth(const kernels::Device& device, int n_threads) {
  if (!device.is_cuda()) return MeasureReadBandwidth(n_threads);
#if BATON_HAVE_CUDA
  return kernels::cuda::MeasureCopyBandwidth(device.index);
#else
  return absl::UnavailableError("no CUDA backend in this build");
#endif
}

// On a GPU: the prefill's figures against cuBLAS running the same GEMM shapes alone (every
// layer's seven matrices at prompt_tokens rows). Nothing on a CPU.
absl::StatusOr<nlohmann::json> PrefillAgainstCublas(const kernels::Device& device,
                                                    const engine::ModelWeights& w,
                                                    int32_t prompt_tokens, double prefill_s) {
  if (!device.is_cuda()) return nlohmann::json::object();
#if BATON_HAVE_CUDA
  std::vector<kernels::cuda::GemmShape> shapes;
  for (const engine::LayerWeights& l : w.layers) {
    for (const kernels::WeightMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      shapes.push_back({m->n_rows, m->n_cols});
    }
  }
  absl::StatusOr<double> gemm_s = kernels::cuda::TimeF16Gemms(device.index, shapes, prompt_tokens);
  if (!gemm_s.ok()) return gemm_s.status();
  return nlohmann::json{{"prefill_cublas_gemm_s", *gemm_s},
                        {"prefill_s", prefill_s},
                        {"prefill_fraction_of_cublas", *gemm_s / prefill_s}};
#else
  (void)w, (void)prompt_tokens, (void)prefill_s;
  return absl::UnavailableError("no CUDA backend in this build");
#endif
}

// The pass the benchmark times, and the cache its blocks are reserved in.
struct TimedPass {
  std::unique_ptr<engine::KvCache> own_cache;  // a single backend's
  std::unique_ptr<engine::ForwardPass> pass;
  engine::KvCache* cache = nullptr;
};

// The model on `backend` with a cache of `cache_options`, or a tensor-parallel group of CPU ranks
// that share the threads, each with such a cache (the group's blocks reserved in rank 0's).
absl::StatusOr<TimedPass> MakePass(const engine::Model& model, const EngineBenchOptions& options,
                                   int n_threads, kernels::Backend* backend,
                                   const engine::KvCacheOptions& cache_options) {
  if (options.tensor_parallel <= 1) {
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
        engine::KvCache::Create(model.config(), cache_options, *backend);
    if (!cache.ok()) return cache.status();
    TimedPass timed{.own_cache = *std::move(cache)};
    timed.cache = timed.own_cache.get();
    timed.pass = std::make_unique<engine::Transformer>(&model.config(), &model.weights(),
                                                       backend, timed.cache);
    return timed;
  }
  if (options.device.is_cuda()) {
    return absl::FailedPreconditionError(
        "bench engine: tensor parallelism runs on the CPU only so far");
  }
  const int rank_threads = engine::RankThreads(n_threads, options.tensor_parallel);
  absl::StatusOr<std::unique_ptr<engine::TensorParallelGroup>> group =
      engine::TensorParallelGroup::Create(
          model.config(), model.weights(),
          {.size = options.tensor_parallel,
           .cache = cache_options,
           .backend = [&](int32_t) -> absl::StatusOr<std::unique_ptr<kernels::Backend>> {
             return kernels::CreateBackend(options.device, {.n_threads = rank_threads});
           },
           .mode = options.tensor_parallel_mode});
  if (!group.ok()) return group.status();
  engine::KvCache* group_cache = &(*group)->cache();
  return TimedPass{.pass = *std::move(group), .cache = group_cache};
}

}  // namespace

absl::StatusOr<nlohmann::json> RunEngineBench(const EngineBenchOptions& options) {
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(options.model_path);
  if (!model.ok()) return model.status();
  const engine::ModelConfig& config = (*model)->config();
  const int n_threads = options.n_threads > 0
                            ? options.n_threads
                            : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  absl::StatusOr<std::unique_ptr<kernels::Backend>> created =
      kernels::CreateBackend(options.device, {.n_threads = n_threads});
  if (!created.ok()) return created.status();
  std::unique_ptr<kernels::Backend> backend = *std::move(created);

  const int32_t max_batch =
      *std::max_element(options.batch_sizes.begin(), options.batch_sizes.end());
  constexpr int32_t kBatchContext = 16;  // tokens before each batched sequence's first step
  const int32_t tokens_needed =
      std::max({options.prompt_tokens + 1, options.decode_context + options.decode_tokens,
                (kBatchContext + options.batch_decode_steps) * max_batch});
  constexpr int32_t kBlockSize = 16;
  const engine::KvCacheOptions cache_options{
      .block_size = kBlockSize,
      .n_blocks = engine::KvCache::BlocksForTokens(config, kBlockSize,
                                                   tokens_needed + kBlockSize * (2 * max_batch + 1))};
  absl::StatusOr<TimedPass> made_pass =
      MakePass(**model, options, n_threads, backend.get(), cache_options);
  if (!made_pass.ok()) return made_pass.status();
  engine::ForwardPass& transformer = *made_pass->pass;
  engine::KvCache* const kv_cache = made_pass->cache;
  std::vector<float> logits;

  // Prefill: one prompt of prompt_tokens tokens, best of `repeats`.
  double prefill_best = 1e30;
  const std::vector<engine::TokenId> prompt =
      SyntheticTokens(options.prompt_tokens, config.n_vocab, 1);
  for (int r = 0; r < options.repeats; ++r) {
    engine::BlockTable kv;
    absl::Cleanup free_kv = [&] { kv_cache->Free(kv); };
    if (absl::Status s = kv_cache->Reserve(kv, options.prompt_tokens); !s.ok()) return s;
    engine::SequenceInput input{.tokens = prompt, .kv = &kv};
    const auto start = Clock::now();
    if (absl::Status s = transformer.Prefill({&input, 1}, logits, nullptr); !s.ok()) return s;
    prefill_best = std::min(prefill_best, Seconds(start));
  }

  // Decode: B sequences, each after a prompt of `context` tokens, through `steps` greedy steps
  // (each a decode and the sampling of its tokens); the seconds of the steps.
  // `after_step(seconds)`, if any, runs untimed after each step.
  auto decode_run = [&](int32_t batch, int32_t context, int32_t steps,
                        const std::function<void(double)>& after_step) -> absl::StatusOr<double> {
    std::vector<engine::BlockTable> tables(batch);
    absl::Cleanup free_kv = [&] {
      for (auto& t : tables) kv_cache->Free(t);
    };
    std::vector<engine::TokenId> next(batch);
    for (int32_t b = 0; b < batch; ++b) {
      if (absl::Status s = kv_cache->Reserve(tables[b], context + steps); !s.ok()) return s;
      const std::vector<engine::TokenId> p = SyntheticTokens(context, config.n_vocab, 100 + b);
      engine::SequenceInput input{.tokens = p, .kv = &tables[b]};
      if (absl::Status s = transformer.Prefill({&input, 1}, logits, nullptr); !s.ok()) return s;
      next[b] = Argmax(logits.data(), config.n_vocab);
    }
    std::vector<engine::SequenceInput> inputs(batch);
    double total = 0;
    for (int32_t step = 0; step < steps; ++step) {
      const auto start = Clock::now();
      for (int32_t b = 0; b < batch; ++b) inputs[b] = {.tokens = {&next[b], 1}, .kv = &tables[b]};
      if (absl::Status s = transformer.Decode(inputs, logits); !s.ok()) return s;
      // On the backend's host threads, as a decode worker samples a step's sequences (a
      // group's ranks have their own: the backend's stay idle).
      auto sample = [&](int64_t begin, int64_t end, int) {
        for (int64_t b = begin; b < end; ++b) {
          next[b] = Argmax(logits.data() + b * config.n_vocab, config.n_vocab);
        }
      };
      if (options.tensor_parallel > 1) {
        sample(0, batch, 0);
      } else {
        backend->ParallelForOnHost(batch, sample);
      }
      const double seconds = Seconds(start);
      total += seconds;
      if (after_step) after_step(seconds);
    }
    return total;
  };
  // Tokens/s of the best of `repeats` runs.
  auto decode_rate = [&](int32_t batch, int32_t context,
                         int32_t steps) -> absl::StatusOr<double> {
    double best = 1e30;
    for (int r = 0; r < options.repeats; ++r) {
      absl::StatusOr<double> seconds = decode_run(batch, context, steps, nullptr);
      if (!seconds.ok()) return seconds.status();
      best = std::min(best, *seconds);
    }
    return batch * steps / best;
  };
  absl::StatusOr<double> decode = decode_rate(1, options.decode_context, options.decode_tokens);
  if (!decode.ok()) return decode.status();
  nlohmann::json batched = nlohmann::json::object();
  for (int32_t batch : options.batch_sizes) {
    absl::StatusOr<double> rate = decode_rate(batch, kBatchContext, options.batch_decode_steps);
    if (!rate.ok()) return rate.status();
    batched[std::to_string(batch)] = *rate;
  }

  const int64_t step_bytes = WeightBytesPerStep((*model)->weights());
  nlohmann::json paired = nlohmann::json::object();
  if (!options.device.is_cuda()) {
    // One sequence's steps, each followed by a read of the step's weight bytes (at most
    // kMaxProbeBytes of them, scaled up) on the same threads: per pair, read time / step time.
    constexpr int64_t kMaxProbeBytes = int64_t{512} << 20;
    ReadProbe probe(static_cast<size_t>(std::min(step_bytes, kMaxProbeBytes)));
    const double scale = static_cast<double>(step_bytes) / static_cast<double>(probe.bytes());
    std::vector<double> reads, fractions;
    absl::StatusOr<double> run =
        decode_run(1, options.decode_context, options.decode_tokens, [&](double step_seconds) {
          const double read_seconds = probe.TimeRead(*backend) * scale;
          reads.push_back(read_seconds);
          fractions.push_back(read_seconds / step_seconds);
        });
    if (!run.ok()) return run.status();
    paired = {{"decode_paired_read_gb_per_s", step_bytes / Summarize(reads).median / 1e9},
              {"decode_paired_read_fraction", Summarize(fractions).median}};
  }

  absl::StatusOr<double> bandwidth = RooflineBandwidth(options.device, n_threads);
  if (!bandwidth.ok()) return bandwidth.status();
  absl::StatusOr<nlohmann::json> against_cublas = PrefillAgainstCublas(
      options.device, (*model)->weights(), options.prompt_tokens, prefill_best);
  if (!against_cublas.ok()) return against_cublas.status();
  const double roofline = *bandwidth / static_cast<double>(step_bytes);
  nlohmann::json result{
      {"model", options.model_path},
      {"device", options.device.ToString()},
      {"backend", backend->name()},
      {"isa", kernels::CpuIsaName()},
      {"threads", n_threads},
      {"tensor_parallel", options.tensor_parallel},
      {"prompt_tokens", options.prompt_tokens},
      {"prefill_tokens_per_s", options.prompt_tokens / prefill_best},
      {"decode_tokens", options.decode_tokens},
      {"decode_context", options.decode_context},
      {"decode_tokens_per_s", *decode},
      {"batched_decode_tokens_per_s", batched},
      {"memory_read_gb_per_s", *bandwidth / 1e9},
      {"weight_bytes_per_decode_step", step_bytes},
      {"decode_roofline_tokens_per_s", roofline},
      {"decode_roofline_fraction", *decode / roofline},
  };
  nlohmann::json batched_fractions = nlohmann::json::object();
  for (int32_t batch : options.batch_sizes) {
    // A batch streams the weights once per step: its steps/s against the roofline.
    const double steps_per_s = batched[std::to_string(batch)].get<double>() / batch;
    batched_fractions[std::to_string(batch)] = steps_per_s / roofline;
  }
  result["batched_decode_roofline_fraction"] = batched_fractions;
  if (options.tensor_parallel > 1) {
    result["tensor_parallel_mode"] =
        options.tensor_parallel_mode == engine::TensorParallelMode::kExact ? "exact"
                                                                            : "partial-sums";
  }
  result.update(paired);
  result.update(*against_cublas);
  return result;
}

}  // namespace baton::bench
