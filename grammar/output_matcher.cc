#include "grammar/output_matcher.h"

#include <algorithm>
#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"
#include "dlpack/dlpack.h"

namespace baton::grammar {

OutputMatcher::OutputMatcher(std::shared_ptr<const CompiledOutputGrammar> grammar, int32_t n_vocab)
    : grammar_(std::move(grammar)),
      matcher_(grammar_->compiled),
      n_vocab_(n_vocab),
      bitmask_(xgrammar::GetBitmaskSize(n_vocab)) {}

absl::StatusOr<std::unique_ptr<OutputMatcher>> OutputMatcher::Create(
    std::shared_ptr<const CompiledOutputGrammar> grammar, int32_t n_vocab,
    std::span<const engine::TokenId> output) {
  std::unique_ptr<OutputMatcher> matcher;
  try {
    matcher.reset(new OutputMatcher(std::move(grammar), n_vocab));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("output grammar: ", e.what()));
  }
  for (size_t i = 0; i < output.size(); ++i) {
    if (absl::Status s = matcher->Accept(output[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the output so far does not match its constraint at token ", i, ": ", s.message()));
    }
  }
  return matcher;
}

bool OutputMatcher::MaskLogits(std::span<float> logits) {
  if (matcher_.IsTerminated()) return false;
  int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
  DLTensor tensor{};
  tensor.data = bitmask_.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = shape;
  if (!matcher_.FillNextTokenBitmask(&tensor)) return true;  // every token allowed
  const size_t n = std::min(logits.size(), static_cast<size_t>(n_vocab_));
  bool any = false;
  for (size_t word = 0; word * 32 < n; ++word) {
    const uint32_t allowed = static_cast<uint32_t>(bitmask_[word]);
    any |= allowed != 0;
  }
  if (!any) return false;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t word = 0; word * 32 < n; ++word) {
    const uint32_t allowed = static_cast<uint32_t>(bitmask_[word]);
    if (allowed == ~uint32_t{0}) continue;
    const size_t begin = word * 32;
    const size_t end = std::min(n, begin + 32);
    if (allowed == 0) {  // the common case once the grammar narrows: a run of forbidden tokens
      std::fill(logits.begin() + begin, logits.begin() + end, kMasked);
      continue;
    }
    for (size_t id = begin; id < end; ++id) {
      if (!((allowed >> (id - begin)) & 1u)) logits[id] = kMasked;
    }
  }
  return true;
}

absl::Status OutputMatcher::Accept(engine::TokenId token) {
  if (token < 0 || token >= n_vocab_) {
    return absl::FailedPreconditionError(
        absl::StrCat("token ", token, " is outside the vocabulary"));
  }
  bool accepted = false;
  try {
    accepted = !matcher_.IsTerminated() && matcher_.AcceptToken(token);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat("token ", token, ": ", e.what()));
  }
  if (!accepted) {
    return absl::FailedPreconditionError(
        absl::StrCat("token ", token, " is not allowed by the output grammar here"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<OutputMatcher>> StartOutputMatcher(
    OutputGrammarCompiler* compiler, const engine::OutputConstraint& constraint,
    std::span<const engine::TokenId> prompt, std::span<const engine::TokenId> generated) {
  if (constraint.kind == engine::OutputConstraint::Kind::kNone) return nullptr;
  if (compiler == nullptr) {
    return absl::FailedPreconditionError("this worker serves no structured output");
  }
  const size_t n_output = static_cast<size_t>(constraint.n_output_in_prompt);
  if (n_output > prompt.size()) {
    return absl::InvalidArgumentError(absl::StrCat("output constraint n_output_in_prompt ",
                                                   n_output, " exceeds the prompt's ",
                                                   prompt.size(), " tokens"));
  }
  absl::StatusOr<std::shared_ptr<const CompiledOutputGrammar>> grammar =
      compiler->Compile(constraint);
  if (!grammar.ok()) return grammar.status();
  std::vector<engine::TokenId> output(prompt.end() - n_output, prompt.end());
  output.insert(output.end(), generated.begin(), generated.end());
  return OutputMatcher::Create(*std::move(grammar), compiler->n_vocab(), output);
}

}  // namespace baton::grammar
