#include "rpc/sampling_params_proto.h"

#include <algorithm>

namespace baton::rpc {
namespace {

engine::OutputConstraint ConstraintFromProto(const baton::v1::OutputConstraint& proto) {
  using Kind = engine::OutputConstraint::Kind;
  engine::OutputConstraint c;
  switch (proto.kind_case()) {
    case baton::v1::OutputConstraint::kJsonObject:
      c.kind = proto.json_object() ? Kind::kJsonObject : Kind::kNone;
      break;
    case baton::v1::OutputConstraint::kJsonSchema:
      c.kind = Kind::kJsonSchema;
      c.text = proto.json_schema();
      break;
    case baton::v1::OutputConstraint::kRegex:
      c.kind = Kind::kRegex;
      c.text = proto.regex();
      break;
    case baton::v1::OutputConstraint::kGrammar:
      c.kind = Kind::kGrammar;
      c.text = proto.grammar();
      break;
    case baton::v1::OutputConstraint::kChoice:
      c.kind = Kind::kChoice;
      c.choices.assign(proto.choice().choices().begin(), proto.choice().choices().end());
      break;
    case baton::v1::OutputConstraint::KIND_NOT_SET:
      break;
  }
  c.strict = proto.strict();
  c.n_output_in_prompt = proto.n_output_in_prompt();
  return c;
}

void ConstraintToProto(const engine::OutputConstraint& c, baton::v1::OutputConstraint& proto) {
  using Kind = engine::OutputConstraint::Kind;
  switch (c.kind) {
    case Kind::kNone:
      return;
    case Kind::kJsonObject:
      proto.set_json_object(true);
      break;
    case Kind::kJsonSchema:
      proto.set_json_schema(c.text);
      break;
    case Kind::kRegex:
      proto.set_regex(c.text);
      break;
    case Kind::kGrammar:
      proto.set_grammar(c.text);
      break;
    case Kind::kChoice:
      for (const std::string& choice : c.choices) proto.mutable_choice()->add_choices(choice);
      break;
  }
  proto.set_strict(c.strict);
  proto.set_n_output_in_prompt(c.n_output_in_prompt);
}

}  // namespace

absl::StatusOr<engine::SamplingParams> SamplingParamsFromProto(
    const baton::v1::SamplingParams& proto, int32_t n_vocab, uint64_t default_seed) {
  engine::SamplingParams p;
  p.temperature = proto.temperature();
  p.top_k = proto.top_k();
  p.top_p = proto.top_p() == 0 ? 1.0f : proto.top_p();
  p.min_p = proto.min_p();
  p.repetition_penalty = proto.repetition_penalty() == 0 ? 1.0f : proto.repetition_penalty();
  p.frequency_penalty = proto.frequency_penalty();
  p.presence_penalty = proto.presence_penalty();
  p.seed = proto.has_seed() ? proto.seed() : default_seed;
  p.max_tokens = proto.max_tokens() == 0 ? 256 : proto.max_tokens();
  p.stop_token_ids.assign(proto.stop_token_ids().begin(), proto.stop_token_ids().end());
  p.stop_strings.assign(proto.stop().begin(), proto.stop().end());
  p.ignore_eos = proto.ignore_eos();
  p.speculative = !proto.disable_speculation();
  p.logprobs = proto.has_logprobs() ? proto.logprobs() : -1;
  p.prompt_logprobs = proto.has_prompt_logprobs() ? proto.prompt_logprobs() : -1;
  p.skip_special_tokens = !proto.has_skip_special_tokens() || proto.skip_special_tokens();
  for (const auto& [token, bias] : proto.logit_bias()) {
    p.logit_bias.push_back({.token = token, .bias = bias});
  }
  p.constraint = ConstraintFromProto(proto.constraint());
  // The map's order is unspecified; the engine's is the tokens'.
  std::sort(p.logit_bias.begin(), p.logit_bias.end(),
            [](const engine::LogitBias& a, const engine::LogitBias& b) {
              return a.token < b.token;
            });
  if (absl::Status s = engine::ValidateSamplingParams(p, n_vocab); !s.ok()) return s;
  return p;
}

baton::v1::SamplingParams SamplingParamsToProto(const engine::SamplingParams& p) {
  baton::v1::SamplingParams proto;
  proto.set_temperature(p.temperature);
  proto.set_top_k(p.top_k);
  proto.set_top_p(p.top_p);
  proto.set_min_p(p.min_p);
  proto.set_repetition_penalty(p.repetition_penalty);
  proto.set_frequency_penalty(p.frequency_penalty);
  proto.set_presence_penalty(p.presence_penalty);
  proto.set_seed(p.seed);
  proto.set_max_tokens(p.max_tokens);
  for (int32_t id : p.stop_token_ids) proto.add_stop_token_ids(id);
  for (const std::string& s : p.stop_strings) proto.add_stop(s);
  proto.set_ignore_eos(p.ignore_eos);
  proto.set_disable_speculation(!p.speculative);
  if (p.logprobs >= 0) proto.set_logprobs(p.logprobs);
  if (p.prompt_logprobs >= 0) proto.set_prompt_logprobs(p.prompt_logprobs);
  if (!p.skip_special_tokens) proto.set_skip_special_tokens(false);
  for (const engine::LogitBias& b : p.logit_bias) (*proto.mutable_logit_bias())[b.token] = b.bias;
  if (p.constraint.kind != engine::OutputConstraint::Kind::kNone) {
    ConstraintToProto(p.constraint, *proto.mutable_constraint());
  }
  return proto;
}

}  // namespace baton::rpc
