#include "grammar/output_grammar.h"

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "xgrammar/grammar.h"
#include "xgrammar/tokenizer_info.h"

namespace baton::grammar {
namespace {

using Kind = engine::OutputConstraint::Kind;

// json_object: a JSON schema for any object.
constexpr char kAnyObjectSchema[] = R"({"type": "object"})";

// A choice list as an EBNF grammar: root ::= "first" | "second" | ...
std::string ChoiceGrammar(const std::vector<std::string>& choices) {
  std::string ebnf = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) ebnf += " | ";
    ebnf += '"';
    for (const unsigned char c : choices[i]) {
      if (c == '"' || c == '\\') {
        ebnf += '\\';
        ebnf += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7f) {
        ebnf += absl::StrFormat("\\x%02x", c);
      } else {
        ebnf += static_cast<char>(c);  // UTF-8 passes as it is
      }
    }
    ebnf += '"';
  }
  return ebnf;
}

// The grammar engine's exception as INVALID_ARGUMENT naming the constraint.
absl::Status Invalid(const engine::OutputConstraint& constraint, const std::exception& e) {
  return absl::InvalidArgumentError(absl::StrCat(
      "output constraint ", std::string(engine::OutputConstraintKindName(constraint.kind)),
      " does not compile: ", e.what()));
}

// `n_vocab`: at least the tokenizer's vocabulary (the ids beyond it are never allowed).
xgrammar::TokenizerInfo TokenizerInfoOf(const engine::Tokenizer& tokenizer, int32_t n_vocab) {
  const int32_t n_tokens = tokenizer.vocab().size();
  std::vector<std::string> pieces(n_tokens);
  std::vector<int32_t> stop_tokens;
  for (int32_t id = 0; id < n_tokens; ++id) {
    if (tokenizer.IsEndOfGeneration(id)) {
      stop_tokens.push_back(id);
    } else {
      pieces[id] = tokenizer.TokenToPiece(id);  // "" for control tokens: never allowed
    }
  }
  return xgrammar::TokenizerInfo(pieces, xgrammar::VocabType::RAW, n_vocab, stop_tokens);
}

int CompileThreads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / 2));
}

}  // namespace

absl::Status CheckOutputConstraint(const engine::OutputConstraint& constraint) {
  try {
    switch (constraint.kind) {
      case Kind::kNone:
      case Kind::kJsonObject:
        return absl::OkStatus();
      case Kind::kJsonSchema:
        xgrammar::Grammar::FromJSONSchema(constraint.text, /*any_whitespace=*/false, std::nullopt,
                                          std::nullopt, constraint.strict);
        return absl::OkStatus();
      case Kind::kRegex:
        xgrammar::Grammar::FromRegex(constraint.text);
        return absl::OkStatus();
      case Kind::kGrammar:
        xgrammar::Grammar::FromEBNF(constraint.text);
        return absl::OkStatus();
      case Kind::kChoice:
        xgrammar::Grammar::FromEBNF(ChoiceGrammar(constraint.choices));
        return absl::OkStatus();
    }
  } catch (const std::exception& e) {
    return Invalid(constraint, e);
  }
  return absl::OkStatus();
}

OutputGrammarCompiler::OutputGrammarCompiler(const engine::Tokenizer& tokenizer, int32_t n_vocab)
    : n_vocab_(std::max(n_vocab, tokenizer.vocab().size())),
      compiler_(TokenizerInfoOf(tokenizer, n_vocab_), CompileThreads(), /*cache_enabled=*/true,
                kCacheBytes) {}

absl::StatusOr<std::shared_ptr<const CompiledOutputGrammar>> OutputGrammarCompiler::Compile(
    const engine::OutputConstraint& constraint) {
  try {
    switch (constraint.kind) {
      case Kind::kNone:
        break;
      case Kind::kJsonObject:
        return std::make_shared<const CompiledOutputGrammar>(CompiledOutputGrammar{
            compiler_.CompileJSONSchema(kAnyObjectSchema, /*any_whitespace=*/false, std::nullopt,
                                        std::nullopt, /*strict_mode=*/false)});
      case Kind::kJsonSchema:
        return std::make_shared<const CompiledOutputGrammar>(CompiledOutputGrammar{
            compiler_.CompileJSONSchema(constraint.text, /*any_whitespace=*/false, std::nullopt,
                                        std::nullopt, constraint.strict)});
      case Kind::kRegex:
        return std::make_shared<const CompiledOutputGrammar>(
            CompiledOutputGrammar{compiler_.CompileRegex(constraint.text)});
      case Kind::kGrammar:
        return std::make_shared<const CompiledOutputGrammar>(
            CompiledOutputGrammar{compiler_.CompileGrammar(constraint.text, "root")});
      case Kind::kChoice:
        return std::make_shared<const CompiledOutputGrammar>(CompiledOutputGrammar{
            compiler_.CompileGrammar(ChoiceGrammar(constraint.choices), "root")});
    }
  } catch (const std::exception& e) {
    return Invalid(constraint, e);
  }
  return absl::InternalError("no output constraint to compile");
}

}  // namespace baton::grammar
