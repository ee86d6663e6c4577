#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace baton::engine {
namespace {

absl::Status Invalid(const char* field, const char* requirement, float value) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling parameter ", field, " must be ", requirement, ", got ", value));
}

absl::Status Invalid(const char* field, const char* requirement, int64_t value) {
  return absl::InvalidArgumentError(
      absl::StrCat("sampling parameter ", field, " must be ", requirement, ", got ", value));
}

absl::Status ValidateLogitBias(const std::vector<LogitBias>& logit_bias, int32_t n_vocab) {
  if (logit_bias.size() > kMaxLogitBiasTokens) {
    return absl::InvalidArgumentError(absl::StrCat("sampling parameter logit_bias has ",
                                                   logit_bias.size(), " tokens, at most ",
                                                   kMaxLogitBiasTokens, " are allowed"));
  }
  std::vector<int32_t> tokens;
  tokens.reserve(logit_bias.size());
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const LogitBias& b = logit_bias[i];
    if (b.token < 0 || b.token >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("sampling parameter logit_bias[", i,
                                                     "] token must be in [0, ", n_vocab,
                                                     "), got ", b.token));
    }
    if (!(b.bias >= -kMaxLogitBias && b.bias <= kMaxLogitBias)) {
      return absl::InvalidArgumentError(absl::StrCat("sampling parameter logit_bias[", i,
                                                     "] bias must be in [-100, 100], got ",
                                                     b.bias));
    }
    tokens.push_back(b.token);
  }
  std::sort(tokens.begin(), tokens.end());
  if (auto twice = std::adjacent_find(tokens.begin(), tokens.end()); twice != tokens.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling parameter logit_bias names token ", *twice, " twice"));
  }
  return absl::OkStatus();
}

// The limits on a constraint's size; whether its text parses is the grammar engine's to say
// (grammar/output_grammar.h).
absl::Status ValidateOutputConstraint(const OutputConstraint& c) {
  using Kind = OutputConstraint::Kind;
  const std::string name(OutputConstraintKindName(c.kind));
  if (c.n_output_in_prompt < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output constraint n_output_in_prompt must be >= 0, got ", c.n_output_in_prompt));
  }
  if (c.kind == Kind::kJsonSchema || c.kind == Kind::kRegex || c.kind == Kind::kGrammar) {
    if (c.text.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("output constraint ", name, " is empty"));
    }
    if (c.text.size() > kMaxOutputConstraintBytes) {
      return absl::InvalidArgumentError(absl::StrCat("output constraint ", name, " has ",
                                                     c.text.size(), " bytes, at most ",
                                                     kMaxOutputConstraintBytes, " are allowed"));
    }
  }
  if (c.kind != Kind::kChoice) return absl::OkStatus();
  if (c.choices.empty() || c.choices.size() > kMaxOutputChoices) {
    return absl::InvalidArgumentError(absl::StrCat("output constraint choice has ",
                                                   c.choices.size(), " entries, it must have 1 to ",
                                                   kMaxOutputChoices));
  }
  for (size_t i = 0; i < c.choices.size(); ++i) {
    if (c.choices[i].empty() || c.choices[i].size() > kMaxOutputChoiceBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("output constraint choice[", i, "] has ", c.choices[i].size(),
                       " bytes, it must have 1 to ", kMaxOutputChoiceBytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view OutputConstraintKindName(OutputConstraint::Kind kind) {
  switch (kind) {
    case OutputConstraint::Kind::kNone:
      return "none";
    case OutputConstraint::Kind::kJsonObject:
      return "json_object";
    case OutputConstraint::Kind::kJsonSchema:
      return "json_schema";
    case OutputConstraint::Kind::kRegex:
      return "regex";
    case OutputConstraint::Kind::kGrammar:
      return "grammar";
    case OutputConstraint::Kind::kChoice:
      return "choice";
  }
  return "unknown";
}

absl::Status ValidateSamplingParams(const SamplingParams& params, int32_t n_vocab) {
  if (n_vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_vocab must be > 0, got ", n_vocab));
  }
  // NaN fails every comparison, so each check below is written to reject it.
  if (!(params.temperature >= 0.0f) || std::isinf(params.temperature)) {
    return Invalid("temperature", "finite and >= 0", params.temperature);
  }
  if (params.top_k < 0) return Invalid("top_k", ">= 0 (0 = off)", int64_t{params.top_k});
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return Invalid("top_p", "in (0, 1]", params.top_p);
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return Invalid("min_p", "in [0, 1]", params.min_p);
  }
  if (!(params.repetition_penalty > 0.0f) || std::isinf(params.repetition_penalty)) {
    return Invalid("repetition_penalty", "finite and > 0", params.repetition_penalty);
  }
  if (!(params.frequency_penalty >= kMinPenalty && params.frequency_penalty <= kMaxPenalty)) {
    return Invalid("frequency_penalty", "in [-2, 2]", params.frequency_penalty);
  }
  if (!(params.presence_penalty >= kMinPenalty && params.presence_penalty <= kMaxPenalty)) {
    return Invalid("presence_penalty", "in [-2, 2]", params.presence_penalty);
  }
  if (params.penalty_last_n < -1) {
    return Invalid("penalty_last_n", ">= -1 (-1 = whole context)", int64_t{params.penalty_last_n});
  }
  if (params.max_tokens < 1) return Invalid("max_tokens", ">= 1", int64_t{params.max_tokens});
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    const int32_t id = params.stop_token_ids[i];
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat("sampling parameter stop_token_ids[", i,
                                                     "] must be in [0, ", n_vocab, "), got ", id));
    }
  }
  if (params.stop_strings.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(absl::StrCat("sampling parameter stop_strings has ",
                                                   params.stop_strings.size(),
                                                   " entries, at most ", kMaxStopStrings,
                                                   " are allowed"));
  }
  for (size_t i = 0; i < params.stop_strings.size(); ++i) {
    if (params.stop_strings[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling parameter stop_strings[", i, "] must not be empty"));
    }
    if (params.stop_strings[i].size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampling parameter stop_strings[", i, "] has ", params.stop_strings[i].size(),
          " bytes, at most ", kMaxStopStringBytes, " are allowed"));
    }
  }
  if (absl::Status s = ValidateLogitBias(params.logit_bias, n_vocab); !s.ok()) return s;
  if (params.logprobs < -1 || params.logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(absl::StrCat("sampling parameter logprobs must be in [0, ",
                                                   kMaxLogprobs, "] (or -1 = off), got ",
                                                   params.logprobs));
  }
  if (params.prompt_logprobs < -1 || params.prompt_logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling parameter prompt_logprobs must be in [0, ", kMaxLogprobs,
                     "] (or -1 = off), got ", params.prompt_logprobs));
  }
  return ValidateOutputConstraint(params.constraint);
}

}  // namespace baton::engine
