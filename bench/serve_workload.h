// The requests of a `baton bench serve` load: read from a JSONL dataset, or synthetic prompts of a
// given token length built from repeated common words.
//
// Synthetic prompts are text (so that gRPC and HTTP send the same thing) and the client has no
// tokenizer, so their length in tokens is calibrated against the server once (two probe requests:
// the word list once and twice gives tokens per word and the fixed overhead, e.g. a BOS token), and
// every request's actual length is checked afterwards against usage.prompt_tokens.
//
// Thread-safety: pure functions and value types.
#ifndef BATON_BENCH_SERVE_WORKLOAD_H_
#define BATON_BENCH_SERVE_WORKLOAD_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::bench {

struct ServeRequest {
  std::string prompt;
  int32_t max_tokens = 0;
  int32_t target_prompt_tokens = 0;  // 0: not known in advance (a dataset prompt)
};

// One request per non-blank line: {"prompt": "...", "max_tokens": N} (max_tokens >= 1;
// `default_max_tokens` when absent). INVALID_ARGUMENT naming the line for anything else.
absl::StatusOr<std::vector<ServeRequest>> ParseJsonlDataset(absl::string_view text,
                                                            int32_t default_max_tokens);
absl::StatusOr<std::vector<ServeRequest>> LoadJsonlDataset(const std::string& path,
                                                           int32_t default_max_tokens);

// n requests from `dataset`: a seeded shuffle, repeated as often as needed.
std::vector<ServeRequest> SampleDataset(const std::vector<ServeRequest>& dataset, int32_t n,
                                        std::mt19937_64& rng);

// The words synthetic prompts are made of (each one token with its leading space in the usual
// byte-level BPE vocabularies; calibration measures what they really are).
const std::vector<std::string>& PromptWords();

// " w1 w2 ... wn": n words drawn from PromptWords().
std::string WordsPrompt(int32_t n_words, std::mt19937_64& rng);
// Every word of PromptWords() in order, `times` times over: the calibration probe.
std::string CalibrationPrompt(int32_t times);

// How many tokens a prompt of n words has: overhead + tokens_per_word * n.
struct PromptCalibration {
  double tokens_per_word = 1;
  int32_t overhead_tokens = 0;
  bool measured = false;
};

// From the prompt lengths of CalibrationPrompt(1) and CalibrationPrompt(2). INVALID_ARGUMENT when
// they make no sense (the second not longer than the first).
absl::StatusOr<PromptCalibration> CalibrationFromProbes(int32_t tokens_once, int32_t tokens_twice);

// Words for a prompt of `target_tokens` tokens (at least 1).
int32_t WordsForTokens(int32_t target_tokens, const PromptCalibration& calibration);

// n synthetic requests: input lengths uniform around input_len and output lengths around
// output_len (range_ratio as in UniformLengths), prompts of random words.
std::vector<ServeRequest> SyntheticRequests(int32_t n, int32_t input_len, int32_t output_len,
                                            double range_ratio,
                                            const PromptCalibration& calibration,
                                            std::mt19937_64& rng);

// A multi-turn conversation: turn t's prompt is the system prompt, then every earlier turn's user
// text and answer, then its own user text (ConversationPrompt), so each turn repeats all of the
// last one's prompt and answer: what prefix caching serves.
struct Conversation {
  std::string system;
  std::vector<std::string> user_turns;
  int32_t max_tokens = 0;  // per answer
};

// The prompt of the turn after `history` (the system prompt and the turns so far, with their
// answers; ConversationHistory) that says `user`.
std::string ConversationPrompt(const std::string& history, const std::string& user);
// `prompt` (a ConversationPrompt) followed by its answer: the next turn's history.
std::string ConversationHistory(const std::string& prompt, const std::string& answer);

// n conversations of `turns` turns sharing one system prompt of `system_tokens` tokens, each turn
// adding `turn_tokens` tokens of user text (random words) and an answer of `output_len` tokens.
std::vector<Conversation> SyntheticConversations(int32_t n, int32_t turns, int32_t system_tokens,
                                                 int32_t turn_tokens, int32_t output_len,
                                                 const PromptCalibration& calibration,
                                                 std::mt19937_64& rng);

}  // namespace baton::bench

#endif  // BATON_BENCH_SERVE_WORKLOAD_H_
