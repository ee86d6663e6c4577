// Structured output's per-token work, micro-benchmarked on the default model's vocabulary (49,152
// tokens; run from the repository root, which holds models/): OutputMatcher::MaskLogits for the
// JSON schema of bench/datasets/person_schema.json at five places of its output (the object's
// start, inside a string value, an integer, a string with a pattern, an array), each iteration on a
// fresh copy of the logits; BM_CopyLogits is that copy alone (subtract it). A decode step masks
// once per constrained sequence, spread over the host threads. BM_AcceptInString: advancing past
// the token drawn.
#include <benchmark/benchmark.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "grammar/output_grammar.h"
#include "grammar/output_matcher.h"

namespace baton::grammar {
namespace {

constexpr char kModel[] = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr char kSchema[] = "bench/datasets/person_schema.json";

struct Setup {
  std::unique_ptr<engine::Tokenizer> tokenizer;
  std::unique_ptr<OutputGrammarCompiler> compiler;
  std::shared_ptr<const CompiledOutputGrammar> grammar;
};

const Setup& Shared() {
  static const Setup* setup = [] {
    auto* s = new Setup;
    s->tokenizer = *engine::Tokenizer::Load(kModel);
    s->compiler =
        std::make_unique<OutputGrammarCompiler>(*s->tokenizer, s->tokenizer->vocab().size());
    std::ifstream in(kSchema);
    engine::OutputConstraint schema{.kind = engine::OutputConstraint::Kind::kJsonSchema,
                                    .text = std::string(std::istreambuf_iterator<char>(in), {}),
                                    .strict = true};
    s->grammar = *s->compiler->Compile(schema);
    return s;
  }();
  return *setup;
}

void Mask(benchmark::State& state, const std::string& output_so_far) {
  const Setup& s = Shared();
  const std::vector<engine::TokenId> output = s.tokenizer->Encode(output_so_far, {});
  std::unique_ptr<OutputMatcher> matcher =
      *OutputMatcher::Create(s.grammar, s.compiler->n_vocab(), output);
  const std::vector<float> logits(s.compiler->n_vocab(), 1.0f);
  std::vector<float> work;
  for (auto _ : state) {
    work = logits;
    benchmark::DoNotOptimize(matcher->MaskLogits(work));
  }
}

// Advancing the grammar past one token (then rolled back: xgrammar's own matcher, as
// OutputMatcher holds it) inside a string value.
void BM_AcceptInString(benchmark::State& state) {
  const Setup& s = Shared();
  xgrammar::GrammarMatcher matcher(s.grammar->compiled);
  for (engine::TokenId id : s.tokenizer->Encode(R"({"name": "Ada Lo)", {})) {
    matcher.AcceptToken(id);
  }
  const engine::TokenId next = s.tokenizer->Encode("vel", {})[0];
  for (auto _ : state) {
    benchmark::DoNotOptimize(matcher.AcceptToken(next));
    matcher.Rollback(1);
  }
}

void BM_CopyLogits(benchmark::State& state) {
  const std::vector<float> logits(Shared().compiler->n_vocab(), 1.0f);
  std::vector<float> work;
  for (auto _ : state) {
    work = logits;
    benchmark::DoNotOptimize(work.data());
  }
}
void BM_MaskObjectStart(benchmark::State& state) { Mask(state, ""); }
void BM_MaskInString(benchmark::State& state) { Mask(state, R"({"name": "Ada Lo)"); }
void BM_MaskInInteger(benchmark::State& state) { Mask(state, R"({"name": "Ada", "age": 3)"); }
void BM_MaskInPattern(benchmark::State& state) {
  Mask(state, R"({"name": "Ada", "age": 30, "email": "ada.lo)");
}
void BM_MaskInArray(benchmark::State& state) {
  Mask(state,
       R"({"name": "Ada", "age": 30, "email": "a@b.io", "city": "Rome", "skills": ["c++", )");
}

BENCHMARK(BM_CopyLogits)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskObjectStart)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskInString)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskInInteger)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskInPattern)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskInArray)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AcceptInString)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace baton::grammar
