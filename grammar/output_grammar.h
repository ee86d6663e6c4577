// Structured output's grammars: an engine::OutputConstraint (JSON object, JSON schema, regular
// expression, EBNF grammar, choice list) compiled, with xgrammar, into a grammar over one model's
// vocabulary, from which OutputMatcher (output_matcher.h) computes each step's allowed tokens.
//
// The vocabulary the grammar sees is the text each token puts in the output
// (Tokenizer::TokenToPiece), so a constraint judges exactly the bytes the client receives. Control
// tokens have no text there and are never allowed; the end-of-generation tokens are allowed only
// where the output is complete, and are then the only ones allowed.
//
// JSON is generated compactly, as Python's json.dumps writes it (", " and ": " separators, no
// other whitespace): small models given free whitespace tend to spend their tokens on it.
//
// Thread-safety: CheckOutputConstraint and OutputGrammarCompiler are safe from any thread;
// compiled grammars are immutable and shared.
#ifndef BATON_GRAMMAR_OUTPUT_GRAMMAR_H_
#define BATON_GRAMMAR_OUTPUT_GRAMMAR_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/sampling_params.h"
#include "engine/tokenizer.h"
#include "xgrammar/compiler.h"

namespace baton::grammar {

// Whether the constraint's text parses (the schema, regular expression or grammar), without a
// vocabulary: what the router checks before it sends a request on. INVALID_ARGUMENT quoting the
// grammar engine's message, e.g. "response_format json_schema: ...". OK for kind kNone.
absl::Status CheckOutputConstraint(const engine::OutputConstraint& constraint);

// A constraint compiled for one vocabulary: its grammar and the token masks precomputed for it.
struct CompiledOutputGrammar {
  xgrammar::CompiledGrammar compiled;
};

class OutputGrammarCompiler {
 public:
  // Compiled grammars kept, by their text, within this many bytes (least recently used go first).
  static constexpr int64_t kCacheBytes = int64_t{256} << 20;

  // `n_vocab`: the model's logits per row (at least the tokenizer's vocabulary; the ids beyond it
  // are never allowed). The tokenizer must outlive nothing here: its pieces are copied.
  OutputGrammarCompiler(const engine::Tokenizer& tokenizer, int32_t n_vocab);

  // The constraint compiled, from the cache when the same text was compiled before. Slow the
  // first time (tens to hundreds of milliseconds for a schema on a large vocabulary): call it
  // off the engine loop. INVALID_ARGUMENT as CheckOutputConstraint; kind kNone is a programmer
  // error.
  absl::StatusOr<std::shared_ptr<const CompiledOutputGrammar>> Compile(
      const engine::OutputConstraint& constraint);

  int32_t n_vocab() const { return n_vocab_; }

 private:
  const int32_t n_vocab_;
  xgrammar::GrammarCompiler compiler_;
};

}  // namespace baton::grammar

#endif  // BATON_GRAMMAR_OUTPUT_GRAMMAR_H_
