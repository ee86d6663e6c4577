#include "decode_worker/decode_batch.h"

#include <map>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/model.h"
#include "gtest/gtest.h"
#include "tests/support/synthetic_model.h"

namespace baton::decode_worker {
namespace {

// Records what the batch streams for one sequence.
class RecordingSink : public TokenSink {
 public:
  void OnToken(int32_t token, int32_t n_generated) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(ended_) << "token after the end";
    tokens_.push_back(token);
  }
  void OnEnd(engine::FinishReason finish, int32_t n_generated,
             const absl::Status& error) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(ended_) << "ended twice";
    EXPECT_NE(finish == engine::FinishReason::kNone, error.ok()) << "a finish reason xor an error";
    ended_ = true;
    finish_ = finish;
    error_ = error;
  }
  std::vector<int32_t> tokens() const {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  bool ended() const {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  engine::FinishReason finish() const {
    absl::MutexLock lock(&mu_);
    return finish_;
  }
  absl::StatusCode error_code() const {
    absl::MutexLock lock(&mu_);
    return error_.code();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int32_t> tokens_;
  bool ended_ = false;
  engine::FinishReason finish_ = engine::FinishReason::kNone;
  absl::Status error_;
};

class DecodeBatchTest : public testing::Test {
 protected:
  void SetUp() override {
    path_ = test_support::TempPath("decode-batch.gguf");
    ASSERT_TRUE(test_support::WriteSyntheticModel(path_, {.seed = 11, .n_ctx = 512}).ok());
    absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    backend_ = kernels::CreateCpuBackend({.n_threads = 1});
  }

  struct Run {
    std::unique_ptr<engine::KvCache> cache;
    std::unique_ptr<engine::Transformer> transformer;
    std::unique_ptr<DecodeBatch> batch;
    std::vector<std::shared_ptr<RecordingSink>> sinks;
  };

  // An empty batch over a fresh cache of `n_blocks` blocks of 4 tokens.
  absl::StatusOr<Run> MakeRun(int32_t n_blocks, const DecodeBatchOptions& options) {
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
        engine::KvCache::Create(model_->config(), {.block_size = 4, .n_blocks = n_blocks});
    if (!cache.ok()) return cache.status();
    Run run;
    run.cache = *std::move(cache);
    run.transformer = std::make_unique<engine::Transformer>(&model_->config(), &model_->weights(),
                                                            backend_.get(), run.cache.get());
    run.batch = std::make_unique<DecodeBatch>(&model_->tokenizer(), run.transformer.get(),
                                              run.cache.get(), options);
    return run;
  }

  // Starts `n` sequences (prompt of 6 tokens each, first token sampled from the prefill) in a
  // batch whose cache has `n_blocks` blocks of 4 tokens, then steps until every one finishes.
  absl::StatusOr<Run> RunSequences(int n, int32_t n_blocks, int32_t max_tokens) {
    absl::StatusOr<Run> made = MakeRun(n_blocks, {.max_batch = 8});
    if (!made.ok()) return made;
    Run& run = *made;
    std::vector<float> logits;
    for (int s = 0; s < n; ++s) {
      DecodeSequence seq;
      seq.id = "seq" + std::to_string(s);
      for (int t = 0; t < 6; ++t) seq.tokens.push_back((s * 31 + t * 7 + 3) % 256);
      seq.n_prompt = 6;
      seq.params = {.temperature = 0.9f, .seed = static_cast<uint64_t>(s), .max_tokens = max_tokens,
                    .ignore_eos = true};
      EXPECT_TRUE(run.cache->Reserve(seq.table, 7).ok());  // prompt + one token of headroom
      engine::SequenceInput input{.tokens = seq.tokens, .kv = &seq.table};
      EXPECT_TRUE(run.transformer->Prefill({&input, 1}, logits).ok());
      seq.tokens.push_back(engine::Sample(seq.params, logits, seq.tokens, 6));
      auto sink = std::make_shared<RecordingSink>();
      seq.sink = sink;
      run.sinks.push_back(sink);
      run.batch->Admit(std::move(seq));
    }
    for (int step = 0; step < 10000; ++step) {
      if (!run.batch->Step() && run.batch->n_waiting() == 0) break;
    }
    return made;
  }

  std::string path_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<kernels::Backend> backend_;
};

TEST_F(DecodeBatchTest, SequencesGrowOnDemandAndPreemptedOnesResumeWithoutLosingAToken) {
  // Plenty of blocks: no preemption. Each sequence ends with 6 + 24 = 30 tokens: 8 blocks.
  absl::StatusOr<Run> roomy_run = RunSequences(4, /*n_blocks=*/64, /*max_tokens=*/24);
  ASSERT_TRUE(roomy_run.ok()) << roomy_run.status();
  Run& roomy = *roomy_run;
  EXPECT_EQ(roomy.batch->n_preemptions(), 0);
  // 14 blocks for 4 sequences that need 8 each: sequences must be preempted and resumed.
  absl::StatusOr<Run> tight_run = RunSequences(4, /*n_blocks=*/14, /*max_tokens=*/24);
  ASSERT_TRUE(tight_run.ok()) << tight_run.status();
  Run& tight = *tight_run;
  EXPECT_GT(tight.batch->n_preemptions(), 0);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(roomy.sinks[s]->finish(), engine::FinishReason::kLength);
    EXPECT_EQ(tight.sinks[s]->finish(), engine::FinishReason::kLength) << "sequence " << s;
    EXPECT_EQ(roomy.sinks[s]->tokens().size(), 23u);  // the first token came from the prefill
    EXPECT_EQ(tight.sinks[s]->tokens(), roomy.sinks[s]->tokens()) << "sequence " << s;
  }
  EXPECT_EQ(tight.cache->pool().n_free(), 14);
  EXPECT_EQ(roomy.cache->pool().n_free(), 64);
}

TEST_F(DecodeBatchTest, SequenceLargerThanTheCacheFailsClearly) {
  absl::StatusOr<Run> made = RunSequences(1, /*n_blocks=*/3, /*max_tokens=*/40);
  ASSERT_TRUE(made.ok()) << made.status();
  Run& run = *made;
  EXPECT_TRUE(run.sinks[0]->ended());
  EXPECT_EQ(run.sinks[0]->error_code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(run.cache->pool().n_free(), 3);
}

TEST_F(DecodeBatchTest, CancelFreesRunningAndPreemptedSequences) {
  absl::StatusOr<Run> made = MakeRun(/*n_blocks=*/8, DecodeBatchOptions{});
  ASSERT_TRUE(made.ok()) << made.status();
  Run& run = *made;
  std::vector<float> logits;
  for (int s = 0; s < 3; ++s) {
    DecodeSequence seq;
    seq.id = "c" + std::to_string(s);
    seq.tokens = {1, 2, 3, 4, 5};
    seq.n_prompt = 5;
    seq.params = {.temperature = 0, .max_tokens = 100, .ignore_eos = true};
    ASSERT_TRUE(run.cache->Reserve(seq.table, 6).ok());
    engine::SequenceInput input{.tokens = seq.tokens, .kv = &seq.table};
    ASSERT_TRUE(run.transformer->Prefill({&input, 1}, logits).ok());
    seq.tokens.push_back(7);
    auto sink = std::make_shared<RecordingSink>();
    seq.sink = sink;
    run.sinks.push_back(sink);
    run.batch->Admit(std::move(seq));
  }
  for (int i = 0; i < 12; ++i) run.batch->Step();
  EXPECT_GT(run.batch->n_preemptions(), 0);
  for (int s = 0; s < 3; ++s) EXPECT_TRUE(run.batch->Cancel("c" + std::to_string(s)));
  EXPECT_FALSE(run.batch->Cancel("never-admitted"));
  run.batch->Step();
  for (int s = 0; s < 3; ++s) {
    EXPECT_TRUE(run.sinks[s]->ended());
    EXPECT_EQ(run.sinks[s]->error_code(), absl::StatusCode::kCancelled);
  }
  // Ended sequences are no longer found.
  EXPECT_FALSE(run.batch->Cancel("c0"));
  EXPECT_EQ(run.cache->pool().n_free(), 8);
  EXPECT_EQ(run.batch->n_running(), 0);
  EXPECT_EQ(run.batch->n_waiting(), 0);
}

}  // namespace
}  // namespace baton::decode_worker
