#include "decode_worker/decode_batch.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/draft_proposer.h"
#include "engine/model.h"
#include "engine/prefix_cache.h"
#include "engine/synthetic_model.h"
#include "engine/transformer.h"
#include "gmock/gmock.h"
#include "grammar/output_grammar.h"
#include "grammar/output_matcher.h"
#include "gtest/gtest.h"
#include "metrics/metrics.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton::decode_worker {
namespace {

// Records what the batch streams for one sequence.
class RecordingSink : public TokenSink {
 public:
  void OnToken(int32_t token, const engine::TokenLogprobs* logprobs, int32_t n_generated,
               const SequenceCounts&) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(ended_) << "token after the end";
    tokens_.push_back(token);
    logprobs_.push_back(logprobs == nullptr ? std::nullopt : std::optional(*logprobs));
  }
  void OnEnd(engine::FinishReason finish, int32_t n_generated,
             const SequenceCounts& speculation, const absl::Status& error) override {
    absl::MutexLock lock(&mu_);
    EXPECT_FALSE(ended_) << "ended twice";
    EXPECT_NE(finish == engine::FinishReason::kNone, error.ok()) << "a finish reason xor an error";
    ended_ = true;
    finish_ = finish;
    error_ = error;
    speculation_ = speculation;
  }
  SequenceCounts speculation() const {
    absl::MutexLock lock(&mu_);
    return speculation_;
  }
  std::vector<int32_t> tokens() const {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  // One per token: what OnToken was given.
  std::vector<std::optional<engine::TokenLogprobs>> logprobs() const {
    absl::MutexLock lock(&mu_);
    return logprobs_;
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
  std::vector<std::optional<engine::TokenLogprobs>> logprobs_;
  bool ended_ = false;
  engine::FinishReason finish_ = engine::FinishReason::kNone;
  absl::Status error_;
  SequenceCounts speculation_;
};

class DecodeBatchTest : public testing::Test {
 protected:
  void SetUp() override {
    path_ = test_support::TempPath("decode-batch.gguf");
    ASSERT_TRUE(engine::WriteSyntheticModel(path_, {.seed = 11, .n_ctx = 512}).ok());
    absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    backend_ = kernels::CreateCpuBackend({.n_threads = 1});
  }

  // Loads a model of these options in place of the default one and checks that speculation and
  // prefix caching keep its plain output (below).
  void ExpectThePlainOutputWithSpeculationAndPrefixCaching(
      const engine::SyntheticModelOptions& options, float temperature);

  struct Run {
    std::unique_ptr<engine::KvCache> cache;
    std::unique_ptr<engine::PrefixCache> prefix;  // set with prefix caching
    std::unique_ptr<engine::Transformer> transformer;
    std::unique_ptr<DecodeBatch> batch;
    std::vector<std::shared_ptr<RecordingSink>> sinks;
  };

  // An empty batch over a fresh cache of `n_blocks` blocks of 4 tokens, with a prefix cache
  // when `prefix_caching`.
  absl::StatusOr<Run> MakeRun(int32_t n_blocks, DecodeBatchOptions options,
                              bool prefix_caching = false) {
    absl::StatusOr<std::unique_ptr<engine::KvCache>> cache =
        engine::KvCache::Create(model_->config(), {.block_size = 4, .n_blocks = n_blocks},
                                *backend_);
    if (!cache.ok()) return cache.status();
    Run run;
    run.cache = *std::move(cache);
    if (prefix_caching) {
      run.prefix = std::make_unique<engine::PrefixCache>(run.cache.get(), "fp", true);
      options.prefix_cache = run.prefix.get();
    }
    run.transformer = std::make_unique<engine::Transformer>(&model_->config(), &model_->weights(),
                                                            backend_.get(), run.cache.get());
    run.batch = std::make_unique<DecodeBatch>(&model_->tokenizer(), run.transformer.get(),
                                              run.cache.get(), options);
    return run;
  }

  // Starts `n` sequences (prompt of 6 tokens each, first token sampled from the prefill) in a
  // batch whose cache has `n_blocks` blocks of 4 tokens, then steps until every one finishes.
  absl::StatusOr<Run> RunSequences(int n, int32_t n_blocks, int32_t max_tokens,
                                   DecodeBatchOptions options = {.max_batch = 8},
                                   float temperature = 0.9f, bool prefix_caching = false) {
    absl::StatusOr<Run> made = MakeRun(n_blocks, options, prefix_caching);
    if (!made.ok()) return made;
    Run& run = *made;
    std::vector<float> logits;
    for (int s = 0; s < n; ++s) {
      DecodeSequence seq;
      seq.id = "seq" + std::to_string(s);
      seq.tokens = Prompt(s);
      seq.n_prompt = 6;
      seq.params = {.temperature = temperature, .seed = static_cast<uint64_t>(s),
                    .max_tokens = max_tokens, .ignore_eos = true, .logprobs = logprobs_};
      EXPECT_TRUE(run.cache->Reserve(seq.table, 7).ok());  // prompt + one token of headroom
      engine::SequenceInput input{.tokens = seq.tokens, .kv = &seq.table};
      EXPECT_TRUE(run.transformer->Prefill({&input, 1}, logits).ok());
      if (constraint_.kind != engine::OutputConstraint::Kind::kNone) {
        // Drawn as the prefill worker draws a constrained first token.
        seq.params.constraint = constraint_;
        auto first = grammar::StartOutputMatcher(grammars_.get(), constraint_, seq.tokens, {});
        EXPECT_TRUE(first.ok() && (*first)->MaskLogits(logits));
      }
      seq.tokens.push_back(engine::Sample(seq.params, logits, seq.tokens, 6));
      auto matcher = grammar::StartOutputMatcher(
          grammars_.get(), seq.params.constraint,
          std::span<const engine::TokenId>(seq.tokens).first(6), {&seq.tokens.back(), 1});
      EXPECT_TRUE(matcher.ok()) << matcher.status();
      if (matcher.ok()) seq.output_matcher = *std::move(matcher);
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

  // The 6-token prompt of RunSequences' sequence s.
  static std::vector<engine::TokenId> Prompt(int s) {
    std::vector<engine::TokenId> tokens;
    for (int t = 0; t < 6; ++t) tokens.push_back((s * 31 + t * 7 + 3) % 256);
    return tokens;
  }

  // Admits sequence `id`: prompt 1..5 prefilled, first token 7, greedy, 100 tokens to go.
  void AdmitLongSequence(Run& run, const std::string& id, bool speculative = true) {
    DecodeSequence seq;
    seq.id = id;
    seq.tokens = {1, 2, 3, 4, 5};
    seq.n_prompt = 5;
    seq.params = {.temperature = 0, .max_tokens = 100, .ignore_eos = true};
    seq.params.speculative = speculative;
    ASSERT_TRUE(run.cache->Reserve(seq.table, 6).ok());
    engine::SequenceInput input{.tokens = seq.tokens, .kv = &seq.table};
    std::vector<float> logits;
    ASSERT_TRUE(run.transformer->Prefill({&input, 1}, logits).ok());
    seq.tokens.push_back(7);
    auto sink = std::make_shared<RecordingSink>();
    seq.sink = sink;
    run.sinks.push_back(sink);
    run.batch->Admit(std::move(seq));
  }

  std::string path_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<kernels::Backend> backend_;
  int32_t logprobs_ = -1;  // RunSequences' sampling.logprobs
  // RunSequences' output constraint, compiled by grammars_ (set with it).
  engine::OutputConstraint constraint_;
  std::unique_ptr<grammar::OutputGrammarCompiler> grammars_;
};

// Expects `actual` to be `expected` up to float rounding (two forward passes of other shapes).
void ExpectSameLogprobs(const engine::TokenLogprobs& actual,
                        const engine::TokenLogprobs& expected) {
  EXPECT_NEAR(actual.logprob, expected.logprob, 1e-4);
  ASSERT_EQ(actual.top.size(), expected.top.size());
  for (size_t i = 0; i < actual.top.size(); ++i) {
    EXPECT_EQ(actual.top[i].id, expected.top[i].id) << "top " << i;
    EXPECT_NEAR(actual.top[i].logprob, expected.top[i].logprob, 1e-4) << "top " << i;
  }
}

// Each generated token's log-probabilities are those of the raw logits at its position, as a
// fresh forward pass over the sequence computes them; requests that do not ask get none.
TEST_F(DecodeBatchTest, LogprobsAreThoseOfTheRawLogitsAtEachToken) {
  logprobs_ = 3;
  absl::StatusOr<Run> run = RunSequences(3, 64, 8);
  ASSERT_TRUE(run.ok()) << run.status();
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(s);
    const std::vector<engine::TokenId> generated = run->sinks[s]->tokens();
    const std::vector<std::optional<engine::TokenLogprobs>> logprobs = run->sinks[s]->logprobs();
    ASSERT_EQ(logprobs.size(), generated.size());
    // The whole sequence once more: prompt, the first token (sampled from the prefill), then
    // the batch's tokens; row r of its logits predicts token r + 1.
    std::vector<engine::TokenId> tokens = Prompt(s);
    std::vector<float> logits;
    engine::BlockTable table;
    ASSERT_TRUE(run->cache->Reserve(table, 6).ok());
    engine::SequenceInput prompt{.tokens = tokens, .kv = &table};
    ASSERT_TRUE(run->transformer->Prefill({&prompt, 1}, logits).ok());
    tokens.push_back(engine::Sample({.temperature = 0.9f, .seed = static_cast<uint64_t>(s)},
                                    logits, tokens, 6));
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    ASSERT_TRUE(run->cache->Reserve(table, static_cast<int32_t>(tokens.size())).ok());
    engine::SequenceInput rest{
        .tokens = std::span<const engine::TokenId>(tokens).subspan(6), .kv = &table,
        .all_logits = true};
    ASSERT_TRUE(run->transformer->Prefill({&rest, 1}, logits).ok());
    const size_t n_vocab = static_cast<size_t>(model_->config().n_vocab);
    for (size_t j = 0; j < generated.size(); ++j) {
      ASSERT_TRUE(logprobs[j].has_value()) << "token " << j;
      const std::span<const float> row(logits.data() + j * n_vocab, n_vocab);
      ExpectSameLogprobs(*logprobs[j], engine::LogprobsOf(row, generated[j], 3));
      EXPECT_LE(logprobs[j]->logprob, logprobs[j]->top[0].logprob);
    }
    run->cache->Free(table);
  }
  logprobs_ = -1;
  absl::StatusOr<Run> without = RunSequences(1, 64, 4);
  ASSERT_TRUE(without.ok()) << without.status();
  for (const auto& logprobs : without->sinks[0]->logprobs()) EXPECT_FALSE(logprobs.has_value());
}

// A step samples its sequences on the backend's host threads at once; each draw depends only on
// its own row, tokens and seed, so the output is the same on one thread as on two, and as when
// each sequence is stepped alone.
TEST_F(DecodeBatchTest, SampledOutputIsTheSameOnOneHostThreadAndOnTwo) {
  // Batches of 8 on one and on two host threads, and one sequence a step (each draw alone).
  std::vector<std::vector<engine::TokenId>> outputs[3];
  for (int way = 0; way < 3; ++way) {
    const int threads = way == 1 ? 2 : 1;
    backend_ = kernels::CreateCpuBackend({.n_threads = threads});
    ASSERT_EQ(backend_->host_threads(), threads);
    absl::StatusOr<Run> run = RunSequences(6, 64, 12, {.max_batch = way == 2 ? 1 : 8},
                                           /*temperature=*/1.0f);
    ASSERT_TRUE(run.ok()) << run.status();
    for (const auto& sink : run->sinks) {
      ASSERT_TRUE(sink->ended());
      outputs[way].push_back(sink->tokens());
    }
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(outputs[0], outputs[2]);
  // The draws are not all the same token (the test would show nothing).
  std::set<engine::TokenId> seen;
  for (const auto& tokens : outputs[0]) seen.insert(tokens.begin(), tokens.end());
  EXPECT_GT(seen.size(), 5u);
}

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

// A constrained sequence keeps its grammar state through preemption (only its KV is recomputed).
TEST_F(DecodeBatchTest, PreemptedConstrainedSequencesResumeWithTheirGrammarState) {
  constraint_ = {.kind = engine::OutputConstraint::Kind::kRegex, .text = "[a-z]{40}"};
  grammars_ = std::make_unique<grammar::OutputGrammarCompiler>(model_->tokenizer(),
                                                               model_->config().n_vocab);
  absl::StatusOr<Run> roomy = RunSequences(4, /*n_blocks=*/64, /*max_tokens=*/24);
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  EXPECT_EQ(roomy->batch->n_preemptions(), 0);
  absl::StatusOr<Run> tight = RunSequences(4, /*n_blocks=*/14, /*max_tokens=*/24);
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_GT(tight->batch->n_preemptions(), 0);
  for (int s = 0; s < 4; ++s) {
    const std::vector<engine::TokenId> tokens = roomy->sinks[s]->tokens();
    EXPECT_EQ(tight->sinks[s]->tokens(), tokens) << "sequence " << s;
    EXPECT_EQ(roomy->sinks[s]->finish(), engine::FinishReason::kLength);
    for (engine::TokenId id : tokens) {
      const std::string piece = model_->tokenizer().TokenToPiece(id);
      EXPECT_TRUE(!piece.empty() && std::all_of(piece.begin(), piece.end(), [](char c) {
        return c >= 'a' && c <= 'z';
      })) << "token " << id << " '" << piece << "'";
    }
  }
  EXPECT_EQ(tight->cache->pool().n_free(), 14);
}

TEST_F(DecodeBatchTest, WithPrefixCachingEndedSequencesStayCachedAndPreemptedOnesResumeExactly) {
  absl::StatusOr<Run> roomy_run = RunSequences(4, /*n_blocks=*/64, /*max_tokens=*/24);
  ASSERT_TRUE(roomy_run.ok()) << roomy_run.status();
  for (int32_t n_blocks : {64, 14}) {
    absl::StatusOr<Run> cached_run = RunSequences(4, n_blocks, /*max_tokens=*/24,
                                                  {.max_batch = 8}, 0.9f, /*prefix_caching=*/true);
    ASSERT_TRUE(cached_run.ok()) << cached_run.status();
    Run& run = *cached_run;
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(run.sinks[s]->tokens(), roomy_run->sinks[s]->tokens())
          << "sequence " << s << " with " << n_blocks << " blocks";
    }
    EXPECT_EQ(run.cache->pool().n_free(), n_blocks);  // cached blocks are free for allocation
    if (n_blocks == 64) {
      // Each sequence's KV covers 6 + 23 tokens at its end: 7 full blocks, all cached.
      EXPECT_EQ(run.batch->n_preemptions(), 0);
      EXPECT_EQ(run.cache->pool().n_cached(), 28);
    } else {
      EXPECT_GT(run.batch->n_preemptions(), 0);
      EXPECT_GT(run.cache->pool().n_cached(), 0);
    }
  }
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
  for (int s = 0; s < 3; ++s) AdmitLongSequence(run, "c" + std::to_string(s));
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

TEST_F(DecodeBatchTest, EndAllEndsRunningWaitingAndPreemptedSequencesWithTheReasonGiven) {
  absl::StatusOr<Run> made = MakeRun(/*n_blocks=*/8, DecodeBatchOptions{});
  ASSERT_TRUE(made.ok()) << made.status();
  Run& run = *made;
  for (int s = 0; s < 3; ++s) AdmitLongSequence(run, "e" + std::to_string(s));
  for (int i = 0; i < 12; ++i) run.batch->Step();
  EXPECT_GT(run.batch->n_preemptions(), 0);
  const absl::Status moved = absl::AbortedError("the worker left the decode role");
  run.batch->EndAll(moved);
  run.batch->Step();
  // Admitted and not stepped yet.
  AdmitLongSequence(run, "waiting");
  run.batch->EndAll(moved);
  run.batch->Step();
  for (const std::shared_ptr<RecordingSink>& sink : run.sinks) {
    EXPECT_TRUE(sink->ended());
    EXPECT_EQ(sink->error_code(), absl::StatusCode::kAborted);
  }
  EXPECT_EQ(run.cache->pool().n_free(), 8);
  EXPECT_EQ(run.batch->n_running(), 0);
  EXPECT_EQ(run.batch->n_waiting(), 0);
  EXPECT_FALSE(run.batch->Cancel("e0"));  // no longer found
  // A sequence admitted afterwards runs as usual.
  AdmitLongSequence(run, "after");
  run.batch->Step();
  EXPECT_FALSE(run.sinks.back()->ended());
  EXPECT_EQ(run.sinks.back()->tokens().size(), 1u);
}

// Proposes the true continuation (from a plain run's full token lists), wrong at one position
// of every other proposal: every verification path runs (all kept, some kept, none kept).
class OracleProposer : public engine::Proposer {
 public:
  explicit OracleProposer(std::vector<std::vector<engine::TokenId>> truth)
      : truth_(std::move(truth)) {}

  void Propose(std::span<engine::ProposalRequest> requests) override {
    for (engine::ProposalRequest& r : requests) {
      r.proposal.clear();
      for (const std::vector<engine::TokenId>& t : truth_) {
        if (t.size() <= r.tokens.size() || !std::equal(r.tokens.begin(), r.tokens.end(), t.begin())) {
          continue;
        }
        const size_t end = std::min(t.size(), r.tokens.size() + r.max_tokens);
        r.proposal.assign(t.begin() + r.tokens.size(), t.begin() + end);
      }
      if (!r.proposal.empty() && ++calls_ % 2 == 0) {
        engine::TokenId& wrong = r.proposal[calls_ / 2 % r.proposal.size()];
        wrong = (wrong + 1) % 256;
      }
    }
  }
  void Forget(uint64_t sequence) override { forgotten_.push_back(sequence); }
  size_t n_forgotten() const { return forgotten_.size(); }

 private:
  std::vector<std::vector<engine::TokenId>> truth_;
  int calls_ = 0;
  std::vector<uint64_t> forgotten_;
};

SequenceCounts Total(const std::vector<std::shared_ptr<RecordingSink>>& sinks) {
  SequenceCounts total;
  for (const auto& sink : sinks) {
    total.proposed += sink->speculation().proposed;
    total.accepted += sink->speculation().accepted;
  }
  return total;
}

class SpeculativeDecodeBatchTest : public DecodeBatchTest,
                                   public testing::WithParamInterface<float> {
 protected:
  // The plain run's tokens for `n` sequences, and an oracle proposer built from them.
  void RunPlain(int n, int32_t max_tokens) {
    absl::StatusOr<Run> plain = RunSequences(n, 64, max_tokens, {.max_batch = 8}, GetParam());
    ASSERT_TRUE(plain.ok()) << plain.status();
    plain_.batch.reset();  // the old run's batch goes before its cache
    plain_ = *std::move(plain);
    std::vector<std::vector<engine::TokenId>> truth;
    for (int s = 0; s < n; ++s) {
      std::vector<engine::TokenId> t = Prompt(s);
      // The first token was sampled from the prefill: the same in every run.
      std::vector<float> logits;
      engine::BlockTable table;
      EXPECT_TRUE(plain_.cache->Reserve(table, 6).ok());
      engine::SequenceInput input{.tokens = t, .kv = &table};
      EXPECT_TRUE(plain_.transformer->Prefill({&input, 1}, logits).ok());
      engine::SamplingParams params = {.temperature = GetParam(), .seed = static_cast<uint64_t>(s)};
      t.push_back(engine::Sample(params, logits, t, 6));
      plain_.cache->Free(table);
      for (engine::TokenId id : plain_.sinks[s]->tokens()) t.push_back(id);
      truth.push_back(t);
    }
    oracle_ = std::make_unique<OracleProposer>(std::move(truth));
  }

  // A fixed token cost: how far speculation goes must not depend on this machine's timings here.
  DecodeBatchOptions Speculative(int32_t k = 4) {
    return {.max_batch = 8,
            .speculation = {.proposer = oracle_.get(),
                            .num_speculative_tokens = k,
                            .disable_batch_size = 8,
                            .token_cost = 0.3}};
  }

  Run plain_;
  std::unique_ptr<OracleProposer> oracle_;
};

TEST_P(SpeculativeDecodeBatchTest, OutputIsPlainDecodingsAloneAndBatched) {
  for (int n : {1, 4}) {
    SCOPED_TRACE(n);
    RunPlain(n, /*max_tokens=*/24);
    metrics::Registry& registry = metrics::Registry::Global();
    metrics::Counter& drafted = registry.GetCounter("baton:spec_decode_num_draft_tokens_total", "");
    metrics::Counter& kept = registry.GetCounter("baton:spec_decode_num_accepted_tokens_total", "");
    const double drafted_before = drafted.value();
    const double kept_before = kept.value();
    absl::StatusOr<Run> spec = RunSequences(n, 64, 24, Speculative(), GetParam());
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (int s = 0; s < n; ++s) {
      EXPECT_EQ(spec->sinks[s]->tokens(), plain_.sinks[s]->tokens()) << "sequence " << s;
      EXPECT_EQ(spec->sinks[s]->finish(), engine::FinishReason::kLength);
    }
    const SequenceCounts total = Total(spec->sinks);
    EXPECT_GT(total.accepted, 0);
    EXPECT_LT(total.accepted, total.proposed);  // the oracle's wrong guesses were rejected
    EXPECT_EQ(drafted.value() - drafted_before, total.proposed);
    EXPECT_EQ(kept.value() - kept_before, total.accepted);
    EXPECT_GT(registry.GetGauge("baton:spec_decode_draft_acceptance_rate", "").value(), 0.0);
    EXPECT_DOUBLE_EQ(registry.GetGauge("baton:spec_decode_token_cost", "").value(), 0.3);
    // Fewer steps than tokens: verification yielded several tokens per step.
    EXPECT_LT(spec->batch->n_steps(), plain_.batch->n_steps());
    EXPECT_EQ(spec->cache->pool().n_free(), 64);
    EXPECT_EQ(oracle_->n_forgotten(), static_cast<size_t>(n));  // every ended sequence
  }
}

// Tokens kept from a verification report the logprobs of their own rows: those of plain decoding.
TEST_P(SpeculativeDecodeBatchTest, LogprobsAreThoseOfPlainDecoding) {
  logprobs_ = 2;
  RunPlain(3, /*max_tokens=*/16);
  absl::StatusOr<Run> spec = RunSequences(3, 64, 16, Speculative(), GetParam());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_GT(Total(spec->sinks).accepted, 0);
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(s);
    ASSERT_EQ(spec->sinks[s]->tokens(), plain_.sinks[s]->tokens());
    const auto spec_logprobs = spec->sinks[s]->logprobs();
    const auto plain_logprobs = plain_.sinks[s]->logprobs();
    ASSERT_EQ(spec_logprobs.size(), plain_logprobs.size());
    for (size_t j = 0; j < spec_logprobs.size(); ++j) {
      ASSERT_TRUE(spec_logprobs[j].has_value() && plain_logprobs[j].has_value()) << "token " << j;
      ExpectSameLogprobs(*spec_logprobs[j], *plain_logprobs[j]);
    }
  }
}

TEST_P(SpeculativeDecodeBatchTest, PreemptedMidSpeculationResumesExactlyAndFreesEverything) {
  RunPlain(4, /*max_tokens=*/24);
  // 14 blocks for 4 sequences that need 8 each, as in the plain preemption test.
  absl::StatusOr<Run> spec = RunSequences(4, /*n_blocks=*/14, 24, Speculative(), GetParam());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_GT(spec->batch->n_preemptions(), 0);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(spec->sinks[s]->tokens(), plain_.sinks[s]->tokens()) << "sequence " << s;
  }
  EXPECT_GT(Total(spec->sinks).accepted, 0);
  EXPECT_EQ(spec->cache->pool().n_free(), 14);
}

TEST_P(SpeculativeDecodeBatchTest, OptedOutRequestsAndLargeStepsDecodePlainly) {
  RunPlain(4, /*max_tokens=*/16);
  DecodeBatchOptions options = Speculative();
  options.speculation.disable_batch_size = 3;  // 4 sequences: every step too large
  absl::StatusOr<Run> large = RunSequences(4, 64, 16, options, GetParam());
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(Total(large->sinks).proposed, 0);
  for (int s = 0; s < 4; ++s) EXPECT_EQ(large->sinks[s]->tokens(), plain_.sinks[s]->tokens());
}

TEST_P(SpeculativeDecodeBatchTest, ALearnedCostAddsTheProposersOwn) {
  // Whatever row cost the steps teach, a proposed token that costs 5 decode steps by itself can
  // never pay: no proposals, and the gauge shows the cost the steps were planned with.
  RunPlain(2, /*max_tokens=*/16);
  DecodeBatchOptions options = Speculative();
  options.speculation.token_cost = -1;
  options.speculation.proposer_cost = 5;
  absl::StatusOr<Run> costly = RunSequences(2, 64, 16, options, GetParam());
  ASSERT_TRUE(costly.ok()) << costly.status();
  EXPECT_EQ(Total(costly->sinks).proposed, 0);
  for (int s = 0; s < 2; ++s) EXPECT_EQ(costly->sinks[s]->tokens(), plain_.sinks[s]->tokens());
  const double cost =
      metrics::Registry::Global().GetGauge("baton:spec_decode_token_cost", "").value();
  EXPECT_GE(cost, 5 + StepCostModel::kMinRowCost);
  EXPECT_LE(cost, 5 + StepCostModel::kMaxRowCost);
}

TEST_P(SpeculativeDecodeBatchTest, DraftModelProposalsKeepThePlainOutput) {
  RunPlain(4, /*max_tokens=*/20);
  // The target as its own draft guesses right every time; another model with the same
  // vocabulary (different weights) mostly wrong. Either way the output is the plain one.
  const std::string other_path = test_support::TempPath("draft.gguf");
  ASSERT_TRUE(engine::WriteSyntheticModel(other_path, {.seed = 12, .n_layer = 1}).ok());
  absl::StatusOr<std::unique_ptr<engine::Model>> other = engine::Model::Load(other_path);
  ASSERT_TRUE(other.ok()) << other.status();
  for (const engine::Model* draft : {model_.get(), other->get()}) {
    const bool self = draft == model_.get();
    SCOPED_TRACE(self ? "self draft" : "other draft");
    absl::StatusOr<std::unique_ptr<engine::Proposer>> proposer =
        engine::CreateDraftProposer(draft, *model_, backend_.get(), {.block_size = 4});
    ASSERT_TRUE(proposer.ok()) << proposer.status();
    DecodeBatchOptions options = Speculative();
    options.speculation.proposer = proposer->get();
    absl::StatusOr<Run> spec = RunSequences(4, 64, 20, options, GetParam());
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(spec->sinks[s]->tokens(), plain_.sinks[s]->tokens()) << "sequence " << s;
    }
    const SequenceCounts total = Total(spec->sinks);
    EXPECT_GT(total.proposed, 0);
    if (self && GetParam() == 0.0f) {
      EXPECT_EQ(total.accepted, total.proposed);
    }
    EXPECT_EQ(spec->cache->pool().n_free(), 64);
  }
}

// Speculation with a draft of the same model (which rolls its own cache back) and prefix caching
// keep the plain output, and every block comes back; a model with windowed layers lets go of
// the blocks their window passed as the batch decodes.
void DecodeBatchTest::ExpectThePlainOutputWithSpeculationAndPrefixCaching(
    const engine::SyntheticModelOptions& options, float temperature) {
  path_ = test_support::TempPath("decode-batch-" + options.architecture + ".gguf");
  ASSERT_TRUE(engine::WriteSyntheticModel(path_, options).ok());
  absl::StatusOr<std::unique_ptr<engine::Model>> model = engine::Model::Load(path_);
  ASSERT_TRUE(model.ok()) << model.status();
  model_ = *std::move(model);
  const int32_t n_blocks = 64 * engine::KvCache::LayerGroups(model_->config()).n_groups();
  absl::StatusOr<Run> plain = RunSequences(4, n_blocks, 24, {.max_batch = 8}, temperature);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->cache->pool().n_free(), n_blocks);

  absl::StatusOr<std::unique_ptr<engine::Proposer>> draft =
      engine::CreateDraftProposer(model_.get(), *model_, backend_.get(), {.block_size = 4});
  ASSERT_TRUE(draft.ok()) << draft.status();
  const DecodeBatchOptions spec_options = {.max_batch = 8,
                                           .speculation = {.proposer = draft->get(),
                                                           .num_speculative_tokens = 4,
                                                           .disable_batch_size = 8,
                                                           .token_cost = 0.3}};
  absl::StatusOr<Run> spec =
      RunSequences(4, n_blocks, 24, spec_options, temperature, /*prefix_caching=*/true);
  ASSERT_TRUE(spec.ok()) << spec.status();
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(spec->sinks[s]->tokens(), plain->sinks[s]->tokens()) << "sequence " << s;
  }
  EXPECT_GT(Total(spec->sinks).accepted, 0) << "proposed " << Total(spec->sinks).proposed;
  EXPECT_EQ(spec->cache->pool().n_free(), n_blocks);
}

// gemma3's five local layers (window 5) and its global one. At a lower temperature, as below:
// the draft's greedy guesses are drawn often enough to be kept (at 0.9, whether any of the few
// proposed is kept depends on the CPU's kernels: none on one without AVX-512).
TEST_F(DecodeBatchTest, WindowedLayersKeepThePlainOutputWithSpeculationAndPrefixCaching) {
  ExpectThePlainOutputWithSpeculationAndPrefixCaching(
      {.seed = 11, .architecture = "gemma3", .n_layer = 6, .head_dim = 32, .sliding_window = 5,
       .n_ctx = 512},
      0.3f);
}

// gpt-oss: local and global layers in turn (window 5), attention sinks, biased experts, YaRN.
// Its random experts spread the probabilities thinner: at a lower temperature the draft's
// guesses are accepted often enough to keep speculation on.
TEST_F(DecodeBatchTest, GptOssKeepsThePlainOutputWithSpeculationAndPrefixCaching) {
  ExpectThePlainOutputWithSpeculationAndPrefixCaching(
      {.seed = 12, .architecture = "gpt-oss", .n_layer = 4, .head_dim = 32, .sliding_window = 5,
       .n_expert = 4, .n_expert_used = 2, .n_ctx = 512, .rope_yarn_factor = 4.0f},
      0.3f);
}

// deepseek2: latent attention (the cache holds one latent per token), a dense first layer,
// routed and shared experts, YaRN with DeepSeek's magnitude scale.
TEST_F(DecodeBatchTest, Deepseek2KeepsThePlainOutputWithSpeculationAndPrefixCaching) {
  absl::StatusOr<engine::SyntheticModelOptions> options =
      engine::SyntheticShape("tiny-deepseek2");
  ASSERT_TRUE(options.ok());
  options->seed = 13;
  ExpectThePlainOutputWithSpeculationAndPrefixCaching(*options, 0.3f);
}

TEST_F(DecodeBatchTest, DraftWithAnotherVocabularyIsRefused) {
  absl::StatusOr<std::unique_ptr<engine::Model>> real =
      engine::Model::Load(test_support::DefaultModelPath());
  ASSERT_TRUE(real.ok()) << real.status();
  absl::StatusOr<std::unique_ptr<engine::Proposer>> proposer =
      engine::CreateDraftProposer(real->get(), *model_, backend_.get(), {});
  EXPECT_EQ(proposer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(proposer.status().message(), testing::HasSubstr("different vocabulary"));
}

// Structured output, as the workers run it: the first token drawn from the prefill's logits
// masked by a matcher past the output so far (a migrated request's tokens, the prompt's tail),
// then the batch decoding with the sequence's own matcher.
class ConstrainedDecodeBatchTest : public DecodeBatchTest {
 protected:
  struct Output {
    std::vector<engine::TokenId> tokens;  // generated after output_so_far, first token first
    engine::FinishReason finish = engine::FinishReason::kNone;
    absl::StatusCode error = absl::StatusCode::kOk;
    int32_t free_blocks = 0;
  };

  Output RunConstrained(const engine::OutputConstraint& constraint, int s,
                        const std::vector<engine::TokenId>& output_so_far,
                        DecodeBatchOptions options) {
    grammar::OutputGrammarCompiler compiler(model_->tokenizer(), model_->config().n_vocab);
    absl::StatusOr<Run> made = MakeRun(64, options);
    EXPECT_TRUE(made.ok()) << made.status();
    Run& run = *made;
    DecodeSequence seq;
    seq.id = "constrained";
    seq.tokens = Prompt(s);
    seq.tokens.insert(seq.tokens.end(), output_so_far.begin(), output_so_far.end());
    seq.n_prompt = static_cast<int32_t>(seq.tokens.size());
    seq.params = {.temperature = 0.9f, .seed = static_cast<uint64_t>(s), .max_tokens = 60,
                  .ignore_eos = true};
    seq.params.constraint = constraint;
    seq.params.constraint.n_output_in_prompt = static_cast<int32_t>(output_so_far.size());
    // The prefill worker's part.
    std::vector<float> logits;
    EXPECT_TRUE(run.cache->Reserve(seq.table, seq.n_prompt + 1).ok());
    engine::SequenceInput input{.tokens = seq.tokens, .kv = &seq.table};
    EXPECT_TRUE(run.transformer->Prefill({&input, 1}, logits).ok());
    auto first_matcher =
        grammar::StartOutputMatcher(&compiler, seq.params.constraint, seq.tokens, {});
    EXPECT_TRUE(first_matcher.ok()) << first_matcher.status();
    EXPECT_TRUE((*first_matcher)->MaskLogits(logits));
    const engine::TokenId first = engine::Sample(seq.params, logits, seq.tokens, seq.n_prompt);
    // The decode worker's part.
    auto matcher = grammar::StartOutputMatcher(&compiler, seq.params.constraint, seq.tokens,
                                               {&first, 1});
    EXPECT_TRUE(matcher.ok()) << matcher.status();
    seq.output_matcher = *std::move(matcher);
    seq.tokens.push_back(first);
    auto sink = std::make_shared<RecordingSink>();
    seq.sink = sink;
    run.batch->Admit(std::move(seq));
    for (int step = 0; step < 1000 && !sink->ended(); ++step) run.batch->Step();
    Output out;
    out.tokens = {first};
    for (engine::TokenId id : sink->tokens()) out.tokens.push_back(id);
    out.finish = sink->finish();
    out.error = sink->error_code();
    out.free_blocks = run.cache->pool().n_free();
    return out;
  }

  std::string Text(const std::vector<engine::TokenId>& tokens) {
    std::string text;
    for (engine::TokenId id : tokens) {
      if (!model_->tokenizer().IsEndOfGeneration(id)) text += model_->tokenizer().TokenToPiece(id);
    }
    return text;
  }
};

TEST_F(ConstrainedDecodeBatchTest, OutputFollowsTheGrammarAndEndsWhereItDoesDespiteIgnoreEos) {
  const std::string pattern = "[a-z]{2,6}( [0-9]{1,3}){1,3}";
  const engine::OutputConstraint regex = {.kind = engine::OutputConstraint::Kind::kRegex,
                                          .text = pattern};
  for (int s = 0; s < 4; ++s) {
    const Output out = RunConstrained(regex, s, {}, {.max_batch = 8});
    SCOPED_TRACE(Text(out.tokens));
    EXPECT_EQ(out.finish, engine::FinishReason::kStop);
    ASSERT_FALSE(out.tokens.empty());
    EXPECT_TRUE(model_->tokenizer().IsEndOfGeneration(out.tokens.back()));
    EXPECT_TRUE(std::regex_match(Text(out.tokens), std::regex(pattern)));
    EXPECT_EQ(out.free_blocks, 64);
  }
}

// Proposals the grammar forbids (the unconstrained draft's, a repeated token) are rejected, and
// the output is the plain constrained one; so is a migrated request's continuation, its grammar
// state rebuilt from the tokens it had generated.
TEST_F(ConstrainedDecodeBatchTest, SpeculationAndMigrationKeepThePlainConstrainedOutput) {
  const engine::OutputConstraint choice = {
      .kind = engine::OutputConstraint::Kind::kChoice,
      .choices = {"alpha beta gamma delta", "alpha beta epsilon", "omega omega omega omega"}};
  absl::StatusOr<std::unique_ptr<engine::Proposer>> draft =
      engine::CreateDraftProposer(model_.get(), *model_, backend_.get(), {.block_size = 4});
  ASSERT_TRUE(draft.ok()) << draft.status();
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(s);
    const Output plain = RunConstrained(choice, s, {}, {.max_batch = 8});
    ASSERT_EQ(plain.finish, engine::FinishReason::kStop);
    const std::string text = Text(plain.tokens);
    EXPECT_NE(std::find(choice.choices.begin(), choice.choices.end(), text), choice.choices.end())
        << text;
    const Output spec = RunConstrained(
        choice, s, {},
        {.max_batch = 8,
         .speculation = {.proposer = draft->get(), .num_speculative_tokens = 4,
                         .disable_batch_size = 8, .token_cost = 0.3}});
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.free_blocks, 64);
    // Moved after k tokens: they are the new prompt's tail.
    for (size_t k : {size_t{1}, plain.tokens.size() / 2}) {
      const std::vector<engine::TokenId> so_far(plain.tokens.begin(), plain.tokens.begin() + k);
      const Output moved = RunConstrained(choice, s, so_far, {.max_batch = 8});
      EXPECT_EQ(moved.tokens,
                std::vector<engine::TokenId>(plain.tokens.begin() + k, plain.tokens.end()))
          << "moved after " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSeeded, SpeculativeDecodeBatchTest, testing::Values(0.0f, 0.9f));

TEST_F(DecodeBatchTest, CancelMidSpeculationFreesEveryBlock) {
  // Proposes the sequence's own last tokens again: whatever is kept, blocks are taken for it.
  class Repeat : public engine::Proposer {
   public:
    void Propose(std::span<engine::ProposalRequest> requests) override {
      for (engine::ProposalRequest& r : requests) r.proposal.assign(r.max_tokens, r.tokens.back());
    }
    void Forget(uint64_t) override {}
  } repeat;
  absl::StatusOr<Run> made =
      MakeRun(/*n_blocks=*/32, {.speculation = {.proposer = &repeat, .num_speculative_tokens = 8,
                                                .disable_batch_size = 8}});
  ASSERT_TRUE(made.ok()) << made.status();
  for (int s = 0; s < 3; ++s) {
    AdmitLongSequence(*made, "c" + std::to_string(s), /*speculative=*/s != 2);
  }
  for (int i = 0; i < 5; ++i) made->batch->Step();
  for (int s = 0; s < 3; ++s) EXPECT_TRUE(made->batch->Cancel("c" + std::to_string(s)));
  made->batch->Step();
  for (int s = 0; s < 3; ++s) EXPECT_EQ(made->sinks[s]->error_code(), absl::StatusCode::kCancelled);
  EXPECT_GT(made->sinks[0]->speculation().proposed, 0);
  EXPECT_EQ(made->sinks[2]->speculation().proposed, 0);  // opted out
  EXPECT_EQ(made->cache->pool().n_free(), 32);
}

}  // namespace
}  // namespace baton::decode_worker
