// The output grammars over the default model's vocabulary: what each constraint allows, that a
// walk drawing random tokens among the allowed ones always ends in text the constraint accepts,
// and the errors of constraints that do not compile.
#include "grammar/output_grammar.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/sampling_params.h"
#include "engine/tokenizer.h"
#include "gmock/gmock.h"
#include "grammar/output_matcher.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"

namespace baton::grammar {
namespace {

using engine::OutputConstraint;
using engine::TokenId;
using ::testing::HasSubstr;
using Kind = OutputConstraint::Kind;

OutputConstraint Constraint(Kind kind, std::string text = "", bool strict = false) {
  return {.kind = kind, .text = std::move(text), .strict = strict};
}

class OutputGrammarTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto tokenizer = engine::Tokenizer::Load(test_support::DefaultModelPath());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
    compiler_ = new OutputGrammarCompiler(*tokenizer_, tokenizer_->vocab().size());
  }
  static void TearDownTestSuite() {
    delete compiler_;
    delete tokenizer_;
  }

  static std::unique_ptr<OutputMatcher> Matcher(const OutputConstraint& constraint,
                                                std::vector<TokenId> output = {}) {
    auto compiled = compiler_->Compile(constraint);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    if (!compiled.ok()) return nullptr;
    auto matcher = OutputMatcher::Create(*compiled, compiler_->n_vocab(), output);
    EXPECT_TRUE(matcher.ok()) << matcher.status();
    return matcher.ok() ? std::move(*matcher) : nullptr;
  }

  // The ids MaskLogits leaves allowed (finite), or none when it reports a dead end.
  static std::vector<TokenId> Allowed(OutputMatcher& matcher) {
    std::vector<float> logits(compiler_->n_vocab(), 0.0f);
    if (!matcher.MaskLogits(logits)) return {};
    std::vector<TokenId> allowed;
    for (TokenId id = 0; id < static_cast<TokenId>(logits.size()); ++id) {
      if (std::isfinite(logits[id])) allowed.push_back(id);
    }
    return allowed;
  }

  // Draws uniformly random tokens among the allowed ones until an end-of-generation token (or
  // `max_tokens`); returns the text (empty and a failure when the grammar dead-ends first).
  // `closing_bias` is added to the logits of tokens that hold '"', '}' or ']': a walk under a
  // grammar of unbounded strings and objects then ends.
  static std::string RandomWalk(const OutputConstraint& constraint, uint32_t seed,
                                int max_tokens = 400, float closing_bias = 0) {
    std::unique_ptr<OutputMatcher> matcher = Matcher(constraint);
    if (!matcher) return "";
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> noise(0.0f, 1.0f);
    std::string text;
    for (int i = 0; i < max_tokens; ++i) {
      std::vector<float> logits(compiler_->n_vocab());
      for (TokenId id = 0; id < static_cast<TokenId>(logits.size()); ++id) {
        logits[id] = noise(rng);
        if (closing_bias != 0 &&
            tokenizer_->TokenToPiece(id).find_first_of("\"}]") != std::string::npos) {
          logits[id] += closing_bias;
        }
      }
      if (!matcher->MaskLogits(logits)) {
        ADD_FAILURE() << "dead end after " << text;
        return "";
      }
      const TokenId token =
          static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      EXPECT_TRUE(matcher->Accept(token).ok());
      if (tokenizer_->IsEndOfGeneration(token)) {
        EXPECT_TRUE(matcher->IsComplete()) << text;
        return text;
      }
      text += tokenizer_->TokenToPiece(token);
    }
    ADD_FAILURE() << "no end after " << max_tokens << " tokens: " << text;
    return "";
  }

  static std::vector<TokenId> Encode(const std::string& text) {
    return tokenizer_->Encode(text, {});
  }

  static inline engine::Tokenizer* tokenizer_ = nullptr;
  static inline OutputGrammarCompiler* compiler_ = nullptr;
};

TEST_F(OutputGrammarTest, ChoiceAllowsOnlyPrefixesOfTheChoicesThenOnlyTheEnd) {
  OutputConstraint choice{.kind = Kind::kChoice, .choices = {"yes", "no"}};
  std::unique_ptr<OutputMatcher> matcher = Matcher(choice);
  ASSERT_NE(matcher, nullptr);
  const std::vector<TokenId> allowed = Allowed(*matcher);
  ASSERT_FALSE(allowed.empty());
  for (TokenId id : allowed) {
    const std::string piece = tokenizer_->TokenToPiece(id);
    EXPECT_TRUE(std::string("yes").starts_with(piece) || std::string("no").starts_with(piece))
        << "token " << id << " '" << piece << "'";
  }
  for (TokenId id : Encode("yes")) ASSERT_TRUE(matcher->Accept(id).ok());
  EXPECT_TRUE(matcher->IsComplete());
  for (TokenId id : Allowed(*matcher)) EXPECT_TRUE(tokenizer_->IsEndOfGeneration(id)) << id;
}

TEST_F(OutputGrammarTest, ATokenTheGrammarForbidsIsRefusedAndTheStateKept) {
  std::unique_ptr<OutputMatcher> matcher = Matcher({.kind = Kind::kChoice, .choices = {"yes"}});
  ASSERT_NE(matcher, nullptr);
  const std::vector<TokenId> before = Allowed(*matcher);
  const absl::Status refused = matcher->Accept(Encode("no")[0]);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("not allowed"));
  EXPECT_EQ(Allowed(*matcher), before);
  EXPECT_EQ(matcher->Accept(-1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(OutputGrammarTest, AMatcherCreatedPastTheOutputSoFarAllowsWhatAcceptingItWouldHave) {
  const OutputConstraint schema =
      Constraint(Kind::kJsonSchema,
                 R"({"type":"object","properties":{"city":{"type":"string"}},)"
                 R"("required":["city"]})",
                 true);
  const std::vector<TokenId> so_far = Encode(R"({"city": "Par)");
  std::unique_ptr<OutputMatcher> stepped = Matcher(schema);
  ASSERT_NE(stepped, nullptr);
  for (TokenId id : so_far) ASSERT_TRUE(stepped->Accept(id).ok()) << id;
  std::unique_ptr<OutputMatcher> rebuilt = Matcher(schema, so_far);
  ASSERT_NE(rebuilt, nullptr);
  EXPECT_EQ(Allowed(*rebuilt), Allowed(*stepped));

  OutputConstraint past_prompt = schema;
  past_prompt.n_output_in_prompt = 99;
  const std::vector<TokenId> prompt = Encode("hi");
  EXPECT_EQ(StartOutputMatcher(compiler_, past_prompt, prompt, {}).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto compiled = compiler_->Compile(schema);
  ASSERT_TRUE(compiled.ok());
  auto wrong = OutputMatcher::Create(*compiled, compiler_->n_vocab(), Encode("[1]"));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("does not match its constraint at token 0"));
}

TEST_F(OutputGrammarTest, RandomWalksUnderAJsonSchemaGiveJsonThatFollowsIt) {
  const OutputConstraint schema = Constraint(Kind::kJsonSchema, R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}
    },
    "required": ["name", "age", "tags"]
  })",
                                             true);
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const std::string text = RandomWalk(schema, seed);
    SCOPED_TRACE(text);
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(value.is_object());
    EXPECT_EQ(value.size(), 3u);  // strict: nothing beyond the three properties
    ASSERT_TRUE(value["name"].is_string());
    EXPECT_LE(value["name"].get<std::string>().size(), 12u * 4);  // 12 characters of UTF-8
    ASSERT_TRUE(value["age"].is_number_integer());
    EXPECT_GE(value["age"].get<int64_t>(), 0);
    EXPECT_LE(value["age"].get<int64_t>(), 150);
    ASSERT_TRUE(value["tags"].is_array());
    EXPECT_LE(value["tags"].size(), 3u);
    for (const auto& tag : value["tags"]) EXPECT_TRUE(tag == "a" || tag == "b");
  }
}

TEST_F(OutputGrammarTest, RandomWalksUnderJsonObjectGiveAnObject) {
  size_t members = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const std::string text = RandomWalk(Constraint(Kind::kJsonObject), seed, 400, 0.9f);
    SCOPED_TRACE(text);
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(value.is_object());
    if (value.is_object()) members += value.size();
  }
  EXPECT_GT(members, 0u);  // not only {}
}

TEST_F(OutputGrammarTest, RandomWalksUnderARegexMatchIt) {
  const std::string pattern = "[0-9]{3}-[a-z]{2,5}( ok)?";
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const std::string text = RandomWalk(Constraint(Kind::kRegex, pattern), seed);
    EXPECT_TRUE(std::regex_match(text, std::regex(pattern))) << text;
  }
}

TEST_F(OutputGrammarTest, RandomWalksUnderAnEbnfGrammarFollowIt) {
  const std::string grammar = R"ebnf(root ::= "(" expr ")"
expr ::= num | num ("+" | "*") num
num ::= [1-9] [0-9]?)ebnf";
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const std::string text = RandomWalk(Constraint(Kind::kGrammar, grammar), seed);
    EXPECT_TRUE(std::regex_match(text, std::regex(R"(\([1-9][0-9]?([+*][1-9][0-9]?)?\))"))) << text;
  }
}

TEST_F(OutputGrammarTest, ChoicesWithQuotesBackslashesAndNewlinesAreMatchedLiterally) {
  const std::vector<std::string> choices = {"say \"hi\"", "a\\b", "two\nlines", "été"};
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    const std::string text = RandomWalk({.kind = Kind::kChoice, .choices = choices}, seed);
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  }
}

// A vocabulary that cannot write what the grammar needs next: no token is allowed, which
// MaskLogits reports (leaving the logits alone) rather than masking everything.
TEST(OutputMatcherTest, AGrammarNoTokenCanContinueIsADeadEnd) {
  engine::Vocab vocab;
  vocab.pre = "default";
  vocab.tokens = {"a", "b", "<|endoftext|>"};
  vocab.token_types = {engine::TokenType::kNormal, engine::TokenType::kNormal,
                       engine::TokenType::kControl};
  vocab.eos_id = 2;
  auto tokenizer = engine::Tokenizer::Create(vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  OutputGrammarCompiler compiler(**tokenizer, 3);
  auto matcher =
      StartOutputMatcher(&compiler, Constraint(Kind::kGrammar, R"(root ::= "a" "c")"), {}, {});
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  std::vector<float> logits = {1, 2, 3};
  ASSERT_TRUE((*matcher)->MaskLogits(logits));
  EXPECT_EQ(logits[0], 1);  // "a"
  EXPECT_EQ(logits[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(logits[2], -std::numeric_limits<float>::infinity());
  ASSERT_TRUE((*matcher)->Accept(0).ok());
  logits = {1, 2, 3};
  EXPECT_FALSE((*matcher)->MaskLogits(logits));
  EXPECT_EQ(logits, (std::vector<float>{1, 2, 3}));
}

TEST(StartOutputMatcherTest, NoConstraintNoMatcherAndNoCompilerRefuses) {
  auto none = StartOutputMatcher(nullptr, {}, {}, {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  auto refused = StartOutputMatcher(nullptr, Constraint(Kind::kJsonObject), {}, {});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CheckOutputConstraintTest, NamesTheKindAndTheEnginesError) {
  EXPECT_TRUE(CheckOutputConstraint({}).ok());
  EXPECT_TRUE(CheckOutputConstraint(Constraint(Kind::kJsonObject)).ok());
  EXPECT_TRUE(CheckOutputConstraint(Constraint(Kind::kJsonSchema, R"({"type":"integer"})")).ok());
  EXPECT_TRUE(CheckOutputConstraint(Constraint(Kind::kRegex, "a+b")).ok());
  EXPECT_TRUE(CheckOutputConstraint(Constraint(Kind::kGrammar, R"(root ::= "x")")).ok());

  const absl::Status schema = CheckOutputConstraint(Constraint(Kind::kJsonSchema, "{\"type\":"));
  EXPECT_EQ(schema.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(schema.message(), HasSubstr("output constraint json_schema does not compile: "));
  const absl::Status type =
      CheckOutputConstraint(Constraint(Kind::kJsonSchema, R"({"type":"banana"})"));
  EXPECT_EQ(type.code(), absl::StatusCode::kInvalidArgument);
  const absl::Status regex = CheckOutputConstraint(Constraint(Kind::kRegex, "(ab"));
  EXPECT_EQ(regex.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(regex.message(), HasSubstr("output constraint regex does not compile: "));
  const absl::Status ebnf = CheckOutputConstraint(Constraint(Kind::kGrammar, "root ::= "));
  EXPECT_EQ(ebnf.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ebnf.message(), HasSubstr("output constraint grammar does not compile: "));
  const absl::Status no_root =
      CheckOutputConstraint(Constraint(Kind::kGrammar, R"(start ::= "x")"));
  EXPECT_EQ(no_root.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(OutputGrammarTest, CompilesOfTheSameTextShareOneGrammar) {
  const OutputConstraint a = Constraint(Kind::kRegex, "[a-c]+x");
  auto first = compiler_->Compile(a);
  auto again = compiler_->Compile(a);
  auto other = compiler_->Compile(Constraint(Kind::kRegex, "[a-c]+y"));
  ASSERT_TRUE(first.ok() && again.ok() && other.ok());
  EXPECT_EQ((*first)->compiled.ImplPtr(), (*again)->compiled.ImplPtr());
  EXPECT_NE((*first)->compiled.ImplPtr(), (*other)->compiled.ImplPtr());
}

TEST_F(OutputGrammarTest, CompileRefusesWhatCheckRefuses) {
  auto compiled = compiler_->Compile(Constraint(Kind::kRegex, "(ab"));
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), HasSubstr("regex does not compile"));
}

}  // namespace
}  // namespace baton::grammar
