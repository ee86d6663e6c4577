// Continuous batching: every step runs one forward over all running sequences (each weight read
// once per step serves every sequence), samples each sequence's next token with its own
// parameters, and streams it out. Sequences join as soon as they are admitted and leave when they
// finish or are cancelled; their blocks return to the pool at once.
//
// KV capacity: a sequence gets another block when its next token needs one. When the pool is
// empty, the youngest running sequence is preempted (recompute policy, as vLLM's): its blocks are
// freed, its tokens kept; once blocks are free again the oldest preempted sequence resumes — its
// KV recomputed here by one prefill pass over its tokens — and continues exactly where it stopped
// (kernels are batch-invariant, so not a token changes). Older sequences therefore never wait
// for younger ones.
//
// Speculative decoding (when a proposer is given): a sequence's step feeds its last token and up
// to K proposed tokens as one (k+1)-row entry of the batch; the target's own sampler then draws
// each position in turn (same seed, same position, same previous tokens as plain decoding) and the
// proposals are kept while they equal what it drew (engine/proposer.h: this is the standard
// rejection rule for a deterministic proposer, and the output is token for token what plain
// decoding gives). The rejected positions' KV is forgotten and any block taken for them returned.
// Proposals never preempt: they use only blocks that are free. K adapts per sequence to its
// acceptance (speculation_length.h) and to what a row costs, learned from the steps' own times
// (step_cost_model.h) and weighed against the whole batch's step (BatchTokenCost); steps with
// more than disable_batch_size sequences, and requests that opt out
// (SamplingParams::speculative), decode plainly.
//
// Structured output: a sequence with an output matcher draws each token, proposals' rows included,
// with the logits of the tokens its grammar forbids masked, and advances the matcher past it (a
// proposal the grammar forbids is never drawn, so it is rejected). The matcher ending on an
// end-of-generation token ends the sequence (kStop, ignore_eos or not); a grammar that allows no
// token at all ends it with FAILED_PRECONDITION.
//
// Thread-safety: Admit, Cancel and the counters are thread-safe; Step runs on the engine loop
// thread only (it owns the transformer and the running set).
#ifndef BATON_DECODE_WORKER_DECODE_BATCH_H_
#define BATON_DECODE_WORKER_DECODE_BATCH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "decode_worker/speculation_length.h"
#include "decode_worker/step_cost_model.h"
#include "engine/generation_state.h"
#include "engine/kv_cache.h"
#include "engine/prefix_cache.h"
#include "engine/proposer.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/tokenizer.h"
#include "engine/forward_pass.h"
#include "grammar/output_matcher.h"

namespace baton::decode_worker {

// A sequence's work so far, beyond its tokens.
struct SequenceCounts {
  int32_t proposed = 0;  // speculative decoding: tokens proposed and verified
  int32_t accepted = 0;  // of them, kept
  // Structured output: seconds spent computing its token masks and advancing its grammar.
  double mask_seconds = 0;
};

// Where a sequence's tokens go (the Decode RPC). Called on the engine thread: must not block.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // A generated token: the n_generated-th (the prefill worker's first token counts as 1), its
  // log-probabilities (null unless the request's sampling asked for them) and the sequence's
  // counts so far.
  virtual void OnToken(int32_t token, const engine::TokenLogprobs* logprobs, int32_t n_generated,
                       const SequenceCounts& counts) = 0;
  // The sequence's last call: it ended by the token stop rules (`finish` != kNone,
  // engine::FinishReasonAfterToken), or `error` says why it did not (CANCELLED when cancelled).
  virtual void OnEnd(engine::FinishReason finish, int32_t n_generated,
                     const SequenceCounts& counts, const absl::Status& error) = 0;
};

struct DecodeSequence {
  std::string id;                       // reservation id
  uint64_t arrival = 0;                 // admission order (set by Admit): lower is older
  engine::BlockTable table;             // holds the prompt's KV; room for max_tokens more
  std::vector<engine::TokenId> tokens;  // prompt, then the generated tokens (first token last)
  int32_t n_prompt = 0;
  std::string cache_salt;               // its prefix-cache salt (engine/block_hash.h)
  engine::SamplingParams params;
  // Where the output stands in its constraint (params.constraint), past every generated token;
  // null when unconstrained. Engine thread once admitted.
  std::unique_ptr<grammar::OutputMatcher> output_matcher;
  std::shared_ptr<TokenSink> sink;
  SpeculationLength speculation_length;  // engine thread
  SequenceCounts counts;                 // engine thread
};

struct SpeculationOptions {
  engine::Proposer* proposer = nullptr;  // null: no speculation; must outlive the batch
  int32_t num_speculative_tokens = 4;    // K: tokens proposed per sequence and step at most
  // Steps with more sequences than this decode plainly: verification rows stop being nearly free
  // once the batch itself fills the kernels (vLLM's speculative_disable_by_batch_size).
  int32_t disable_batch_size = 4;
  // c in speculation_length.h: one more verification row plus one proposed token, relative to a
  // plain decode step. Fixed when >= 0. When negative, the row's share is learned from the
  // batch's own steps (step_cost_model.h, from kPriorRowCost) and proposer_cost is added.
  double token_cost = -1;
  // A proposed token's own cost relative to a decode step, with a learned row cost: a draft
  // model's share of the weight bytes; 0 for prompt lookup.
  double proposer_cost = 0;
  // The row cost assumed before the batch has timed steps of different sizes: about an AVX2 row
  // of the default model (AVX-512 rows measure 0.2, scalar ones near 1).
  static constexpr double kPriorRowCost = 0.3;
};

struct DecodeBatchOptions {
  int32_t max_batch = 64;  // sequences per step at most; the rest wait their turn
  SpeculationOptions speculation;
  // Where a sequence that ends or is preempted publishes its full blocks (prompt and generated
  // tokens alike), and where a preempted one looks its KV up again on resuming; null: no prefix
  // caching. Must outlive the batch.
  engine::PrefixCache* prefix_cache = nullptr;
};

class DecodeBatch {
 public:
  DecodeBatch(const engine::Tokenizer* tokenizer, engine::ForwardPass* transformer,
              engine::KvCache* cache, DecodeBatchOptions options);
  ~DecodeBatch();  // frees every block still held

  // Queues a sequence to join at the next step.
  void Admit(DecodeSequence sequence);
  // Stops a sequence (client gone); its blocks are freed at the next step. Returns whether the id
  // was admitted and has not ended yet (waiting, running or preempted); false for an unknown or
  // already ended id, which is then ignored.
  bool Cancel(const std::string& id);
  // Ends every sequence admitted before this call (waiting, running or preempted) at the next
  // step, each sink told `why` (a worker leaving the decode role: the router migrates them).
  void EndAll(const absl::Status& why);

  // Engine thread: admits waiting sequences, runs one decode step. False when idle.
  bool Step();

  int32_t n_running() const { return n_running_.load(); }
  // Admitted but not yet stepped, plus preempted sequences waiting for blocks.
  int32_t n_waiting() const;
  int64_t n_preemptions() const { return n_preemptions_.load(); }
  // Sizes of the batches run so far, for metrics (count of steps at each size is not kept).
  int64_t n_steps() const { return n_steps_.load(); }
  // The recent steps' cost (step_cost_model.h): a one-row step's seconds (0 before any step) and
  // what each further row adds as a share of it.
  double one_row_step_seconds() const { return one_row_step_seconds_.load(); }
  double row_cost() const { return row_cost_.load(); }

 private:
  // Publishes the sequence's full blocks to the prefix cache (if any) and frees its blocks.
  void ReleaseBlocks(DecodeSequence& seq);
  // Frees the sequence's blocks and tells its sink how it ended.
  void Finish(DecodeSequence& seq, engine::FinishReason finish, const absl::Status& error);
  // One sequence's share of a step: its last token, then its proposals (for which room was found
  // without preempting), and how many blocks it held before room was made for them.
  struct StepEntry {
    std::vector<engine::TokenId> fed;
    int32_t blocks_before = 0;
  };
  // The entries of the first n running sequences (proposals only when speculation is on and the
  // step is small enough).
  std::vector<StepEntry> PlanStep(size_t n);
  // c of speculation_length.h for this step: the fixed token_cost, or the learned one.
  double TokenCost() const;
  // Samples the sequence's next tokens from its logits rows (one per fed token, from
  // `first_row`), keeping proposals while they equal what was drawn, and forgets the KV of the
  // rest. Returns how the sequence ended (kNone: it goes on).
  // `drawn`: the first row's draw (DrawFirstTokens), token -1 when it was not drawn.
  // FAILED_PRECONDITION when the sequence's output grammar allows no token.
  absl::StatusOr<engine::FinishReason> AcceptTokens(DecodeSequence& seq, const StepEntry& entry,
                                                    size_t first_row, engine::DrawnToken drawn);
  // Draws sequence `seq`'s token from `logits` (engine::DrawToken), masked by and then advancing
  // its output matcher if it has one; token kDeadEnd when that allows no token.
  static constexpr engine::TokenId kDeadEnd = -2;
  static engine::DrawnToken Draw(engine::Sampler& sampler, DecodeSequence& seq,
                                 std::span<float> logits);
  // Draws the first row of each of the step's n entries at once, spread over the backend's host
  // threads (each sequence's draw depends on nothing but its own row, tokens and seed); token -1
  // where an entry proposed tokens (speculation), whose rows are drawn one after another.
  std::vector<engine::DrawnToken> DrawFirstTokens(const std::vector<StepEntry>& entries);
  // Moves admitted sequences in and applies cancellations (running and preempted).
  void TakeArrivalsAndCancellations();
  // Resumes preempted sequences, oldest first, while the pool has room for them.
  void ResumePreempted();
  // Gives each of the first n running sequences room for its next token, preempting the youngest
  // running sequences as needed. Returns how many of the first n still run (they stay in front).
  size_t MakeRoom(size_t n);
  void Preempt(size_t index);

  const engine::Tokenizer& tokenizer_;
  engine::ForwardPass& transformer_;
  engine::KvCache& cache_;
  const DecodeBatchOptions options_;
  std::vector<engine::Sampler> samplers_;  // one per host thread of the backend

  mutable absl::Mutex mu_;
  std::vector<DecodeSequence> admitted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancelled_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_all_ ABSL_GUARDED_BY(mu_);  // EndAll's, until the next step
  // Ids admitted and not yet ended: what Cancel can find.
  absl::flat_hash_set<std::string> live_ids_ ABSL_GUARDED_BY(mu_);

  std::vector<DecodeSequence> running_;    // engine thread only
  std::vector<DecodeSequence> preempted_;  // engine thread only; oldest first
  std::vector<float> logits_;            // engine thread only
  StepCostModel step_cost_{SpeculationOptions::kPriorRowCost};  // engine thread only
  std::atomic<int32_t> n_running_{0};
  std::atomic<int64_t> n_steps_{0};
  std::atomic<double> one_row_step_seconds_{0};  // step_cost_'s, for other threads
  std::atomic<double> row_cost_{SpeculationOptions::kPriorRowCost};
  std::atomic<int32_t> n_preempted_{0};
  std::atomic<int64_t> n_preemptions_{0};
  uint64_t next_arrival_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace baton::decode_worker

#endif  // BATON_DECODE_WORKER_DECODE_BATCH_H_
