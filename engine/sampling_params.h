// The per-request settings that control how the next token is chosen from the model's logits
// (see engine/sampler.h for the order they are applied in) and when generation ends.
//
// Field meanings follow llama.cpp's sampler settings and the OpenAI API: the same request sent
// to baton and to either of those means the same thing. A request's SamplingParams are checked
// once, at intake, with ValidateSamplingParams(); the sampler assumes they passed.
//
// Thread-safety: a plain value type.
#ifndef BATON_ENGINE_SAMPLING_PARAMS_H_
#define BATON_ENGINE_SAMPLING_PARAMS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace baton::engine {

// Limits that ValidateSamplingParams enforces.
inline constexpr int32_t kMaxStopStrings = 16;
// Bytes per stop string at most (the stop matcher holds back that much text while it streams).
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr float kMinPenalty = -2.0f;  // frequency/presence penalty range (OpenAI's)
inline constexpr float kMaxPenalty = 2.0f;
// The default seed. A request that sets none is therefore reproducible too; a server that wants
// unseeded requests to differ draws a fresh seed per request before sampling.
inline constexpr uint64_t kDefaultSamplingSeed = 0xBA70;
// Generated tokens at most when a request sets none (OpenAI's API leaves it to the server).
inline constexpr int32_t kDefaultMaxTokens = 256;
// OpenAI's logit_bias limits: biases in [-100, 100], at most this many tokens biased.
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr size_t kMaxLogitBiasTokens = 300;
// Most likely tokens a request may ask to see at each position (OpenAI's top_logprobs; vLLM's
// default max_logprobs).
inline constexpr int32_t kMaxLogprobs = 20;
// Structured output's limits: bytes of a schema, regular expression or grammar; choices, and
// bytes of each.
inline constexpr size_t kMaxOutputConstraintBytes = 64 * 1024;
inline constexpr size_t kMaxOutputChoices = 256;
inline constexpr size_t kMaxOutputChoiceBytes = 1024;

struct LogitBias {
  int32_t token = 0;
  float bias = 0.0f;
};

// Structured output: what the generated text must match (vLLM's structured_outputs, OpenAI's
// response_format). Every token drawn is drawn among those that keep the text a prefix of some
// string the constraint accepts (grammar/output_matcher.h); once the text is complete only the
// end-of-generation tokens are allowed.
struct OutputConstraint {
  enum class Kind {
    kNone,        // unconstrained
    kJsonObject,  // any JSON object (response_format json_object)
    kJsonSchema,  // `text` is a JSON schema; `strict`: no properties beyond those it names
    kRegex,       // `text` is a regular expression the whole output matches
    kGrammar,     // `text` is an EBNF grammar (xgrammar's GBNF dialect) whose rule `root` starts
    kChoice,      // the output is exactly one of `choices`
  };
  Kind kind = Kind::kNone;
  std::string text;
  std::vector<std::string> choices;
  bool strict = false;
  // How many of the prompt's last tokens are output already (a request that migrated after
  // generating them): the constraint applies from the first of them. 0 for a fresh request.
  int32_t n_output_in_prompt = 0;
};

std::string_view OutputConstraintKindName(OutputConstraint::Kind kind);  // "json_schema", ...

struct SamplingParams {
  // Divides the logits after filtering. 0 = greedy (argmax, lowest id wins ties).
  float temperature = 1.0f;
  // Keep only the k highest logits. 0 = off. 1 = greedy. Values above n_vocab act as off.
  int32_t top_k = 0;
  // Nucleus: keep the smallest set of highest-probability tokens whose probabilities (at
  // temperature 1) add up to at least top_p. 1 = off. In (0, 1].
  float top_p = 1.0f;
  // Keep only tokens whose probability (at temperature 1) is at least min_p times the most likely
  // token's. 0 = off. In [0, 1].
  float min_p = 0.0f;
  // llama.cpp's repetition penalty on tokens seen in the penalty window: positive logits are
  // divided by it, negative ones multiplied. 1 = off. > 0.
  float repetition_penalty = 1.0f;
  // OpenAI's penalties on tokens seen in the penalty window: the logit loses
  // frequency_penalty * count + presence_penalty * (count > 0). 0 = off. In [-2, 2].
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // How many of the most recent tokens (prompt + generated) the penalties look at.
  // -1 = the whole context, 0 = penalties off.
  int32_t penalty_last_n = 64;
  // Key of the counter-based random stream: the token drawn at a position depends only on
  // (seed, position, logits, previous tokens, the settings above).
  uint64_t seed = kDefaultSamplingSeed;
  // Generated tokens at most (the stop token, when one ends generation, counts). >= 1.
  int32_t max_tokens = kDefaultMaxTokens;
  // Generation stops after any of these tokens (in addition to end-of-generation tokens unless
  // ignore_eos). Each in [0, n_vocab).
  std::vector<int32_t> stop_token_ids = {};
  // Generation stops when the text contains any of these; the stop string is not returned
  // (engine/stop_matcher.h). At most kMaxStopStrings, none empty, none over kMaxStopStringBytes.
  std::vector<std::string> stop_strings = {};
  // Keep generating past the model's end-of-generation tokens (benchmarks).
  bool ignore_eos = false;
  // May the decode worker speculate for this request (when it is set up to)? The output is the
  // same either way; false opts out, e.g. to measure plain decoding beside speculative.
  bool speculative = true;
  // Report each generated token's log-probability and those of the `logprobs` most likely tokens
  // at its position (engine::LogprobsOf). -1 = off; else in [0, kMaxLogprobs].
  int32_t logprobs = -1;
  // Report every prompt token's log-probability after the first, with those of the
  // `prompt_logprobs` most likely tokens at its position (vLLM's prompt_logprobs; OpenAI's
  // `echo` with `logprobs`). -1 = off; else in [0, kMaxLogprobs]. The prefill worker computes
  // the logits of every prompt position for it and so takes nothing from its prefix cache.
  int32_t prompt_logprobs = -1;
  // Whether control tokens the model generates are left out of the output's text (vLLM's
  // skip_special_tokens; the router's detokenizer reads it). A stop token's text never is in it.
  bool skip_special_tokens = true;
  // Added to these tokens' logits before anything else (the penalties included), as OpenAI's and
  // llama.cpp's logit_bias: -100 all but bans a token, 100 all but forces it. Each token in
  // [0, n_vocab) at most once, each bias in [-100, 100], at most kMaxLogitBiasTokens of them.
  // Log-probabilities (logprobs) are those of the logits before it.
  std::vector<LogitBias> logit_bias = {};
  // What the output must match; kind kNone: anything.
  OutputConstraint constraint = {};
};

// OK when `params` is usable with a model of `n_vocab` tokens; otherwise INVALID_ARGUMENT whose
// message names the first offending field and its value, e.g. "top_p must be in (0, 1], got 0".
absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t n_vocab);

}  // namespace baton::engine

#endif  // BATON_ENGINE_SAMPLING_PARAMS_H_
