// The prefill scheduler on a synthetic model, pushing in-process into a decode worker's real
// ReservationTable: batching, chunked prefill (results identical to an unchunked prefill), the
// no-starvation order, cancellation part-way, token accounting, and prefix caching on both sides
// (results identical to computing everything).
#include "prefill_worker/prefill_scheduler.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "decode_worker/reservation_table.h"
#include "engine/model.h"
#include "engine/prefix_cache.h"
#include "engine/synthetic_model.h"
#include "engine/transformer.h"
#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/backend_factory.h"
#include "kernels/device.h"
#include "kernels/half.h"
#include "rpc/prefill_stage.h"
#include "tests/support/own_memory_backend.h"
#include "tests/support/temp_path.h"

namespace baton::prefill_worker {
namespace {

constexpr int32_t kBlockSize = 4;

// Outcomes of the jobs, by request id, as the finisher threads report them.
class Outcomes {
 public:
  std::function<void(absl::StatusOr<PrefillResult>)> For(const std::string& id) {
    return [this, id](absl::StatusOr<PrefillResult> result) {
      absl::MutexLock lock(&mu_);
      results_.emplace(id, std::move(result));
    };
  }
  // Waits (up to 30 s) for `id`'s outcome.
  absl::StatusOr<PrefillResult> Await(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto has = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return results_.contains(id); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(30))) {
      return absl::DeadlineExceededError("no outcome for " + id);
    }
    return results_.at(id);
  }
  bool Has(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return results_.contains(id);
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, absl::StatusOr<PrefillResult>> results_ ABSL_GUARDED_BY(mu_);
};

class PrefillSchedulerTest : public testing::Test {
 protected:
  void SetUp() override {
    path_ = test_support::TempPath("prefill-scheduler.gguf");
    ASSERT_TRUE(engine::WriteSyntheticModel(path_, {.seed = 5, .n_ctx = 256}).ok());
    absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    backend_ = kernels::CreateCpuBackend({.n_threads = 1});
    absl::StatusOr<std::unique_ptr<engine::KvCache>> decode_cache =
        engine::KvCache::Create(model_->config(), {.block_size = kBlockSize, .n_blocks = 128},
                                *backend_);
    ASSERT_TRUE(decode_cache.ok()) << decode_cache.status();
    decode_cache_ = *std::move(decode_cache);
    decode_prefix_ = std::make_unique<engine::PrefixCache>(decode_cache_.get(), "fp", true);
    reservations_ = std::make_unique<decode_worker::ReservationTable>(
        decode_cache_.get(),
        decode_worker::ReservationTableOptions{.model_fingerprint = "fp",
                                               .max_context = 256,
                                               .prefix_cache = decode_prefix_.get()});
    transport_ = kvtransfer::CreateInProcessKvTransport(reservations_.get());
  }

  // Where the prefill worker computes: on the host; on a CPU backend whose memory is not the
  // host's (its KV must be staged on the host for the push); on the first GPU.
  enum class Compute { kHost, kOwnMemory, kGpu };

  // A prefill worker with a token budget of `max_batch_tokens`, with prefix caching when
  // `prefix_caching`, computing where `compute` says. Callers wrap it in
  // ASSERT_NO_FATAL_FAILURE: it fails, leaving no worker, when the cache cannot be made; it
  // skips the test when kGpu and no GPU is usable.
  void StartWorker(int32_t max_batch_tokens, bool prefix_caching = false, int32_t n_blocks = 64,
                   Compute compute = Compute::kHost,
                   int64_t max_prompt_logit_floats = int64_t{64} << 20) {
    scheduler_.reset();
    transformer_.reset();
    prefill_prefix_.reset();
    prefill_cache_.reset();
    kernels::Backend* backend = backend_.get();
    if (compute == Compute::kOwnMemory) {
      prefill_backend_ = std::make_unique<test_support::OwnMemoryBackend>(
          kernels::CreateCpuBackend({.n_threads = 1}));
      backend = prefill_backend_.get();
    }
    if (compute == Compute::kGpu) {
      absl::StatusOr<std::unique_ptr<kernels::Backend>> gpu =
          kernels::CreateBackend(*kernels::ParseDevice("cuda"), {});
      if (!gpu.ok()) GTEST_SKIP() << "needs a CUDA GPU: " << gpu.status().message();
      gpu_backend_ = *std::move(gpu);
      backend = gpu_backend_.get();
    }
    absl::StatusOr<std::unique_ptr<engine::KvCache>> prefill_cache =
        engine::KvCache::Create(model_->config(), {.block_size = kBlockSize, .n_blocks = n_blocks},
                                *backend);
    ASSERT_TRUE(prefill_cache.ok()) << prefill_cache.status();
    prefill_cache_ = *std::move(prefill_cache);
    prefill_prefix_ =
        std::make_unique<engine::PrefixCache>(prefill_cache_.get(), "fp", prefix_caching);
    transformer_ = std::make_unique<engine::Transformer>(&model_->config(), &model_->weights(),
                                                         backend, prefill_cache_.get());
    scheduler_ = std::make_unique<PrefillScheduler>(
        transformer_.get(), prefill_cache_.get(), transport_.get(),
        PrefillSchedulerOptions{.max_batch_tokens = max_batch_tokens,
                                .model_fingerprint = "fp",
                                .finisher_threads = 2,
                                .prefix_cache = prefill_prefix_.get(),
                                .max_prompt_logit_floats = max_prompt_logit_floats});
  }

  static std::vector<engine::TokenId> Prompt(int32_t n, int32_t salt) {
    std::vector<engine::TokenId> tokens;
    for (int32_t i = 0; i < n; ++i) tokens.push_back((i * 37 + salt * 11 + 5) % 256);
    return tokens;
  }

  // Reserves on the decode side (looking the prompt up in its prefix cache when
  // `decode_lookup`) and queues the prompt; returns the reservation id (empty, after a test
  // failure, when the reservation is refused).
  std::string Enqueue(const std::string& id, std::vector<engine::TokenId> prompt,
                      bool decode_lookup = false, int32_t logprobs = -1,
                      int32_t prompt_logprobs = -1) {
    const std::span<const engine::TokenId> lookup =
        decode_lookup ? std::span<const engine::TokenId>(prompt) : std::span<const engine::TokenId>();
    absl::StatusOr<decode_worker::ReserveResult> reserved = reservations_->Reserve(
        id, "fp", static_cast<int32_t>(prompt.size()), 4, std::chrono::seconds(30), lookup);
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    if (!reserved.ok()) return "";
    auto job = std::make_shared<PrefillJob>();
    job->request_id = id;
    job->prompt = std::move(prompt);
    job->params = {.temperature = 0.0f, .logprobs = logprobs, .prompt_logprobs = prompt_logprobs};
    job->reservation_id = reserved->reservation_id;
    job->destination_cached_blocks = reserved->n_cached_tokens / kBlockSize;
    job->deadline = std::chrono::system_clock::now() + std::chrono::seconds(60);
    job->done = outcomes_.For(id);
    scheduler_->Enqueue(job);
    return reserved->reservation_id;
  }

  // Steps until the queue is empty, as the engine loop would: a prompt waiting for scratch blocks
  // that a push in flight still holds gets its turn once the push is over (the loop's tick);
  // gives up after 30 s. Returns how many steps ran.
  int RunAll() {
    int steps = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < give_up) {
      if (scheduler_->Step()) {
        ++steps;
      } else if (scheduler_->queued_prompt_tokens() > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } else {
        break;
      }
    }
    return steps;
  }

  // The K and V the decode worker holds for the prompt's tokens, [layer][token][K|V][kv_dim];
  // claiming the reservation publishes its blocks to the decode side's prefix cache.
  std::vector<uint16_t> ReceivedKv(const std::string& reservation_id, int32_t n_prompt) {
    absl::StatusOr<decode_worker::ClaimedSequence> claimed =
        reservations_->Claim(reservation_id, n_prompt);
    EXPECT_TRUE(claimed.ok()) << claimed.status();
    if (!claimed.ok()) return {};
    std::vector<uint16_t> kv;
    for (int32_t layer = 0; layer < decode_cache_->n_layer(); ++layer) {
      const kernels::KvLayerView view = decode_cache_->LayerView(layer, claimed->table, n_prompt);
      for (int32_t t = 0; t < n_prompt; ++t) {
        for (const uint16_t* base : {view.k_base, view.v_base}) {
          for (int32_t kv_h = 0; kv_h < view.n_kv_head; ++kv_h) {
            const uint16_t* row = base + view.RowOffset(t, kv_h);
            kv.insert(kv.end(), row, row + view.head_dim);
          }
        }
      }
    }
    decode_cache_->Free(claimed->table);
    return kv;
  }

  // The prompt's log-probabilities computed apart: one forward pass of the whole prompt with
  // every position's logits, on a cache of its own; entry i is token i + 1's.
  std::vector<engine::TokenLogprobs> ReferencePromptLogprobs(
      const std::vector<engine::TokenId>& prompt, int32_t k) {
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache = engine::KvCache::Create(
        model_->config(), {.block_size = kBlockSize, .n_blocks = 64}, *backend_);
    EXPECT_TRUE(cache.ok()) << cache.status();
    if (!cache.ok()) return {};
    engine::Transformer transformer(&model_->config(), &model_->weights(), backend_.get(),
                                    cache->get());
    engine::BlockTable table;
    EXPECT_TRUE((*cache)->Reserve(table, static_cast<int32_t>(prompt.size())).ok());
    const std::vector<engine::SequenceInput> input = {
        {.tokens = prompt, .kv = &table, .all_logits = true}};
    std::vector<float> logits;
    EXPECT_TRUE(transformer.Prefill(input, logits).ok());
    const size_t n_vocab = static_cast<size_t>(model_->config().n_vocab);
    std::vector<engine::TokenLogprobs> out;
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
      out.push_back(engine::LogprobsOf(
          std::span<const float>(logits.data() + i * n_vocab, n_vocab), prompt[i + 1], k));
    }
    (*cache)->Free(table);
    return out;
  }

  static void ExpectSameLogprobs(const std::vector<engine::TokenLogprobs>& got,
                                 const std::vector<engine::TokenLogprobs>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].logprob, want[i].logprob) << "prompt token " << i + 1;
      ASSERT_EQ(got[i].top.size(), want[i].top.size()) << "prompt token " << i + 1;
      for (size_t j = 0; j < got[i].top.size(); ++j) {
        EXPECT_EQ(got[i].top[j].id, want[i].top[j].id) << "prompt token " << i + 1;
        EXPECT_EQ(got[i].top[j].logprob, want[i].top[j].logprob) << "prompt token " << i + 1;
      }
    }
  }

  std::string path_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::KvCache> decode_cache_;
  std::unique_ptr<engine::PrefixCache> decode_prefix_;
  std::unique_ptr<decode_worker::ReservationTable> reservations_;
  std::unique_ptr<kvtransfer::KvTransport> transport_;
  std::unique_ptr<test_support::OwnMemoryBackend> prefill_backend_;  // Compute::kOwnMemory
  std::unique_ptr<kernels::Backend> gpu_backend_;                     // Compute::kGpu
  std::unique_ptr<engine::KvCache> prefill_cache_;
  std::unique_ptr<engine::PrefixCache> prefill_prefix_;
  std::unique_ptr<engine::Transformer> transformer_;
  Outcomes outcomes_;
  std::unique_ptr<PrefillScheduler> scheduler_;
};

TEST_F(PrefillSchedulerTest, ChunkedPrefillGivesTheSameFirstTokenAndKvAsOneForward) {
  const std::vector<engine::TokenId> prompt = Prompt(50, 1);
  ASSERT_NO_FATAL_FAILURE(StartWorker(2048));
  const std::string whole_id = Enqueue("whole", prompt);
  EXPECT_EQ(RunAll(), 1);
  absl::StatusOr<PrefillResult> whole = outcomes_.Await("whole");
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<uint16_t> whole_kv = ReceivedKv(whole_id, 50);

  // A budget of 18 tokens: chunks of 16 (4 blocks), so 16 + 16 + 16 + 2 tokens in 4 steps.
  ASSERT_NO_FATAL_FAILURE(StartWorker(18));
  EXPECT_EQ(scheduler_->chunk_tokens(), 16);
  const std::string chunked_id = Enqueue("chunked", prompt);
  EXPECT_EQ(RunAll(), 4);
  absl::StatusOr<PrefillResult> chunked = outcomes_.Await("chunked");
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  EXPECT_EQ(chunked->first_token, whole->first_token);
  EXPECT_EQ(chunked->kv_bytes, whole->kv_bytes);
  EXPECT_TRUE(ReceivedKv(chunked_id, 50) == whole_kv) << "chunked KV differs";
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
}

// The first token's log-probabilities come with it when the request asks: greedy, it is the most
// likely token of the prompt's last logits row.
TEST_F(PrefillSchedulerTest, TheFirstTokensLogprobsComeWithItWhenAsked) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(2048));
  const std::string with_id = Enqueue("with", Prompt(20, 3), false, /*logprobs=*/5);
  const std::string without_id = Enqueue("without", Prompt(20, 4));
  RunAll();
  absl::StatusOr<PrefillResult> with = outcomes_.Await("with");
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(with->first_token_logprobs.has_value());
  const engine::TokenLogprobs& logprobs = *with->first_token_logprobs;
  ASSERT_EQ(logprobs.top.size(), 5u);
  EXPECT_EQ(logprobs.top[0].id, with->first_token);
  EXPECT_EQ(logprobs.logprob, logprobs.top[0].logprob);
  double probability = 0;
  for (size_t i = 0; i < logprobs.top.size(); ++i) {
    if (i > 0) {
      EXPECT_LE(logprobs.top[i].logprob, logprobs.top[i - 1].logprob);
    }
    probability += std::exp(logprobs.top[i].logprob);
  }
  EXPECT_GT(probability, 0.0);
  EXPECT_LE(probability, 1.0 + 1e-5);
  absl::StatusOr<PrefillResult> without = outcomes_.Await("without");
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_FALSE(without->first_token_logprobs.has_value());
  ReceivedKv(with_id, 20);
  ReceivedKv(without_id, 20);
}

// Prompt log-probabilities are every prompt position's, bit for bit those of one forward pass
// over the whole prompt: when the prompt shares its steps with another prompt (whose first token
// they leave alone), when it is chunked, and when its prefix is cached (nothing is taken from the
// cache then). A request that does not ask gets none.
TEST_F(PrefillSchedulerTest, PromptLogprobsAreEveryPositionsWhateverTheBatchChunksOrCache) {
  const std::vector<engine::TokenId> prompt = Prompt(50, 6);
  const std::vector<engine::TokenLogprobs> reference = ReferencePromptLogprobs(prompt, 3);
  ASSERT_EQ(reference.size(), 49u);

  ASSERT_NO_FATAL_FAILURE(StartWorker(2048, /*prefix_caching=*/true));
  const std::string alone_id = Enqueue("alone", Prompt(30, 7));
  RunAll();
  absl::StatusOr<PrefillResult> alone = outcomes_.Await("alone");
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_TRUE(alone->prompt_logprobs.empty());
  ReceivedKv(alone_id, 30);

  // Batched: a short prompt, then the one with prompt logprobs, then another short one.
  const std::string before_id = Enqueue("before", Prompt(30, 7));
  const std::string with_id = Enqueue("with", prompt, false, -1, /*prompt_logprobs=*/3);
  const std::string after_id = Enqueue("after", Prompt(30, 7));
  EXPECT_EQ(RunAll(), 1);
  absl::StatusOr<PrefillResult> with = outcomes_.Await("with");
  ASSERT_TRUE(with.ok()) << with.status();
  ExpectSameLogprobs(with->prompt_logprobs, reference);
  for (const char* id : {"before", "after"}) {
    absl::StatusOr<PrefillResult> other = outcomes_.Await(id);
    ASSERT_TRUE(other.ok()) << other.status();
    EXPECT_EQ(other->first_token, alone->first_token) << id;
    EXPECT_TRUE(other->prompt_logprobs.empty()) << id;
  }
  ReceivedKv(before_id, 30);
  ReceivedKv(after_id, 30);
  ReceivedKv(with_id, 50);

  // The same prompt again: its blocks are cached, and taken by a request without prompt
  // logprobs, but not by one with them.
  const std::string again_id = Enqueue("again", prompt, false, -1, /*prompt_logprobs=*/3);
  RunAll();
  absl::StatusOr<PrefillResult> again = outcomes_.Await("again");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->cached_tokens, 0);
  EXPECT_EQ(again->first_token, with->first_token);
  ExpectSameLogprobs(again->prompt_logprobs, reference);
  ReceivedKv(again_id, 50);
  const std::string plain_id = Enqueue("plain", prompt);
  RunAll();
  absl::StatusOr<PrefillResult> plain = outcomes_.Await("plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT(plain->cached_tokens, 0);
  EXPECT_EQ(plain->first_token, with->first_token);
  ReceivedKv(plain_id, 50);

  // Chunked: 16 + 16 + 16 + 2 tokens in 4 steps.
  ASSERT_NO_FATAL_FAILURE(StartWorker(18));
  const std::string chunked_id = Enqueue("chunked", prompt, false, -1, /*prompt_logprobs=*/3);
  EXPECT_EQ(RunAll(), 4);
  absl::StatusOr<PrefillResult> chunked = outcomes_.Await("chunked");
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  EXPECT_EQ(chunked->first_token, with->first_token);
  ExpectSameLogprobs(chunked->prompt_logprobs, reference);
  ReceivedKv(chunked_id, 50);
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());

  // Logits of at most 9 rows a step: chunks of 8 tokens (2 blocks), 7 steps; a prompt without
  // prompt logprobs is not chunked by it.
  const int64_t row = model_->config().n_vocab;
  ASSERT_NO_FATAL_FAILURE(StartWorker(2048, false, 64, Compute::kHost, 9 * row));
  const std::string capped_id = Enqueue("capped", prompt, false, -1, /*prompt_logprobs=*/3);
  EXPECT_EQ(RunAll(), 7);
  absl::StatusOr<PrefillResult> capped = outcomes_.Await("capped");
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->first_token, with->first_token);
  ExpectSameLogprobs(capped->prompt_logprobs, reference);
  ReceivedKv(capped_id, 50);
  const std::string uncapped_id = Enqueue("uncapped", prompt);
  EXPECT_EQ(RunAll(), 1);
  ASSERT_TRUE(outcomes_.Await("uncapped").ok());
  ReceivedKv(uncapped_id, 50);
}

// Prefill on a backend whose memory is not the host's (a GPU's): each layer's blocks are staged on
// the host before the push reads them, and the decode side gets the same KV and first token.
TEST_F(PrefillSchedulerTest, KvInMemoryOfItsOwnIsStagedAndArrivesTheSame) {
  const std::vector<engine::TokenId> prompt = Prompt(50, 2);
  ASSERT_NO_FATAL_FAILURE(StartWorker(2048));
  const std::string host_id = Enqueue("host", prompt);
  RunAll();
  absl::StatusOr<PrefillResult> host = outcomes_.Await("host");
  ASSERT_TRUE(host.ok()) << host.status();
  const std::vector<uint16_t> host_kv = ReceivedKv(host_id, 50);

  // Chunked too (chunks of 16 tokens), so that the push is several ranges; each layer's copy
  // lands late, as a GPU's copy stream does, so the push must wait for it.
  ASSERT_NO_FATAL_FAILURE(StartWorker(18, false, 64, Compute::kOwnMemory));
  prefill_backend_->set_copy_delay(std::chrono::milliseconds(2));
  const std::string own_id = Enqueue("own", prompt);
  RunAll();
  absl::StatusOr<PrefillResult> own = outcomes_.Await("own");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->first_token, host->first_token);
  EXPECT_EQ(own->kv_bytes, host->kv_bytes);
  EXPECT_TRUE(ReceivedKv(own_id, 50) == host_kv) << "the staged KV differs";
  // Every block sent went through the host once; the logits of each chunk's last token too.
  const size_t logits_bytes = model_->config().n_vocab * sizeof(float);
  EXPECT_EQ(prefill_backend_->bytes_to_host(),
            static_cast<size_t>(own->kv_bytes) + 4 * logits_bytes);
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
}

// On a GPU (skipped without one): each layer's KV leaves through the copy stream and page-locked
// host memory for a CPU decode worker's cache, which gets the CPU prefill's first token and its
// KV within the GPU's rounding (f16 GEMM operands), as a mixed CPU/GPU cluster would.
TEST_F(PrefillSchedulerTest, KvComputedOnAGpuArrivesInACpuCacheWithinRounding) {
  const std::vector<engine::TokenId> prompt = Prompt(50, 2);
  ASSERT_NO_FATAL_FAILURE(StartWorker(2048));
  const std::string cpu_id = Enqueue("cpu", prompt);
  RunAll();
  absl::StatusOr<PrefillResult> cpu = outcomes_.Await("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const std::vector<uint16_t> cpu_kv = ReceivedKv(cpu_id, 50);

  ASSERT_NO_FATAL_FAILURE(StartWorker(18, false, 64, Compute::kGpu));
  if (IsSkipped()) return;
  const std::string gpu_id = Enqueue("gpu", prompt);
  RunAll();
  absl::StatusOr<PrefillResult> gpu = outcomes_.Await("gpu");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->first_token, cpu->first_token);
  EXPECT_EQ(gpu->kv_bytes, cpu->kv_bytes);
  const std::vector<uint16_t> gpu_kv = ReceivedKv(gpu_id, 50);
  ASSERT_EQ(gpu_kv.size(), cpu_kv.size());
  double error = 0, magnitude = 0;
  for (size_t i = 0; i < cpu_kv.size(); ++i) {
    const double want = kernels::F16ToF32(cpu_kv[i]);
    const double got = kernels::F16ToF32(gpu_kv[i]);
    ASSERT_TRUE(std::isfinite(got)) << "element " << i;
    error += std::abs(got - want);
    magnitude += std::abs(want);
  }
  EXPECT_LT(error / magnitude, 1e-2) << "mean |GPU - CPU| / mean |CPU| over the KV";
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
}

// A copy of the KV to the host that fails fails the request as this worker's fault (the router
// must not blame the decode worker), and every block goes back on both sides.
TEST_F(PrefillSchedulerTest, AFailedCopyOfTheKvFailsTheRequestAsThisWorkersFault) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(18, false, 64, Compute::kOwnMemory));
  prefill_backend_->fail_copies(absl::InternalError("cuda:0: copy to the host failed: test"));
  Enqueue("broken", Prompt(50, 4));
  RunAll();
  absl::StatusOr<PrefillResult> result = outcomes_.Await("broken");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal) << result.status();
  EXPECT_NE(result.status().message().find("copy to the host failed"), std::string::npos);
  EXPECT_FALSE(rpc::IsKvDestinationFault(result.status())) << result.status();
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
  EXPECT_EQ(reservations_->size(), 0);
  EXPECT_EQ(decode_cache_->pool().n_free(), decode_cache_->pool().n_blocks());
}

TEST_F(PrefillSchedulerTest, ShortPromptWaitsForAtMostOneChunkOfALongOne) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(16));
  Enqueue("long", Prompt(64, 2));  // 4 chunks of 16
  Enqueue("short", Prompt(5, 3));
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 69);
  ASSERT_TRUE(scheduler_->Step());  // the long prompt's first chunk fills the budget
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 53);
  ASSERT_TRUE(scheduler_->Step());  // the short prompt, ahead of the long one's second chunk
  ASSERT_TRUE(outcomes_.Await("short").ok());
  EXPECT_FALSE(outcomes_.Has("long"));
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 48);
  EXPECT_EQ(RunAll(), 3);
  ASSERT_TRUE(outcomes_.Await("long").ok());
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 0);
}

TEST_F(PrefillSchedulerTest, TheQueueAndTheArrivalsCountOnlyWhatIsNotCachedAndTheRateIsMeasured) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(64, /*prefix_caching=*/true));
  EXPECT_EQ(scheduler_->prompt_tokens_per_second(), 0);
  EXPECT_EQ(scheduler_->arrivals().tokens_per_second, 0);
  const std::vector<engine::TokenId> first = Prompt(40, 8);
  Enqueue("first", first);
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 40);
  EXPECT_DOUBLE_EQ(scheduler_->arrivals().tokens_per_prompt, 40);
  EXPECT_EQ(RunAll(), 1);
  ASSERT_TRUE(outcomes_.Await("first").ok());
  EXPECT_GT(scheduler_->prompt_tokens_per_second(), 0);
  // The same 40 tokens and 8 more: all 40 (ten full blocks of 4) are cached, so 8 wait.
  std::vector<engine::TokenId> longer = first;
  for (int i = 0; i < 8; ++i) longer.push_back(7);
  Enqueue("longer", longer);
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 8);
  // Per prompt: 40 and 8, the older weighing 0.9.
  EXPECT_DOUBLE_EQ(scheduler_->arrivals().tokens_per_prompt, (0.9 * 40 + 8) / 1.9);
  EXPECT_GT(scheduler_->arrivals().tokens_per_second, 0);
  EXPECT_EQ(RunAll(), 1);
  ASSERT_TRUE(outcomes_.Await("longer").ok());
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 0);
  // The estimate at arrival held nothing: every block is back.
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
}

// A prompt arriving while a pass runs waits for it: the pass's tokens count as queued until it
// ends.
TEST_F(PrefillSchedulerTest, ThePassRunningNowCountsAsQueuedUntilItEnds) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(16, false, 64, Compute::kOwnMemory));
  std::vector<int64_t> queued_in_pass;
  prefill_backend_->on_forward(
      [&] { queued_in_pass.push_back(scheduler_->queued_prompt_tokens()); });
  Enqueue("long", Prompt(32, 2));  // 2 chunks of 16
  Enqueue("short", Prompt(5, 3));
  ASSERT_TRUE(scheduler_->Step());
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 21);
  ASSERT_TRUE(scheduler_->Step());
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 16);
  EXPECT_EQ(RunAll(), 1);
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 0);
  // Seen from inside each pass: everything not yet computed, that pass's tokens included.
  EXPECT_THAT(queued_in_pass, ::testing::ElementsAre(37, 21, 16));
}

TEST_F(PrefillSchedulerTest, PromptsThatFitShareAForward) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(64));
  Enqueue("a", Prompt(20, 4));
  Enqueue("b", Prompt(30, 5));
  Enqueue("c", Prompt(30, 6));  // 20 + 30 + 30 > 64: next step
  EXPECT_EQ(RunAll(), 2);
  for (const char* id : {"a", "b", "c"}) EXPECT_TRUE(outcomes_.Await(id).ok()) << id;
}

TEST_F(PrefillSchedulerTest, CancelPartWayFreesEveryBlockOnBothSides) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(16));
  Enqueue("long", Prompt(64, 7));
  const int32_t decode_free = decode_cache_->pool().n_free();
  ASSERT_TRUE(scheduler_->Step());
  EXPECT_LT(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
  EXPECT_TRUE(scheduler_->Cancel("long"));
  ASSERT_TRUE(scheduler_->Step());
  absl::StatusOr<PrefillResult> result = outcomes_.Await("long");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(scheduler_->Step());
  EXPECT_EQ(scheduler_->queued_prompt_tokens(), 0);
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
  // The aborted push released the reservation: its blocks are back in the decode pool.
  EXPECT_EQ(reservations_->size(), 0);
  EXPECT_GT(decode_cache_->pool().n_free(), decode_free);
  EXPECT_EQ(decode_cache_->pool().n_free(), decode_cache_->pool().n_blocks());
}

TEST_F(PrefillSchedulerTest, APushTheDecodeSideRefusesFailsAsTheDestinationsFault) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(16));
  const std::string reservation = Enqueue("gone", Prompt(64, 3));
  ASSERT_FALSE(reservation.empty());
  ASSERT_TRUE(scheduler_->Step());  // the push has begun
  ASSERT_TRUE(reservations_->Release(reservation));  // the decode side drops it
  RunAll();
  absl::StatusOr<PrefillResult> result = outcomes_.Await("gone");
  ASSERT_FALSE(result.ok());
  // The router blames the decode worker for it, not this prefill worker (rpc/prefill_stage.h).
  EXPECT_TRUE(rpc::IsKvDestinationFault(result.status())) << result.status();
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
}

TEST_F(PrefillSchedulerTest, CancellationIsNotTheDestinationsFault) {
  ASSERT_NO_FATAL_FAILURE(StartWorker(16));
  Enqueue("mine", Prompt(64, 5));
  ASSERT_TRUE(scheduler_->Step());
  EXPECT_TRUE(scheduler_->Cancel("mine"));
  RunAll();
  absl::StatusOr<PrefillResult> result = outcomes_.Await("mine");
  ASSERT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(rpc::IsKvDestinationFault(result.status()));
}

// Two prompts sharing their first 26 tokens: `Shared(n, salt)` is that prefix then n - 26 more.
std::vector<engine::TokenId> Shared(int32_t n, int32_t salt) {
  std::vector<engine::TokenId> tokens;
  for (int32_t i = 0; i < n; ++i) {
    tokens.push_back(i < 26 ? (i * 13 + 7) % 256 : (i * 29 + salt * 17 + 3) % 256);
  }
  return tokens;
}

// The first token and the KV the decode worker ends up with for `second`, after `first` went
// through the same worker pair, for each way the prefix caches can take part. None may change a
// bit; what differs is what is computed and what travels.
struct CacheCase {
  const char* name;
  bool prefill_caching;
  bool decode_lookup;
  int32_t max_batch_tokens;
  int32_t expect_prefill_cached;   // tokens the prefill worker takes from its cache
  int64_t expect_sent_blocks;      // blocks (per layer) of `second` that travel
};

class PrefixCachingTest : public PrefillSchedulerTest,
                          public testing::WithParamInterface<CacheCase> {};

TEST_P(PrefixCachingTest, HitsChangeWhatIsComputedAndSentButNotABit) {
  const CacheCase& c = GetParam();
  const std::vector<engine::TokenId> first = Shared(40, 1);
  const std::vector<engine::TokenId> second = Shared(45, 2);  // 12 blocks, 6 shared full ones

  // The reference: nothing cached anywhere.
  ASSERT_NO_FATAL_FAILURE(StartWorker(c.max_batch_tokens, /*prefix_caching=*/false));
  const std::string cold_id = Enqueue("cold", second);
  RunAll();
  absl::StatusOr<PrefillResult> cold = outcomes_.Await("cold");
  ASSERT_TRUE(cold.ok()) << cold.status();
  const std::vector<uint16_t> cold_kv = ReceivedKv(cold_id, 45);
  EXPECT_EQ(cold->cached_tokens, 0);  // (reserved without its tokens: not cached on either side)

  ASSERT_NO_FATAL_FAILURE(StartWorker(c.max_batch_tokens, c.prefill_caching));
  const std::string first_id = Enqueue("first", first, c.decode_lookup);
  RunAll();
  ASSERT_TRUE(outcomes_.Await("first").ok());
  ReceivedKv(first_id, 40);  // claimed: its blocks are published on the decode side, then freed

  const std::string warm_id = Enqueue("warm", second, c.decode_lookup);
  RunAll();
  absl::StatusOr<PrefillResult> warm = outcomes_.Await("warm");
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(warm->first_token, cold->first_token);
  EXPECT_EQ(warm->cached_tokens, c.expect_prefill_cached);
  const int64_t layer_bytes = int64_t{model_->config().n_layer} * 2 * kBlockSize *
                              model_->config().kv_dim() * 2;
  EXPECT_EQ(warm->kv_bytes, c.expect_sent_blocks * layer_bytes);
  EXPECT_TRUE(ReceivedKv(warm_id, 45) == cold_kv) << "KV with cache hits differs";
  // Every block is back (cached ones count as free) on both sides.
  EXPECT_EQ(prefill_cache_->pool().n_free(), prefill_cache_->pool().n_blocks());
  EXPECT_EQ(decode_cache_->pool().n_free(), decode_cache_->pool().n_blocks());
}

TEST_F(PrefillSchedulerTest, APromptWaitsForScratchBlocksThatAnotherPromptsCacheHitTook) {
  // 12 scratch blocks. A 32-token prompt leaves 8 blocks cached (free, but matchable).
  ASSERT_NO_FATAL_FAILURE(StartWorker(2048, /*prefix_caching=*/true, /*n_blocks=*/12));
  const std::vector<engine::TokenId> first = Prompt(32, 1);
  Enqueue("first", first);
  RunAll();
  ASSERT_TRUE(outcomes_.Await("first").ok());
  // The second takes those 8 cached blocks and one more; the third needs 4 of the 3 left, so
  // it must wait for the second to finish rather than fail.
  std::vector<engine::TokenId> second = first;
  second.insert(second.end(), {1, 2, 3, 4});
  Enqueue("second", second);
  Enqueue("third", Prompt(16, 9));
  RunAll();
  absl::StatusOr<PrefillResult> second_result = outcomes_.Await("second");
  ASSERT_TRUE(second_result.ok()) << second_result.status();
  EXPECT_EQ(second_result->cached_tokens, 32);
  absl::StatusOr<PrefillResult> third = outcomes_.Await("third");
  EXPECT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(prefill_cache_->pool().n_free(), 12);
}

INSTANTIATE_TEST_SUITE_P(
    BothSides, PrefixCachingTest,
    testing::Values(
        // 24 tokens (6 blocks) hit on both sides: 6 of 12 blocks travel.
        CacheCase{"both", true, true, 2048, 24, 6},
        CacheCase{"prefill_only", true, false, 2048, 24, 12},
        CacheCase{"decode_only", false, true, 2048, 0, 6},
        // Chunks of 8 tokens (2 blocks): the cached ranges go before any compute when only the
        // prefill side has them; the computed ones the decode side has are not sent.
        CacheCase{"both_chunked", true, true, 8, 24, 6},
        CacheCase{"prefill_only_chunked", true, false, 8, 24, 12},
        CacheCase{"decode_only_chunked", false, true, 8, 0, 6},
        // Chunks of 12 tokens (3 blocks): the hit (6 blocks) ends on a range boundary.
        CacheCase{"both_chunked_by_3", true, true, 12, 24, 6},
        // Chunks of 20 tokens (5 blocks): the hit ends inside a range, which then holds cached
        // and computed blocks.
        CacheCase{"prefill_only_chunked_by_5", true, false, 20, 24, 12},
        CacheCase{"both_chunked_by_5", true, true, 20, 24, 6}),
    [](const testing::TestParamInfo<CacheCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace baton::prefill_worker
